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


span = st.tuples(st.sampled_from(["compute", "comm"]), st.integers(0, 300), st.integers(0, 60), st.sampled_from("ab"))


@settings(max_examples=80, deadline=None)
@given(st.lists(span, min_size=1, max_size=15), st.lists(st.integers(1, 299), max_size=4, unique=True),
       st.integers(0, 20))
def test_breakdown_per_step_matches_naive(spans, cuts, gap):
    """Per step window (touching, or `gap` apart) and key: |M_k ∩ W| and |(M_k \\ C) ∩ W| per nanosecond."""
    import numpy as np
    import pandas as pd

    from overlapscope.analysis.breakdown import exposed_by_key_and_step

    edges = sorted(cuts)
    starts = [0] + [e + gap for e in edges]
    ends = edges + [360]
    windows = pd.DataFrame({"step": np.arange(len(starts), dtype=np.int32), "start_ns": starts, "end_ns": ends})
    windows = windows[windows["end_ns"] > windows["start_ns"]].reset_index(drop=True)
    events = pd.DataFrame([(k, s, s + n) for k, s, n, _ in spans], columns=["kind", "start_ns", "end_ns"])
    events["kind"] = events["kind"].astype("category")
    keys = np.array([key for *_, key in spans], dtype=object)
    totals, per_step = exposed_by_key_and_step(events, windows, keys, "collective")
    compute = {t for k, s, n, _ in spans if k == "compute" for t in range(s, s + n)}
    for key in sorted({key for k, *_, key in spans if k == "comm"}):
        m_k = {t for k, s, n, kk in spans if k == "comm" and kk == key for t in range(s, s + n)}
        want = []
        for w in windows.itertuples():
            inside = set(range(w.start_ns, w.end_ns))
            count = sum(1 for k, s, n, kk in spans if k == "comm" and kk == key and w.start_ns <= s < w.end_ns)
            comm, exposed = len(m_k & inside), len((m_k - compute) & inside)
            if comm or count:
                want.append((int(w.step), count, comm, exposed))
        rows = per_step[per_step["collective"] == key]
        assert [(int(r.step), int(r["count"]), int(r.comm_ns), int(r.exposed_comm_ns)) for _, r in rows.iterrows()] == want
        total = totals.set_index("collective").loc[key]
        assert (int(total.comm_ns), int(total.exposed_comm_ns)) == (sum(w[2] for w in want), sum(w[3] for w in want))
