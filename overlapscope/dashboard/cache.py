"""Figures computed once per run (and per step for the timeline), shared by every page load.

The runs are fixed when the server starts, so a figure for (run, step) never changes: the first
request pays for it, later ones (another tab, a reload, a reset after a zoom) reuse it. Zoomed
views are not cached: they depend on the exact range and are cheap (data.Lane.visible).
"""
from __future__ import annotations

import threading
from functools import lru_cache

import plotly.graph_objects as go
import pandas as pd

from . import figures
from .data import RunData
from .timeline import TimelineConfig, timeline_figure


class FigureCache:
    def __init__(self, runs: list[RunData], timeline_cfg: TimelineConfig = TimelineConfig()) -> None:
        self.runs = runs
        self.timeline_cfg = timeline_cfg
        self._lock = threading.Lock()
        self._breakdowns: dict[int, dict[str, go.Figure | None]] = {}
        self._compare: dict[str, tuple[pd.DataFrame, go.Figure | None]] = {}
        self.timeline = lru_cache(maxsize=64)(self._timeline)

    def _timeline(self, i: int, step: int) -> dict:
        return timeline_figure(self.runs[i], step, None, self.timeline_cfg)

    def zoomed(self, i: int, step: int, view_ns: tuple[int, int] | None) -> dict:
        if view_ns is None:
            return self.timeline(i, step)
        return timeline_figure(self.runs[i], step, view_ns, self.timeline_cfg)

    def breakdowns(self, i: int) -> dict[str, go.Figure | None]:
        with self._lock:
            if i not in self._breakdowns:
                data = self.runs[i]
                a = data.analysis
                self._breakdowns[i] = {
                    "collective": figures.breakdown_figure(a.by_collective, "collective", "by collective"),
                    "group": figures.breakdown_figure(a.by_group, "group", "by process group"),
                    "scope": figures.breakdown_figure(a.by_scope, "scope", "by launching range"),
                    "prefetch": figures.prefetch_figure(a.prefetch),
                    "bubbles": figures.bubble_figure(a.bubbles),
                    "gantt": figures.microbatch_gantt(data, data.steps[0]),
                    "waits": figures.wait_heatmap(a.collectives),
                    "variation": figures.step_variation(a.steps),
                }
            return self._breakdowns[i]

    def compare(self, key: str) -> tuple[pd.DataFrame, go.Figure | None]:
        """Per-collective ("collective") or per-scope ("scope") difference between run A and run B."""
        with self._lock:
            if key not in self._compare:
                a, b = self.runs[0], self.runs[1]
                section = "by_collective" if key == "collective" else "by_scope"
                frame = figures.compare_frame(a, b, section, key)
                title = f"exposed comm per {'collective' if key == 'collective' else 'layer / unit'}"
                self._compare[key] = (frame, figures.compare_figure(frame, a.label, b.label, title))
            return self._compare[key]
