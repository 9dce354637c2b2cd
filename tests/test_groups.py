"""Process groups for gloo comm that names none, chosen from each rank's pg_config (2-D mesh)."""
from __future__ import annotations

from crossrank_tables import MS, ev, table
from overlapscope.analysis.collectives import analyze_collectives
from overlapscope.analysis.groups import rank_groups

# (dp, tp) = (2, 2): tp groups are consecutive ranks, dp groups strided, as torch's init_device_mesh makes them.
PG = {
    0: [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}, {"pg_name": "1", "pg_desc": "mesh_dp", "ranks": [0, 2]},
        {"pg_name": "3", "pg_desc": "mesh_tp", "ranks": [0, 1]}],
    1: [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}, {"pg_name": "2", "pg_desc": "mesh_dp", "ranks": [1, 3]},
        {"pg_name": "3", "pg_desc": "mesh_tp", "ranks": [0, 1]}],
    2: [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}, {"pg_name": "1", "pg_desc": "mesh_dp", "ranks": [0, 2]},
        {"pg_name": "4", "pg_desc": "mesh_tp", "ranks": [2, 3]}],
    3: [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}, {"pg_name": "2", "pg_desc": "mesh_dp", "ranks": [1, 3]},
        {"pg_name": "4", "pg_desc": "mesh_tp", "ranks": [2, 3]}],
}


def test_rank_groups_from_pg_config():
    groups = rank_groups(PG.items())
    assert groups[2] == {"default_pg": "0", "mesh_dp": "1", "mesh_tp": "4"}
    assert rank_groups([(0, [{"pg_name": "7", "ranks": [0, 5]}, {"pg_name": "8", "ranks": [1, 2]}])]) == {0: {"size2": "7"}}


def two_d_run() -> dict:
    """TP all-reduces: group {0,1} at 0-10 and 20-30 ms, group {2,3} at 5-15 and 40-50 ms (drifted apart);
    FSDP all-gathers: {0,2} at 100-110 ms, {1,3} at 200-210 ms. No event names its group (gloo)."""
    tp = {0: [(0, 10), (20, 30)], 1: [(0, 10), (20, 30)], 2: [(5, 15), (40, 50)], 3: [(5, 15), (40, 50)]}
    dp = {0: (100, 110), 2: (100, 110), 1: (200, 210), 3: (200, 210)}
    tables = {}
    for r in range(4):
        rows = [ev("thread:9", "comm", "gloo:all_reduce", s * MS, e * MS, collective="all_reduce") for s, e in tp[r]]
        rows.append(ev("thread:9", "comm", "gloo:all_gather", dp[r][0] * MS, dp[r][1] * MS, collective="all_gather"))
        tables[r] = table(r, rows)
    return tables


def test_each_stream_goes_to_the_family_that_makes_it_possible():
    rep = analyze_collectives(two_d_run(), groups_of=rank_groups(PG.items()),
                              group_sizes={"0": 4, "1": 2, "2": 2, "3": 2, "4": 2})
    c = rep.collectives
    assert rep.unmatched.empty and (c["ranks"] == 2).all() and c["instance"].nunique() == 6
    by = c.groupby(["collective", "group"])["rank"].apply(lambda s: sorted(set(s))).to_dict()
    assert by == {("all_gather", "1"): [0, 2], ("all_gather", "2"): [1, 3],
                  ("all_reduce", "3"): [0, 1], ("all_reduce", "4"): [2, 3]}
    assert rep.clock_offsets_ns == {0: 0, 1: 0, 2: 0, 3: 0}
    assert not any("name no process group" in d for d in rep.diagnoses)


def test_without_pg_config_the_streams_span_every_rank():
    """What the groups fix: without them the two TP groups' all-reduces fuse into 4-rank collectives
    (and drag the clocks of ranks 2 and 3), and the FSDP all-gathers find no partner."""
    rep = analyze_collectives(two_d_run())
    assert set(rep.collectives["group"]) == {""} and (rep.collectives["ranks"] == 4).all()
    assert rep.unmatched["count"].sum() == 4 and set(rep.unmatched["collective"]) == {"all_gather"}
    assert rep.clock_offsets_ns[2] != 0


def test_gloo_runs_break_exposed_comm_down_by_the_groups_their_traces_list():
    # gloo names no group on its ops; the by-group table uses the groups the cross-rank match found in
    # distributedInfo.pg_config, the same names as the wait/transfer table (no "(no group)" row).
    from pathlib import Path

    import overlapscope

    for run, groups in (("ddp", {"0"}), ("fsdp2_tp", {"1", "2", "3", "4"})):
        a = overlapscope.analyze(overlapscope.load_run(Path(__file__).resolve().parents[1] / "traces" / run))
        assert set(a.by_group["group"]) == groups == set(a.wait_transfer["group"]), run
        per_step = a.by_key_steps[a.by_key_steps["section"] == "by_group"]
        totals = per_step.groupby(["rank", "key"])["exposed_comm_ns"].sum()
        assert totals.to_dict() == a.by_group.set_index(["rank", "group"])["exposed_comm_ns"].to_dict(), run
