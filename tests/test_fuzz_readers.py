"""Mutation fuzz of both readers (hypothesis, derandomized: the same 80 examples per reader every run;
about 35 CPU s for both).

Each example mutates the base trace of tests/hostile.py (Kineto: any field of any event, args
included, top-level fields, copies of events, extra step ranges; nsys: any column of any row of
the kernel, runtime, NVTX and string tables, set to a hostile value, rows deleted or copied) and
runs `overlapscope analyze`. The only acceptable outcomes:
- exit 2, nothing on stdout, one line on stderr naming the file (never "internal error");
- exit 0, and for every rank and step compute + exposed comm + exposed memcpy + idle = window,
  every number non-negative, every window inside the span of the rank's events.
"""
from __future__ import annotations

import json
import os
import sqlite3

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hostile as H
from overlapscope.cli import main
from overlapscope.pipeline.run import load_run

# OVERLAPSCOPE_FUZZ_EXAMPLES=N explores N fresh random examples per reader instead (a longer hunt).
_HUNT = int(os.environ.get("OVERLAPSCOPE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=_HUNT or 80, deadline=None, derandomize=not _HUNT, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

HOSTILE = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70), st.integers(min_value=-5, max_value=50_000),
    st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(), st.text(max_size=6),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(["1e3", "", "kernel", "cuda_runtime", "ProfilerStep#1", H.NCCL, "gloo:all_reduce"]))
EVENT_FIELDS = ["ts", "dur", "cat", "name", "tid", "ph", "args"]
ARG_FIELDS = ["stream", "correlation", "In msg nelems", "Out msg nelems", "dtype", "Collective name", "Seq",
              "Process Group Name", "bytes"]
TOP_FIELDS = [("distributedInfo", "rank"), ("distributedInfo", "world_size"), ("distributedInfo",),
              ("baseTimeNanoseconds",), ("deviceProperties",)]
N_EVENTS = 10


@st.composite
def kineto_mutation(draw):
    kind = draw(st.sampled_from(["event", "arg", "delete", "top", "copy", "step"]))
    i = draw(st.integers(0, N_EVENTS - 1))
    if kind == "event":
        return H.set_event(i, draw(st.sampled_from(EVENT_FIELDS)), draw(HOSTILE))
    if kind == "arg":
        return H.set_arg(i, draw(st.sampled_from(ARG_FIELDS)), draw(HOSTILE))
    if kind == "delete":
        return H.set_event(i, draw(st.sampled_from(["ts", "dur", "args", "cat", "name"])), H._DELETE)
    if kind == "top":
        return H.set_top(draw(st.sampled_from(TOP_FIELDS)), draw(HOSTILE))
    if kind == "copy":
        return H.duplicate_events(*draw(st.lists(st.integers(0, N_EVENTS - 1), min_size=1, max_size=4)))
    start = draw(st.integers(-30_000, 60_000))
    return H.add_step(draw(st.integers(0, 4)), start, start + draw(st.integers(-1_000, 40_000)))


def _apply_all(mutations):
    def mutate(doc):
        for m in mutations:
            try:
                m(doc)
            except (KeyError, TypeError, IndexError):
                pass  # an earlier mutation removed what this one changes: the document stays as it is
    return mutate


def assert_acceptable(result, path, spans):
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"overlapscope: error: {path}") or str(path) in lines[0], lines[0]
        assert "internal error" not in lines[0], lines[0]
        return
    doc = orjson.loads(result.stdout)
    for rank in doc["ranks"]:
        lo, hi = spans()[rank["rank"]]
        for s in rank["steps"]:
            parts = [s[k] for k in ("compute_ns", "exposed_comm_ns", "exposed_memcpy_ns", "idle_ns")]
            assert all(p >= 0 for p in parts) and s["comm_ns"] >= s["exposed_comm_ns"] >= 0, s
            assert sum(parts) == s["window_ns"] == s["window_end_ns"] - s["window_start_ns"], s
            assert lo <= s["window_start_ns"] <= s["window_end_ns"] <= hi, (s, lo, hi)


def _spans(path):
    def spans():
        run = load_run(path, cache=False)
        return {t.rank: (int(t.events["start_ns"].min()), int(t.events["end_ns"].max())) for t in run.ranks}
    return spans


def analyze(path):
    return CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--no-cache"])


@FUZZ
@given(mutations=st.lists(kineto_mutation(), min_size=1, max_size=3))
def test_mutated_kineto_traces_give_a_number_that_holds_or_one_line(tmp_path_factory, mutations):
    path = tmp_path_factory.mktemp("k") / "trace.json"
    doc = H.base_kineto()
    _apply_all(mutations)(doc)
    path.write_text(json.dumps(doc))  # NaN/Infinity are written as JSON parsers refuse them: malformed JSON
    assert_acceptable(analyze(path), path, _spans(path))


NSYS_TABLES = {
    H.KERNEL: ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "correlationId", "globalTid"],
    "NVTX_EVENTS": ["start", "end", "text", "globalTid", "eventType"],
    "StringIds": ["id", "value"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs"],
}
SQL_VALUES = st.one_of(st.integers(min_value=-2**63, max_value=2**63 - 1), st.integers(-5, 50_000), st.none(),
                       st.floats(allow_nan=False), st.text(max_size=5), st.binary(max_size=3))


@st.composite
def nsys_mutation(draw):
    table = draw(st.sampled_from(sorted(NSYS_TABLES)))
    kind = draw(st.sampled_from(["set", "set", "set", "delete", "copy", "drop_column"]))
    row = draw(st.integers(1, 6))
    if kind == "set":
        return (f"UPDATE {table} SET {draw(st.sampled_from(NSYS_TABLES[table]))} = ? WHERE rowid = {row}",
                (draw(SQL_VALUES),))
    if kind == "delete":
        return f"DELETE FROM {table} WHERE rowid = {row}", ()
    if kind == "copy":
        return f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid = {row}", ()
    return f"ALTER TABLE {table} DROP COLUMN {draw(st.sampled_from(NSYS_TABLES[table]))}", ()


def write_mutated_nsys(path, statements):
    H.base_nsys().write(path)
    conn = sqlite3.connect(path)
    try:
        for table in NSYS_TABLES:  # copies without NOT NULL / UNIQUE, so any value can be put in
            conn.execute(f"CREATE TABLE t2 AS SELECT * FROM {table}")
            conn.execute(f"DROP TABLE {table}")
            conn.execute(f"ALTER TABLE t2 RENAME TO {table}")
        for sql, params in statements:
            try:
                conn.execute(sql, params)
            except sqlite3.Error:
                pass  # e.g. a column already dropped: the export stays as it is
        conn.commit()
    finally:
        conn.close()


@FUZZ
@given(statements=st.lists(nsys_mutation(), min_size=1, max_size=3))
def test_mutated_nsys_exports_give_a_number_that_holds_or_one_line(tmp_path_factory, statements):
    path = tmp_path_factory.mktemp("n") / "trace.sqlite"
    write_mutated_nsys(path, statements)
    assert_acceptable(analyze(path), path, _spans(path))
