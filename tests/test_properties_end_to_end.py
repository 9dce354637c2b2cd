"""Random GPU traces through the whole pipeline (write Kineto JSON, read, analyze) against a naive
per-nanosecond reference of DESIGN.md's definitions."""
from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings, strategies as st

import overlapscope
from kineto_builder import KinetoTrace

BASE = 1_711_964_646_000_000_000
KINDS = {"compute": "void gemm()", "comm": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "copy": None}

event = st.tuples(st.sampled_from(sorted(KINDS)), st.integers(0, 300), st.integers(0, 80), st.sampled_from([7, 20, 21]))


@settings(max_examples=60, deadline=None)
@given(st.lists(event, min_size=1, max_size=15))
def test_random_single_window_matches_naive(events):
    t = KinetoTrace(base_ns=BASE)
    sets = {"compute": set(), "comm": set(), "copy": set()}
    lo, hi = None, None
    for kind, start, length, stream in events:
        end = start + length
        if kind == "copy":
            t.memcpy(start, end, stream=stream)
        else:
            t.kernel(KINDS[kind], start, end, stream=stream)
        sets[kind].update(range(start, end))
        lo = start if lo is None else min(lo, start)
        hi = end if hi is None else max(hi, end)
    with tempfile.TemporaryDirectory() as tmp:
        a = overlapscope.analyze(overlapscope.load_run(t.write(Path(tmp) / "r.json")))
    row = a.totals.iloc[0]
    c, m, x = sets["compute"], sets["comm"], sets["copy"]
    assert int(row.window_ns) == hi - lo
    assert int(row.compute_ns) == len(c)
    assert int(row.comm_ns) == len(m)
    assert int(row.overlapped_ns) == len(m & c)
    assert int(row.exposed_comm_ns) == len(m - c)
    assert int(row.exposed_memcpy_ns) == len(x - c - m)
    assert int(row.idle_ns) == (hi - lo) - len(c | m | x)
