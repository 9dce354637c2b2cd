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


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest((HERE / "conftest.py").read_text())
    # data_paths.py points at data/real beside the inner conftest, which the inner session lacks
    pytester.makepyfile(data_paths=(HERE / "data_paths.py").read_text(), test_inner=INNER)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("OVERLAPSCOPE_TESTS_MAY_SKIP", raising=False)
    return pytester


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
