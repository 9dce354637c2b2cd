"""Human-facing views of an Analysis: the terminal table, markdown and CSV.

The first table is what an engineer reads first: per rank, step time, exposed comm (ms and % of the
step), overlap %, and the collective with the most exposed time; then a run summary.
"""
from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd

from ..analysis.collectives import straggler
from ..analysis.crossrank import bubble_summary, collective_summary
from ..analysis.prefetch import worst_units
from ..analysis.result import Analysis, key_label
from .ep_cp import tables as ep_cp_tables
from . import whatif_report

MS = 1e6
# Every table's title says what its ms are: a mean per step, or a total over the run.
PER_STEP = "ms: mean per step of each rank"
TOTALS = "ms: totals over all steps and ranks"


def _ms(ns: float) -> str:
    return "-" if ns is None or (isinstance(ns, float) and math.isnan(ns)) else f"{ns / MS:,.3f}"


def _pct(p: float) -> str:
    return "-" if p is None or (isinstance(p, float) and math.isnan(p)) else f"{p:.1f}"


def rank_rows(analysis: Analysis) -> pd.DataFrame:
    """One row per rank with the headline numbers (all in ns / pct, unformatted)."""
    t = analysis.totals.copy()
    t["step_ns"] = t["window_ns"] / t["steps"].clip(lower=1)
    t["exposed_per_step_ns"] = t["exposed_comm_ns"] / t["steps"].clip(lower=1)
    worst = (analysis.by_collective[analysis.by_collective["exposed_comm_ns"] > 0]
             .sort_values("exposed_comm_ns", ascending=False, kind="stable")
             .drop_duplicates("rank").set_index("rank"))
    t["worst_collective"] = t["rank"].map(worst["collective"]).astype(object).fillna("")  # empty map: float NaN
    t["worst_collective_ns"] = t["rank"].map(worst["exposed_comm_ns"]).fillna(0).astype(np.int64)
    return t


def summary_lines(analysis: Analysis) -> list[str]:
    t = rank_rows(analysis)
    lines = []
    if t.empty:
        return lines
    mean_exposed = t["exposed_per_step_ns"].mean()
    mean_step = t["step_ns"].mean()
    worst = t.sort_values("exposed_comm_ns", ascending=False).iloc[0]
    comm_total = t["comm_ns"].sum()
    overlap = 100.0 * t["overlapped_ns"].sum() / comm_total if comm_total else float("nan")
    lines.append(
        f"{len(t)} rank(s), {int(t['steps'].max())} step(s): mean step {_ms(mean_step)} ms, "
        f"exposed comm {_ms(mean_exposed)} ms/step "
        f"({_pct(100.0 * mean_exposed / mean_step if mean_step else float('nan'))}% of the step), "
        f"overlap {_pct(overlap)}%")
    if comm_total:
        late = straggler(analysis.collectives, analysis.stragglers)
        lines.append(f"most exposed: rank {int(worst['rank'])} with {_ms(worst['exposed_per_step_ns'])} ms/step"
                     + (f", most of it {worst['worst_collective']}" if worst["worst_collective"] else "")
                     + (f"; straggler: rank {late['rank']} (last at {late['last_arrivals']} of its "
                        f"{late['collectives']} collectives)" if late else ""))
    else:
        lines.append("no communication found: nothing to overlap")
    # The readers' RankMeta: which accelerator and backend the numbers are from.
    facts = [f"{label} {analysis.run[key]}" for key, label in (("device_name", "device"), ("backend", "backend"))
             if analysis.run.get(key)]
    if facts:
        lines.append(", ".join(facts))
    lines.extend(whatif_report.whatif_lines(analysis))
    lines.extend(analysis.diagnoses)
    return lines


def _headline(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    t = rank_rows(analysis)
    # ms columns are per step (means over the rank's steps), as the title says
    header = ["rank", "steps", "step ms", "exposed ms", "exposed %", "overlap %",
              "compute ms", "idle ms", "worst collective"]
    rows = []
    for r in t.itertuples(index=False):
        n = max(int(r.steps), 1)
        worst = f"{r.worst_collective} {_ms(r.worst_collective_ns / n)} ms" if r.worst_collective else "-"
        rows.append([str(r.rank), str(r.steps), _ms(r.step_ns), _ms(r.exposed_per_step_ns),
                     _pct(r.exposed_comm_pct), _pct(r.overlap_pct), _ms(r.compute_ns / n), _ms(r.idle_ns / n), worst])
    return header, rows


def _breakdown(analysis: Analysis, frame: pd.DataFrame, column: str, top: int = 10) -> tuple[list[str], list[list[str]]]:
    """Exposed time per key summed over ranks, worst first."""
    header = [column, "count", "comm ms", "exposed ms", "exposed % of its comm"]
    if frame.empty:
        return header, []
    g = frame.groupby(column, as_index=False, observed=True)[["count", "comm_ns", "exposed_comm_ns"]].sum()
    g = g[g["comm_ns"] > 0].sort_values("exposed_comm_ns", ascending=False, kind="stable").head(top)
    rows = [[key_label(r[0], column), str(r[1]), _ms(r[2]), _ms(r[3]), _pct(100.0 * r[3] / r[2] if r[2] else float("nan"))]
            for r in g.itertuples(index=False)]
    return header, rows


def _per_step(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["rank", "step", "window ms", "compute ms", "comm ms", "overlapped ms", "exposed ms",
              "exposed memcpy ms", "idle ms", "overlap %", "exposed %"]
    rows = [[str(r.rank), str(r.step), _ms(r.window_ns), _ms(r.compute_ns), _ms(r.comm_ns), _ms(r.overlapped_ns),
             _ms(r.exposed_comm_ns), _ms(r.exposed_memcpy_ns), _ms(r.idle_ns), _pct(r.overlap_pct),
             _pct(r.exposed_comm_pct)] for r in analysis.steps.itertuples(index=False)]
    return header, rows


def _wait_transfer(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    """Per collective: how much of its time ranks spent waiting for late peers vs moving data."""
    header = ["group", "collective", "op", "instances", "wait ms", "transfer ms", "exposed wait ms",
              "exposed transfer ms", "median busbw GB/s"]
    summary = collective_summary(analysis.collectives, analysis.wait_transfer)
    rows = [[key_label(r.group, "group"), str(r.collective), key_label(r.op, "op"), str(r.collectives), _ms(r.wait_ns),
             _ms(r.transfer_ns), _ms(r.exposed_wait_ns), _ms(r.exposed_transfer_ns),
             "-" if pd.isna(r.median_busbw_gbps) else f"{r.median_busbw_gbps:,.2f}"]
            for r in summary.head(12).itertuples(index=False)]
    return header, rows


def _stragglers(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["rank", "last arrivals", "of collectives", "mean lateness ms", "clock offset µs"]
    st = analysis.stragglers
    if st is None or st.empty:
        return header, []
    offsets = analysis.clock_offsets_ns or {}
    rows = [[str(r.rank), str(r.last_arrivals), str(r.collectives), _ms(r.mean_lateness_ns),
             f"{offsets.get(int(r.rank), 0) / 1e3:,.1f}"] for r in st.head(8).itertuples(index=False)]
    return header, rows


def _unmatched(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["rank", "group", "collective", "op", "count", "why"]
    u = analysis.unmatched
    if u is None or u.empty:
        return header, []
    return header, [[str(r.rank), key_label(r.group, "group"), str(r.collective), key_label(r.op, "op"), str(r.count), str(r.reason)]
                    for r in u.head(10).itertuples(index=False)]


def _comm_families(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["rule", "kernels", "count", "device ms", "device %", "example kernel"]
    f = analysis.comm_families
    if f is None or f.empty:
        return header, []
    return header, [[str(r.rule), str(r.kernels), str(r.count), _ms(r.device_ns), _pct(r.device_pct), str(r.example)[:70]]
                    for r in f.itertuples(index=False)]


def _comm_candidates(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["kernel", "ranks", "count", "device ms", "device %", "why", "to count it"]
    c = analysis.comm_candidates
    if c is None or c.empty:
        return header, []
    return header, [[str(r.name)[:70], str(r.ranks), str(r.count), _ms(r.device_ns), _pct(r.device_pct), str(r.why),
                     f"--comm-pattern '{r.comm_pattern}'"] for r in c.head(10).itertuples(index=False)]


def _prefetch(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["unit", "pass", "rows", "mean gap ms", "max gap ms", "mean lead ms"]
    worst = worst_units(analysis.prefetch)
    return header, [[str(unit), str(pass_), str(n), _ms(gap), _ms(top), _ms(lead)]
                    for unit, pass_, n, gap, top, lead in worst.itertuples(index=False, name=None)]


def _bubbles(analysis: Analysis) -> tuple[list[str], list[list[str]]]:
    header = ["rank", "schedule", "stages", "micro-batches", "steps", "bubble ms/step", "bubble %", "theory %"]
    summary = bubble_summary(analysis.bubbles)
    return header, [[str(r.rank), str(r.schedule), str(r.stages), str(r.microbatches), str(r.steps),
                     _ms(r.bubble_ns / max(int(r.steps), 1)), _pct(r.bubble_pct), _pct(r.theory_pct)]
                    for r in summary.itertuples(index=False)]


def sections(analysis: Analysis, *, per_step: bool = False) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) for every table a report shows, in order."""
    out = [(f"Exposed communication per rank ({PER_STEP})", *_headline(analysis))]
    if per_step:
        out.append(("Per step (ms: each step of each rank)", *_per_step(analysis)))
    out += [
           (f"Exposed comm by collective ({TOTALS})", *_breakdown(analysis, analysis.by_collective, "collective")),
           (f"Exposed comm by process group ({TOTALS})", *_breakdown(analysis, analysis.by_group, "group")),
           (f"Exposed comm by launching scope ({TOTALS})", *_breakdown(analysis, analysis.by_scope, "scope")),
           (f"Wait vs transfer by collective, matched across ranks ({TOTALS})", *_wait_transfer(analysis)),
           ("Stragglers (who arrives last; counts of collectives, mean ms)", *_stragglers(analysis)),
           ("Collectives that could not be matched across ranks (counts of events)", *_unmatched(analysis)),
           (f"What counted as communication, by rule ({TOTALS})", *_comm_families(analysis)),
           (f"Kernels counted as compute that look like communication ({TOTALS})", *_comm_candidates(analysis)),
           ("FSDP prefetch gaps, worst units (ms: per unit, pass and step)", *_prefetch(analysis)),
           (f"Pipeline bubbles per stage ({PER_STEP})", *_bubbles(analysis)),
           *whatif_report.sections(analysis)]
    out += ep_cp_tables(analysis)
    return [s for s in out if s[2]]


def render_rich(analysis: Analysis, console, *, per_step: bool = False) -> None:
    from rich.table import Table
    from rich.markup import escape

    console.print(f"[bold]overlapscope[/bold] {escape(str(analysis.run.get('path')))}")
    for title, header, rows in sections(analysis, per_step=per_step):
        # The title on its own line: as a table title, rich wraps it to the table's width.
        console.print(f"[italic]{escape(title)}[/italic]")
        table = Table()
        for i, h in enumerate(header):
            table.add_column(h, justify="left" if _is_text(h) else "right")
        for row in rows:
            table.add_row(*[escape(c) for c in row])
        console.print(table)
    for line in summary_lines(analysis):
        console.print(escape(line))


def render_markdown(analysis: Analysis, *, per_step: bool = False) -> str:
    buf = io.StringIO()
    buf.write(f"# overlapscope: `{analysis.run.get('path')}`\n\n")
    for line in summary_lines(analysis):
        buf.write(f"- {_md_escape(line)}\n")
    for title, header, rows in sections(analysis, per_step=per_step):
        buf.write(f"\n## {title}\n\n")
        buf.write("| " + " | ".join(header) + " |\n")
        buf.write("|" + "|".join("---" if _is_text(h) else "---:" for h in header) + "|\n")
        for row in rows:
            buf.write("| " + " | ".join(_md_escape(c) for c in row) + " |\n")
    return buf.getvalue()


def _is_text(header: str) -> bool:
    return header.startswith(("rank", "worst", "scope", "collective", "group", "unit", "pass", "schedule",
                              "op", "why", "key", "link", "flags", "ends on", "rule", "example", "kernel", "to count", "phase"))


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


CSV_TABLES = {
    "steps": "steps",
    "totals": "totals",
    "by-collective": "by_collective",
    "collectives": "collectives",
}
"""`analyze --format csv --table NAME`: the Analysis frame each writes. steps: per rank and step,
every overlap column (ns); totals: per rank, summed over its steps; by-collective: per rank and
collective type, totals over the steps; collectives: per collective instance and rank (wait,
transfer, bandwidth)."""


def render_csv(analysis: Analysis, table: str = "steps", *, run_column: bool = False) -> str:
    """One of CSV_TABLES as CSV, the shape notebooks and spreadsheets want; run_column adds the run's
    path first (several runs in one file). No trailing blank line."""
    frame = getattr(analysis, CSV_TABLES[table])
    if run_column:
        frame = frame.assign(run=str(analysis.run.get("path")))[["run", *frame.columns]]
    return frame.to_csv(index=False, lineterminator="\n")
