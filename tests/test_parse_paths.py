"""The typed (msgspec) decode and the generic (orjson dicts) decode give identical event tables."""
from __future__ import annotations

import gzip

import orjson
import pandas as pd
import pytest

from conftest import SHARED_TRACES
from kineto_builder import KinetoTrace
from overlapscope.ingest.kineto import read_kineto
from overlapscope.ingest.kineto_parse import _typed_columns, read_bytes

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def both_paths(path):
    """(typed result, generic result); asserts the file really took the typed path."""
    assert _typed_columns(read_bytes(path)) is not None, "expected the typed decode to accept this file"
    raw = path.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return read_kineto(path), read_kineto(path, doc=doc)


def assert_same(a, b):
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert (a.rank, a.device, a.rank_from, a.world_size, a.meta) == (b.rank, b.device, b.rank_from, b.world_size,
                                                                     b.meta)


def gpu_trace_with_comm_args() -> KinetoTrace:
    t = KinetoTrace(rank=1, base_ns=1_711_964_646_000_000_000)
    t.step(7, 0, 100_000)
    t.kernel("void gemm()", 10_000, 40_000)
    # args on the kernel itself (newer Kineto)...
    t.kernel(NCCL, 30_000, 55_000, stream=20, **{"Collective name": "allreduce", "dtype": "Float",
                                                   "In msg nelems": 1024, "Out msg nelems": 1024,
                                                   "Process Group Name": "0", "Seq": 3})
    # ...or on the record_param_comms op around the launch (older Kineto).
    t.cpu_op("record_param_comms", 55_000, 70_000, **{"Collective name": "_allgather_base", "dtype": "BFloat16",
                                                       "In msg nelems": 8, "Out msg nelems": 16,
                                                       "Process Group Name": "pg1", "seq": 9})
    t.kernel("ncclDevKernel_Generic", 60_000, 80_000, stream=21, launch_ns=60_000)
    t.memcpy(85_000, 90_000)
    t.sync(90_000, 95_000)
    return t


def gloo_cpu_trace() -> KinetoTrace:
    t = KinetoTrace(rank=0, base_ns=0)
    t.step(1, 0, 100_000)
    t.cpu_op("aten::mm", 1_000, 20_000)
    t.cpu_op("c10d::allreduce_", 20_000, 22_000)
    t.annotation("gloo:all_reduce", 23_000, 40_000, tid=200)
    t.cpu_op("aten::add", 25_000, 45_000)
    t.cpu_op("wrapper", 50_000, 70_000)
    t.cpu_op("c10d::wait", 55_000, 60_000)
    return t


@pytest.mark.parametrize("make", [gpu_trace_with_comm_args, gloo_cpu_trace])
@pytest.mark.parametrize("name", ["rank.json", "rank.json.gz"])
def test_hand_built_traces_read_the_same_on_both_paths(tmp_path, make, name):
    typed, generic = both_paths(make().write(tmp_path / name))
    assert_same(typed, generic)


def test_comm_args_are_read_from_kernel_and_enclosing_record_param_comms(tmp_path):
    typed, _ = both_paths(gpu_trace_with_comm_args().write(tmp_path / "r.json"))
    comm = typed.events[typed.events["kind"] == "comm"].set_index("name")
    assert comm.loc[NCCL, ["collective", "bytes", "group", "seq"]].tolist() == ["all_reduce", 4096, "0", 3]
    assert comm.loc["ncclDevKernel_Generic", ["collective", "bytes", "group", "seq"]].tolist() == \
        ["all_gather", 32, "pg1", 9]
    assert typed.steps.to_dict("list") == {"step": [7], "start_ns": [1_711_964_646_000_000_000],
                                           "end_ns": [1_711_964_646_000_100_000]}


def test_unusual_file_falls_back_to_the_generic_path(tmp_path):
    t = gpu_trace_with_comm_args()
    t.events.append({"ph": "X", "cat": "cpu_op", "name": 5, "pid": 1, "tid": 100, "ts": 1.0, "dur": 2.0})
    t.events.append({"ph": "i", "name": "marker", "args": ["not", "a", "dict"]})
    path = t.write(tmp_path / "odd.json")
    assert _typed_columns(read_bytes(path)) is None
    trace = read_kineto(path)
    assert "5" in set(trace.events["name"].astype(str))


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="../shared/traces is not beside this checkout")
@pytest.mark.parametrize("path", sorted(SHARED_TRACES.glob("kineto-gpu/*/*.json.gz")), ids=lambda p: p.name)
def test_real_traces_read_the_same_on_both_paths(path):
    assert_same(*both_paths(path))
