"""Wait + transfer <= comm per collective, on every backend: times of a key, not sums over collectives.

gloo runs DDP's bucket all-reduces on two worker threads at once; summing each collective's wait and
transfer counted that time twice (traces/ddp: 162.4 + 222.1 ms against 242.4 ms of all-reduce).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import overlapscope
from crossrank_tables import MS, ev, table
from overlapscope.analysis.collectives import analyze_collectives
from overlapscope.analysis.crossrank import collective_summary

TRACES = Path(__file__).resolve().parents[1] / "traces"


def two_at_once() -> dict:
    # Per rank, all-reduces A and B run at once on two threads; rank 1 arrives 4 ms late to both.
    plan = {0: ((0, 10), (2, 12)), 1: ((4, 10), (6, 12))}
    return {r: table(r, [ev(f"thread:{i + 1}", "comm", "gloo:all_reduce", a * MS, b * MS, collective="all_reduce",
                            group="0", seq=i) for i, (a, b) in enumerate(spans)]) for r, spans in plan.items()}


def test_concurrent_collectives_of_one_key_count_their_time_once():
    rep = analyze_collectives(two_at_once())
    # per collective, rank 0 waits 4 ms in each (A [0, 4), B [2, 6)): summed, 8 ms wait + 12 ms transfer
    per_instance = rep.collectives[rep.collectives["rank"] == 0]
    assert per_instance["wait_ns"].sum() == 8 * MS and per_instance["transfer_ns"].sum() == 12 * MS
    # as time: transfer [4, 12) while either moves data, wait [0, 4): 4 + 8 = the 12 ms of comm
    wt = rep.wait_transfer.set_index("rank")
    assert (wt.loc[0, "wait_ns"], wt.loc[0, "transfer_ns"]) == (4 * MS, 8 * MS)
    assert (wt.loc[1, "wait_ns"], wt.loc[1, "transfer_ns"]) == (0, 8 * MS)
    # nothing computes: all of it is exposed, split the same way
    assert (wt.loc[0, "exposed_wait_ns"], wt.loc[0, "exposed_transfer_ns"]) == (4 * MS, 8 * MS)
    assert wt.loc[0, "collectives"] == 2


@pytest.mark.parametrize("run", sorted(p.name for p in TRACES.iterdir() if (p / "manifest.json").is_file()))
def test_wait_plus_transfer_never_exceeds_comm_on_the_reference_runs(run):
    a = overlapscope.analyze(overlapscope.load_run(TRACES / run))
    assert not a.wait_transfer.empty, f"{run}: no collective matched across ranks"
    wt = a.wait_transfer.groupby(["rank", "collective"])[["wait_ns", "transfer_ns", "exposed_wait_ns",
                                                          "exposed_transfer_ns"]].sum()
    by = a.by_collective.set_index(["rank", "collective"]).loc[wt.index]
    assert ((wt["wait_ns"] + wt["transfer_ns"]) <= by["comm_ns"]).all()
    assert ((wt["exposed_wait_ns"] + wt["exposed_transfer_ns"]) <= by["exposed_comm_ns"]).all()


def test_ddp_on_gloo_wait_and_transfer_add_up_to_its_all_reduce_time():
    a = overlapscope.analyze(overlapscope.load_run(TRACES / "ddp"))
    [row] = collective_summary(a.collectives, a.wait_transfer).itertuples(index=False)
    comm = a.by_collective.loc[a.by_collective["collective"] == "all_reduce"]
    assert row.wait_ns + row.transfer_ns == comm["comm_ns"].sum()  # every all-reduce matched
    assert row.exposed_wait_ns + row.exposed_transfer_ns == comm["exposed_comm_ns"].sum()
    assert row.group == "0"  # the default group of distributedInfo.pg_config, though gloo names none


def test_keys_are_measured_apart_whether_lifted_onto_one_axis_or_taken_one_at_a_time():
    import numpy as np
    import pandas as pd
    from overlapscope.analysis.wait_transfer import wait_transfer_time

    # two ranks, two keys on rank 0; the same rows with rank 1's clock 2^61 ns away cannot be lifted
    # onto one int64 axis (the per-key fallback): every total must be the same
    def rows(shift: int) -> tuple[pd.DataFrame, dict, dict]:
        off = {0: 0, 1: shift}
        spans = [(0, "all_reduce", 0, 4, 10), (0, "all_reduce", 2, 5, 12), (0, "all_gather", 20, 21, 30),
                 (1, "all_reduce", 3, 4, 10)]
        frame = pd.DataFrame([{"rank": r, "group": "0", "collective": c, "op": "sum", "instance": i,
                               "start_ns": a * MS + off[r], "split_ns": b * MS + off[r], "end_ns": e * MS + off[r]}
                              for i, (r, c, a, b, e) in enumerate(spans)])
        uncovered = {r: pd.DataFrame({"start_ns": np.array([3, 8]) * MS + off[r], "end_ns": np.array([6, 25]) * MS + off[r]})
                     for r in off}
        windows = {0: pd.DataFrame({"start_ns": [1 * MS], "end_ns": [28 * MS]}), 1: None}
        return frame, uncovered, windows

    near, far = wait_transfer_time(*rows(0)), wait_transfer_time(*rows(2 ** 61))
    pd.testing.assert_frame_equal(near, far)
    # rank 0 all_reduce: transfer [4, 12) -> clipped [4, 12); wait [1, 4); exposed: W \ C = [3, 6) and [8, 25)
    r0 = near.iloc[1]
    assert (r0["collective"], r0["wait_ns"], r0["transfer_ns"]) == ("all_reduce", 3 * MS, 8 * MS)
    assert (r0["exposed_wait_ns"], r0["exposed_transfer_ns"], r0["collectives"]) == (1 * MS, 6 * MS, 2)
    assert list(near["collective"]) == ["all_gather", "all_reduce", "all_reduce"]
    assert near.iloc[0]["transfer_ns"] == 7 * MS  # [21, 30) clipped at 28


def test_exposed_wait_and_transfer_do_not_depend_on_how_far_apart_the_ranks_clocks_are():
    import pandas as pd

    def ranks(shift: int) -> dict:
        # rank 1 arrives 4 ms late; both compute [11, 12) ms, inside the transfer
        plan = {0: 0, 1: 4}
        return {r: table(r, [ev("thread:1", "comm", "gloo:all_reduce", (a + 0) * MS + r * shift, 10 * MS + r * shift,
                                collective="all_reduce", group="0", seq=0),
                             ev("thread:2", "compute", "aten::mm", 11 * MS + r * shift, 12 * MS + r * shift)])
                for r, a in plan.items()}

    columns = ["rank", "wait_ns", "transfer_ns", "exposed_wait_ns", "exposed_transfer_ns"]
    near, far = (analyze_collectives(ranks(s)).collectives[columns] for s in (0, 2 ** 61))
    pd.testing.assert_frame_equal(near, far)  # 2^61 ns apart: rank by rank instead of on one axis
    assert near["exposed_wait_ns"].tolist() == [4 * MS, 0] and near["exposed_transfer_ns"].tolist() == [6 * MS] * 2
