"""Hand-built traces whose exposed-comm numbers are known to the nanosecond."""
from __future__ import annotations

import pytest

import overlapscope
from kineto_builder import KinetoTrace

BASE = 1_711_964_646_000_000_000  # newer Kineto: relative float µs + baseTimeNanoseconds
EPOCH = 1_695_835_573_023_613_000  # older Kineto: int epoch µs, no base


def analyze(tmp_path, trace, name="rank0.json"):
    return overlapscope.analyze(overlapscope.load_run(trace.write(tmp_path / name)))


def two_stream_trace(offset: int, float_ts: bool, scale: int = 1) -> KinetoTrace:
    """Step 1: compute [10,40)+[50,60), AllReduce [30,55) on stream 20, AllGather [45,70) on stream 21,
    memcpy [65,80); step 2: compute [120,130). Units of `scale` ns, shifted by `offset`."""
    t = KinetoTrace(float_ts=float_ts, base_ns=BASE if float_ts else None)
    u = lambda x: offset + x * scale  # noqa: E731
    t.step(1, u(0), u(100))
    t.step(2, u(100), u(200))
    t.kernel("void gemm_kernel()", u(10), u(40), launch_ns=u(1))
    t.kernel("void gemm_kernel()", u(50), u(60), launch_ns=u(2))
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", u(30), u(55),
             stream=20, launch_ns=u(3))
    t.kernel("ncclDevKernel_AllGather_RING_LL", u(45), u(70), stream=21, launch_ns=u(4))
    t.memcpy(u(65), u(80), launch_ns=u(5))
    t.kernel("void gemm_kernel()", u(120), u(130), launch_ns=u(101))
    return t


EXPECTED_STEP1 = dict(window_ns=110, compute_ns=40, comm_ns=40, overlapped_ns=20, exposed_comm_ns=20,
                      exposed_memcpy_ns=10, idle_ns=40)
EXPECTED_STEP2 = dict(window_ns=10, compute_ns=10, comm_ns=0, overlapped_ns=0, exposed_comm_ns=0,
                      exposed_memcpy_ns=0, idle_ns=0)


@pytest.mark.parametrize("float_ts,offset,scale", [
    (True, 0, 1),            # ns-resolution relative float µs (ts like 0.01)
    (True, 4_458_676_983_543_183, 1),   # float µs with ns decimals at real Kineto magnitudes
    (False, EPOCH, 1000),    # int epoch µs: exact int64 ns, no float rounding
])
def test_two_nccl_streams_overlap_each_other_and_compute(tmp_path, float_ts, offset, scale):
    a = analyze(tmp_path, two_stream_trace(offset, float_ts, scale))
    steps = a.steps.set_index("step")
    for step, expected in ((1, EXPECTED_STEP1), (2, EXPECTED_STEP2)):
        got = {k: int(steps.loc[step, k]) for k in expected}
        assert got == {k: v * scale for k, v in expected.items()}
    row = steps.loc[1]
    assert row.compute_ns + row.exposed_comm_ns + row.exposed_memcpy_ns + row.idle_ns == row.window_ns
    assert row.overlap_pct == pytest.approx(50.0)
    total = a.totals.iloc[0]
    assert int(total.exposed_comm_ns) == 20 * scale and int(total.window_ns) == 120 * scale
    by = a.by_collective.set_index("collective")["exposed_comm_ns"].to_dict()
    # Per collective: AllReduce [30,55) minus compute -> 10; AllGather [45,70) -> 15 (overlap counts in both).
    assert by == {"all_gather": 15 * scale, "all_reduce": 10 * scale}
    # per step: all in step 1, summing to the totals, for every section
    per_step = a.by_key_steps
    assert set(per_step["step"]) == {1}
    for section, frame in (("by_collective", a.by_collective), ("by_group", a.by_group), ("by_scope", a.by_scope)):
        rows = per_step[per_step["section"] == section].set_index("key")
        totals = frame.set_index(frame.columns[1])
        assert rows[["count", "comm_ns", "exposed_comm_ns"]].sort_index().equals(
            totals[["count", "comm_ns", "exposed_comm_ns"]].sort_index().rename_axis("key"))


def test_window_start_is_first_device_start_and_kernel_straddles_boundary(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.step(1, 0, 100_000)
    t.step(2, 100_000, 200_000)
    t.kernel("void gemm()", 10_000, 40_000, launch_ns=1_000)
    # launched in step 1, runs into step 2's window [120_000, ...): clipped into both windows
    t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 115_000, 125_000, stream=20, launch_ns=2_000)
    t.kernel("void gemm()", 120_000, 130_000, launch_ns=101_000)
    a = analyze(tmp_path, t)
    s = a.steps.set_index("step")
    assert (int(s.loc[1, "window_start_ns"]) - BASE, int(s.loc[1, "window_end_ns"]) - BASE) == (10_000, 120_000)
    assert int(s.loc[1, "comm_ns"]) == 5_000 and int(s.loc[1, "exposed_comm_ns"]) == 5_000
    assert int(s.loc[2, "comm_ns"]) == 5_000 and int(s.loc[2, "overlapped_ns"]) == 5_000
    assert int(s.loc[2, "exposed_comm_ns"]) == 0
    # per step, the all-reduce is cut at the edge of the touching windows; it is counted where it starts
    rows = a.by_key_steps[a.by_key_steps["section"] == "by_collective"]
    got = [(int(r.step), r.key, int(r["count"]), int(r.comm_ns), int(r.exposed_comm_ns)) for _, r in rows.iterrows()]
    assert got == [(1, "all_reduce", 1, 5_000, 5_000), (2, "all_reduce", 0, 5_000, 0)]


def test_zero_length_events_change_nothing(tmp_path):
    t = two_stream_trace(0, True)
    t.kernel("ncclDevKernel_AllReduce", 90, 90, stream=20, launch_ns=6)
    t.kernel("void gemm()", 85, 85, launch_ns=7)
    a = analyze(tmp_path, t)
    got = a.steps.set_index("step").loc[1]
    assert {k: int(got[k]) for k in EXPECTED_STEP1} == EXPECTED_STEP1


def test_sync_events_are_not_compute(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.kernel("void gemm()", 0, 10)
    t.sync(10, 50)
    t.kernel("ncclDevKernel_AllReduce", 20, 60, stream=20)
    a = analyze(tmp_path, t)
    row = a.totals.iloc[0]
    assert (int(row.compute_ns), int(row.exposed_comm_ns), int(row.window_ns)) == (10, 40, 60)
    assert int(a.steps.iloc[0].step) == -1


def test_no_comm_gives_null_percentages_not_nan(tmp_path):
    import orjson
    from overlapscope.report.json_report import to_json

    t = KinetoTrace(base_ns=BASE)
    t.kernel("void gemm()", 0, 10)
    doc = orjson.loads(to_json(analyze(tmp_path, t)))
    total = doc["ranks"][0]["total"]
    assert total["overlap_pct"] is None and total["exposed_comm_pct"] is None and total["comm_ns"] == 0


def test_symmetric_memory_and_vllm_allreduce_count_as_comm(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.kernel("void gemm()", 0, 100)
    t.kernel("multimem_all_reduce_kernel<bf16>", 50, 150, stream=9)
    t.kernel("void vllm::cross_device_reduce_2stage<half, 8>()", 200, 260, stream=9)
    a = analyze(tmp_path, t)
    row = a.totals.iloc[0]
    assert (int(row.comm_ns), int(row.exposed_comm_ns)) == (160, 110)
    assert a.by_collective["collective"].tolist() == ["all_reduce"]


def test_user_comm_pattern(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.kernel("my_custom_allgather_kernel", 0, 100, stream=9)
    path = t.write(tmp_path / "r.json")
    plain = overlapscope.analyze(overlapscope.load_run(path))
    custom = overlapscope.analyze(overlapscope.load_run(path, comm_patterns=("custom_allgather",)))
    assert int(plain.totals.iloc[0].comm_ns) == 0
    assert int(custom.totals.iloc[0].comm_ns) == 100
    assert custom.by_collective["collective"].tolist() == ["all_gather"]


def test_scope_is_innermost_annotation_around_the_launch(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.step(1, 0, 1_000)
    t.annotation("## forward ##", 10, 500)
    t.annotation("FSDP::pre_forward (layers.3)", 20, 100)
    t.annotation("nccl:all_gather", 30, 40)  # a comm wrapper, not a scope
    t.kernel("ncclDevKernel_AllGather", 200, 300, stream=20, launch_ns=35)
    t.kernel("ncclDevKernel_ReduceScatter", 400, 450, stream=20, launch_ns=600)
    t.kernel("void gemm()", 150, 250, launch_ns=150)
    a = analyze(tmp_path, t)
    by = a.by_scope.set_index("scope")["exposed_comm_ns"].to_dict()
    assert by == {"FSDP::pre_forward (layers.3)": 50, "": 50}


def test_nccl_args_give_bytes_and_group(tmp_path):
    from overlapscope.ingest.kineto import read_kineto

    t = KinetoTrace(base_ns=BASE)
    t.kernel("ncclDevKernel_AllGather", 0, 100, stream=20, **{
        "Collective name": "_allgather_base", "In msg nelems": 1000, "Out msg nelems": 2000,
        "dtype": "BFloat16", "Process Group Name": "3", "Group size": 2})
    ev = read_kineto(t.write(tmp_path / "r.json")).events
    comm = ev[ev["kind"] == "comm"].iloc[0]
    assert (int(comm["bytes"]), comm["group"], comm["collective"]) == (4000, "3", "all_gather")


# --- CPU (gloo) traces ---------------------------------------------------------------------------
MAIN, WORKER = 100, 200


def gloo_trace() -> KinetoTrace:
    t = KinetoTrace(base_ns=BASE)
    t.step(1, 0, 100_000)
    t.cpu_op("aten::mm", 1_000, 20_000)
    # an autograd node that blocks on the collective: not compute; its wait-free child is
    t.cpu_op("autograd::engine::evaluate_function: MmBackward0", 25_000, 60_000)
    t.cpu_op("aten::add", 26_000, 29_000)
    t.cpu_op("c10d::allreduce_", 30_000, 32_000)
    t.cpu_op("aten::empty", 30_500, 31_000)  # inside the enqueue itself: a child with no wait
    t.annotation("gloo:all_reduce", 32_000, 70_000, tid=WORKER)
    t.cpu_op("aten::copy_", 33_000, 34_000, tid=WORKER)  # on a comm worker: never compute
    t.cpu_op("aten::mm", 62_000, 90_000)
    return t


def test_gloo_worker_transfer_is_comm_and_blocking_parents_are_not_compute(tmp_path):
    a = analyze(tmp_path, gloo_trace())
    row = a.steps.iloc[0]
    # compute: [1,20) + [26,29) + [30.5,31) + [62,90) = 19 + 3 + 0.5 + 28 = 50.5 µs; comm [32,70)
    assert int(row.window_ns) == 100_000
    assert int(row.compute_ns) == 50_500
    assert int(row.comm_ns) == 38_000
    assert int(row.overlapped_ns) == 8_000
    assert int(row.exposed_comm_ns) == 30_000
    assert int(row.idle_ns) == 100_000 - 50_500 - 30_000


def test_gloo_transfer_linked_to_its_enqueue(tmp_path):
    from overlapscope.ingest.kineto import read_kineto

    t = gloo_trace()
    # FSDP2 reduce-scatter runs as gloo:all_reduce; the enqueue says what it is
    t.annotation("FSDP::post_backward_reduce (layers.0)", 91_000, 99_000)
    t.cpu_op("c10d::_reduce_scatter_base_", 92_000, 93_000)
    t.annotation("gloo:all_reduce", 93_500, 98_000, tid=WORKER)
    ev = read_kineto(t.write(tmp_path / "r.json")).events
    comm = ev[ev["kind"] == "comm"].sort_values("start_ns")
    assert comm["collective"].tolist() == ["all_reduce", "reduce_scatter"]
    assert (comm["launch_ns"] - BASE).tolist() == [30_000, 92_000]
    assert set(comm["launch_lane"]) == {f"thread:{MAIN}"}
    a = overlapscope.analyze(overlapscope.load_run(tmp_path / "r.json"))
    assert "FSDP::post_backward_reduce (layers.0)" in set(a.by_scope["scope"])


def test_pipeline_send_recv_on_main_thread_are_comm_and_waits(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.step(1, 0, 10_000)
    t.cpu_op("aten::mm", 0, 2_000)
    t.cpu_op("PipelineStage.forward_recv", 2_000, 6_000)   # encloses the recv wait: not compute
    t.annotation("gloo:recv", 2_500, 5_500)
    t.cpu_op("aten::mm", 6_000, 10_000)
    a = analyze(tmp_path, t)
    row = a.steps.iloc[0]
    assert (int(row.compute_ns), int(row.comm_ns), int(row.exposed_comm_ns), int(row.idle_ns)) == \
        (6_000, 3_000, 3_000, 1_000)


def test_collective_on_compute_stream_is_diagnosed(tmp_path):
    t = KinetoTrace(base_ns=BASE)
    t.kernel("void gemm()", 0, 100, stream=7)
    t.kernel("ncclDevKernel_SendRecv", 100, 350, stream=7)
    t.kernel("ncclDevKernel_AllReduce", 0, 50, stream=20)
    a = analyze(tmp_path, t)
    assert a.diagnoses == ["rank 0: 1 collective kernel(s), 0.000 ms, run on stream:7, which also runs compute: "
                           "they cannot overlap anything there"]
