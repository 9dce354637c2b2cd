"""RankMeta: every reader fills the same typed facts; analyzers and reports read them, not reader dicts."""
from __future__ import annotations

import dataclasses

import orjson
import pytest

import overlapscope
from kineto_builder import KinetoTrace
from overlapscope.analysis.crossrank import group_sizes
from overlapscope.core.table import ProcessGroup, RankMeta
from overlapscope.report.json_report import to_json
from data_paths import REAL_TRACES

NSYS_MOCK = REAL_TRACES / "nsys" / "mock.sqlite"
KINETO_PG = REAL_TRACES / "kineto-gpu" / "nccl_parser_config"
REPO_TRACES = REAL_TRACES.parents[2] / "traces"


def meta_of(path):
    return [t.meta for t in overlapscope.load_run(path, cache=False).ranks]


@pytest.mark.needs_data(NSYS_MOCK)
def test_nsys_fills_device_clock_host_and_the_report_shows_the_device():
    (meta,) = meta_of(NSYS_MOCK)
    assert (meta.source_format, meta.source_file) == ("nsys", str(NSYS_MOCK))
    assert meta.device_name == "NVIDIA GeForce RTX 3080" and meta.world_size == 1
    assert meta.clock == "unix" and meta.clock_base_ns > 10**18 and meta.host == "DESKTOP-KBEMEQS"
    assert meta.extra["pid"] == 91186  # format-specific facts stay apart from the typed ones
    report = orjson.loads(to_json(overlapscope.analyze_run(NSYS_MOCK, cache=False)))
    assert report["run"]["device_name"] == "NVIDIA GeForce RTX 3080"


@pytest.mark.needs_data(KINETO_PG)
def test_kineto_fills_device_backend_groups_and_clock():
    (meta,) = meta_of(KINETO_PG)
    assert meta.source_format == "kineto" and meta.source_file.endswith("nccl_data.json.gz")
    assert (meta.device_name, meta.backend, meta.world_size) == ("NVIDIA A100-PG509-200", "nccl", 2)
    assert meta.process_groups == (ProcessGroup(name="0", ranks=(0, 1), size=2, desc="default_pg"),)
    assert meta.clock == "unix" and meta.clock_base_ns == 1_711_964_646_000_000_000
    assert meta.extra == {"nccl_version": "2.17.1"}


def test_a_2d_mesh_run_gives_every_rank_its_groups():
    run = overlapscope.load_run(REPO_TRACES / "fsdp2_tp", cache=False)
    assert [sorted(g.desc for g in t.meta.process_groups) for t in run.ranks] == [["default_pg", "mesh_dp", "mesh_tp"]] * 4
    assert all(t.meta.backend == "gloo" and t.meta.world_size == 4 for t in run.ranks)
    assert group_sizes(run) == {"0": 4, "1": 2, "2": 2, "3": 2, "4": 2}


def test_a_trace_without_distributed_info_leaves_fields_unknown(tmp_path):
    t = KinetoTrace(rank=None)
    t.kernel("void gemm()", 1_000, 2_000)
    (meta,) = meta_of(t.write(tmp_path / "a.json"))
    assert (meta.backend, meta.world_size, meta.process_groups, meta.device_name, meta.clock) == (None, None, (), None, "")


def test_json_round_trip_is_exact():
    meta = RankMeta(source_format="kineto", source_file="r.json", device_name="X", backend="nccl", world_size=8,
                    process_groups=(ProcessGroup(name="3", ranks=(0, 4), size=2, desc="mesh_tp"),),
                    clock="unix", clock_base_ns=5, extra={"nccl_version": "2.21"})
    back = RankMeta.from_json(orjson.loads(orjson.dumps(meta.to_json())))
    assert back == meta and back.extra == meta.extra
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.world_size = 2  # type: ignore[misc]
