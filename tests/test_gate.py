"""The CI gate on hand-built analyses whose per-step numbers, shifts and bounds are known exactly."""
from __future__ import annotations

import itertools
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from click.testing import CliRunner

from gate_fixtures import BASE6, MS, make_analysis, shifted
from overlapscope.errors import OverlapscopeError
from overlapscope.report import gate_baseline as gb
from overlapscope.report.gate import DEFAULT_METRICS, METRICS, Thresholds, compare
from overlapscope.report.gate_cli import baseline as baseline_cmd
from overlapscope.report.gate_cli import check as check_cmd
from overlapscope.report.gate_stats import _mann_whitney_cdf, _signed_rank_cdf, paired_shift, shift
from overlapscope.report.junit import junit_error_xml, junit_xml
from overlapscope.report.summary import github_annotations, markdown, publish_github


def base_doc(**kw):
    return gb.build_baseline(make_analysis({0: BASE6}, **kw))


def result(verdict, name):
    return next(r for r in verdict.results if r.metric.name == name)


# --- statistics -------------------------------------------------------------------------------

def test_u_distribution_matches_enumeration():
    n, m = 3, 4
    counts = np.zeros(n * m + 1)
    for pos in itertools.combinations(range(n + m), n):
        counts[sum(1 for c in pos for b in range(n + m) if b not in pos and c > b)] += 1
    assert np.allclose(np.cumsum(counts) / math.comb(7, 3), _mann_whitney_cdf(3, 4))


def test_signed_rank_distribution_matches_enumeration():
    n = 5
    counts = np.zeros(n * (n + 1) // 2 + 1)
    for signs in itertools.product((0, 1), repeat=n):
        counts[sum(r for r, s in zip(range(1, n + 1), signs) if s)] += 1
    assert np.allclose(np.cumsum(counts) / 2 ** n, _signed_rank_cdf(n))


def test_mann_whitney_bounds_exact_for_3_vs_3():
    s = shift([0.0, 0.5, 1.0], [2.0, 3.0, 4.0], alpha=0.05)
    # P(U = 0) = 1/20 = alpha: the bound is the smallest pairwise difference
    assert (s.estimate, s.lower, s.upper, s.method) == (2.5, 1.0, 4.0, "mann-whitney")
    # at alpha 0.04 no rank test can reach: Welch t on means 0.5 vs 3.0 (sds 0.5 and 1)
    w = shift([0.0, 0.5, 1.0], [2.0, 3.0, 4.0], alpha=0.04)
    assert w.method == "welch-t" and w.significant and w.lower < 1.0


def test_mann_whitney_bound_6_vs_6_is_eighth_smallest_difference():
    s = shift(BASE6, shifted(BASE6, 8.0), alpha=0.05)
    # differences are 8 + (i - j); P(U <= 7) <= 0.05 < P(U <= 8) for 6 vs 6, so the 8th smallest: 8 - 2
    assert (s.estimate, s.lower, s.upper) == (8.0, 6.0, 10.0)


def test_wilcoxon_bound_is_third_smallest_walsh_average_for_6_pairs():
    d = np.array([1.0, 1.22, 1.92, 2.23, 2.45, 2.52])
    s = paired_shift(np.zeros(6), d, alpha=0.05)
    # P(T+ <= 2) = 3/64 <= 0.05 < P(T+ <= 3) = 5/64: the 3rd smallest of the 21 Walsh averages
    assert s.method == "wilcoxon" and s.lower == pytest.approx(1.22)
    assert s.estimate == pytest.approx(np.median([(a + b) / 2 for i, a in enumerate(d) for b in d[i:]]))


def test_paired_falls_back_to_t_below_five_pairs():
    s = paired_shift([10.0, 11.0, 19.0], [12.61, 13.67, 23.23], alpha=0.05)
    assert s.method == "paired-t" and s.significant  # t = 5.98 with 2 df
    assert paired_shift([10.0, 11.0, 19.0], [10.03, 10.86, 19.10], alpha=0.05).lower < 0
    assert not paired_shift([1.0], [2.0], alpha=0.05).decidable
    same = paired_shift(BASE6, BASE6, alpha=0.05)
    assert (same.estimate, same.lower, same.significant) == (0.0, 0.0, False)


def test_shift_large_samples_use_normal_approximation():
    rng = np.random.default_rng(7)
    s = shift(rng.normal(0, 1, 200), rng.normal(1, 1, 200), alpha=0.05)
    assert 0.6 < s.lower < s.estimate < s.upper < 1.4


# --- baseline files ---------------------------------------------------------------------------

def test_baseline_roundtrip_keeps_exact_ns_and_nulls(tmp_path):
    doc = gb.build_baseline(make_analysis({0: BASE6, 1: shifted(BASE6, 1)}, model="fsdp2"))
    path = tmp_path / "base.json"
    gb.save_baseline(doc, path)
    raw = json.loads(path.read_text())
    assert raw["schema"] == "overlapscope.baseline/1"
    assert raw["steps"]["exposed_comm_ns"][:2] == [10 * MS, 11 * MS]
    assert raw["run"]["model"] == "fsdp2" and raw["run"]["world_size"] == 2
    assert raw["by_collective"]["exposed_comm_ns"] == [75 * MS, 81 * MS]
    assert gb.load_baseline(path) == raw
    assert not list(tmp_path.glob(".base.json.*"))  # no temporary left behind


@pytest.mark.parametrize("content, why", [
    ("{not json", "not a readable JSON baseline"),
    ('{"schema": "overlapscope.report/1"}', "not an overlapscope baseline"),
    ('{"schema": "overlapscope.baseline/1", "steps": {"rank": [0]}}', "no per-step samples"),
    ('{"schema": "overlapscope.baseline/1", "steps": {"rank": [0], "step": [1, 2]}}', "not lists of one length"),
])
def test_bad_baseline_files_are_one_line_errors(tmp_path, content, why):
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(OverlapscopeError, match=why) as err:
        gb.load_baseline(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


# --- verdicts ---------------------------------------------------------------------------------

def test_same_run_passes():
    verdict = compare(base_doc(), make_analysis({0: BASE6}))
    assert verdict.exit_code == 0
    assert result(verdict, "exposed_comm").status == "pass"
    assert result(verdict, "exposed_comm").worsening.estimate == 0
    # one rank, per-rank totals: a breakdown has one sample a side and cannot be decided
    assert result(verdict, "exposed_comm_by_collective").status == "undecided"


def test_steady_increase_regresses_with_exact_bound_and_names_the_new_collective():
    current = make_analysis({0: shifted(BASE6, 8)},
                            collectives={"all_reduce": {0: BASE6}, "all_gather": {0: [8.0] * 6}})
    verdict = compare(base_doc(), current)
    r = result(verdict, "exposed_comm")
    assert verdict.exit_code == 1 and r.status == "regression"
    assert (r.baseline_median, r.current_median) == (12.5 * MS, 20.5 * MS)
    # paired by step: every difference is 8 ms, so are the estimate and the bound
    assert (r.worsening.estimate, r.worsening.lower, r.allowed) == (8 * MS, 8 * MS, 1.25 * MS)
    assert r.worsening.method == "wilcoxon"
    kinds = {(f.kind, f.key): f for f in r.findings}
    assert kinds[("rank", "0")].significant
    assert kinds[("collective", "all_gather")].delta == 8 * MS
    assert ("collective", "all_reduce") not in kinds  # unchanged: not named
    assert kinds[("scope", "unit.all_gather")].delta == 8 * MS
    # overlap falls 20 points every step (comm 40 ms)
    o = result(verdict, "overlap")
    assert o.status == "regression" and (o.worsening.estimate, o.worsening.lower) == (20.0, 20.0)
    assert o.allowed == pytest.approx(6.875)


def test_per_step_breakdown_decides_each_collective():
    kw = dict(per_step_breakdown=True)
    base = gb.build_baseline(make_analysis({0: BASE6}, **kw))
    current = make_analysis({0: shifted(BASE6, 8)}, collectives={"all_reduce": {0: BASE6}, "all_gather": {0: [8.0] * 6}},
                            **kw)
    r = result(compare(base, current), "exposed_comm_by_collective")
    # 2 keys: alpha 0.025 each; P(T+ <= 0) = 1/64 <= 0.025 < P(T+ <= 1): the smallest Walsh average
    assert r.status == "regression"
    assert [(f.key, f.delta, f.significant) for f in r.findings] == [("all_gather", 8 * MS, True)]
    assert r.worsening.lower == 8 * MS


def test_significant_but_below_threshold_passes():
    base = [10.0, 10.1, 10.2, 10.3, 10.4, 10.5]
    r = result(compare(gb.build_baseline(make_analysis({0: base})), make_analysis({0: shifted(base, 0.5)})),
               "exposed_comm")
    assert r.worsening.significant and r.worsening.lower == pytest.approx(0.5 * MS)
    assert r.allowed == pytest.approx(1.025 * MS) and r.status == "pass"


def test_large_but_noisy_change_passes_when_steps_do_not_pair():
    base = [10.0, 30.0, 10.0, 30.0, 10.0, 30.0]
    current = make_analysis({0: shifted(base, 4)}, first_step=101)  # other step numbers: unpaired
    r = result(compare(gb.build_baseline(make_analysis({0: base})), current), "exposed_comm")
    assert r.worsening.method == "mann-whitney"
    assert r.worsening.estimate == 4 * MS > r.allowed == 2 * MS
    assert r.worsening.lower == -16 * MS and r.status == "pass"


def test_large_but_noisy_paired_change_passes():
    base = [10.0, 30.0, 10.0, 30.0, 10.0, 30.0]
    current = [b + d for b, d in zip(base, [12.0, -9.0, 8.0, -6.0, 10.0, 7.0])]
    r = result(compare(gb.build_baseline(make_analysis({0: base})), make_analysis({0: current})), "exposed_comm")
    # Walsh averages of the differences: median 3 ms > allowed 2 ms, but the bound (3rd smallest) is -6 ms
    assert (r.worsening.estimate, r.worsening.lower, r.status) == (3 * MS, -6 * MS, "pass")


def test_improvement_is_not_a_failure():
    verdict = compare(base_doc(), make_analysis({0: shifted(BASE6, -8)}))
    assert result(verdict, "exposed_comm").status == "improved"
    assert result(verdict, "overlap").status == "improved" and verdict.exit_code == 0


def test_one_rank_regressing_alone_fails_and_is_named():
    base = gb.build_baseline(make_analysis({0: BASE6, 1: BASE6}))
    current = make_analysis({0: BASE6, 1: shifted(BASE6, 8)})
    r = result(compare(base, current), "exposed_comm")
    # pooled over 12 pairs (six 0 ms, six 8 ms differences): 21 Walsh averages of 0, 36 of 4, 21 of 8;
    # the bound, the 18th smallest (P(T+ <= 17) <= 0.05 for n = 12), is 0: not significant...
    assert (r.worsening.estimate, r.worsening.lower) == (4 * MS, 0)
    # ...but rank 1 alone is 8 ms worse every step (alpha 0.025 per rank): it fails and is named
    assert r.status == "regression" and "rank 1 alone" in r.note
    assert [(f.kind, f.key) for f in r.findings if f.kind == "rank"] == [("rank", "1")]


def test_breakdown_over_eight_ranks_of_totals_is_decidable():
    ranks = {r: shifted(BASE6, r * 0.1) for r in range(8)}
    base = gb.build_baseline(make_analysis(ranks))
    r = result(compare(base, make_analysis(ranks)), "exposed_comm_by_collective")
    assert r.status == "pass"
    worse = {r: shifted(v, 5) for r, v in ranks.items()}
    r = result(compare(base, make_analysis(worse)), "exposed_comm_by_collective")
    assert r.status == "regression" and r.findings[0].key == "all_reduce"
    assert r.findings[0].delta == pytest.approx(5 * MS)


def test_metric_selection_and_unknown_metric():
    verdict = compare(base_doc(), make_analysis({0: BASE6}), metrics=["step_time", "comm"])
    assert [r.metric.name for r in verdict.results] == ["step_time", "comm"]
    with pytest.raises(OverlapscopeError, match="unknown metric nope"):
        compare(base_doc(), make_analysis({0: BASE6}), metrics=["nope"])


@pytest.mark.parametrize("field, value", [("max_increase_pct", -1.0), ("min_increase_ms", math.nan),
                                          ("alpha", 0.0), ("alpha", 0.5)])
def test_thresholds_are_checked(field, value):
    with pytest.raises(OverlapscopeError):
        Thresholds(**{field: value})


# --- incompatible runs ------------------------------------------------------------------------

@pytest.mark.parametrize("current, why", [
    (make_analysis({0: BASE6}, world_size=8), "world size 8, but the baseline has 1"),
    (make_analysis({}), "run has no steps: nothing was measured"),
    (make_analysis({0: [12.0]}, first_step=-1), "run has no steps .no ProfilerStep"),
])
def test_incompatible_runs(current, why):
    with pytest.raises(OverlapscopeError, match=why):
        compare(base_doc(), current)


def test_missing_and_extra_ranks():
    base = gb.build_baseline(make_analysis({0: BASE6, 1: BASE6, 2: BASE6}))
    with pytest.raises(OverlapscopeError, match=r"ranks 1, 2 missing \(the baseline has ranks 0, 1, 2\)"):
        compare(base, make_analysis({0: BASE6}, world_size=3))
    with pytest.raises(OverlapscopeError, match="ranks 3 are not in the baseline"):
        compare(base, make_analysis({r: BASE6 for r in range(4)}, world_size=3))


def test_identity_differences_warn():
    base = base_doc(backend="nccl", manifest={"layout": {"parallel": "fsdp2", "prefetch": "1"}, "torch_version": "2.13"})
    current = make_analysis({0: BASE6}, backend="gloo",
                            manifest={"layout": {"parallel": "fsdp2", "prefetch": "none"}, "torch_version": "2.13"})
    assert compare(base, current).warnings == ("backend differs: baseline 'nccl', this run 'gloo'",
                                               "layout.prefetch differs: baseline '1', this run 'none'")


# --- JUnit, markdown, GitHub ------------------------------------------------------------------

def regressed_verdict():
    current = make_analysis({0: shifted(BASE6, 8)}, collectives={"all_reduce": {0: BASE6}, "a|l<b>": {0: [8.0] * 6}})
    return compare(base_doc(), current, metrics=DEFAULT_METRICS + ("step_time",))


def test_junit_has_one_case_per_metric():
    verdict = regressed_verdict()
    root = ET.fromstring(junit_xml(verdict))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == list(DEFAULT_METRICS) + ["step_time"]
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped"), suite.get("errors")) == ("5", "2", "2", "0")
    failed = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert set(failed) == {"exposed_comm", "overlap"}
    assert "collective a|l<b> +8.000 ms/step" in failed["exposed_comm"].get("message")
    assert cases[2].find("skipped") is not None and cases[4].find("system-out") is not None


def test_junit_error_for_unusable_input():
    suite = ET.fromstring(junit_error_xml("run: world size 8, but the baseline has 4")).find("testsuite")
    assert suite.get("errors") == "1" and suite.find("testcase/error").get("message").endswith("has 4")


def test_markdown_summary_escapes_trace_names():
    md = markdown(regressed_verdict())
    assert md.startswith("## overlapscope check: ❌ 2 of 5 metrics regressed")
    assert "| `exposed_comm` | ❌ regression | 12.500 ms | 20.500 ms | +8.000 ms | ≥ +8.000 ms | 1.250 ms |" in md
    assert "| `overlap` | ❌ regression | 68.8% | 48.8% | -20.0 pp | ≤ -20.0 pp | 6.9 pp |" in md
    assert "collective `a|l<b>` +8.000 ms/step" in md  # a code span: shown, never rendered


def test_github_output_only_under_actions(tmp_path):
    verdict = regressed_verdict()
    lines = github_annotations(verdict)
    assert lines[0].startswith("::error title=overlapscope exposed_comm::exposed_comm REGRESSED: +8.000 ms")
    assert publish_github("md\n", lines, env={}) == []
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier\n")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    assert publish_github("md\n", lines, env=env) == lines
    assert summary.read_text() == "earlier\nmd\n"


# --- CLI on stored run records (baseline JSON as RUN) -----------------------------------------

def write(doc, path):
    gb.save_baseline(doc, path)
    return str(path)


def test_cli_exit_statuses_and_outputs(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    base = write(base_doc(), tmp_path / "base.json")
    same = write(base_doc(), tmp_path / "same.json")
    worse = write(gb.build_baseline(make_analysis({0: shifted(BASE6, 8)})), tmp_path / "worse.json")
    wide = write(gb.build_baseline(make_analysis({0: BASE6}, world_size=8)), tmp_path / "wide.json")
    runner = CliRunner()
    ok = runner.invoke(check_cmd, [same, "--baseline", base])
    assert ok.exit_code == 0 and "PASS (0 of 4" in ok.output
    junit, summary = tmp_path / "out" / "j.xml", tmp_path / "out" / "s.md"
    bad = runner.invoke(check_cmd, [worse, "--baseline", base, "--metric", "exposed_comm",
                                    "--junit", str(junit), "--summary", str(summary)])
    assert bad.exit_code == 1 and "exposed_comm REGRESSED" in bad.output
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"
    assert summary.read_text().startswith("## overlapscope check: ❌ 1 of 1")
    # a 70% allowance lets the same +64% through
    assert runner.invoke(check_cmd, [worse, "--baseline", base, "--max-increase", "70"]).exit_code == 0
    unusable = runner.invoke(check_cmd, [wide, "--baseline", base, "--junit", str(junit)])
    assert unusable.exit_code == 2
    assert unusable.output.strip() == "overlapscope: error: run: world size 8, but the baseline has 1: different runs"
    assert ET.parse(junit).getroot().find("testsuite").get("errors") == "1"
    garbage = tmp_path / "garbage.json"
    garbage.write_text("[]")
    assert runner.invoke(check_cmd, [same, "--baseline", str(garbage)]).exit_code == 2
    assert runner.invoke(check_cmd, [same, "--baseline", base, "--alpha", "2"]).exit_code == 2


def test_cli_under_github_actions_prints_annotations(tmp_path, monkeypatch):
    summary = tmp_path / "gh.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base = write(base_doc(), tmp_path / "base.json")
    worse = write(gb.build_baseline(make_analysis({0: shifted(BASE6, 8)})), tmp_path / "worse.json")
    out = CliRunner().invoke(check_cmd, [worse, "--baseline", base])
    assert out.exit_code == 1
    assert "::error title=overlapscope exposed_comm::" in out.output
    assert "❌ 2 of 4 metrics regressed" in summary.read_text()


def test_cli_baseline_refuses_runs_without_steps(tmp_path):
    no_steps = write(gb.build_baseline(make_analysis({0: [12.0]}, first_step=-1)), tmp_path / "nostep.json")
    out = CliRunner().invoke(baseline_cmd, [no_steps, "-o", str(tmp_path / "b.json")])
    assert out.exit_code == 2 and "no steps" in out.output and not (tmp_path / "b.json").exists()
    good = write(base_doc(), tmp_path / "rec.json")
    out = CliRunner().invoke(baseline_cmd, [good, "-o", str(tmp_path / "b.json")])
    assert out.exit_code == 0 and gb.load_baseline(tmp_path / "b.json")["steps"]["step"] == [1, 2, 3, 4, 5, 6]


def test_every_metric_has_a_known_section():
    assert {m.section for m in METRICS.values()} <= {"steps"} | set(gb.BREAKDOWNS)


# --- the CI examples only use options that exist ----------------------------------------------

def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def test_ci_examples_use_real_check_and_baseline_options(tmp_path, monkeypatch):
    import shlex
    from pathlib import Path

    import yaml

    examples = Path(__file__).resolve().parents[1] / "examples" / "ci"
    monkeypatch.chdir(tmp_path)
    for name in ("run", "run2", "run3"):
        (tmp_path / name).mkdir()
    commands = {"check": check_cmd, "baseline": baseline_cmd}
    seen = set()
    for name in ("github-actions.yml", "gitlab-ci.yml"):
        for text in _strings(yaml.safe_load((examples / name).read_text())):
            for line in text.replace("\\\n", " ").splitlines():
                for sub, cmd in commands.items():
                    marker = f"overlapscope {sub} "
                    if marker in line:
                        args = [a.replace("$BASELINE", "ci/base.json")
                                for a in shlex.split(line.split(marker, 1)[1])]
                        cmd.make_context(sub, args)  # raises on an unknown option or a bad value
                        seen.add((name, sub))
    assert seen == {(n, s) for n in ("github-actions.yml", "gitlab-ci.yml") for s in ("check", "baseline")}


# --- baselines of several runs ----------------------------------------------------------------

def test_combined_baseline_splits_back_into_its_runs():
    docs = [gb.build_baseline(make_analysis({0: shifted(BASE6, d), 1: BASE6}, path=f"r{d}")) for d in (0, 2, 4)]
    combined = gb.combine(docs)
    assert combined["steps"]["run"] == [0] * 12 + [1] * 12 + [2] * 12
    assert [r["path"] for r in combined["runs"]] == ["r0", "r2", "r4"]
    assert gb.split_runs(combined) == docs
    assert gb.split_runs(docs[0]) == [docs[0]]
    with pytest.raises(OverlapscopeError, match="world size 8, but the first run has 2"):
        gb.combine(docs[:1] + [gb.build_baseline(make_analysis({0: BASE6, 1: BASE6}, world_size=8))])


def test_run_to_run_noise_of_the_baseline_runs_is_allowed():
    runs = [gb.build_baseline(make_analysis({0: shifted(BASE6, d)})) for d in (0, 2)]
    base = gb.combine(runs)
    # typical step = median of the two runs = BASE6 + 1; each run strays 2 ms from the other: noise 2 x 1.5
    r = result(compare(base, make_analysis({0: shifted(BASE6, 3)}), metrics=["exposed_comm"]), "exposed_comm")
    assert (r.worsening.estimate, r.worsening.lower, r.noise, r.allowed) == (2 * MS, 2 * MS, 3 * MS, 3 * MS)
    assert r.status == "pass"
    r = result(compare(base, make_analysis({0: shifted(BASE6, 5)}), metrics=["exposed_comm"]), "exposed_comm")
    assert (r.worsening.estimate, r.status) == (4 * MS, "regression")
    from overlapscope.report.summary import describe
    assert "allowed worsening 3.000 ms (the baseline runs' own run-to-run noise)" in describe(r, 0.05)
    # without the noise allowance the same +2 ms would fail (floor 1.35 ms)
    strict = Thresholds(noise_factor=0.0)
    r = result(compare(base, make_analysis({0: shifted(BASE6, 3)}), strict, ["exposed_comm"]), "exposed_comm")
    assert (r.allowed, r.status) == (1.35 * MS, "regression")


def test_cli_baseline_of_several_runs(tmp_path):
    recs = [write(gb.build_baseline(make_analysis({0: shifted(BASE6, d)}, path=f"r{d}")), tmp_path / f"r{d}.json")
            for d in (0, 2)]
    out = CliRunner().invoke(baseline_cmd, [*recs, "-o", str(tmp_path / "b.json")])
    assert out.exit_code == 0 and "(2 runs, 1 ranks, 6 steps)" in out.output
    doc = gb.load_baseline(tmp_path / "b.json")
    assert len(doc["runs"]) == 2 and doc["steps"]["run"] == [0] * 6 + [1] * 6
    ok = CliRunner().invoke(check_cmd, [recs[1], "--baseline", str(tmp_path / "b.json"), "--metric", "exposed_comm"])
    assert ok.exit_code == 0, ok.output


# --- CPU-only runs ---------------------------------------------------------------------------------

def cpu(exposed_by_rank, **kw):
    return make_analysis(exposed_by_rank, device="cpu", **kw)


def test_cpu_only_runs_default_to_overlap_and_allow_the_step_spread():
    # comm 40 ms, exposed 10..15 ms: overlap 75, 72.5 .. 62.5% on two ranks; the 12 values have
    # quartiles 65 and 72.5 (numpy's linear rule), an IQR of 7.5 points in both runs
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    v = compare(base, cpu({0: shifted(BASE6, 3), 1: shifted(BASE6, 3)}))  # overlap -7.5 points per step
    assert [r.metric.name for r in v.results] == ["overlap"]
    assert v.notes[0].startswith("CPU-only runs: communication") and v.notes[1].startswith("CPU-only runs: a change")
    r = v.results[0]
    assert (r.worsening.estimate, r.noise, r.noise_source, r.allowed, r.status) == (7.5, 7.5, "spread", 7.5, "pass")
    from overlapscope.report.summary import describe, markdown, text_report
    assert "allowed worsening 7.5 pp (the step-to-step spread of the runs)" in describe(r, 0.05)
    assert "note: CPU-only runs" in text_report(v) and "### Notes" in markdown(v)
    # one more ms per step (-10 points) is beyond the spread
    r = compare(base, cpu({0: shifted(BASE6, 4), 1: shifted(BASE6, 4)})).results[0]
    assert (r.worsening.estimate, r.allowed, r.status) == (10.0, 7.5, "regression")
    # the same -7.5 points on GPU runs: default metrics, no spread allowance (10% of 68.75%)
    gpu_base = gb.build_baseline(make_analysis({0: BASE6, 1: BASE6}))
    v = compare(gpu_base, make_analysis({0: shifted(BASE6, 3), 1: shifted(BASE6, 3)}))
    assert [r.metric.name for r in v.results] == list(DEFAULT_METRICS) and v.notes == ()
    assert (result(v, "overlap").allowed, result(v, "overlap").status) == (6.875, "regression")


def test_cpu_only_time_metrics_are_judged_when_named():
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    # exposed 10..15 ms twice over: quartiles 11 and 14 ms, a spread of 3 ms per step
    r = result(compare(base, cpu({0: shifted(BASE6, 3), 1: shifted(BASE6, 3)}), metrics=["exposed_comm"]),
               "exposed_comm")
    assert (r.worsening.estimate, r.allowed, r.status) == (3 * MS, 3 * MS, "pass")
    r = result(compare(base, cpu({0: shifted(BASE6, 3.5), 1: shifted(BASE6, 3.5)}), metrics=["exposed_comm"]),
               "exposed_comm")
    assert (r.worsening.estimate, r.status) == (3.5 * MS, "regression")


def test_cpu_only_baseline_of_several_runs_allows_the_larger_of_their_noise_and_the_spread():
    # exposed 10..15 ms: quartiles 11.25 and 13.75 ms, a spread of 2.5 ms in each run
    base = gb.combine([gb.build_baseline(cpu({0: shifted(BASE6, d)})) for d in (0, 2)])
    r = compare(base, cpu({0: shifted(BASE6, 3)}), metrics=["exposed_comm"]).results[0]
    assert (r.noise, r.noise_source, r.allowed, r.status) == (3 * MS, "runs", 3 * MS, "pass")
    base = gb.combine([gb.build_baseline(cpu({0: shifted(BASE6, d)})) for d in (0, 1)])
    r = compare(base, cpu({0: shifted(BASE6, 3)}), metrics=["exposed_comm"]).results[0]
    assert (r.noise, r.noise_source, r.allowed, r.status) == (2.5 * MS, "spread", 2.5 * MS, "pass")


def test_cpu_only_rank_regressing_alone_beyond_the_spread_fails():
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    r = compare(base, cpu({0: BASE6, 1: shifted(BASE6, 10)})).results[0]  # rank 1: overlap -25 points per step
    assert r.status == "regression"
    assert [(f.kind, f.key, f.delta, f.significant) for f in r.findings if f.kind == "rank"] == [("rank", "1", 25.0, True)]


def test_step_spread_ignores_undefined_steps_and_counts_a_lone_step_as_no_spread():
    import pandas as pd

    from overlapscope.report.gate import _step_spread
    # IQRs 0 (one step) and 1.0 (2 and 4: quartiles 2.5 and 3.5): root mean square sqrt(1/2)
    spread = _step_spread([pd.Series([7.0]), pd.Series([np.nan, 2.0, 4.0])])
    assert spread == math.sqrt(0.5)
