"""`overlapscope report RUN [--baseline B.json | --compare RUN2] -o report.html`: the reviewer's page."""
from __future__ import annotations

from pathlib import Path

import click

from overlapscope.errors import OverlapscopeError
from overlapscope.output_paths import check_output
from overlapscope.pipeline.options import RunOptions, run_options
from overlapscope.report.gate_metrics import Thresholds


def write_html_report(run: str | Path, output: str | Path, options: RunOptions, *,
                      baseline_doc: dict | None = None, thresholds: Thresholds = Thresholds(),
                      metrics: tuple[str, ...] | None = None, analysis=None, verdict=None) -> None:
    """Analyze RUN (unless given) and write the page; with a baseline, judge it (unless the verdict is given)."""
    from overlapscope.pipeline.run import analyze_run
    from overlapscope.report.html_report import write_report

    inputs = {Path(run).resolve(), *(Path(p).resolve() for p in _paths(baseline_doc))}
    if Path(output).resolve() in inputs:
        raise OverlapscopeError("the report would overwrite an input: name another file with -o", output)
    check_output(output, "-o", [run, *_paths(baseline_doc)])  # nor land inside a run directory
    if analysis is None:
        analysis = analyze_run(run, options, keep_events=True)
    if baseline_doc is not None and verdict is None:
        from overlapscope.report.gate import compare

        verdict = compare(baseline_doc, analysis, thresholds, metrics)
    write_report(output, analysis, verdict=verdict, baseline=baseline_doc)


def _paths(doc: dict | None) -> list[str]:
    if not doc:
        return []
    return [str(r.get("path")) for r in doc.get("runs", [doc.get("run", {})]) if r.get("path")]


@click.command("report")
@click.argument("run", type=click.Path(exists=True))
@click.option("--baseline", "baseline_path", type=click.Path(exists=True, dir_okay=False),
              help="Judge RUN against this baseline (as `check` does) and show the verdict with its evidence.")
@click.option("--compare", "compare_run", type=click.Path(exists=True),
              help="Judge RUN against RUN2 taken as a one-run baseline.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@run_options
def report(run: str, baseline_path: str | None, compare_run: str | None, output: str, options: RunOptions) -> None:
    """Write one self-contained HTML page of RUN: summary, diagnoses, a step's timeline, breakdowns, verdict.

    The page needs no server and no network (plotly.js is inlined): open it from disk or a CI artifact.
    """
    from overlapscope.cli import one_line_errors

    @one_line_errors
    def go() -> None:
        if baseline_path and compare_run:
            raise OverlapscopeError("give --baseline or --compare, not both")
        doc = None
        if baseline_path:
            from overlapscope.report import gate_baseline as gb

            doc = gb.load_baseline(baseline_path)
            if Path(output).resolve() == Path(baseline_path).resolve():
                raise OverlapscopeError("the report would overwrite an input: name another file with -o", output)
        elif compare_run:
            from overlapscope.report.gate_cli import run_document

            doc = run_document(compare_run, options)
        write_html_report(run, output, options, baseline_doc=doc)
        click.echo(f"report: {output}")

    go()
