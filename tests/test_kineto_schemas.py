"""Kineto schemas: the pre-2022 category names read like today's; device activity in categories the
reader does not know is named (warning), or the trace is refused - never a CPU report as the run."""
from __future__ import annotations

import logging

import orjson
import pytest

from kineto_builder import KinetoTrace
from overlapscope import analyze, load_run
from overlapscope.errors import TraceError

BASE = 1_711_964_646_000_000_000
OLD = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cuda_runtime": "Runtime",
       "cpu_op": "Operator", "user_annotation": "Operator"}


def step_trace() -> KinetoTrace:
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE, float_ts=False)
    t.step(3, 0, 100_000)
    t.kernel("void gemm()", 1_000, 30_000, launch_ns=0)
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", 20_000, 50_000,
             stream=20, launch_ns=1_000)
    t.memcpy(60_000, 64_000, nbytes=4096, launch_ns=2_000)
    return t


def test_pre_2022_categories_read_like_the_current_ones(tmp_path):
    (tmp_path / "new").mkdir()
    step_trace().write(tmp_path / "new" / "rank0.json")
    old = step_trace()
    for e in old.events:
        e["cat"] = OLD.get(e["cat"], e["cat"])
    (tmp_path / "old").mkdir()
    old.write(tmp_path / "old" / "rank0.json")
    a_new, a_old = (analyze(load_run(tmp_path / d, cache=False)) for d in ("new", "old"))
    assert a_old.totals.drop(columns="source").equals(a_new.totals.drop(columns="source"))
    total = a_old.totals.iloc[0]
    # window [1, 64) µs; compute [1, 30); comm [20, 50): 10 overlapped, 20 exposed; memcpy 4 exposed
    assert (total.window_ns, total.compute_ns, total.comm_ns, total.overlapped_ns, total.exposed_memcpy_ns) == \
        (63_000, 29_000, 30_000, 10_000, 4_000)
    assert a_old.steps["step"].tolist() == [3]


def test_earliest_libkineto_form_reads_like_the_current_one(tmp_path):
    """libkineto's first ChromeTraceLogger (output_json.cpp, 2020-21) wrote a bare JSON array, device
    events on `"tid": "stream 7"`, launches as `Runtime` with cbid/correlation/external id, flow
    arrows to "stream N", and no top-level fields: same numbers as today's schema."""
    (tmp_path / "new").mkdir()
    step_trace().write(tmp_path / "new" / "rank0.json")
    events = []
    for e in step_trace().events:
        e = dict(e, cat=OLD.get(e["cat"], e["cat"]), args=dict(e["args"]))
        if e["cat"] in ("Kernel", "Memcpy"):
            e["tid"] = f"stream {e['args']['stream']}"
            e["args"].update({"queued": 0, "context": 1, "external id": 1})
        elif e["cat"] == "Runtime":
            e["args"].update({"cbid": 211, "external id": 1, "external ts": e["ts"]})
            events.append({"ph": "f", "id": e["args"]["correlation"], "pid": 0, "tid": "stream 7", "ts": e["ts"],
                           "cat": "async", "name": "launch", "bp": "e"})
        events.append(e)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "rank0.json").write_bytes(orjson.dumps(events))
    a_new, a_old = (analyze(load_run(tmp_path / d, cache=False)) for d in ("new", "old"))
    assert a_old.totals.drop(columns="source").equals(a_new.totals.drop(columns="source"))
    assert (a_old.totals.iloc[0].comm_ns, a_old.totals.iloc[0].exposed_comm_ns) == (30_000, 20_000)
    assert a_old.steps["step"].tolist() == [3]
    (tmp_path / "old" / "rank0.json").write_bytes(orjson.dumps([1, 2, 3]))
    with pytest.raises(TraceError, match="not a Kineto trace"):
        load_run(tmp_path / "old", cache=False)


@pytest.mark.parametrize("launch_cat", ["xpu_runtime", "privateuse1_runtime"])
def test_xpu_and_privateuse1_launches_tie_kernels_to_their_steps(tmp_path, launch_cat):
    """Intel XPU and PrivateUse1 backends launch `kernel` events from their own runtime category
    (libkineto ActivityType names): the same steps and numbers as a CUDA trace."""
    (tmp_path / "cuda").mkdir()
    step_trace().write(tmp_path / "cuda" / "rank0.json")
    other = step_trace()
    for e in other.events:
        if e["cat"] == "cuda_runtime":
            e["cat"] = launch_cat
    (tmp_path / "other").mkdir()
    other.write(tmp_path / "other" / "rank0.json")
    a_cuda, a_other = (analyze(load_run(tmp_path / d, cache=False)) for d in ("cuda", "other"))
    assert a_other.totals.drop(columns="source").equals(a_cuda.totals.drop(columns="source"))
    assert a_other.steps["step"].tolist() == [3] and a_other.totals.iloc[0].comm_ns == 30_000


def test_device_activity_in_unknown_categories_alone_is_refused(tmp_path):
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE, float_ts=False)
    t.step(1, 0, 100_000)
    t.cpu_op("aten::mm", 1_000, 5_000)
    t.x("mtia_ccp_events", "fused_mm_kernel", 2_000, 9_000, pid=0, tid=3)
    t.x("mtia_ccp_events", "hccl:all_reduce", 9_000, 19_000, pid=0, tid=4)
    path = t.write(tmp_path / "rank0.json")
    with pytest.raises(TraceError, match=r"mtia_ccp_events \(2 events\).*CPU ops alone are not the run"):
        load_run(path, cache=False)


def test_unknown_categories_beside_known_device_work_are_named(tmp_path, caplog):
    t = step_trace()
    t.x("hccl_events", "hcom_allReduce__1_0_1", 70_000, 80_000, pid=0, tid=3)
    t.x("python_function", "train.py(12): step", 0, 90_000)  # known to carry nothing the numbers need
    path = t.write(tmp_path / "rank0.json")
    with caplog.at_level(logging.WARNING):
        a = analyze(load_run(path, cache=False))
    assert a.totals.iloc[0].comm_ns == 30_000
    warned = [r.getMessage() for r in caplog.records if "not analysed" in r.getMessage()]
    assert len(warned) == 1 and "hccl_events (1 events)" in warned[0] and "python_function" not in warned[0]


def test_gloo_transfers_pair_only_with_enqueues_of_their_backend_and_collective(tmp_path):
    """Main thread: NCCL all-gathers (c10d::allgather_ around nccl:all_gather), a gloo reduce-scatter
    and two gloo barriers; the gloo worker runs gloo:all_reduce then two gloo:barrier. FIFO over all
    enqueues would label the barriers all_gather; per backend and collective each finds its own."""
    t = KinetoTrace(rank=0, world_size=2, base_ns=BASE)
    t.step(1, 0, 1_000_000)
    for i in range(3):
        t.cpu_op("c10d::allgather_", 10_000 * i, 10_000 * i + 5_000)
        t.cpu_op("nccl:all_gather", 10_000 * i + 1_000, 10_000 * i + 4_000)
    t.cpu_op("c10d::_reduce_scatter_base_", 100_000, 101_000)
    t.cpu_op("c10d::barrier", 200_000, 201_000)
    t.cpu_op("c10d::barrier", 300_000, 301_000)
    t.annotation("gloo:all_reduce", 100_500, 150_000, tid=7)
    t.annotation("gloo:barrier", 200_500, 210_000, tid=7)
    t.annotation("gloo:barrier", 300_500, 310_000, tid=7)
    path = t.write(tmp_path / "rank0.json")
    ev = load_run(path, cache=False).ranks[0].events
    comm = ev[ev["kind"] == "comm"].sort_values("start_ns")
    assert comm["collective"].astype(str).tolist() == ["reduce_scatter", "barrier", "barrier"]
    assert (comm["launch_ns"] - comm["launch_ns"].min()).tolist() == [0, 100_000, 200_000]
    by_coll = analyze(load_run(path, cache=False)).by_collective.set_index("collective")
    assert by_coll["comm_ns"].to_dict() == {"reduce_scatter": 49_500, "barrier": 19_000}


def test_cuda_graph_replay_kernels_belong_to_the_launch_step_and_scope(tmp_path):
    """One cudaGraphLaunch (one correlation id) replays three kernels, an NCCL all-reduce among them:
    all belong to step 2, which launched the graph, and to the scope around the launch."""
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 100_000)
    t.kernel("void gemm()", 10_000, 40_000, launch_ns=1_000)
    t.step(2, 100_000, 200_000)
    t.annotation("decoder | graph", 100_500, 102_000)
    t.x("cuda_runtime", "cudaGraphLaunch", 101_000, 101_800, correlation=77)
    for name, s, e, stream in (("void gemm()", 150_000, 170_000, 7), ("void add()", 170_000, 175_000, 7),
                               ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 165_000, 185_000, 20)):
        t.x("kernel", name, s, e, pid=0, tid=stream, stream=stream, device=0, correlation=77)
    a = analyze(load_run(t.write(tmp_path / "rank0.json"), cache=False))
    steps = a.steps.set_index("step")
    # step 2's window starts at its first device event (150 µs) and ends at the last (185 µs)
    assert (steps.loc[2, "window_ns"], steps.loc[2, "compute_ns"], steps.loc[2, "comm_ns"],
            steps.loc[2, "exposed_comm_ns"]) == (35_000, 25_000, 20_000, 10_000)
    assert steps.loc[1, "comm_ns"] == 0
    assert a.by_scope[["scope", "comm_ns", "exposed_comm_ns"]].values.tolist() == [["decoder | graph", 20_000, 10_000]]
