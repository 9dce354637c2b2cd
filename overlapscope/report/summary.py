"""Words for a gate verdict: one line per metric, a markdown summary, GitHub Actions output."""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Mapping

from overlapscope.analysis.result import key_label
from overlapscope.report.gate import Finding, MetricResult, Verdict
from overlapscope.report.gate_metrics import POWER

_STATUS = {"regression": "❌ regression", "pass": "✅ pass", "improved": "✅ improved",
           "inconclusive": "⚪ inconclusive"}
NOISE_WORDS = {"runs": " (the baseline runs' own run-to-run noise)"}
_HEAD = {"regression": "REGRESSED", "pass": "ok", "improved": "improved", "inconclusive": "INCONCLUSIVE"}
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#])")


def fmt(value: float | None, unit: str, *, signed: bool = False, delta: bool = False) -> str:
    """12.345 ms / 45.2% for a value in the metric's unit (ns or pct); deltas of pct are points (pp)."""
    if value is None or not math.isfinite(value):
        return "n/a" if value is None or math.isnan(value) else ("+inf" if value > 0 else "-inf")
    sign = "+" if signed else ""
    if unit == "ns":
        return f"{value / 1e6:{sign},.3f} ms"
    return f"{value:{sign}.1f}" + (" pp" if signed or delta else "%")


def _relative(result: MetricResult) -> str:
    """The change relative to the baseline, for time metrics only: a percentage's change is in points."""
    base = result.baseline_median
    est = result.worsening.estimate
    if result.metric.unit == "pct" or not (math.isfinite(base) and math.isfinite(est)) or base == 0:
        return ""
    return f"{100.0 * est * result.metric.worse / abs(base):+.1f}%; "


def key_text(f: Finding) -> str:
    return key_label(f.key, "scope" if f.kind == "scope" else f.kind)


def finding_text(f: Finding, unit: str = "ns", direction: int = 1) -> str:
    """direction: the metric's `worse` for rank findings (an overlap drop shows as -N pp), else +1."""
    return f"{f.kind} {key_text(f)} {fmt(f.delta * direction, unit, signed=True)}/step"


def change_text(result: MetricResult, alpha: float) -> str:
    """The change in the metric's own direction, with its one-sided bound on the worse side."""
    m, w = result.metric, result.worsening
    conf = f"{100 * (1 - alpha):g}%"
    change = fmt(w.estimate * m.worse, m.unit, signed=True)
    bound = f"at {'least' if m.worse > 0 else 'most'} {fmt(w.lower * m.worse, m.unit, signed=True)}"
    how = {"wilcoxon": ", paired by step", "paired-t": ", paired by step, t",
           "run-t": f", each run one sample, {w.n_baseline} baseline run{'s' if w.n_baseline > 1 else ''}",
           "run-t-log": f", each run one sample on a log scale, {w.n_baseline} baseline run"
                        f"{'s' if w.n_baseline > 1 else ''}"}
    return f"{change} per step ({_relative(result)}{conf}: {bound}{how.get(w.method, '')})"


def detectable_text(result: MetricResult, alpha: float, power: float) -> str:
    """The smallest worsening this comparison could detect, beside the threshold it was asked to find."""
    m = result.metric
    if not math.isfinite(result.detectable):
        smallest = "no change of any size"
    else:
        smallest = f"a worsening of {fmt(result.detectable, m.unit, delta=True)} or more"
    return (f"this data can detect {smallest} ({100 * power:g}% power, {100 * (1 - alpha):g}% one-sided), "
            f"the threshold is {fmt(result.threshold, m.unit, delta=True)}")


def describe(result: MetricResult, alpha: float, power: float = POWER) -> str:
    """One line: what moved, by how much, whether that is beyond noise and thresholds, and where."""
    m = result.metric
    head = _HEAD[result.status]
    if result.status == "inconclusive" and not result.worsening.decidable:
        line = f"{m.name} {head}: {result.note or 'too few samples to decide'}"
        return line + (f"; {result.advice}" if result.advice else "")
    line = f"{m.name} {head}: {change_text(result, alpha)}, allowed worsening {fmt(result.allowed, m.unit, delta=True)}"
    if result.noise > 0 and result.noise >= result.allowed:
        line += NOISE_WORDS.get(result.noise_source, "")
    if m.section == "steps":
        line += f"; median {fmt(result.baseline_median, m.unit)} -> {fmt(result.current_median, m.unit)}"
    elif result.status != "inconclusive":  # an inconclusive breakdown's note names its least decidable key
        line += " (the key that moved most)"
    if result.note:
        line += f"; {result.note}"
    if result.status == "inconclusive":
        line += f"; {detectable_text(result, alpha, power)}; {result.advice}"
    if result.findings:
        unit = "ns" if m.section != "steps" or m.attribute else m.unit
        parts = [finding_text(f, m.unit, m.worse) if f.kind == "rank" else finding_text(f, unit)
                 for f in result.findings]
        line += "; " + ", ".join(parts)
    return line


def text_report(verdict: Verdict) -> str:
    th = verdict.thresholds
    lines = [describe(r, th.alpha, th.power) for r in verdict.results]
    lines += [f"note: {n}" for n in verdict.notes]
    lines += [f"warning: {w}" for w in verdict.warnings]
    lines.append(f"overlapscope check: {outcome_line(verdict)}")
    return "\n".join(lines)


def outcome_line(verdict: Verdict) -> str:
    """FAIL / INCONCLUSIVE / PASS with the counts behind it."""
    total = len(verdict.results)
    if verdict.regressions:
        return f"FAIL ({len(verdict.regressions)} of {total} metrics regressed)"
    if verdict.inconclusive:
        return (f"INCONCLUSIVE ({len(verdict.inconclusive)} of {total} metrics could not have detected a worsening "
                f"of the threshold's size; nothing regressed)")
    return f"PASS (0 of {total} metrics regressed)"


def md_code(text: object) -> str:
    """A code span: its content is shown verbatim (HTML escaped by the renderer); only backticks break it."""
    return "`" + str(text).replace("`", "'").replace("\n", " ") + "`"


def md_escape(text: str) -> str:
    """Trace-supplied names (scopes, groups) may hold markdown or HTML: show them, never render them."""
    return _MD_SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")


def markdown(verdict: Verdict) -> str:
    th = verdict.thresholds
    n = len(verdict.regressions)
    title = f"❌ {n} of {len(verdict.results)} metrics regressed" if n else (
        f"⚪ inconclusive ({len(verdict.inconclusive)} of {len(verdict.results)} metrics could not be decided)"
        if verdict.inconclusive else "✅ no regression")
    conf = f"{100 * (1 - th.alpha):g}%"
    out = [
        f"## overlapscope check: {title}",
        "",
        f"Baseline {md_code(verdict.baseline_run.get('path', '?'))} · this run "
        f"{md_code(verdict.current_run.get('path', '?'))} · world size "
        f"{md_escape(verdict.current_run.get('world_size', '?'))}",
        "",
        f"A metric fails when its change per step is significant ({conf} one-sided bound on the worse side, "
        f"Hodges-Lehmann over per-step samples, paired by step when both runs have the same steps) and worse by more "
        f"than {th.max_increase_pct:g}% of its baseline median and more than {th.min_increase_ms:g} ms "
        f"({th.min_increase_points:g} points for percentages)"
        + (f", and by more than the baseline's {verdict.baseline_runs} runs stray from each other." if
           verdict.baseline_runs > 1 else ".")
        + f" A metric is inconclusive when the smallest worsening its data could detect ({100 * th.power:g}% power) "
          f"is larger than that threshold: it never fails the build.",
        "",
        f"| metric | status | baseline median | this run | change per step | {conf} bound | allowed worsening "
        f"| smallest detectable |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in verdict.results:
        m, w = r.metric, r.worsening
        name = md_code(m.name) + ("" if m.section == "steps" else " (worst key)")
        out.append(f"| {name} | {_STATUS[r.status]} | {fmt(r.baseline_median, m.unit)} | "
                   f"{fmt(r.current_median, m.unit)} | {fmt(w.estimate * m.worse, m.unit, signed=True)} | "
                   f"{'≥' if m.worse > 0 else '≤'} {fmt(w.lower * m.worse, m.unit, signed=True)} | "
                   f"{fmt(r.allowed, m.unit, delta=True)} | {fmt(r.detectable, m.unit, delta=True) if math.isfinite(r.detectable) else 'none'} |")
    details = [r for r in verdict.results if r.findings or r.note or r.advice]
    if details:
        out += ["", "### Details"]
        for r in details:
            unit = r.metric.unit if r.metric.section == "steps" and not r.metric.attribute else "ns"
            items = [f"{f.kind} {md_code(key_text(f))} "
                     f"{fmt(f.delta * r.metric.worse, r.metric.unit, signed=True) if f.kind == 'rank' else fmt(f.delta, unit, signed=True)}"
                     f"/step{'' if f.significant else ' (largest, not significant alone)'}" for f in r.findings]
            text = "; ".join(items) if items else md_escape(r.note)
            if r.advice:
                text += ("; " if text else "") + md_escape(f"{detectable_text(r, th.alpha, th.power)}; {r.advice}")
            out.append(f"- **{r.metric.title}** ({md_code(r.metric.name)}): {text}")
    if verdict.notes:
        out += ["", "### Notes"] + [f"- {md_escape(n)}" for n in verdict.notes]
    if verdict.warnings:
        out += ["", "### Warnings"] + [f"- {md_escape(w)}" for w in verdict.warnings]
    return "\n".join(out) + "\n"


def error_markdown(message: str) -> str:
    return f"## overlapscope check: ⚠️ cannot compare\n\n{md_escape(message)}\n"


def _gh_escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_escape(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(verdict: Verdict) -> list[str]:
    """`::error` per regressed metric and `::warning` per identity difference (workflow commands)."""
    alpha, power = verdict.thresholds.alpha, verdict.thresholds.power
    lines = [f"::error title={_gh_prop('overlapscope ' + r.metric.name)}::{_gh_escape(describe(r, alpha, power))}"
             for r in verdict.regressions]
    lines += [f"::warning title={_gh_prop('overlapscope ' + r.metric.name + ' inconclusive')}::"
              f"{_gh_escape(describe(r, alpha, power))}" for r in verdict.inconclusive]
    lines += [f"::warning title=overlapscope::{_gh_escape(w)}" for w in verdict.warnings]
    return lines


def publish_github(markdown_text: str, annotations: list[str], env: Mapping[str, str] = os.environ) -> list[str]:
    """Under GitHub Actions append the summary to $GITHUB_STEP_SUMMARY; return the lines to print."""
    if env.get("GITHUB_ACTIONS") != "true":
        return []
    summary_path = env.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        with Path(summary_path).open("a", encoding="utf-8") as fh:
            fh.write(markdown_text)
    return annotations


def error_annotation(message: str) -> str:
    return f"::error title=overlapscope check::{_gh_escape(message)}"
