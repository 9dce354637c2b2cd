"""The committed MoE and ring-attention example runs (traces/moe_ep*, traces/cp*) through `overlapscope
analyze`: the JSON sections, the table and markdown summaries, and the numbers traces/README.md quotes
for each run are the analysis' own."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import overlapscope
from overlapscope.analysis.all_to_all import traffic_matrices
from overlapscope.cli import main

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "traces"
RUNS = ("moe_ep", "moe_ep_no_overlap", "moe_ep_skewed", "cp", "cp_no_overlap")


@pytest.fixture(scope="module")
def analyses():
    return {run: overlapscope.analyze(overlapscope.load_run(TRACES / run)) for run in RUNS}


def _readme_row(run: str) -> str:
    rows = [ln for ln in (TRACES / "README.md").read_text().splitlines() if ln.startswith(f"| `{run}` |")]
    assert len(rows) == 1, f"traces/README.md: one row for {run}"
    return rows[0]


def _forward_ms(passes) -> tuple[int, int]:
    """(exposed, total) forward ms over all ranks and steps, as the README rounds them."""
    fwd = passes[passes["pass"] == "forward"]
    return round(fwd["exposed_comm_ns"].sum() / 1e6), round(fwd["comm_ns"].sum() / 1e6)


def test_readme_numbers_are_the_analysis(analyses) -> None:
    exposed, total = map(int, re.search(r"(\d+) of (\d+) ms of forward dispatch\+combine exposed",
                                        _readme_row("moe_ep")).groups())
    assert (exposed, total) == _forward_ms(analyses["moe_ep"].moe_passes)
    none = _forward_ms(analyses["moe_ep_no_overlap"].moe_passes)
    assert tuple(map(int, re.search(r"\((\d+) of (\d+) ms\)", _readme_row("moe_ep_no_overlap")).groups())) == none
    assert none[0] == none[1], "--overlap none: every forward dispatch and combine exposed"

    row = _readme_row("moe_ep_skewed")
    a2a = analyses["moe_ep_skewed"].all_to_all
    dispatch = a2a[a2a["scope"].str.endswith(":dispatch")]
    assert {f"{x:.2f}" for x in dispatch["imbalance"]} == {re.search(r"every dispatch ([\d.]+)x", row).group(1)}
    assert set(dispatch["hot_rank"]) == {int(re.search(r"rank (\d+) hot", row).group(1))}

    a = analyses["cp"]
    exposed, total, by_attn = map(int, re.search(r"(\d+) of (\d+) ms of forward p2p exposed, (\d+) ms",
                                                 _readme_row("cp")).groups())
    assert (exposed, total) == _forward_ms(a.ring_passes)
    fwd = a.ring_steps[a.ring_steps["pass"] == "forward"]
    assert by_attn == round(fwd["hidden_by_attn_ns"].sum() / 1e6)
    off = _forward_ms(analyses["cp_no_overlap"].ring_passes)
    assert tuple(map(int, re.search(r"(\d+) of (\d+) ms exposed", _readme_row("cp_no_overlap")).groups())) == off
    assert off[0] / off[1] > 0.95 > exposed / total, "waiting first exposes the p2p; overlap on hides much of it"


def _analyze(run: str, fmt: str) -> str:
    out = CliRunner().invoke(main, ["analyze", str(TRACES / run), "--format", fmt, "--no-cache"])
    assert out.exit_code == 0, out.output
    return out.stdout


@pytest.mark.parametrize("run", ["moe_ep_skewed", "cp"])
def test_json_and_summaries_are_drawn_from_the_analysis(analyses, run: str) -> None:
    a = analyses[run]
    doc = json.loads(_analyze(run, "json"))
    for section in ("all_to_all", "moe_layers", "moe_passes", "ring_steps", "ring_passes"):
        assert len(doc[section]) == len(getattr(a, section)), section
    moe = run.startswith("moe")
    titles = (["All-to-all traffic (most imbalanced)", "Exposed MoE dispatch/combine per layer"] if moe
              else ["Ring-attention steps (all ranks, steps, layers)"])
    absent = "Ring-attention steps" if moe else "All-to-all traffic"
    md, table = _analyze(run, "markdown"), _analyze(run, "table")
    for title in titles:
        assert f"## {title}" in md and title in table
    assert absent not in md and absent not in table
    if moe:
        matrices = traffic_matrices(a.all_to_all_traffic)
        for row in doc["all_to_all"]:
            assert (row["members"], row["traffic_bytes"]) == matrices[row["instance"]]
        assert len(doc["all_to_all"]) == a.all_to_all["instance"].nunique() > 0
    else:
        assert len(doc["ring_steps"]) > 0 and doc["all_to_all"] == [] and doc["moe_layers"] == []
        fwd = [r for r in doc["ring_steps"] if r["pass"] == "forward"]
        assert sum(r["hidden_by_attn_ns"] for r in fwd) == a.ring_steps.query("`pass` == 'forward'")[
            "hidden_by_attn_ns"].sum()
