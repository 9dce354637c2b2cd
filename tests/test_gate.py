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
    assert result(verdict, "exposed_comm_by_collective").status == "inconclusive"
    assert verdict.outcome == "inconclusive" and verdict.exit_status(strict=True) == 3


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
    # the +-10 ms steps hide a 2 ms worsening: no verdict either way
    assert r.worsening.lower == -16 * MS and r.status == "inconclusive" and r.detectable > 2 * MS


def test_large_but_noisy_paired_change_passes():
    base = [10.0, 30.0, 10.0, 30.0, 10.0, 30.0]
    current = [b + d for b, d in zip(base, [12.0, -9.0, 8.0, -6.0, 10.0, 7.0])]
    r = result(compare(gb.build_baseline(make_analysis({0: base})), make_analysis({0: current})), "exposed_comm")
    # Walsh averages of the differences: median 3 ms > allowed 2 ms, but the bound (3rd smallest) is -6 ms
    assert (r.worsening.estimate, r.worsening.lower, r.status) == (3 * MS, -6 * MS, "inconclusive")


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
    ok = runner.invoke(check_cmd, [same, "--baseline", base, "--metric", "exposed_comm", "--metric", "overlap"])
    assert ok.exit_code == 0 and "PASS (0 of 2" in ok.output
    # per-rank breakdown totals of one rank cannot be decided: inconclusive, 0 unless --strict
    blind = runner.invoke(check_cmd, [same, "--baseline", base])
    assert blind.exit_code == 0 and "INCONCLUSIVE (2 of 4" in blind.output
    assert runner.invoke(check_cmd, [same, "--baseline", base, "--strict"]).exit_code == 3
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
    # the HTML report is written by check and kept as an artifact
    gh = yaml.safe_load((examples / "github-actions.yml").read_text())
    upload = next(s for s in gh["jobs"]["exposed-communication"]["steps"] if s.get("uses", "").startswith(
        "actions/upload-artifact"))
    assert "overlapscope-report.html" in upload["with"]["path"].split()
    gl = yaml.safe_load((examples / "gitlab-ci.yml").read_text())["overlapscope"]
    assert "overlapscope-report.html" in gl["artifacts"]["paths"]
    assert all("--html overlapscope-report.html" in (examples / n).read_text() for n in ("github-actions.yml",
                                                                                       "gitlab-ci.yml"))


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
    # the runs stray by more than the 1.35 ms threshold: a worsening of that size could not be seen
    assert r.status == "inconclusive" and r.detectable == 3 * MS and "stray by 2.000 ms" in r.advice
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

def test_run_level_tests_times_on_a_log_scale_where_load_multiplies_them():
    from overlapscope.report.gate_power import run_level
    base = [np.array([100.0, 100, 100, 100])]
    slower = run_level(base, np.full(4, 200.0), load_sd=0.35, prior_df=4, alpha=0.05, log=True)
    faster = run_level(base, np.full(4, 50.0), load_sd=0.35, prior_df=4, alpha=0.05, log=True)
    # twice as slow and twice as fast are the same distance from the baseline: +100 and -50 in the unit
    assert (slower.shift.estimate, faster.shift.estimate) == pytest.approx((100.0, -50.0))
    assert slower.shift.method == "run-t-log" and slower.base == pytest.approx(100.0)
    half = 2.131847 * 0.35 * math.sqrt(2)  # t4(0.95) * sd of a log median * sqrt(1 + 1/1)
    assert slower.shift.lower == pytest.approx(100 * math.expm1(math.log(2) - half), rel=1e-5)
    assert faster.shift.upper == pytest.approx(100 * math.expm1(-math.log(2) + half), rel=1e-5)


def cpu(exposed_by_rank, **kw):
    return make_analysis(exposed_by_rank, device="cpu", **kw)


# --- what the data can detect ------------------------------------------------------------------

def test_step_detectable_shift_is_the_documented_power_formula():
    from scipy.special import stdtrit

    from overlapscope.report.gate_power import robust_sd, step_detectable
    d = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert robust_sd(d) == pytest.approx(1.4826 * 1.5)  # MAD of 1..6 is 1.5
    # paired: (t5(0.95) + t5(0.80)) * s_d / sqrt(6) * sqrt(pi/3)
    expected = (stdtrit(5, 0.95) + stdtrit(5, 0.8)) * 1.4826 * 1.5 / math.sqrt(6) * math.sqrt(math.pi / 3)
    assert step_detectable(np.zeros(6), d, True, 0.05) == pytest.approx(expected)
    # independent 6 vs 6 of the same spread: pooled s, SE s * sqrt(1/6 + 1/6), 10 df
    expected = (stdtrit(10, 0.95) + stdtrit(10, 0.8)) * 1.4826 * 1.5 * math.sqrt(1 / 3) * math.sqrt(math.pi / 3)
    assert step_detectable(d, d + 5, False, 0.05) == pytest.approx(expected)
    assert step_detectable(np.zeros(1), np.ones(1), True, 0.05) == math.inf
    # a mostly tied sample (MAD 0) falls back to the sample sd
    assert robust_sd(np.array([0.0, 0.0, 0.0, 3.0])) == pytest.approx(1.5)


def test_run_level_test_pools_the_assumed_load_noise_with_the_runs_own():
    from overlapscope.report.gate_power import run_level
    # one baseline run: tau^2 = load 6^2 + (pi/2) * within^2 / n (within 1.4826 * MAD 2, n 4 steps)
    r = run_level([np.array([40.0, 42, 44, 46])], np.array([30.0, 32, 34, 36]), load_sd=6.0, prior_df=4, alpha=0.05)
    tau = math.sqrt(36 + math.pi / 2 * (1.4826 * 2) ** 2 / 4)
    assert (r.shift.estimate, r.shift.method, r.runs) == (-10.0, "run-t", 1)
    assert r.run_sd == pytest.approx(tau) and r.load_sd == pytest.approx(6.0)
    assert r.shift.lower == pytest.approx(-10 - 2.131847 * tau * math.sqrt(2), rel=1e-6)
    # three baseline runs whose medians spread by 1 (var 1): (4 * prior + 2 * 1) / 6, df 6
    runs = [np.array([40.0, 42, 44, 46]) + d for d in (-1, 0, 1)]
    r3 = run_level(runs, np.array([30.0, 32, 34, 36]), load_sd=6.0, prior_df=4, alpha=0.05)
    assert r3.run_sd == pytest.approx(math.sqrt((4 * tau ** 2 + 2 * 1.0) / 6))
    assert r3.detectable < r.detectable


def cpu(exposed_by_rank, **kw):
    return make_analysis(exposed_by_rank, device="cpu", **kw)


def test_cpu_only_one_run_baseline_is_inconclusive_says_what_it_could_detect_and_what_to_record():
    from overlapscope.report.summary import describe, text_report
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    v = compare(base, cpu({0: shifted(BASE6, 1), 1: shifted(BASE6, 1)}))  # overlap -2.5 points
    r = v.results[0]
    assert [x.metric.name for x in v.results] == ["overlap"] and r.model == "runs"
    assert r.status == "inconclusive" and v.exit_code == 0 and v.exit_status(strict=True) == 3
    assert r.detectable > r.threshold == pytest.approx(6.875)
    line = describe(r, 0.05)
    assert "overlap INCONCLUSIVE: -2.5 pp per step" in line and "1 baseline run" in line
    assert f"can detect a worsening of {r.detectable:.1f} pp or more (80% power, 95% one-sided)" in line
    assert "the threshold is 6.9 pp" in line and r.advice in line
    assert "INCONCLUSIVE (1 of 1 metrics" in text_report(v)
    # prefetch off: overlap 68.8% -> 0% is beyond any run-to-run drift: it fails
    gone = compare(base, cpu({0: [40.0] * 6, 1: [40.0] * 6})).results[0]
    assert gone.status == "regression" and "-68.8 pp per step (95%" in describe(gone, 0.05)


def test_cpu_only_baseline_of_runs_that_agree_decides_a_large_threshold():
    runs = [gb.build_baseline(cpu({0: shifted(BASE6, d), 1: shifted(BASE6, d)})) for d in (0, 0.2, 0.4, 0.6, 0.8)]
    base = gb.combine(runs)
    th = Thresholds(min_increase_points=40.0)
    r = compare(base, cpu({0: shifted(BASE6, 0.4), 1: shifted(BASE6, 0.4)}), th).results[0]
    assert r.status == "pass" and r.detectable <= 40.0
    r = compare(base, cpu({0: shifted(BASE6, 0.4), 1: shifted(BASE6, 0.4)})).results[0]
    assert r.status == "inconclusive" and "(--min-increase-points)" in r.advice


def test_cpu_only_time_metrics_scale_the_assumed_load_noise_with_the_median():
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    r = compare(base, cpu({0: shifted(BASE6, 1), 1: shifted(BASE6, 1)}), metrics=["exposed_comm"]).results[0]
    # 35% of the 12.5 ms median: a one-run baseline cannot see 1.25 ms
    assert r.status == "inconclusive" and r.worsening.method == "run-t-log"
    assert r.detectable > 4 * 0.35 * 12.5 * MS


def test_cpu_only_rank_regressing_alone_fails():
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    r = compare(base, cpu({0: BASE6, 1: [40.0] * 6})).results[0]  # rank 1: every step exposed, overlap 0
    assert r.status == "regression" and "rank 1 alone regressed" in r.note
    assert [(f.kind, f.key, f.delta, f.significant) for f in r.findings if f.kind == "rank"] == [
        ("rank", "1", 68.75, True)]


def test_gpu_steps_too_few_or_too_noisy_are_inconclusive_with_a_step_count_to_record():
    base = [10.0, 30.0, 10.0, 30.0, 10.0, 30.0]
    # other step numbers: unpaired, and the +-10 ms steps hide a 2 ms threshold
    r = result(compare(gb.build_baseline(make_analysis({0: base})), make_analysis({0: base}, first_step=101)),
               "exposed_comm")
    assert r.status == "inconclusive" and r.model == "steps" and r.worsening.method == "mann-whitney"
    need = math.ceil(6 * (r.detectable / r.threshold) ** 2)
    assert r.advice.startswith(f"profile at least {need} steps per rank (--steps)")
    one = result(compare(gb.build_baseline(make_analysis({0: [10.0]})), make_analysis({0: [10.0]})), "exposed_comm")
    assert one.status == "inconclusive" and "too few samples (1 vs 1)" in one.note


def test_percentage_metrics_change_in_points_only():
    from overlapscope.report.summary import describe
    # overlap 42.5% -> 0%: printed as -42.5 pp, never as a relative "-100.0%"
    base = gb.build_baseline(make_analysis({0: [23.0] * 6}))
    r = result(compare(base, make_analysis({0: [40.0] * 6})), "overlap")
    line = describe(r, 0.05)
    assert "-42.5 pp per step (95%" in line and "%;" not in line.split("per step")[1].split(")")[0]
    exposed = describe(result(compare(base, make_analysis({0: [40.0] * 6})), "exposed_comm"), 0.05)
    assert "(+73.9%; 95%" in exposed  # time metrics keep their relative change


def test_junit_and_github_mark_inconclusive_as_skipped_and_warning(monkeypatch, tmp_path):
    base = gb.build_baseline(cpu({0: BASE6, 1: BASE6}))
    v = compare(base, cpu({0: BASE6, 1: BASE6}))
    case = ET.fromstring(junit_xml(v)).find("testsuite/testcase")
    skipped = case.find("skipped")
    assert skipped is not None and "overlap INCONCLUSIVE" in skipped.get("message")
    assert "can detect a worsening of" in skipped.get("message") and v.results[0].advice in skipped.get("message")
    assert ET.fromstring(junit_xml(v)).find("testsuite").get("skipped") == "1"
    lines = github_annotations(v)
    assert lines and lines[0].startswith("::warning title=overlapscope overlap inconclusive::")
    assert "⚪ inconclusive" in markdown(v) and "| smallest detectable |" in markdown(v)
