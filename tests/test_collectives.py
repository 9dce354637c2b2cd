"""Cross-rank collectives on hand-built traces with known answers, and on a real 2-rank GPU trace."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from crossrank_tables import MS, US, ev, table, windows
from data_paths import REAL_TRACES
from overlapscope.analysis.collectives import (COLLECTIVE_COLUMNS, STRAGGLER_COLUMNS, analyze_collectives,
                                               busbw_factor)

# Rank r records true time t as t - OFFSET[r]; the analysis must find these offsets.
OFFSET = {0: 0, 1: 2 * MS, 2: -3500 * US}


def nccl(rank: int, true_start: int, true_end: int, coll: str, seq: int, nbytes: int) -> dict:
    off = OFFSET[rank]
    return ev("stream:20", "comm", f"ncclDevKernel_{coll}", true_start - off, true_end - off,
              collective=coll, bytes=nbytes, group="0", seq=seq, launch_lane="thread:1")


def three_ranks() -> dict[int, pd.DataFrame]:
    # (collective, seq, bytes, starts per rank, common end): rank 2 arrives last twice, rank 1 once.
    plan = [("all_reduce", 0, 1_000_000, (1000, 1500, 4000), 10_000),
            ("all_reduce", 1, 1_000_000, (20_000, 20_000, 23_000), 30_000),
            ("all_gather", 2, 3_000_000, (40_000, 41_000, 40_500), 50_000)]
    tables = {}
    for r in range(3):
        rows = [nccl(r, starts[r] * US, end * US, coll, seq, nb) for coll, seq, nb, starts, end in plan]
        if r == 0:
            rows += [ev("stream:7", "compute", "gemm", 0, 2000 * US), ev("stream:7", "compute", "gemm", 8000 * US, 9000 * US)]
        tables[r] = table(r, rows[::-1])  # row order must not matter
    return tables


def test_wait_transfer_bandwidth_and_offsets_exact():
    rep = analyze_collectives(three_ranks())
    assert rep.clock_offsets_ns == OFFSET
    c = rep.collectives.set_index(["seq", "rank"])
    assert list(rep.collectives.columns) == list(COLLECTIVE_COLUMNS)
    assert (rep.collectives["match"] == "seq").all()
    # aligned times are the true times
    assert c.loc[(0, 1), "start_ns"] == 1500 * US and c.loc[(0, 2), "end_ns"] == 10_000 * US
    waits = {(s, r): c.loc[(s, r), "wait_ns"] // US for s in range(3) for r in range(3)}
    assert waits == {(0, 0): 3000, (0, 1): 2500, (0, 2): 0, (1, 0): 3000, (1, 1): 3000, (1, 2): 0,
                     (2, 0): 1000, (2, 1): 0, (2, 2): 500}
    assert set(c.loc[0, "transfer_ns"]) == {6000 * US}
    assert set(c.loc[2, "transfer_ns"]) == {9000 * US}
    # rank 0 computes over [0, 2000) and [8000, 9000) µs: exposed wait [2000, 4000), transfer 5000 µs
    assert c.loc[(0, 0), "exposed_wait_ns"] == 2000 * US
    assert c.loc[(0, 0), "exposed_transfer_ns"] == 5000 * US
    assert c.loc[(0, 1), "exposed_wait_ns"] == 2500 * US
    # nccl-tests: algbw = S / t; all_reduce busbw x 2(n-1)/n, all_gather x (n-1)/n
    assert c.loc[(0, 0), "algbw_gbps"] == pytest.approx(1e6 / 6e6)
    assert c.loc[(0, 0), "busbw_gbps"] == pytest.approx(1e6 / 6e6 * 4 / 3)
    assert c.loc[(2, 1), "instance_busbw_gbps"] == pytest.approx(3e6 / 9e6 * 2 / 3)
    assert c.loc[(0, 2), "last_arrival"] and c.loc[(2, 1), "last_arrival"] and not c.loc[(1, 1), "last_arrival"]


def test_stragglers_ranked_by_last_arrivals_then_lateness():
    strag = analyze_collectives(three_ranks()).stragglers
    assert list(strag.columns) == list(STRAGGLER_COLUMNS)
    assert strag["rank"].tolist() == [2, 1, 0]
    assert strag["last_arrivals"].tolist() == [2, 1, 0]
    assert strag["mean_lateness_ns"].tolist() == pytest.approx([6500 * US / 3, 500 * US, 0.0])


def test_group_size_from_process_group_drives_busbw():
    rep = analyze_collectives(three_ranks(), group_sizes={"0": 8})
    row = rep.collectives.set_index(["seq", "rank"]).loc[(0, 0)]
    assert row["group_size"] == 8 and row["busbw_gbps"] == pytest.approx(1e6 / 6e6 * 2 * 7 / 8)


def test_two_nccl_streams_match_by_order_per_group():
    # tp all-reduces on stream 7, dp all-gathers on stream 9, launched interleaved; rank 1's clock is 5 ms ahead.
    def rank_rows(r: int) -> list[dict]:
        shift = 5 * MS if r == 1 else 0
        tp = [(10, 100 + 20 * r, 200), (30, 300, 400)]
        dp = [(20, 150, 500), (40, 600 + 50 * r, 700)]
        rows = [ev("stream:7", "comm", "ncclKernel_AllReduce", s * US + shift, e * US + shift, collective="all_reduce",
                   bytes=4096, group="tp", launch_ns=l * US + shift, launch_lane="thread:1") for l, s, e in tp]
        rows += [ev("stream:9", "comm", "ncclKernel_AllGather", s * US + shift, e * US + shift, collective="all_gather",
                    bytes=8192, group="dp", launch_ns=l * US + shift, launch_lane="thread:1") for l, s, e in dp]
        return rows
    rep = analyze_collectives({r: table(r, rank_rows(r)) for r in (0, 1)})
    assert rep.clock_offsets_ns == {0: 0, 1: -5 * MS}
    c = rep.collectives
    assert (c["match"] == "order").all() and len(c) == 8 and rep.unmatched.empty
    dp1 = c[(c["group"] == "dp") & (c["seq"] == 1)].set_index("rank")
    assert dp1.loc[0, "wait_ns"] == 50 * US and dp1.loc[1, "wait_ns"] == 0
    tp0 = c[(c["group"] == "tp") & (c["seq"] == 0)].set_index("rank")
    assert tp0.loc[0, "wait_ns"] == 20 * US and tp0.loc[1, "transfer_ns"] == 80 * US


def test_missing_event_matched_by_time_and_reported():
    # rank 1 lost its second all-reduce; its clock reads 0.3 ms ahead.
    r0 = [ev("stream:20", "comm", "ncclKernel_AllReduce", s * MS, e * MS, collective="all_reduce")
          for s, e in [(0, 10), (20, 30), (40, 50), (60, 70)]]
    r1 = [ev("stream:20", "comm", "ncclKernel_AllReduce", s * MS + 300 * US, e * MS + 300 * US, collective="all_reduce")
          for s, e in [(5, 10), (45, 50), (65, 70)]]
    rep = analyze_collectives({0: table(0, r0), 1: table(1, r1)})
    assert rep.clock_offsets_ns == {0: 0, 1: -300 * US}
    c = rep.collectives
    assert (c["match"] == "time").all() and c["instance"].nunique() == 3
    assert c[c["rank"] == 0]["start_ns"].tolist() == [0, 40 * MS, 60 * MS]
    assert c[c["rank"] == 1]["wait_ns"].tolist() == [0, 0, 0]
    assert c[c["rank"] == 0]["wait_ns"].tolist() == [5 * MS, 5 * MS, 5 * MS]
    u = rep.unmatched
    assert u[["rank", "reason", "count"]].values.tolist() == [[0, "no collective on another rank ends with it", 1]]
    assert any("1 of 7 comm events could not be matched" in d for d in rep.diagnoses)


def test_size_mismatch_is_not_matched():
    r0 = [ev("stream:20", "comm", "nccl", s * MS, e * MS, collective="broadcast", bytes=b)
          for s, e, b in [(0, 10, 1024), (20, 30, 1024)]]
    r1 = [ev("stream:20", "comm", "nccl", s * MS, e * MS, collective="broadcast", bytes=b)
          for s, e, b in [(2, 10, 1024), (22, 30, 2048)]]
    rep = analyze_collectives({0: table(0, r0), 1: table(1, r1)})
    assert rep.collectives["instance"].nunique() == 1
    assert sorted(rep.unmatched["reason"]) == ["no collective on another rank ends with it", "size differs from rank 0"]


def test_send_and_recv_form_one_p2p_collective():
    r0 = [ev("thread:1", "comm", "gloo:send", 0, 10 * MS, collective="send", bytes=100),
          ev("thread:1", "comm", "gloo:recv", 20 * MS, 30 * MS, collective="recv", bytes=100)]
    r1 = [ev("thread:1", "comm", "gloo:recv", 2 * MS, 10 * MS, collective="recv", bytes=100),
          ev("thread:1", "comm", "gloo:send", 25 * MS, 30 * MS, collective="send", bytes=100)]
    c = analyze_collectives({0: table(0, r0), 1: table(1, r1)}).collectives
    assert c["instance"].tolist() == [0, 0, 1, 1]
    assert c["collective"].tolist() == ["send", "recv", "recv", "send"]
    assert c["wait_ns"].tolist() == [2 * MS, 0, 5 * MS, 0]
    assert c["busbw_gbps"].tolist() == pytest.approx([100 / 8e6, 100 / 8e6, 100 / 5e6, 100 / 5e6])
    # a pipeline's sender always arrives last: that is the bubble's business, not a straggler
    assert analyze_collectives({0: table(0, r0), 1: table(1, r1)}).stragglers.empty


def test_p2p_among_three_ranks_without_peers_is_reported():
    rows = {r: [ev("thread:1", "comm", "gloo:send", 0, 10 * MS, collective="send")] for r in range(3)}
    rep = analyze_collectives({r: table(r, rows[r]) for r in range(3)})
    assert rep.collectives.empty
    assert set(rep.unmatched["reason"]) == {"p2p peer unknown (3 ranks of the group do p2p)"}


def test_exposed_counts_only_inside_step_windows():
    tables = three_ranks()
    rep = analyze_collectives(tables, {0: windows((0, 0, 5000 * US)), 1: windows((0, 0, 60_000 * US)),
                                       2: windows((0, 0, 60_000 * US))})
    row = rep.collectives.set_index(["seq", "rank"]).loc[(0, 0)]
    # wait [1000, 4000) minus compute [0, 2000): 2000 µs; transfer [4000, 10000) cut at 5000: 1000 µs
    assert row["exposed_wait_ns"] == 2000 * US and row["exposed_transfer_ns"] == 1000 * US


def test_single_rank_has_no_cross_rank_sections():
    rep = analyze_collectives({0: three_ranks()[0]})
    assert rep.collectives.empty and rep.unmatched.empty and rep.diagnoses == []
    assert list(rep.collectives.columns) == list(COLLECTIVE_COLUMNS)


def test_busbw_factors_are_nccl_tests():
    f = busbw_factor(np.array(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"],
                              dtype=object), np.full(6, 4))
    assert f.tolist() == [1.5, 0.75, 0.75, 0.75, 1.0, 1.0]


def test_busbw_factor_per_row_of_a_text_column():
    """A str column (the collectives' own) and its object array give one factor per row: repeated
    names, each row's own group size (1: an all_reduce moves nothing, 0), an unknown or missing
    name NaN, factor-1 types whatever the size."""
    names = ["all_reduce", "recv", "barrier", None, "all_reduce", "all_to_all", "reduce", "all_reduce"]
    n = np.array([8, 8, 8, 8, 2, 4, 1, 1])
    for column in (pd.Series(names, dtype="str"), np.array(names, dtype=object)):
        f = busbw_factor(column, n)
        assert f[[0, 1, 4, 5, 6, 7]].tolist() == [1.75, 1.0, 1.0, 0.75, 1.0, 0.0]
        assert np.isnan(f[[2, 3]]).all()


SAMPLED = REAL_TRACES / "kineto-gpu" / "trace_filter_2rank"


@pytest.mark.needs_data(SAMPLED)
def test_real_sampled_two_rank_trace_matches_by_time():
    """Event-sampled ranks 0 and 1 of a 128-GPU job: half the SendRecv kernels have no partner in the
    other file. The five that do end within 0.4 ms of each other; order matching would pair the wrong ones."""
    from overlapscope import load_run
    from overlapscope.analysis.windows import step_windows
    run = load_run(SAMPLED)
    rep = analyze_collectives({t.rank: t.events for t in run.ranks}, {t.rank: step_windows(t) for t in run.ranks})
    base = 1682725898000000000
    ends = rep.collectives.pivot(index="instance", columns="rank", values="end_ns") - base
    assert (ends // US).values.tolist() == [[187835, 187835], [307389, 307334], [627817, 628149],
                                            [1182485, 1182493], [1249534, 1249345]]
    assert rep.clock_offsets_ns == {0: 0, 1: 0}  # one host, one clock
    assert rep.unmatched.groupby("rank")["count"].sum().tolist() == [5, 5]
    ops = rep.collectives.groupby("instance")["op"].first().tolist()
    assert ops == ["nccl:all_to_all", "nccl:all_reduce", "nccl:_all_gather_base", "nccl:all_reduce",
                   "nccl:_all_gather_base"]


def test_buffered_send_ending_before_its_recv_still_matches_and_does_not_move_clocks():
    # gloo: the send returns once buffered, long before the peer posts its recv
    r0 = [ev("thread:1", "comm", "gloo:send", 0, 1 * MS, collective="send"),
          ev("thread:1", "comm", "gloo:send", 20 * MS, 21 * MS, collective="send")]
    r1 = [ev("thread:1", "comm", "gloo:recv", 5 * MS, 10 * MS, collective="recv"),
          ev("thread:1", "comm", "gloo:recv", 30 * MS, 32 * MS, collective="recv")]
    rep = analyze_collectives({0: table(0, r0), 1: table(1, r1)})
    assert (rep.collectives["match"] == "order").all() and rep.collectives["instance"].nunique() == 2
    assert rep.clock_offsets_ns == {0: 0, 1: 0}
    assert any(d.startswith("clocks not aligned for rank") and "only send/recv" in d for d in rep.diagnoses)


def test_design_records_nest_ranks_under_each_collective():
    from overlapscope.analysis.collectives import design_records
    recs = design_records(analyze_collectives(three_ranks()).collectives)
    assert [r["seq"] for r in recs] == [0, 1, 2]
    first = recs[0]
    assert first["group"] == "0" and first["collective"] == "all_reduce" and first["bytes"] == 1_000_000
    assert first["ranks"]["2"] == {"start_ns": 4000 * US, "end_ns": 10_000 * US, "wait_ns": 0,
                                   "transfer_ns": 6000 * US, "exposed_wait_ns": 0, "exposed_transfer_ns": 6000 * US}
    assert first["algbw_gbps"] == pytest.approx(1e6 / 6e6) and first["transfer_ns"] == 6000 * US
    assert design_records(analyze_collectives({0: three_ranks()[0]}).collectives) == []


def test_unknown_group_in_a_run_with_several_groups_is_flagged():
    rows = {r: [ev("thread:2", "comm", "gloo:all_reduce", 0, 10 * MS, collective="all_reduce")] for r in range(4)}
    rep = analyze_collectives({r: table(r, rows[r]) for r in range(4)}, group_sizes={"0": 4, "1": 2, "2": 2})
    assert any("1 collectives name no process group while the run has 3" in d for d in rep.diagnoses)
    assert not any("process group" in d for d in analyze_collectives({r: table(r, rows[r]) for r in range(4)},
                                                                     group_sizes={"0": 4}).diagnoses)


def test_sequence_number_on_one_rank_only_is_unmatched():
    r0 = [ev("stream:20", "comm", "nccl", s * MS, (s + 5) * MS, collective="all_reduce", group="0", seq=q)
          for q, s in ((7, 0), (8, 10))]
    r1 = [ev("stream:20", "comm", "nccl", 1 * MS, 5 * MS, collective="all_reduce", group="0", seq=7)]
    rep = analyze_collectives({0: table(0, r0), 1: table(1, r1)})
    assert rep.collectives["seq"].tolist() == [7, 7]
    assert rep.unmatched[["rank", "reason", "count"]].values.tolist() == [[0, "no other rank has this sequence number", 1]]


def test_parts_renumbered_unless_their_rows_carry_the_rank_already():
    import numpy as np

    from overlapscope.analysis.crossrank import _carried_rank, _numbered
    from overlapscope.core.table import make_table

    events = make_table(-1, lane=["stream:7"], kind=["comm"], name=["ncclDevKernel_AllReduce_Sum_f32_RING_LL"],
                        start_ns=[0], end_ns=[5], collective=["all_reduce"])
    assert _carried_rank(events) == -1
    assert _carried_rank(events.iloc[:0]) is None
    mixed = events.assign(rank=np.array([3], np.int32))
    assert _carried_rank(pd.concat([events, mixed], ignore_index=True)) is None
    comm = pd.DataFrame({"rank": np.array([-1, -1], np.int64), "x": [1, 2]})
    renumbered = _numbered(comm, 4, -1)  # the reader said -1, the run numbered it 4
    assert renumbered["rank"].tolist() == [4, 4] and renumbered["rank"].dtype == np.int64
    assert comm["rank"].tolist() == [-1, -1]  # the part itself is left as it was
    assert _numbered(comm, -1, -1) is comm  # carried already: no copy and no read
    assert _numbered(comm, 4, None)["rank"].tolist() == [4, 4]  # unknown: read and compared
    assert _numbered(comm.assign(rank=4), 4, None)["rank"].tolist() == [4, 4]


def test_stream_keys_join_group_collective_and_op_of_each_row():
    import numpy as np

    from overlapscope.analysis.matching import stream_keys

    rng = np.random.default_rng(3)
    pick = lambda vals: rng.choice(np.array(vals, dtype=object), 500)
    comm = pd.DataFrame({"group": pick(["0", "", "pg:tp", None]), "collective": pick(["all_reduce", "all_gather", ""]),
                         "op": pick(["c10d::allreduce_", "", "nccl:all_gather"]), "rank": rng.integers(0, 3, 500)})
    key, reason = stream_keys(comm)
    assert key.dtype == object and reason.tolist() == [""] * 500
    assert key.tolist() == [f"{g}|{c}|{o}" for g, c, o in zip(comm["group"], comm["collective"], comm["op"])]


def test_bandwidth_group_size_from_the_group_else_the_ranks_that_ran_it():
    import numpy as np

    from overlapscope.analysis.collectives import _add_bandwidth

    rows = pd.DataFrame({"instance": [1, 1, 0, 0, 2], "bytes": [4, 4, 8, 8, 2], "group": ["9", "9", "0", "0", None],
                         "ranks": [2, 2, 2, 2, 1], "transfer_ns": [1, 1, 4, 2, 0],
                         "collective": ["all_reduce"] * 4 + ["all_gather"]})
    _add_bandwidth(rows, {"0": 4})
    # group "0" is known to hold 4 ranks; "9" and a missing group (after "0": not its size) fall back
    # to the ranks seen
    assert rows["group_size"].tolist() == [2, 2, 4, 4, 1]
    assert rows["instance_transfer_ns"].tolist() == [1, 1, 4, 4, 0]
    # busbw = S / t x 2(n-1)/n for all_reduce (nccl-tests); no transfer: NaN
    assert rows["busbw_gbps"].tolist()[:4] == [4.0, 4.0, 8 / 4 * 1.5, 8 / 2 * 1.5]
    assert np.isnan(rows["busbw_gbps"].iloc[4])


def test_instance_ids_number_key_and_label_pairs_as_ngroup_does():
    """matching._instance_ids: (key, label) pairs numbered in order of first appearance, as
    groupby(sort=False, dropna=False).ngroup() numbers them - by packed int64 codes where the pair fits
    (labels a few apart), by pandas' grouping where it does not (labels 2^61 apart); a missing key is
    a key of its own on both paths."""
    from overlapscope.analysis.matching import _instance_ids

    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(1, 40))
        keys = rng.choice(np.array(["0|all_reduce|", "0|p2p|0->1", "1|broadcast|", None], dtype=object), n)
        label = rng.integers(0, 5, n) * (2 ** 61 if trial % 2 else 1) - (trial % 3)
        m = pd.DataFrame({"key": pd.array(keys, dtype="str"), "label": label})
        want = m.groupby(["key", "label"], sort=False, dropna=False).ngroup().to_numpy(np.int64)
        assert _instance_ids(m).tolist() == want.tolist(), trial
    assert _instance_ids(pd.DataFrame({"key": pd.array([], dtype="str"), "label": np.empty(0, np.int64)})).size == 0
