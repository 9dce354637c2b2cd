"""The Dash dashboard: `create_app(paths)` builds it, `serve(...)` runs it (app.py and `overlapscope dashboard`).

Runs are read and analyzed once, when the app is created; requests only slice what is in memory.
The server binds 127.0.0.1 unless told otherwise and serves only the runs it was started with.
"""
from __future__ import annotations

import logging
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..errors import OverlapscopeError

if TYPE_CHECKING:
    from ..pipeline.options import RunOptions

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent / "assets"
# plotly.js's cartesian bundle (npm plotly.js-cartesian-dist-min, the version the plotly package
# ships; MIT, LICENSE.plotly-cartesian beside it): every trace type the page draws (scatter, bar,
# heatmap) in 1.5 MB. The full bundle the plotly package ships is 4.8 MB, and evaluating it took
# ~1.3 s of a fresh headless Chromium's first paint here against ~0.6 s for this one.
PLOTLY_JS = "/assets/plotly-cartesian.min.js"
# Dash's pages load @babel/polyfill (core-js 2 + regenerator), 99 kB that took ~0.2 s of the first
# paint to evaluate, and that replaces native builtins (String.prototype.trim, which Plotly calls
# per colour) with slower ones. A current browser needs only its regenerator runtime (npm
# regenerator-runtime, MIT, LICENSE.regenerator-runtime beside it), which Dash's bundles call.
REGENERATOR_JS = "/assets/regenerator-runtime.js"
_POLYFILL_TAG = re.compile(r'<script src="[^"]*/deps/polyfill@[^"]*"></script>')


def create_app(paths: Sequence[str | Path], options: RunOptions | None = None, *, host: str = "127.0.0.1",
               allow_hosts: Sequence[str] = (), refuse_unreadable: bool = False):
    """A Dash app for one run (or two to compare); runs that fail to load show their error on the page,
    or, with refuse_unreadable (the CLI), raise it as an OverlapscopeError (one line, exit 2): a server
    for a run that cannot be read would only show that error.

    It answers only requests whose Host is `host` (the address it is bound to), localhost, or one of
    `allow_hosts` (dashboard/hosts.py); any other gets 403."""
    from .cache import FigureCache
    from .callbacks import register
    from .data import load_run_data
    from .hosts import allowed_hosts, restrict_hosts
    from .layout import page, tab_content
    from .steps import step_choice

    if not 1 <= len(paths) <= 2:
        raise ValueError("the dashboard shows one run, or two to compare")
    runs = [load_run_data(p, options) for p in paths]
    for r in runs:
        if not r.ok:
            if refuse_unreadable:
                raise OverlapscopeError(r.error)
            log.warning("%s", r.error)
    cache = FigureCache(runs)
    choice = step_choice(runs)
    if choice is not None:  # draw the first page's timeline(s) now, not on the first request
        tab_content("timeline", runs, cache, choice.default)
    # Plotly is fetched with the page's own scripts instead of after the layout arrives, so parsing
    # it overlaps the layout request. The assets folder is served, not included in the page.
    app = _dash_class()(__name__, title="overlapscope", suppress_callback_exceptions=True, update_title=None,
               external_scripts=[PLOTLY_JS], assets_folder=str(ASSETS), include_assets_files=False)
    app.layout = lambda: page(runs, cache)  # built per page load from cached figures
    register(app, runs, cache)
    restrict_hosts(app.server, allowed_hosts(host, allow_hosts))
    return app


@lru_cache(maxsize=1)
def _dash_class():
    """Dash with the polyfill swapped for the regenerator runtime in the page's scripts
    (`interpolate_index` is Dash's hook for changing the page; without the tag, nothing changes)."""
    from dash import Dash

    class OverlapscopeDash(Dash):
        def interpolate_index(self, **kwargs):
            kwargs["scripts"] = _POLYFILL_TAG.sub(f'<script src="{REGENERATOR_JS}"></script>', kwargs["scripts"],
                                                  count=1)
            return super().interpolate_index(**kwargs)

    return OverlapscopeDash


def serve(app, *, host: str = "127.0.0.1", port: int = 8050) -> None:
    """Serve until interrupted (a threaded WSGI server: one user, local)."""
    # The CLI already printed the address: Dash's, Flask's and werkzeug's own banner lines ("Dash is
    # running on", "Serving Flask app", "Debug mode: off", some in colour) only with -v. Flask's
    # `run` echoes its banner whatever the log level, so without -v the server is werkzeug's, on
    # Dash's WSGI app (how gunicorn serves it too).
    if log.isEnabledFor(logging.INFO):
        app.run(host=host, port=port, debug=False)
        return
    from werkzeug.serving import run_simple

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app.logger.setLevel(logging.WARNING)
    run_simple(host, port, app.server, threaded=True)
