"""Every kind of bad input: one line on stderr naming the file and the problem, exit 2, no number."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from overlapscope.cli import main

BAD = Path(__file__).parent / "data" / "bad"

CASES = {
    "empty.json": "empty file",
    "truncated.json.gz": "truncated or corrupt gzip",
    "malformed.json": "malformed JSON",
    "truncated.json": "truncated JSON",
    "not_kineto.json": "not a Kineto trace",
    "no_activity.json": "no device or CPU activity",
    "duplicate_rank": "rank 0 appears twice",
    "no_traces": "holds no traces",
    "empty_step.json": "step 2 has no compute or communication events",
    "no_work_in_steps.json": "no device work was launched inside any step range",
    "does_not_exist.json": "no such file or directory",
}


def run(*args: str):
    return CliRunner().invoke(main, ["analyze", *args])


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_bad_input_is_one_line_exit_2(name, fmt):
    result = run(str(BAD / name), "--format", fmt)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert CASES[name] in lines[0]
    assert str(BAD / name) in lines[0] or name in lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_bad_run_among_good_ones_prints_no_number(real_traces):
    good = real_traces / "kineto-gpu" / "nccl_parser_config" / "nccl_data.json.gz"
    result = run(str(good), str(BAD / "malformed.json"), "--format", "json")
    assert result.exit_code == 2 and result.stdout == ""


def test_mixed_world_sizes_warn_but_analyze(caplog):
    result = run(str(BAD / "mixed_world_sizes"), "--format", "json")
    assert result.exit_code == 0
    assert "disagree on world size" in caplog.text


def test_unknown_rank_falls_back_to_order_with_warning(tmp_path, caplog):
    from kineto_builder import KinetoTrace

    t = KinetoTrace(rank=None, base_ns=0)
    t.kernel("void gemm()", 1_000, 2_000)
    t.write(tmp_path / "a.json")
    t.write(tmp_path / "b.json")
    result = run(str(tmp_path), "--format", "json")
    assert result.exit_code == 0, result.output
    assert caplog.text.count("by file order") == 2


def test_rank_from_file_name(tmp_path):
    from kineto_builder import KinetoTrace

    t = KinetoTrace(rank=None, base_ns=0)
    t.kernel("void gemm()", 1_000, 2_000)
    t.write(tmp_path / "job_rank3.json")
    result = run(str(tmp_path), "--format", "json")
    import orjson

    doc = orjson.loads(result.stdout)
    assert doc["ranks"][0]["rank"] == 3 and doc["run"]["rank_from"] == {"3": "filename"}


def test_ranks_that_never_overlap_in_time_warn(tmp_path, caplog):
    from kineto_builder import KinetoTrace

    for rank, base in ((0, 1_000_000_000_000), (1, 9_000_000_000_000)):
        t = KinetoTrace(rank=rank, base_ns=base)
        t.kernel("void gemm()", 1_000, 2_000)
        t.write(tmp_path / f"r{rank}.json")
    result = run(str(tmp_path), "--format", "json")
    assert result.exit_code == 0
    assert "clocks apart" in caplog.text and "8000.000 s before" in caplog.text


def test_a_bug_is_one_line_too_never_a_traceback(monkeypatch):
    import overlapscope.pipeline.run as pipeline_run

    def broken(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(pipeline_run, "analyze_run", broken)
    result = run(str(BAD / "mixed_world_sizes"))
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "overlapscope: error: internal error, please report it with OVERLAPSCOPE_DEBUG=1 output: RuntimeError: boom"]


def test_ranks_missing_from_the_manifest_warn(tmp_path, caplog):
    import orjson
    from kineto_builder import KinetoTrace

    t = KinetoTrace(rank=0, world_size=4, base_ns=0)
    t.kernel("void gemm()", 1_000, 2_000)
    t.write(tmp_path / "rank0.json")
    (tmp_path / "manifest.json").write_bytes(orjson.dumps({"world_size": 4}))
    result = run(str(tmp_path), "--format", "json")
    assert result.exit_code == 0
    assert "3 of 4 ranks have no trace (missing: 1, 2, 3)" in caplog.text
