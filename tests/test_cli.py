"""The analyze command's formats and options, on a hand-built two-rank run."""
from __future__ import annotations

import csv
import io

import orjson
import pytest
from click.testing import CliRunner

from kineto_builder import KinetoTrace
from overlapscope.cli import main

BASE = 1_711_964_646_000_000_000


@pytest.fixture
def run_dir(tmp_path):
    for rank, late in ((0, 0), (1, 5_000)):
        t = KinetoTrace(rank=rank, base_ns=BASE)
        t.step(7, 0, 100_000)
        t.annotation("layers.0 | forward", 500, 40_000)
        t.kernel("void gemm()", 1_000, 30_000, launch_ns=600)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 20_000 + late, 50_000, stream=20, launch_ns=700)
        t.write(tmp_path / f"trace_r{rank}.json.gz")
    return tmp_path


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_json_schema_and_exact_values(run_dir):
    doc = orjson.loads(invoke("analyze", str(run_dir), "--format", "json"))
    assert doc["schema"] == "overlapscope.report/1"
    r0, r1 = doc["ranks"]
    assert [s["step"] for s in r0["steps"]] == [7]
    # rank 0: compute [1,30) µs, comm [20,50) -> exposed 20 µs in a window [1, 50) µs
    assert (r0["total"]["window_ns"], r0["total"]["exposed_comm_ns"], r0["total"]["overlapped_ns"]) == \
        (49_000, 20_000, 10_000)
    assert (r1["total"]["exposed_comm_ns"], r1["total"]["overlapped_ns"]) == (20_000, 5_000)
    assert r0["total"]["overlap_pct"] == pytest.approx(100 * 10 / 30)
    assert r0["total"]["exposed_comm_pct"] == pytest.approx(100 * 20 / 49)
    assert r0["steps"][0]["exposed_comm_pct"] == pytest.approx(100 * 20 / 49)
    assert {(b["rank"], b["scope"]) for b in doc["by_scope"]} == {(0, "layers.0 | forward"), (1, "layers.0 | forward")}


def test_table_names_worst_collective_and_summary(run_dir):
    out = invoke("analyze", str(run_dir))
    assert "Exposed communication per rank" in out
    assert "all_reduce 20.000 ms" not in out  # 20 µs, not ms
    assert "all_reduce 0.020 ms" in out
    assert "most exposed: rank 0" in out or "most exposed: rank 1" in out


def test_markdown_per_step(run_dir):
    out = invoke("analyze", str(run_dir), "--format", "markdown", "--per-step")
    assert "## Per step" in out
    assert "| 0 | 7 | 0.049 | 0.029 | 0.030 | 0.010 | 0.020 |" in out
    assert "| 1 | 7 | 0.049 | 0.029 | 0.025 | 0.005 | 0.020 |" in out


def test_csv_has_one_row_per_rank_and_step(run_dir):
    rows = list(csv.DictReader(io.StringIO(invoke("analyze", str(run_dir), "--format", "csv"))))
    assert [(r["rank"], r["step"]) for r in rows] == [("0", "7"), ("1", "7")]
    assert rows[0]["exposed_comm_ns"] == "20000"


def test_output_file(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "report.json"  # not in the run directory: that is refused
    invoke("analyze", str(run_dir), "--format", "json", "-o", str(out))
    assert orjson.loads(out.read_bytes())["ranks"][1]["rank"] == 1


def test_no_steps_makes_one_window(run_dir):
    doc = orjson.loads(invoke("analyze", str(run_dir), "--format", "json", "--no-steps"))
    assert [s["step"] for s in doc["ranks"][0]["steps"]] == [-1]


def test_several_runs_give_a_json_array(run_dir):
    docs = orjson.loads(invoke("analyze", str(run_dir), str(run_dir / "trace_r0.json.gz"), "--format", "json"))
    assert [len(d["ranks"]) for d in docs] == [2, 1]


def test_version():
    assert "overlapscope" in invoke("--version")


def test_cross_rank_sections_in_json_table_and_markdown(run_dir):
    doc = orjson.loads(invoke("analyze", str(run_dir), "--format", "json"))
    [coll] = doc["collectives"]
    # rank 1 starts its AllReduce 5 µs late: rank 0 waits 5 µs, both end together (clock offset 0)
    assert coll["collective"] == "all_reduce"
    assert {r: (v["wait_ns"], v["transfer_ns"]) for r, v in coll["ranks"].items()} == \
        {"0": (5_000, 25_000), "1": (0, 25_000)}
    assert doc["clock_offsets_ns"] == {"0": 0, "1": 0}
    assert doc["stragglers"][0]["rank"] == 1
    table = invoke("analyze", str(run_dir))
    assert "Wait vs transfer by collective" in table and "Stragglers (who arrives last" in table
    md = invoke("analyze", str(run_dir), "--format", "markdown")
    assert "## Wait vs transfer by collective, matched across ranks (ms: totals over all steps and ranks)" in md
    assert "| (no group) | all_reduce | - | 1 | 0.005 | 0.050 |" in md
