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
