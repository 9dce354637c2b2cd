"""Overlap bounds, the cross-rank critical path, slack and what-if on hand-built multi-rank traces whose
answers are known to the ns (DESIGN.md "Overlap bounds", "Critical path", "What-if")."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from crossrank_tables import US, ev, table
from overlapscope.analysis import analyze
from overlapscope.core.table import RankMeta, RankTrace, Run

HOST = "thread:1"


def kernel(start_us: float, end_us: float, name: str = "gemm", launch_us: float = 0, stream: str = "stream:7") -> dict:
    return ev(stream, "compute", name, int(start_us * US), int(end_us * US), launch_ns=int(launch_us * US),
              launch_lane=HOST)


def allreduce(start_us: float, end_us: float, seq: int = 0, launch_us: float = 0, nbytes: int = -1) -> dict:
    return ev("stream:20", "comm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", int(start_us * US), int(end_us * US),
              collective="all_reduce", group="0", seq=seq, bytes=nbytes, launch_ns=int(launch_us * US),
              launch_lane=HOST)


def run_of(per_rank: dict[int, list[dict]]) -> Run:
    no_steps = pd.DataFrame({"step": pd.Series(dtype=np.int64), "start_ns": pd.Series(dtype=np.int64),
                             "end_ns": pd.Series(dtype=np.int64)})
    ranks = [RankTrace(rank=r, events=table(r, rows), steps=no_steps, device="gpu",
                       meta=RankMeta(source_format="test", source_file=f"rank{r}.json", world_size=len(per_rank)))
             for r, rows in sorted(per_rank.items())]
    return Run(ranks=ranks, manifest={}, path="hand-built")


def saved(a, key_type: str, key: str) -> int:
    w = a.whatif
    return int(w[(w["key_type"] == key_type) & (w["key"] == key)]["saved_ns"].iloc[0])


def test_collective_hidden_by_compute_on_every_rank_saves_nothing():
    a = analyze(run_of({r: [kernel(0, 100), allreduce(10, 60)] for r in (0, 1)}))
    assert saved(a, "collective", "all_reduce") == 0
    assert a.critical_steps["path_ns"].tolist() == [100 * US]
    assert a.critical_steps["comm_on_path_ns"].tolist() == [0]
    slack = a.collective_slack.iloc[0]
    assert slack["slack_ns"] == 40 * US and not slack["on_critical_path"] and slack["saved_ns"] == 0
    assert set(a.critical_path["kind"]) == {"compute"}
    assert a.steps["critical_comm_ns"].tolist() == [0, 0]


def test_collective_alone_between_two_kernels_saves_its_exposed_time():
    # K1 ends, the all-reduce runs (inferred gate: launched long before, it started when K1 ended), K2
    # waits for it (launched at 2 µs, started at 50 µs): hiding it saves its 20 µs of exposed time.
    rows = [kernel(0, 30), allreduce(30, 50, launch_us=1), kernel(50, 80, launch_us=2)]
    a = analyze(run_of({0: rows, 1: rows}))
    assert int(a.totals["exposed_comm_ns"].iloc[0]) == 20 * US
    assert saved(a, "collective", "all_reduce") == 20 * US
    assert a.critical_steps["path_ns"].tolist() == [80 * US]
    assert a.critical_steps["comm_on_path_ns"].tolist() == [20 * US]
    path = a.critical_path
    assert path["kind"].tolist() == ["compute", "comm", "compute"]
    assert path[["start_ns", "end_ns"]].to_numpy().tolist() == [[0, 30 * US], [30 * US, 50 * US], [50 * US, 80 * US]]
    assert a.collective_slack["slack_ns"].tolist() == [0]
    assert a.collective_slack["saved_ns"].tolist() == [20 * US]
    assert sorted(a.steps["critical_comm_ns"].tolist()) == [0, 20 * US]


def test_late_rank_moves_the_critical_path_to_that_rank():
    # Rank 1 computes 10 µs longer; the all-reduce completes when it arrives (J = 40 µs) and transfers 20 µs.
    r0 = [kernel(0, 30), allreduce(30, 60, launch_us=1), kernel(60, 90, launch_us=2)]
    r1 = [kernel(0, 40), allreduce(40, 60, launch_us=1), kernel(60, 90, launch_us=2)]
    a = analyze(run_of({0: r0, 1: r1}))
    path = a.critical_path
    first = path.iloc[0]
    assert (first["rank"], first["kind"], first["start_ns"], first["end_ns"]) == (1, "compute", 0, 40 * US)
    assert a.critical_steps["ranks_on_path"].tolist() == [2]
    comm = path[path["kind"] == "comm"]
    assert comm[["start_ns", "end_ns"]].to_numpy().tolist() == [[40 * US, 60 * US]]
    # hiding the collective removes its transfer, not the wait for the late rank
    assert saved(a, "collective", "all_reduce") == 20 * US
    assert a.collective_slack["slack_ns"].tolist() == [0]


def test_partly_hidden_collective_saves_the_part_compute_does_not_cover():
    # compute [0, 50) on stream 7 covers the first 30 µs of a 40 µs all-reduce; K2 waits for its end
    rows = [kernel(0, 50), allreduce(20, 60, launch_us=1), kernel(60, 70, launch_us=2)]
    a = analyze(run_of({0: rows, 1: rows}))
    assert saved(a, "collective", "all_reduce") == 10 * US
    assert int(a.totals["exposed_comm_ns"].iloc[0]) == 10 * US


def test_overlap_bounds_and_launch_bound_idle():
    # K1 [0,10) launched at -1: then idle [10,20) ends at K2, launched at 15 after the idle began: launch-bound;
    # idle [30,40) ends at K3, launched at 5 before it began: not launch-bound (the device waited on something).
    rows = [kernel(0, 10, launch_us=-1), kernel(20, 30, launch_us=15), kernel(40, 50, launch_us=5),
            allreduce(40, 45, launch_us=1)]
    a = analyze(run_of({0: rows, 1: rows}))
    s = a.steps.iloc[0]
    assert s["launch_bound_idle_ns"] == 10 * US
    assert s["idle_ns"] == 20 * US
    assert s["no_overlap_ns"] == 30 * US + 5 * US + 10 * US   # compute + comm + idle not launch-bound
    assert s["perfect_overlap_ns"] == 30 * US
    # measured 50: below the no-overlap bound's 45 by -5 of a 15 µs range
    assert np.isclose(s["overlap_efficiency_pct"], 100 * (45 - 50) / 15)


def test_bounds_fully_hidden_and_fully_exposed():
    hidden = analyze(run_of({r: [kernel(0, 100), allreduce(10, 60)] for r in (0, 1)})).steps.iloc[0]
    assert (hidden["no_overlap_ns"], hidden["perfect_overlap_ns"]) == (150 * US, 100 * US)
    assert hidden["overlap_efficiency_pct"] == 100.0
    rows = [kernel(0, 30), allreduce(30, 50, launch_us=1), kernel(50, 80, launch_us=2)]
    exposed = analyze(run_of({0: rows, 1: rows})).steps.iloc[0]
    assert (exposed["no_overlap_ns"], exposed["perfect_overlap_ns"]) == (80 * US, 60 * US)
    assert exposed["overlap_efficiency_pct"] == 0.0


def stepped_run(comm_exposed_us: list[float]) -> Run:
    """Two ranks, one step per entry: K1 [0, 3000) µs, then an all-reduce that pokes out of K1 by the given µs
    before K2 (which waits for it); steps 10 ms apart, ProfilerStep ranges on the host thread."""
    per_rank: dict[int, list[dict]] = {0: [], 1: []}
    spans = []
    for i, exposed in enumerate(comm_exposed_us):
        t0 = i * 10_000
        rows = [kernel(t0, t0 + 3000, launch_us=t0 + 1), allreduce(t0 + 1000, t0 + 3000 + exposed, seq=i,
                                                                   launch_us=t0 + 2),
                kernel(t0 + 3000 + exposed, t0 + 4000 + exposed, launch_us=t0 + 3)]
        for r in per_rank:
            per_rank[r] += [dict(row, step=i + 1) for row in rows]
        spans.append((i + 1, t0 * US, (t0 + 10) * US))
    steps = pd.DataFrame(spans, columns=["step", "start_ns", "end_ns"]).astype(np.int64)
    ranks = [RankTrace(rank=r, events=table(r, rows), steps=steps, device="gpu",
                       meta=RankMeta(source_format="test", source_file=f"rank{r}.json", world_size=2))
             for r, rows in per_rank.items()]
    return Run(ranks=ranks, manifest={}, path="hand-built")


def test_gate_metric_critical_comm_fails_when_comm_joins_the_critical_path():
    from overlapscope.report.gate import Thresholds, compare
    from overlapscope.report.gate_baseline import build_baseline

    base = analyze(stepped_run([0, 0, 0, 0, 0, 0]))
    worse = analyze(stepped_run([2000, 2100, 1900, 2050, 1950, 2000]))
    assert base.steps["critical_comm_ns"].tolist() == [0] * 12
    # the path runs through the whole all-reduce (it started at 1000 µs, before K1 ended) into K2
    assert sorted(worse.steps["critical_comm_ns"].tolist())[6:] == [3900 * US, 3950 * US, 4000 * US, 4000 * US,
                                                                     4050 * US, 4100 * US]
    verdict = compare(build_baseline(base), worse, Thresholds(), ["critical_comm"])
    assert verdict.results[0].status == "regression"
    assert compare(build_baseline(base), base, Thresholds(), ["critical_comm"]).results[0].status != "regression"


def _stream_wait_trace(tmp_path, rank: int):
    """K1 (stream 7) -> event -> all-gather (stream 21, ends 48 µs) -> event -> K2 (stream 7, starts 50 µs);
    an unrelated all-reduce on stream 20 ends at 50 µs, inside K2's gap, and nothing waits for it."""
    from kineto_builder import KinetoTrace

    t = KinetoTrace(rank=rank)
    t.step(1, 0, 100 * US)
    t.kernel("gemm_k1", 0, 30 * US, stream=7, launch_ns=1 * US)
    rec = t.record_event(7, 2 * US)
    t.wait_event(21, 7, rec, 3 * US)
    t.kernel("ncclDevKernel_AllGather_RING_LL", 30 * US, 48 * US, stream=21, launch_ns=4 * US)
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10 * US, 50 * US, stream=20, launch_ns=5 * US)
    rec2 = t.record_event(21, 6 * US)
    t.wait_event(7, 21, rec2, 7 * US)
    t.kernel("gemm_k2", 50 * US, 80 * US, stream=7, launch_ns=8 * US)
    return t.write(tmp_path / f"rank{rank}.json")


def test_stream_wait_events_are_the_dependency_not_timing(tmp_path):
    from overlapscope.pipeline.run import analyze_run

    for r in (0, 1):
        _stream_wait_trace(tmp_path, r)
    a = analyze_run(tmp_path, cache=False)
    # K2 waited for the all-gather (2 µs of lag after it), not for the all-reduce that ended later
    assert saved(a, "collective", "all_reduce") == 0
    assert saved(a, "collective", "all_gather") == 18 * US
    assert a.critical_path["label"].tolist() == ["gemm_k1", "ncclDevKernel_AllGather_RING_LL", "gemm_k2"]
    assert a.critical_path["lag_ns"].tolist() == [0, 0, 2 * US]



def test_nsys_stream_waits_are_the_dependency_not_timing(tmp_path):
    """The same dependencies as the Kineto case, from an nsys export's CUDA_EVENT records and
    STREAM_WAIT_EVENT synchronization rows; correlation ids in call order (record before wait)."""
    from nsys_builder import EventRecord, Export, Kernel, Range, Sync
    from overlapscope.pipeline.run import analyze_run

    for rank in (0, 1):
        pid = 200
        e = Export(processes={pid: "python3"}, gpus={0: "NVIDIA H100"})
        e.ranges.append(Range(pid, "ProfilerStep#1", 0, 100 * US))
        e.kernels += [
            Kernel(pid, 0, 7, "gemm_k1", 0, 30 * US, launch=1 * US, corr=101),
            Kernel(pid, 0, 21, "ncclDevKernel_AllGather_RING_LL", 30 * US, 48 * US, launch=4 * US, corr=104),
            Kernel(pid, 0, 20, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10 * US, 50 * US, launch=5 * US, corr=105),
            Kernel(pid, 0, 7, "gemm_k2", 50 * US, 80 * US, launch=8 * US, corr=108),
        ]
        # event 5 reused: recorded on stream 7 (corr 102), then on stream 21 after the all-gather (106)
        e.events += [EventRecord(pid, 0, 7, 5, 102), EventRecord(pid, 0, 21, 5, 106)]
        e.syncs += [Sync(pid, 0, 21, 3 * US, 3 * US, sync_type=2, event_id=5, corr=103),
                    Sync(pid, 0, 7, 7 * US, 7 * US, sync_type=2, event_id=5, corr=107)]
        e.write(tmp_path / f"rank{rank}.sqlite")
    from overlapscope.ingest.nsys import read_nsys
    waits = read_nsys(tmp_path / "rank0.sqlite")[0].meta.stream_waits
    assert waits == {"lane": ["stream:21", "stream:7"], "corr": [103, 107], "wait_lane": ["stream:7", "stream:21"],
                     "record_corr": [102, 106]}
    a = analyze_run(tmp_path, cache=False)
    assert saved(a, "collective", "all_reduce") == 0
    assert saved(a, "collective", "all_gather") == 18 * US
    assert [n.split("(")[0] for n in a.critical_path["label"]] == ["gemm_k1", "ncclDevKernel_AllGather_RING_LL",
                                                                   "gemm_k2"]
    assert a.critical_path["lag_ns"].tolist() == [0, 0, 2 * US]


REPO = Path(__file__).resolve().parents[1]


def test_reference_fsdp2_without_prefetch_ranks_the_forward_all_gathers_first():
    from overlapscope.pipeline.run import analyze_run

    w = analyze_run(REPO / "traces/fsdp2_no_prefetch", cache=False).whatif
    by_pass = w[w["key_type"] == "collective_pass"]
    assert by_pass["key"].iloc[0] == "all_gather in forward"
    assert w[w["key_type"] == "collective"]["key"].iloc[0] == "all_gather"


def test_reference_ddp_ranks_each_steps_last_all_reduce_first():
    from overlapscope.pipeline.run import analyze_run

    for run in ("ddp", "ddp_one_bucket"):
        a = analyze_run(REPO / "traces" / run, cache=False)
        c = a.collectives.drop_duplicates("instance")
        last = c.sort_values("start_ns").groupby("step")["instance"].last()
        best = a.collective_slack.sort_values("saved_ns", ascending=False).groupby("step")["instance"].first()
        assert (best.sort_index() == last.sort_index()).all(), run
        assert (a.collective_slack.groupby("step")["saved_ns"].max() > 0).all()


def test_a_late_host_launch_shows_as_host_time_on_the_path():
    # K2 was launched only at 50 µs (the host was busy): the device idles 40 µs and the path says so
    rows = [kernel(0, 10, launch_us=-1), kernel(51, 60, launch_us=50), allreduce(2, 8, launch_us=1)]
    a = analyze(run_of({0: rows, 1: rows}))
    path = a.critical_path
    assert path["kind"].tolist() == ["host", "compute"]
    assert path[["start_ns", "end_ns"]].to_numpy().tolist() == [[0, 50 * US], [50 * US, 60 * US]]
    assert path["lane"].tolist() == [HOST, "stream:7"] and path["lag_ns"].tolist() == [0, 1 * US]
    assert saved(a, "collective", "all_reduce") == 0


def test_saving_bound_holds_and_caps_leave_unsolved_keys_unknown():
    from overlapscope.analysis.critical_path import slack
    from overlapscope.analysis.whatif import whatif_by_key
    from overlapscope.pipeline.run import analyze_run

    for run in ("fsdp2_no_prefetch", "ddp"):
        w = analyze_run(REPO / "traces" / run, cache=False).whatif
        assert (w["saved_ns"] <= w["saved_bound_ns"]).all() and (w["saved_no_sync_ns"] <= w["saved_bound_ns"]).all()
        assert (w["saved_ns"] <= w["saved_no_sync_ns"]).all()



def test_capped_solves_leave_the_rest_unknown_not_zero(monkeypatch):
    import overlapscope.analysis.whatif as W

    monkeypatch.setattr(W, "MAX_KEY_SOLVES", 1)
    monkeypatch.setattr(W, "MAX_INSTANCE_BATCHES", 1)
    a = analyze(stepped_run([2000, 1500]))
    w = a.whatif
    solved = w[w["saved_ns"].notna()]
    assert len(solved) == 1 and solved["saved_ns"].iloc[0] == 3500 * US  # the first key of the largest bound
    assert w["saved_ns"].isna().sum() == len(w) - 1 and (w["saved_bound_ns"] >= 3500 * US).all()
    # one batch: the largest critical collective of each step
    assert a.collective_slack["saved_ns"].notna().sum() == 2


CYCLE_RUN = Path(__file__).parent / "data" / "cp_walk_cycle"
"""A real CPU+gloo ring-attention run (instrumented_models.cp --overlap off, 2 ranks): on one host thread
a gloo send and the next recv overlap (the lane's gap is negative), so following each node's binding
constraint from a recv back to its send, and from the send to the recv that arrived last on the other
rank, comes back to the first recv. The walk once looped there, growing memory until the kernel killed
the process (the CI run of stop 20)."""


def test_the_walk_back_visits_each_node_once_on_overlapping_gloo_p2p():
    import subprocess
    import sys
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30));"
            "from overlapscope.pipeline.run import analyze_run; a = analyze_run(sys.argv[1]);"
            "p = a.critical_path; print(len(p), int(a.critical_steps['step'].nunique()))")
    out = subprocess.run([sys.executable, "-c", code, str(CYCLE_RUN)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    segments, steps = map(int, out.stdout.split())
    assert steps == 3 and 0 < segments < 10_000


def test_a_walk_that_meets_itself_is_cut_and_said_not_silently_short(monkeypatch):
    # No measured graph of ours binds in a circle once the jump to the last arrival skips visited nodes,
    # but negative lane lags on two ranks could; a circular binding stands in for it here.
    import overlapscope.analysis.critical_path as cp
    monkeypatch.setattr(cp, "_binding", lambda solved: np.roll(np.arange(len(solved.nodes)), 1))
    rows = [kernel(0, 30), allreduce(30, 50, launch_us=1), kernel(50, 80, launch_us=2)]
    a = analyze(run_of({0: rows, 1: rows}))
    note = [d for d in a.diagnoses if "runs back into itself" in d]
    assert note and note[0].startswith("the critical path of 1 step(s) (-1)")  # no steps: one window, step -1
    # unpatched, the same run's walk is whole and nothing is said
    monkeypatch.undo()
    assert not [d for d in analyze(run_of({0: rows, 1: rows})).diagnoses if "runs back into itself" in d]


def test_comm_keys_equal_the_per_node_string_formulation():
    """comm_keys labels only the comm nodes and joins each distinct (collective, scope/pass) pair once;
    the labels are those of astype(str) and np.char.add over every node, node for node."""
    from overlapscope.analysis.whatif import comm_keys

    rng = np.random.default_rng(7)
    n = 500
    pick = lambda values: np.array(values, dtype=object)[rng.integers(0, len(values), n)]  # noqa: E731
    nodes = pd.DataFrame({"cls": pick(["comm", "compute", "copy"]),
                          "collective": pick(["all_reduce", "all_gather", ""]),
                          "group": pick(["0", "1", ""]), "scope": pick(["layers.0", "layers.1", "", np.nan]),
                          "pass": pick(["forward", "backward", ""])})
    comm = (nodes["cls"] == "comm").to_numpy()
    as_str = {c: nodes[c].to_numpy(object).astype(str) for c in ("collective", "group", "scope", "pass")}

    def both(a, sep, b):
        return np.where((a != "") & (b != ""), np.char.add(np.char.add(a, sep), b), "")

    want = dict(as_str, collective_scope=both(as_str["collective"], " of ", as_str["scope"]),
                collective_pass=both(as_str["collective"], " in ", as_str["pass"]))
    got = comm_keys(nodes)
    assert set(got) == set(want)
    for k, v in want.items():
        expected = np.where(comm, v, "").astype(object)
        assert got[k].dtype == object and got[k].tolist() == expected.tolist(), k
    assert "all_reduce of nan" in set(got["collective_scope"].tolist())  # a missing scope reads "nan", as astype(str) gave


def test_solve_numbers_every_rank_s_chains_after_the_ones_before_it_an_empty_graph_included():
    """solve counts each rank's chains with one reduceat over the concatenated nodes: a rank with no
    graph nodes takes no chain ids, and every other rank's chains follow the earlier ranks' (each
    rank's largest chain id + 1, computed here rank by rank)."""
    from overlapscope.analysis import analyze_rank
    from overlapscope.analysis.critical_path import solve

    rows = [kernel(0, 30), allreduce(30, 50, launch_us=1), kernel(50, 80, launch_us=2)]
    run = run_of({0: rows, 1: rows + [kernel(90, 95, stream="stream:9")], 2: rows})
    sections = {t.rank: analyze_rank(t) for t in run.ranks}
    graphs = {r: s["graph"] for r, s in sections.items()}
    empty = graphs[1]._replace(nodes=graphs[1].nodes.iloc[:0], edges=graphs[1].edges.iloc[:0])
    graphs = {0: graphs[0], 1: empty, 2: graphs[2], 3: graphs[1]}
    windows = {r: sections[min(r, 2)]["windows"]["start_ns"].to_numpy(np.int64) for r in graphs}
    solved = solve(graphs, {}, windows, pd.DataFrame(columns=["rank", "start_ns", "end_ns", "instance"]))
    before = 0
    for r in sorted(graphs):
        own = graphs[r].nodes["chain"].to_numpy(np.int64)
        got = solved.nodes.loc[solved.nodes["rank"] == r, "chain"].to_numpy(np.int64)
        assert got.tolist() == (own + before).tolist(), r
        before += int(own.max()) + 1 if own.size else 0
    assert before == len(np.unique(solved.graph.chain)) and not (solved.nodes["rank"] == 1).any()


def test_step_groups_give_the_per_step_largest_span_of_a_pandas_groupby():
    """StepGroups (built once per solve) against the groupby it replaced: steps unsorted across ranks,
    already sorted (no gather), one step, and no nodes; the index named step, the values span_ns."""
    from overlapscope.analysis.critical_path import StepGroups

    rng = np.random.default_rng(11)
    for step in (rng.integers(-1, 6, 300), np.sort(rng.integers(0, 4, 50)), np.full(7, -1), np.empty(0, np.int64)):
        step = step.astype(np.int64)
        wstart, y = rng.integers(0, 10**9, step.size), rng.integers(10**9, 2 * 10**9, step.size)
        want = pd.Series(y - wstart, name="span_ns").groupby(step).max().rename_axis("step")
        pd.testing.assert_series_equal(StepGroups.of(step, wstart).spans(y), want, check_index_type=True)


def test_first_match_equals_an_inner_merge_with_the_first_duplicate_kept():
    from overlapscope.analysis.critical_path import first_match

    rng = np.random.default_rng(5)
    for n_query, n_table in ((300, 200), (0, 5), (5, 1), (40, 0)):
        query = pd.DataFrame({k: rng.integers(0, 4, n_query) for k in ("rank", "start_ns", "end_ns")})
        table = pd.DataFrame({k: rng.integers(0, 4, n_table) for k in ("rank", "start_ns", "end_ns")})
        table["instance"] = rng.permutation(n_table)
        keys = ["rank", "start_ns", "end_ns"]
        found = query.reset_index().merge(table.drop_duplicates(keys), on=keys, how="inner")
        want = np.full(n_query, -1)
        want[found["index"].to_numpy()] = found["instance"].to_numpy()
        got = first_match([query[k].to_numpy(np.int64) for k in keys], [table[k].to_numpy(np.int64) for k in keys],
                          table["instance"].to_numpy(np.int64))
        assert np.array_equal(got, want)


def test_hidden_many_of_node_positions_equals_each_mask_solved_alone():
    """_hidden_many takes the positions of the nodes to hide; untied comm (no collectives matched here)
    hides its duration, through a copy of the graph's durations, and each set equals _hidden's mask."""
    from overlapscope.analysis import analyze_rank
    from overlapscope.analysis.critical_path import solve
    from overlapscope.analysis.whatif import _hidden, _hidden_many

    rows = [kernel(0, 30), allreduce(30, 50, launch_us=1), kernel(50, 80, launch_us=2), allreduce(80, 95, seq=1),
            kernel(95, 99)]
    run = run_of({0: rows, 1: rows})
    sections = {t.rank: analyze_rank(t) for t in run.ranks}
    solved = solve({r: s["graph"] for r, s in sections.items()}, {},
                   {r: s["windows"]["start_ns"].to_numpy(np.int64) for r, s in sections.items()},
                   pd.DataFrame(columns=["rank", "start_ns", "end_ns", "instance"]))
    comm = np.flatnonzero((solved.nodes["cls"] == "comm").to_numpy())
    assert comm.size == 4 and (solved.graph.inst < 0).all()
    durations = solved.graph.dur.copy()
    sets = [comm, comm[:1], comm[2:], np.empty(0, np.int64)]
    for on, got in zip(sets, _hidden_many(solved, iter(sets))):
        mask = np.zeros(len(solved.nodes), bool)
        mask[on] = True
        pd.testing.assert_series_equal(got, _hidden(solved, mask))
    assert np.array_equal(solved.graph.dur, durations)  # the graph's own durations untouched
    assert _hidden(solved, np.isin(np.arange(len(solved.nodes)), comm)).sum() < _hidden(solved, np.zeros(len(solved.nodes), bool)).sum()


def test_by_instance_savings_equal_each_collective_hidden_alone():
    """whatif_by_instance (batched solves, spans read by step position) against each collective hidden
    by itself in a plain solve (_hidden): the same saved_ns at the collective's step, on a real
    multi-step run with several collectives a step."""
    from overlapscope.analysis import analyze_rank
    from overlapscope.analysis.critical_path import slack, solve, step_spans
    from overlapscope.analysis.crossrank import cross_rank_sections
    from overlapscope.analysis.whatif import _hidden, whatif_by_instance
    from overlapscope.pipeline.run import load_run

    run = load_run(REPO / "traces" / "ddp")
    sections = [analyze_rank(t) for t in run.ranks]
    cross = cross_rank_sections(run, [s["cross_rank"] for s in sections])
    solved = solve({t.rank: s["graph"] for t, s in zip(run.ranks, sections)}, cross["clock_offsets_ns"],
                   {t.rank: s["windows"]["start_ns"].to_numpy(np.int64) for t, s in zip(run.ranks, sections)},
                   cross["collectives"])
    got = whatif_by_instance(solved, slack(solved))
    solved_rows = got[got["saved_ns"].notna()]
    assert solved_rows["step"].nunique() > 1 and solved_rows.groupby("step").size().max() > 1
    base = step_spans(solved)
    for instance, step, saved_ns in solved_rows.itertuples(index=False):
        want = (base - _hidden(solved, solved.graph.inst == instance)).loc[step]
        assert saved_ns == float(want), (instance, step)
