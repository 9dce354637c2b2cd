"""The rules for tests whose committed data (always fail) or browser (fail, unless told to skip) is
missing, and the session check that no test changes the test data or leaves a cache in it."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
HERE = Path(__file__).resolve().parent

INNER = '''
import pytest

@pytest.mark.needs_data("/nonexistent/tests/data/x.json.gz")
def test_reads_a_committed_trace():
    pass

def test_uses_the_fixture(real_traces):
    pass
'''


def inner_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tests: str,
                  conftest_tail: str = "") -> pytest.Pytester:
    """An inner session with the suite's conftest (plus conftest_tail) running `tests`, no skips allowed."""
    pytester.makeconftest((HERE / "conftest.py").read_text() + conftest_tail)
    # data_paths.py points at data/real beside the inner conftest, which the inner session lacks
    pytester.makepyfile(data_paths=(HERE / "data_paths.py").read_text(), test_inner=tests)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("OVERLAPSCOPE_TESTS_MAY_SKIP", raising=False)
    return pytester


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return inner_session(pytester, monkeypatch, INNER)


def test_missing_committed_data_fails_and_says_the_checkout_is_broken(inner):
    out = inner.runpytest_subprocess("-p", "no:cacheprovider")
    out.assert_outcomes(errors=2)  # at set-up, before any fixture reads the file
    assert out.ret != 0
    out.stdout.fnmatch_lines(["*/nonexistent/tests/data/x.json.gz is not there: the checkout lacks committed "
                              "test data (git status, git checkout -- tests/data)*"])


def test_missing_committed_data_fails_even_where_a_browser_may_be_skipped(inner, monkeypatch):
    monkeypatch.setenv("OVERLAPSCOPE_TESTS_MAY_SKIP", "browser, shared")
    inner.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(errors=2)


def run_beside_data(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tests: str) -> pytest.RunResult:
    """An inner session with the suite's conftest and a watched data/ folder holding one trace."""
    pytester.makeconftest((HERE / "conftest.py").read_text())
    (pytester.path / "data").mkdir(exist_ok=True)
    (pytester.path / "data" / "trace.json").write_text("{}")
    pytester.makepyfile(data_paths=(HERE / "data_paths.py").read_text(), test_inner=tests)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


READS = """
from pathlib import Path

def test_only_reads():
    assert (Path(__file__).parent / "data" / "trace.json").read_text() == "{}"
"""


def test_a_test_that_writes_beside_the_test_data_fails_the_session(pytester, monkeypatch):
    out = run_beside_data(pytester, monkeypatch, READS + """
def test_leaves_a_cache_beside_the_data():
    (Path(__file__).parent / "data" / ".overlapscope-cache").mkdir()
""")
    out.assert_outcomes(passed=2)
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["*tests changed their inputs*data/.overlapscope-cache*"])


def test_the_session_passes_when_the_test_data_is_only_read(pytester, monkeypatch):
    assert run_beside_data(pytester, monkeypatch, READS).ret == pytest.ExitCode.OK


def test_a_cache_folder_left_in_the_test_data_by_an_earlier_run_fails_the_session(pytester, monkeypatch):
    (pytester.path / "data" / "old").mkdir(parents=True)
    (pytester.path / "data" / "old" / ".overlapscope-cache").mkdir()
    out = run_beside_data(pytester, monkeypatch, READS)
    out.assert_outcomes(passed=1)
    assert out.ret == pytest.ExitCode.TESTS_FAILED
    out.stdout.fnmatch_lines(["*a cache folder lies in the test data*data/old/.overlapscope-cache*"])


BROWSER_TEST = '''
import pytest

@pytest.mark.needs_browser
def test_drives_chromium():
    pass
'''


@pytest.fixture
def no_browser(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """An inner session on a machine where the browser check says no."""
    return inner_session(pytester, monkeypatch, BROWSER_TEST, conftest_tail='''

import overlapscope.dashboard.testing as _testing
_testing.browser_missing = lambda: "/usr/bin/chromium is missing (apt-get install -y chromium chromium-driver)"
''')


def test_a_browser_test_without_a_browser_fails_and_says_how_to_get_one(no_browser):
    out = no_browser.runpytest_subprocess("-p", "no:cacheprovider")
    out.assert_outcomes(errors=1)
    out.stdout.fnmatch_lines(["*/usr/bin/chromium is missing*`make test` installs it, or set "
                              "OVERLAPSCOPE_TESTS_MAY_SKIP=browser to skip such tests*"])


def test_a_browser_test_without_a_browser_is_skipped_only_when_told(no_browser, monkeypatch):
    monkeypatch.setenv("OVERLAPSCOPE_TESTS_MAY_SKIP", "shared, browser")
    out = no_browser.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    out.assert_outcomes(skipped=1)
    out.stdout.fnmatch_lines(["*SKIPPED*/usr/bin/chromium is missing*"])
