from __future__ import annotations

import os
from pathlib import Path

import pytest

from data_paths import REAL_TRACES

# What a test may skip for, when it is absent here: "browser" (Chromium + chromedriver, which `make test`
# installs). Empty by default, so a missing browser is a broken set-up and fails the test instead of hiding
# it. Committed test data (tests/data) is never skippable: a checkout without it is broken.
MAY_SKIP = "OVERLAPSCOPE_TESTS_MAY_SKIP"
CACHE_DIR_NAME = ".overlapscope-cache"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="Rewrite tests/golden/ from the current outputs instead of comparing with them.")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "needs_data(*paths): reads these committed test-data files or folders")
    config.addinivalue_line("markers", "needs_browser: drives headless Chromium")


# Inputs no test may change: the committed test data and the example runs. Checked around the whole
# session (a listing with sizes and mtimes), so a test that writes a cache, an output or a scratch file
# beside them fails the run even when every test passed.
HERE = Path(__file__).resolve().parent
WATCHED = (HERE / "data", HERE.parent / "traces")


def snapshot(tops: tuple[Path, ...] = WATCHED) -> dict[str, tuple[bool, int, int]]:
    """path -> (is a folder, size, mtime ns) of everything under `tops` (bytecode caches aside)."""
    out = {}
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in [*dirnames, *filenames, "."]:
                path = os.path.normpath(os.path.join(dirpath, name))
                st = os.lstat(path)
                out[path] = (name in dirnames or name == ".", st.st_size if name in filenames else 0, st.st_mtime_ns)
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = snapshot()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        return
    after = snapshot()
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    # a cache folder beside the data fails the session even when an earlier run left it (it is
    # git-ignored, so nothing else would show it)
    caches = sorted(p for p in after if os.path.basename(p) == CACHE_DIR_NAME)
    for what, paths in (("tests changed their inputs (tests never write beside test data)", changed),
                        ("a cache folder lies in the test data (tests use a temporary cache)", caches)):
        if paths:
            shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(f"ERROR: {what}: {shown}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


_BEFORE = pytest.StashKey[dict]()


def data_missing(why: str) -> None:
    """Fail a test whose committed data is missing: the checkout is broken, nothing to set up."""
    pytest.fail(f"{why}: the checkout lacks committed test data (git status, git checkout -- tests/data)",
                pytrace=False)


def browser_absent(why: str) -> None:
    """Fail (or skip, when MAY_SKIP lists "browser") a browser test on a machine without Chromium."""
    if "browser" in {k.strip() for k in os.environ.get(MAY_SKIP, "").split(",")}:
        pytest.skip(why)
    pytest.fail(f"{why}: `make test` installs it, or set {MAY_SKIP}=browser to skip such tests", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # before fixtures: a module fixture that reads a committed trace must not fail first with a traceback
    for mark in item.iter_markers("needs_data"):
        missing = [str(p) for p in mark.args if not os.path.exists(p)]
        if missing:
            data_missing(f"{missing[0]} is not there")
    if item.get_closest_marker("needs_browser"):
        from overlapscope.dashboard.testing import browser_missing

        why = browser_missing()
        if why:
            browser_absent(why)


@pytest.fixture
def real_traces() -> os.PathLike:
    if not REAL_TRACES.is_dir():
        data_missing(f"{REAL_TRACES} is not there")
    return REAL_TRACES


@pytest.fixture(autouse=True, scope="session")
def _cache_in_tmp(tmp_path_factory):
    """Tests never leave Parquet caches in the user's cache dir (or beside the committed traces)."""
    old = os.environ.get("OVERLAPSCOPE_CACHE_DIR")
    os.environ["OVERLAPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("overlapscope-cache"))
    yield
    if old is None:
        os.environ.pop("OVERLAPSCOPE_CACHE_DIR", None)
    else:
        os.environ["OVERLAPSCOPE_CACHE_DIR"] = old
