"""`overlapscope baseline` and `overlapscope check`: the CI gate's commands.

Exit status of `check`: 0 no regression, 1 regression, 2 unusable input (one line says why); an
inconclusive verdict (the data could not have detected a worsening of the threshold's size) is 0,
or 3 with --strict.
RUN is anything `overlapscope.load_run` reads, or a baseline JSON written earlier (a stored
snapshot of a run, so two archived runs can be compared without their traces).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from overlapscope.errors import OverlapscopeError, bug_line
from overlapscope.output_paths import check_output, check_outputs
from overlapscope.pipeline.options import RunOptions, run_options
# Only what the options' help needs is imported here (stdlib only): `check --help` must not pay for
# pandas and SciPy. The comparison, baseline and report modules load when a command runs.
from overlapscope.report.gate_metrics import DEFAULT_METRICS, HOST_DEFAULT_METRICS, METRICS, Thresholds


def run_document(path: str | Path, options: RunOptions = RunOptions()) -> dict[str, Any]:
    """The baseline-shaped record of a run: analyzed from traces, or read back from a baseline JSON."""
    from overlapscope.report import gate_baseline as gb

    path = Path(path)
    if path.is_file() and path.suffix == ".json" and _is_baseline(path):
        return gb.load_baseline(path)
    from overlapscope.pipeline.run import analyze_run  # the one pipeline; imported late, it is heavy

    return gb.build_baseline(analyze_run(path, options))


def _is_baseline(path: Path) -> bool:
    from overlapscope.report import gate_baseline as gb

    with path.open("rb") as fh:
        head = fh.read(4096)
    return gb.SCHEMA.encode() in head


@click.command("baseline")
@click.argument("runs", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Baseline JSON to write (replaced atomically).")
@click.option("--runs", "record", type=click.IntRange(min=1), default=None, metavar="N",
              help="Record N runs of the command after -- (through `overlapscope profile`, one after the other) "
                   "and make the baseline from them.")
@click.option("--runs-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --runs: where the runs go (default: OUTPUT without .json, plus -runs/); must be empty.")
@click.option("--steps", type=click.IntRange(min=1), default=8, show_default=True,
              help="With --runs: steps recorded per run.")
@click.option("--skip-first", type=click.IntRange(min=0), default=1, show_default=True,
              help="With --runs: steps skipped before the warm-up step.")
@run_options
def baseline(runs: tuple[str, ...], output: str, record: int | None, runs_dir: Path | None, steps: int,
             skip_first: int, options: RunOptions) -> None:
    """Record per-step exposed communication, overlap and step time of RUN... as a baseline for `check`.

    Several runs of one configuration make a baseline that knows the machine's run-to-run noise.
    `baseline --runs N -o B.json -- CMD...` records the N runs itself (e.g. CMD = torchrun ... train.py).
    """
    from overlapscope.report import gate_baseline as gb

    try:
        check_output(output, "-o", [] if record is not None else runs)
        if record is not None:
            from overlapscope.report.gate_record import record_runs

            folder = runs_dir or Path(output).with_suffix("").with_name(Path(output).stem + "-runs")
            paths = [str(p) for p in record_runs(list(runs), record, folder, steps=steps, skip_first=skip_first)]
        else:
            missing = [r for r in runs if not Path(r).exists()]
            if missing:
                raise OverlapscopeError("no such run (to record runs of a command: --runs N -- CMD...)", missing[0])
            paths = list(runs)
        docs = []
        for run in paths:
            doc = run_document(run, options)
            frame = gb.step_frame(doc)
            if frame.empty or (frame["step"] < 0).all():
                raise OverlapscopeError("no steps (no ProfilerStep#N or 'step N' ranges): a baseline needs per-step "
                                        "samples, profile several steps", run)
            docs.extend(gb.split_runs(doc))
        gb.save_baseline(gb.combine(docs), output)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback (OVERLAPSCOPE_DEBUG=1 shows it)
        raise _usage_exit(_user_error(exc)) from None
    click.echo(f"baseline: {output} ({len(docs)} run{'s' if len(docs) > 1 else ''}, {frame['rank'].nunique()} ranks, "
               f"{frame['step'].nunique()} steps)")


@click.command("check")
@click.argument("run", type=click.Path(exists=True))
@click.option("--baseline", "baseline_path", required=True, type=click.Path(dir_okay=False),
              help="Baseline JSON written by `overlapscope baseline`.")
@click.option("--metric", "metrics", multiple=True, type=click.Choice(list(METRICS)),
              help=f"Metric to check (repeatable). Default: {', '.join(DEFAULT_METRICS)}; for two CPU-only runs: "
                   f"{', '.join(HOST_DEFAULT_METRICS)}.")
@click.option("--max-increase", "max_increase_pct", type=float, default=Thresholds.max_increase_pct,
              show_default=True, metavar="PCT", help="Allowed worsening, percent of the baseline median.")
@click.option("--min-increase-ms", type=float, default=Thresholds.min_increase_ms, show_default=True,
              metavar="MS", help="Allowed worsening of time metrics, ms per step.")
@click.option("--min-increase-points", type=float, default=Thresholds.min_increase_points, show_default=True,
              metavar="PP", help="Allowed worsening of percentage metrics, percentage points.")
@click.option("--alpha", type=float, default=Thresholds.alpha, show_default=True,
              help="One-sided significance level.")
@click.option("--noise-factor", type=float, default=Thresholds.noise_factor, show_default=True,
              help="With a baseline of several runs: allow this times the largest run-to-run shift among them.")
@click.option("--strict", is_flag=True,
              help="Exit 3 when the verdict is inconclusive (default 0: an inconclusive check never fails the build).")
@click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--summary", "summary_path", type=click.Path(dir_okay=False), help="Write a markdown summary here.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False),
              help="Write the self-contained HTML report (verdict with its evidence, timeline, breakdowns) here.")
@run_options
def check(run: str, baseline_path: str, metrics: tuple[str, ...], max_increase_pct: float, min_increase_ms: float,
          min_increase_points: float, alpha: float, noise_factor: float, strict: bool, junit_path: str | None,
          summary_path: str | None, html_path: str | None, options: RunOptions) -> None:
    """Compare RUN with a baseline: exit 0 pass (or inconclusive), 1 regression, 2 unusable input, 3 inconclusive
    with --strict."""
    from overlapscope.report import gate_baseline as gb
    from overlapscope.report.gate import compare
    from overlapscope.io_atomic import write_text
    from overlapscope.report.junit import junit_error_xml, junit_xml
    from overlapscope.report.summary import (error_annotation, error_markdown, github_annotations, markdown,
                                             publish_github, text_report)

    try:
        # Before anything is written, the error report included: a refused path is never written.
        check_outputs({"--junit": junit_path, "--summary": summary_path}, [run, baseline_path])
    except OverlapscopeError as exc:
        raise _usage_exit(exc) from None
    try:
        thresholds = Thresholds(max_increase_pct=max_increase_pct, min_increase_ms=min_increase_ms,
                                min_increase_points=min_increase_points, alpha=alpha, noise_factor=noise_factor)
        base = gb.load_baseline(baseline_path)
        analysis = None
        if html_path:
            if Path(run).is_file() and _is_baseline(Path(run)):
                raise OverlapscopeError("--html needs the run's traces, not a stored baseline record", run)
            from overlapscope.pipeline.run import analyze_run

            analysis = analyze_run(run, options, keep_events=True)  # the page draws a step's events
            current = gb.build_baseline(analysis)
        else:
            current = run_document(run, options)
        verdict = compare(base, current, thresholds, metrics or None)
        if html_path:
            from overlapscope.report.html_cli import write_html_report

            write_html_report(run, html_path, options, baseline_doc=base, analysis=analysis, verdict=verdict)
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback (OVERLAPSCOPE_DEBUG=1 shows it)
        exc = _user_error(exc)
        message = str(exc)
        try:
            if junit_path:
                write_text(junit_path, junit_error_xml(message))
            if summary_path:
                write_text(summary_path, error_markdown(message))
        except OverlapscopeError as write_error:  # still one line: both problems in it
            exc = OverlapscopeError(f"{message}; and {write_error}")
        for line in publish_github(error_markdown(message), [error_annotation(message)]):
            click.echo(line)
        raise _usage_exit(exc) from None
    md = markdown(verdict)
    try:
        if junit_path:
            write_text(junit_path, junit_xml(verdict))
        if summary_path:
            write_text(summary_path, md)
    except OverlapscopeError as exc:  # a report that cannot be written is exit 2, never 1 (regression)
        raise _usage_exit(exc) from None
    click.echo(text_report(verdict))
    for line in publish_github(md, github_annotations(verdict)):
        click.echo(line)
    raise SystemExit(verdict.exit_status(strict))


def _user_error(exc: Exception) -> OverlapscopeError:
    if isinstance(exc, OverlapscopeError):
        return exc
    if os.environ.get("OVERLAPSCOPE_DEBUG"):
        raise exc
    return OverlapscopeError(bug_line(exc))


def _usage_exit(exc: OverlapscopeError) -> SystemExit:
    # One line on stderr, never a traceback: the shared contract for user errors (exit 2).
    click.echo(f"overlapscope: error: {exc}", err=True)
    return SystemExit(2)
