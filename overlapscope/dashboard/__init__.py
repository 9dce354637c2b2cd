"""The Dash dashboard: `create_app(paths)` builds it, `serve(...)` runs it (app.py and `overlapscope dashboard`).

Runs are read and analyzed once, when the app is created; requests only slice what is in memory.
The server binds 127.0.0.1 unless told otherwise and serves only the runs it was started with.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

PLOTLY_JS = "/_dash-component-suites/plotly/package_data/plotly.min.js"  # served by dcc from the plotly package


def create_app(paths: Sequence[str | Path], *, no_steps: bool = False, step_pattern: str | None = None,
               comm_patterns: tuple[str, ...] = ()):
    """A Dash app for one run (or two to compare); runs that fail to load show their error on the page."""
    from dash import Dash

    from .cache import FigureCache
    from .callbacks import register
    from .data import load_run_data
    from .layout import page

    if not 1 <= len(paths) <= 2:
        raise ValueError("the dashboard shows one run, or two to compare")
    runs = [load_run_data(p, no_steps=no_steps, step_pattern=step_pattern, comm_patterns=comm_patterns)
            for p in paths]
    for r in runs:
        if not r.ok:
            log.warning("%s", r.error)
    cache = FigureCache(runs)
    for i, r in enumerate(runs):  # the first page shows each run's first step: draw it now, not on the request
        if r.ok:
            cache.timeline(i, r.steps[0])
    # Plotly (4.8 MB) is fetched with the page's own scripts instead of after the layout arrives, so
    # parsing it overlaps the layout request: about half a second off the first paint.
    app = Dash(__name__, title="overlapscope", suppress_callback_exceptions=True, update_title=None,
               external_scripts=[PLOTLY_JS])
    app.layout = lambda: page(runs, cache)  # built per page load from cached figures
    register(app, runs, cache)
    return app


def serve(app, *, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Serve until interrupted (Flask's threaded server: one user, local)."""
    app.run(host=host, port=port, debug=False)
