"""One pipeline: every entry point that reads a run takes the same RunOptions and gets the same numbers."""
from __future__ import annotations

import dataclasses
import json

import orjson
import pytest
from click.testing import CliRunner

import overlapscope
from kineto_builder import KinetoTrace
from overlapscope.cli import main
from overlapscope.dashboard.data import load_run_data
from overlapscope.pipeline.options import RunOptions, field_docs
from overlapscope.report import gate_baseline as gb
from overlapscope.report.json_report import to_json
from overlapscope.report.perfetto import EXPOSED_TID

# Options that change every number of this run: without them it has no steps and no comm.
FLAGS = ["--step-pattern", r"iteration \d+", "--comm-pattern", "my_collective"]
OPTIONS = RunOptions(step_pattern=r"iteration \d+", comm_patterns=("my_collective",))


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for rank in range(2):
        t = KinetoTrace(rank=rank)
        for s in range(3):
            o = s * 100_000
            t.annotation(f"iteration {s}", o, o + 100_000)
            t.kernel("void gemm()", o + 10_000, o + 40_000, launch_ns=o + 1_000)
            # exposed: [40, 50 + 5*rank + s) µs of each step
            t.kernel("my_collective_kernel", o + 30_000, o + 50_000 + 5_000 * rank + 1_000 * s, stream=20,
                     launch_ns=o + 2_000)
        t.write(d / f"rank{rank}.json")
    return d


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


def test_every_entry_point_gives_the_same_numbers(run_dir, tmp_path, request, monkeypatch):
    api = overlapscope.analyze_run(run_dir, OPTIONS)
    expected = [sum(10_000 + 5_000 * rank + 1_000 * s for s in range(3)) for rank in range(2)]
    assert api.totals["exposed_comm_ns"].tolist() == expected
    assert api.steps["step"].tolist() == [0, 1, 2, 0, 1, 2]
    # The options matter: without them the same run has no comm at all.
    assert overlapscope.analyze_run(run_dir).totals["comm_ns"].sum() == 0
    report = to_json(api)

    assert cli("analyze", run_dir, "--format", "json", *FLAGS).stdout.strip() == report
    assert to_json(overlapscope.analyze(overlapscope.load_run(run_dir, OPTIONS))) == report
    assert to_json(load_run_data(run_dir, OPTIONS).analysis) == report

    doc = gb.build_baseline(api)
    cli("baseline", run_dir, "-o", tmp_path / "base.json", *FLAGS)
    recorded = gb.load_baseline(tmp_path / "base.json")
    assert gb.step_frame(recorded).equals(gb.step_frame(doc))
    checked = cli("check", run_dir, "--baseline", tmp_path / "base.json", *FLAGS)
    # The run against its own baseline: every metric moved by exactly zero.
    assert "PASS (0 of" in checked.stdout and "exposed_comm ok: +0.000 ms per step (+0.0%" in checked.stdout

    cli("export", run_dir, "--perfetto", tmp_path / "t.json", *FLAGS)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    exposed = {}
    for e in events:
        if e.get("ph") == "X" and e["tid"] == EXPOSED_TID:
            exposed[e["pid"]] = exposed.get(e["pid"], 0) + round(e["dur"] * 1000)
    assert [exposed[r] for r in (0, 1)] == expected

    # The pytest plugin: record this run as a baseline through the fixture's own call.
    gate = request.getfixturevalue("overlapscope")
    monkeypatch.setattr(type(gate), "baseline_path", lambda self, name=None: tmp_path / "plugin.json")
    gate.update = True
    gate.check_run(run_dir, options=OPTIONS)
    assert gb.step_frame(gb.load_baseline(tmp_path / "plugin.json")).equals(gb.step_frame(doc))


def test_run_options_are_keyword_only_frozen_and_documented():
    with pytest.raises(TypeError):
        RunOptions(r"x")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        OPTIONS.no_steps = True  # type: ignore[misc]
    docs = field_docs(RunOptions)
    assert {f.name for f in dataclasses.fields(RunOptions)} == set(docs)
    assert all(len(d) > 20 for d in docs.values())


@pytest.mark.parametrize("command", ["analyze", "baseline", "check", "export", "dashboard"])
def test_every_command_declares_the_same_run_options(command):
    params = {p.name for p in main.commands[command].params}
    wanted = {f.name for f in dataclasses.fields(RunOptions) if "cli" in f.metadata}
    assert wanted <= params


def test_both_dask_options_is_a_usage_error(run_dir):
    result = CliRunner().invoke(main, ["baseline", str(run_dir), "-o", "x.json", "--workers", "2",
                                       "--scheduler", "tcp://x:1"])
    assert result.exit_code == 2 and "not both" in result.stderr


def test_json_report_has_no_event_tables(run_dir):
    """keep_events only adds Analysis.traces; the reports never carry it."""
    kept = overlapscope.analyze_run(run_dir, OPTIONS, keep_events=True)
    assert kept.traces is not None and len(kept.traces.ranks) == 2
    assert to_json(kept) == to_json(overlapscope.analyze_run(run_dir, OPTIONS))
    assert "traces" not in orjson.loads(to_json(kept))


def test_workers_send_compact_results_not_event_tables(run_dir):
    """Without keep_events the reducer gets each rank's sections and two rows of its table (its
    earliest start and latest end), and the numbers are those of the whole tables."""
    from overlapscope.ingest import ReadOptions
    from overlapscope.pipeline.cache import CacheConfig
    from overlapscope.pipeline.distributed import rank_job

    read = ReadOptions(step_pattern=OPTIONS.step_pattern, comm_patterns=OPTIONS.comm_patterns)
    full = overlapscope.load_run(run_dir, OPTIONS).ranks[0].events
    (outcome,) = rank_job([run_dir / "rank0.json"], read, CacheConfig(enabled=False), False)
    assert len(outcome.trace.events) == 2 and len(full) > 2
    assert outcome.trace.events["start_ns"].min() == full["start_ns"].min()
    assert outcome.trace.events["end_ns"].max() == full["end_ns"].max()
    pooled = overlapscope.analyze_run(run_dir, dataclasses.replace(OPTIONS, pool_workers=2))
    assert pooled.traces is None and to_json(pooled) == to_json(overlapscope.analyze_run(run_dir, OPTIONS))
