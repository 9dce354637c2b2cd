"""Drive the dashboard in real headless Chromium: used by the tests, the scale benchmark and the README
screenshot. Needs selenium and Debian's `chromium` + `chromium-driver` (/usr/bin/chromium,
/usr/bin/chromedriver); nothing here is imported by the dashboard itself.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

CHROMIUM = os.environ.get("OVERLAPSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OVERLAPSCOPE_CHROMEDRIVER", "/usr/bin/chromedriver")
# Root in a container needs --no-sandbox; the network is closed, so nothing may phone home.
CHROMIUM_ARGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
    "--window-size=1500,1100",
)


def browser_missing() -> str | None:
    """Why a browser test cannot run here, or None when it can."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'dash[testing]' selenium)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.isfile(path) or shutil.which(path)):
            return f"{path} is missing (apt-get install -y chromium chromium-driver)"
    return None


@contextmanager
def served(app) -> Iterator[str]:
    """Serve a Dash app on a free local port in a thread; yields its URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@contextmanager
def chromium() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in CHROMIUM_ARGS:
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 30.0, poll_s: float = 0.02) -> Any:
    """Poll until predicate() is truthy; its value, or TimeoutError."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for the page")
        time.sleep(poll_s)


# The figure Plotly actually drew in graph `graph_id`: _fullData holds the decoded arrays (gd.data
# may still hold the base64 typed-array specs the server sent).
FIGURE_JS = """
const gd = document.querySelector('[id="' + arguments[0] + '"] .js-plotly-plot');
if (!gd || !gd._fullData || !gd._fullLayout) return null;
const arr = (v) => (v == null ? null : Array.from(v, (e) => (typeof e === 'number' && isNaN(e) ? null : e)));
return {meta: gd.layout.meta || null,
        traces: gd._fullData.map(t => ({meta: t.meta || null, mode: t.mode, type: t.type, x: arr(t.x), y: arr(t.y),
                                         base: arr(t.base), text: arr(t.text), fillcolor: t.fillcolor || null})),
        xrange: gd._fullLayout.xaxis.range.slice(), xtitle: gd._fullLayout.xaxis.title.text,
        ticktext: gd.layout.yaxis && gd.layout.yaxis.ticktext ? Array.from(gd.layout.yaxis.ticktext) : [],
        svg_marks: gd.querySelectorAll('g.trace').length};
"""


META_JS = """
const gd = document.querySelector('[id="' + arguments[0] + '"] .js-plotly-plot');
return gd && gd._fullData && gd._fullLayout && gd.layout.meta ? gd.layout.meta : null;
"""


def figure(driver, graph_id: str) -> dict | None:
    """Data and layout of the drawn figure (every point: slow for big figures, use meta() to wait)."""
    return driver.execute_script(FIGURE_JS, graph_id)


def meta(driver, graph_id: str) -> dict | None:
    """layout.meta of the drawn figure: the timeline's step, view and point count."""
    return driver.execute_script(META_JS, graph_id)


def idle(driver) -> bool:
    """No callback in flight (Dash marks the outputs of pending callbacks as loading)."""
    return driver.execute_script(
        "return document.querySelectorAll('[data-dash-is-loading=\"true\"]').length === 0;")


def console_errors(driver) -> list[str]:
    """SEVERE browser console entries since the last call."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(paths: list[str], out: str, *, width: int = 1500, height: int = 1100) -> None:
    """PNG of the page for `paths` once the timeline is drawn (the README's docs/dashboard.png)."""
    from . import create_app

    app = create_app(paths)
    with served(app) as url, chromium() as driver:
        driver.set_window_size(width, height)
        driver.get(url)
        wait_for(lambda: meta(driver, "timeline-0"), 120)
        wait_for(lambda: idle(driver), 120)
        time.sleep(0.5)  # let the resize after the first draw settle
        driver.save_screenshot(out)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Save a screenshot of the dashboard in headless Chromium.")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    screenshot(args.runs, args.out)
