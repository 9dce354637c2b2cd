"""The one rule for tests whose shared traces or browser are missing (fail, unless told to skip), and the
session check that no test changes the test data."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
HERE = Path(__file__).resolve().parent

INNER = '''
import pytest

@pytest.mark.needs_shared("/nonexistent/shared/traces/x.json.gz")
def test_reads_a_shared_trace():
    pass

def test_uses_the_fixture(real_traces):
    pass
'''


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest((HERE / "conftest.py").read_text())
    # shared_data.py points one level above the inner checkout, where no shared/ is
    pytester.makepyfile(shared_data=(HERE / "shared_data.py").read_text(), test_inner=INNER)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("OVERLAPSCOPE_TESTS_MAY_SKIP", raising=False)
    return pytester


def test_missing_real_traces_fail_with_the_way_out(inner):
    out = inner.runpytest_subprocess("-p", "no:cacheprovider")
    out.assert_outcomes(errors=2)  # at set-up, before any fixture reads the file
    assert out.ret != 0
    out.stdout.fnmatch_lines(["*/nonexistent/shared/traces/x.json.gz is not there (test data missing from this checkout): "
                              "`make test` sets it up, or set OVERLAPSCOPE_TESTS_MAY_SKIP=shared to skip such tests*"])


def test_missing_real_traces_skip_when_allowed(inner, monkeypatch):
    monkeypatch.setenv("OVERLAPSCOPE_TESTS_MAY_SKIP", "browser, shared")
    inner.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(skipped=2)



def run_beside_data(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tests: str) -> pytest.RunResult:
    """An inner session with the suite's conftest and a watched data/ folder holding one trace."""
    pytester.makeconftest((HERE / "conftest.py").read_text())
    (pytester.path / "data").mkdir()
    (pytester.path / "data" / "trace.json").write_text("{}")
    pytester.makepyfile(shared_data=(HERE / "shared_data.py").read_text(), test_inner=tests)
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
