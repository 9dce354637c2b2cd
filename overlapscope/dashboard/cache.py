"""Figures computed once per run (and per step for the timeline), shared by every page load.

The runs are fixed when the server starts, so a figure for (run, step) never changes: the first
request pays for it, later ones (another tab, a reload, a reset after a zoom) reuse it. Zoomed
views are not cached: they depend on the exact range and are cheap (data.Lane.visible).
"""
from __future__ import annotations

import threading
from dataclasses import replace
from functools import lru_cache

import plotly.graph_objects as go
import pandas as pd

from . import figures
from .data import RunData
from .timeline import TimelineConfig, timeline_figure

PAIR_COLUMNS = 2
"""Two runs are drawn side by side: each timeline gets half the width, so half the pixels to merge to."""


class FigureCache:
    def __init__(self, runs: list[RunData], timeline_cfg: TimelineConfig = TimelineConfig()) -> None:
        self.runs = runs
        self.timeline_cfg = timeline_cfg
        self._lock = threading.Lock()
        self._breakdowns: dict[int, dict[str, go.Figure | None]] = {}
        self._compare: dict[str, tuple[pd.DataFrame, go.Figure | None]] = {}
        self.pair_cfg = replace(timeline_cfg, width_px=max(100, timeline_cfg.width_px // PAIR_COLUMNS))
        self.timeline = lru_cache(maxsize=64)(self._timeline)
        self._pair_default = lru_cache(maxsize=64)(self._pair)
        self.gantt = lru_cache(maxsize=64)(self._gantt)

    def _timeline(self, i: int, step: int) -> dict:
        return timeline_figure(self.runs[i], step, None, self.timeline_cfg)

    def zoomed(self, i: int, step: int, view_ns: tuple[int, int] | None) -> dict:
        if view_ns is None:
            return self.timeline(i, step)
        return timeline_figure(self.runs[i], step, view_ns, self.timeline_cfg)

    def pair_view_ms(self, steps: dict[int, int | None]) -> tuple[float, float]:
        """The x range two side-by-side timelines share by default: 0 to the longer of the two steps."""
        spans = [self.runs[i].span(s) for i, s in steps.items() if s is not None]
        return 0.0, max([(span[1] - span[0]) / 1e6 for span in spans if span] or [1.0])

    def pair(self, i: int, step: int | None, view_ms: tuple[float, float], default: bool) -> dict:
        """Run i's timeline in a side-by-side pair: x in ms from its own step start, range `view_ms`."""
        if default:
            return self._pair_default(i, step, view_ms)
        return self._pair(i, step, view_ms)

    def _pair(self, i: int, step: int | None, view_ms: tuple[float, float]) -> dict:
        data = self.runs[i]
        span = data.span(step) if step is not None else None
        if span is None:
            return {"data": [], "layout": {"title": {"text": f"{data.label}: no step here"},
                                           "meta": {"step": step, "view_ms": list(view_ms), "points": 0}}}
        view_ns = (span[0] + int(round(view_ms[0] * 1e6)), span[0] + int(round(view_ms[1] * 1e6)))
        fig = timeline_figure(data, step, view_ns, self.pair_cfg)
        # The server's range wins over a zoom kept by uirevision: the other column follows a zoom here.
        return {**fig, "layout": {**fig["layout"], "uirevision": f"{fig['layout']['uirevision']}|{view_ms}"}}

    def _gantt(self, i: int, step: int) -> go.Figure | None:
        return figures.microbatch_gantt(self.runs[i], step)

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
                    "waits": figures.wait_heatmap(a.wait_transfer),
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
