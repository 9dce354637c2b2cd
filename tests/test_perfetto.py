"""`overlapscope export RUN --perfetto OUT.json`: Chrome-trace JSON with an exposed-comm track per rank."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from overlapscope import load_run
from overlapscope.cli import main
from overlapscope.core.table import RankMeta, RankTrace, Run, make_table
from overlapscope.report.perfetto import EXPOSED_TID, EXPOSED_TRACK, write_perfetto
from data_paths import REAL_TRACES

CONTROL = REAL_TRACES / "kineto-gpu/trace_diff_control/control.json.gz"
SAMPLED = REAL_TRACES / "kineto-gpu/trace_filter_2rank"


def _hand_run() -> Run:
    """One rank, no steps, so one window [0, 100) µs: compute [0,40) [60,100), comm [30,70) -> exposed [40,60)."""
    ev = make_table(
        0, lane=["stream:7", "stream:7", "stream:21", "thread:1"], kind=["compute", "compute", "comm", "cpu_op"],
        name=["gemm", "gemm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "aten::mm <&>"],
        start_ns=[1_000_000_000, 1_000_060_000, 1_000_030_000, 1_000_000_000],
        end_ns=[1_000_040_000, 1_000_100_000, 1_000_070_000, 1_000_005_001],
        collective=["", "", "all_reduce", ""], bytes=[-1, -1, 4096, -1])
    trace = RankTrace(rank=0, events=ev, steps=pd.DataFrame({"step": [], "start_ns": [], "end_ns": []}),
                      meta=RankMeta(source_format="test", source_file="hand"), device="gpu")
    return Run(ranks=[trace], manifest={}, path="hand")


def test_hand_built_run_exact_tracks(tmp_path):
    out = tmp_path / "t.json"
    n = write_perfetto(_hand_run(), out, clock_offsets_ns={0: 500})
    doc = json.loads(out.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert n == len(xs) == 5
    exposed = [e for e in xs if e["tid"] == EXPOSED_TID]
    # Exposed [40, 60) µs after the first event; the offset moves everything, so relative times stay.
    assert exposed == [{"ph": "X", "name": EXPOSED_TRACK, "cat": "exposed", "ts": 40.0, "dur": 20.0,
                        "pid": 0, "tid": EXPOSED_TID}]
    comm = [e for e in xs if e["cat"] == "comm"]
    assert comm[0]["args"] == {"collective": "all_reduce", "bytes": 4096, "group": "", "seq": -1, "step": -1}
    cpu = [e for e in xs if e["cat"] == "cpu_op"][0]
    assert cpu["name"] == "aten::mm <&>" and cpu["dur"] == 5.001  # ns kept as µs decimals
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {0: "stream:21", 1: "stream:7", 2: "thread:1", EXPOSED_TID: EXPOSED_TRACK}
    assert doc["otherData"]["t0_ns"] == 1_000_000_500 and doc["otherData"]["exposed_comm_ns"] == {"0": 20_000}


def export_cli(run, tmp_path) -> dict:
    out = tmp_path / "export.perfetto.json"
    result = CliRunner().invoke(main, ["export", str(run), "--perfetto", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


@pytest.mark.needs_data(CONTROL)
def test_export_cli_on_real_trace_matches_reference(tmp_path):
    doc = export_cli(CONTROL, tmp_path)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    exposed = [e for e in xs if e["tid"] == EXPOSED_TID]
    # README reference: exposed comm 87,921 µs on rank 3 over 6 steps; every event of the table is there.
    assert sum(round(e["dur"] * 1000) for e in exposed) == 87_921_000
    assert len(xs) - len(exposed) == len(load_run(CONTROL).ranks[0].events)
    starts = np.array([e["ts"] for e in exposed])
    assert (np.diff(starts) > 0).all() and starts.min() >= 0
    assert {e["pid"] for e in xs} == {3}


@pytest.mark.needs_data(SAMPLED)
def test_export_two_ranks_one_process_each(tmp_path):
    doc = export_cli(SAMPLED, tmp_path)
    exposed = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["tid"] == EXPOSED_TID:
            exposed[e["pid"]] = exposed.get(e["pid"], 0) + round(e["dur"] * 1000)
    assert exposed == {0: 336_983_000, 1: 303_523_000}  # README reference table


def test_export_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    result = CliRunner().invoke(main, ["export", str(bad), "--perfetto", str(tmp_path / "o.json")])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and str(bad) in result.output
    assert not (tmp_path / "o.json").exists()
