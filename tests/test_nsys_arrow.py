"""The ADBC (Arrow) fetch and the sqlite3 fetch of the nsys reader give the same tables and errors."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest

from data_paths import REAL_TRACES
from nsys_builder import small_run
from overlapscope.errors import TraceError
from overlapscope.ingest import nsys_arrow
from overlapscope.ingest.nsys import read_nsys

pytestmark = pytest.mark.skipif(not nsys_arrow.ENABLED, reason="adbc-driver-sqlite is not installed ([fast] extra)")

BAD = Path(__file__).parent / "data" / "nsys_bad"


def read_both(path: Path, monkeypatch) -> tuple[object, object]:
    """(ADBC result, sqlite3 result): a list of RankTrace, or the TraceError's message."""
    out = []
    for enabled in (True, False):
        monkeypatch.setattr(nsys_arrow, "ENABLED", enabled)
        try:
            out.append(read_nsys(path))
        except TraceError as exc:
            out.append(str(exc))
    return out[0], out[1]


def assert_same(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert len(a) == len(b)
    for x, y in zip(a, b):
        pd.testing.assert_frame_equal(x.events, y.events, check_exact=True)
        pd.testing.assert_frame_equal(x.steps, y.steps, check_exact=True)
        assert (x.rank, x.rank_from, x.meta) == (y.rank, y.rank_from, y.meta)


@pytest.mark.needs_data(REAL_TRACES)
@pytest.mark.parametrize("path", sorted((REAL_TRACES / "nsys").glob("*.sqlite")), ids=lambda p: p.name)
def test_real_exports_read_the_same_through_adbc_and_sqlite3(path, monkeypatch):
    taken = []
    real = nsys_arrow.fetch_arrow
    monkeypatch.setattr("overlapscope.ingest.nsys_schema.fetch_arrow",
                        lambda *a, **k: taken.append(r := real(*a, **k)) or r)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    assert_same(*read_both(path, monkeypatch))
    assert taken and all(r is not None for r in taken[: len(taken) // 2]), "the ADBC path was not taken"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not list(path.parent.glob(path.name + "-*")), "a journal or WAL file was left beside the export"


@pytest.mark.parametrize("path", sorted(BAD.glob("*.sqlite")), ids=lambda p: p.name)
def test_bad_exports_fail_the_same_through_adbc_and_sqlite3(path, monkeypatch):
    assert_same(*read_both(path, monkeypatch))


def test_hand_built_export_reads_the_same(tmp_path, monkeypatch):
    assert_same(*read_both(small_run().write(tmp_path / "run.sqlite"), monkeypatch))


def test_a_null_in_an_integer_column_leaves_it_to_the_sqlite3_path(tmp_path):
    import sqlite3

    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, "x"), (None, None)])
    conn = sqlite3.connect(db)
    assert nsys_arrow.fetch_arrow(conn, "SELECT a, b FROM t", ("a", "b"), {"b": "object"}) is None
    got = nsys_arrow.fetch_arrow(conn, "SELECT COALESCE(a, -1), b FROM t", ("a", "b"), {"b": "object"})
    assert got["a"].tolist() == [1, -1] and got["b"].tolist() == ["x", None] and got["a"].dtype == "int64"
    conn.close()
