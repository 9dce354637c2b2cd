"""The `overlapscope` command: profile | analyze | baseline | check | report | dashboard | export."""
from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Callable

import click

from . import __version__
from .errors import OverlapscopeError, bug_line
from .output_paths import check_output
from .pipeline.options import RunOptions, run_options

EXIT_UNUSABLE = 2


def fail(message: str) -> None:
    click.echo(f"overlapscope: error: {message}", err=True)
    sys.exit(EXIT_UNUSABLE)


def one_line_errors(func: Callable) -> Callable:
    """User errors become one line on stderr and exit 2 - never a traceback (OVERLAPSCOPE_DEBUG=1 shows it)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except OverlapscopeError as exc:
            if os.environ.get("OVERLAPSCOPE_DEBUG"):
                raise
            fail(str(exc))
        except MemoryError:
            fail("out of memory while reading the run (try fewer ranks at once)")
        except KeyboardInterrupt:
            fail("interrupted")
        except Exception as exc:  # noqa: BLE001 - a bug must still not print a number or a traceback
            if os.environ.get("OVERLAPSCOPE_DEBUG"):
                raise
            fail(bug_line(exc))

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="overlapscope")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """How much of your NCCL communication is not hidden behind compute, and why."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="overlapscope: %(levelname)s: %(message)s", stream=sys.stderr)


@main.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "markdown"]), default="table",
              show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write here instead of stdout.")
@click.option("--per-step", is_flag=True, help="Also show every step of every rank (table and markdown).")
@click.option("--table", "csv_table", type=click.Choice(["steps", "totals", "by-collective", "collectives"]),
              default="steps", show_default=True,
              help="With --format csv: per rank and step, per rank (totals), per rank and collective type, "
                   "or per collective instance and rank.")
@run_options
@one_line_errors
def analyze(runs: tuple[str, ...], fmt: str, output: str | None, per_step: bool, csv_table: str,
            options: RunOptions) -> None:
    """Exposed communication of one or more runs.

    RUN is a directory of per-rank traces (*.json, *.json.gz, *.sqlite), one trace file, or an nsys export.
    """
    from .pipeline.pool import frozen_heap
    from .pipeline.run import analyze_run

    check_output(output, "-o", runs)
    # Analyze everything first: a bad RUN must stop the command before any number is printed.
    results = [analyze_run(r, options) for r in runs]
    # the analyses are long-lived: the rendering's collections need not walk them (a table of 4,096
    # ranks took 6.6 s with them walked, 3.8 s without)
    with frozen_heap(collect=True):
        _render(results, fmt, output, per_step, csv_table)


def _render(results: list, fmt: str, output: str | None, per_step: bool, csv_table: str) -> None:
    """analyze's output: stdout, or the file at `output` (atomic)."""
    from .io_atomic import write_text
    from .report import json_report, tables

    if fmt == "json":
        text = json_report.to_json(results[0]) if len(results) == 1 else \
            "[" + ",\n".join(json_report.to_json(a) for a in results) + "]"
    elif fmt == "markdown":
        text = "\n".join(tables.render_markdown(a, per_step=per_step) for a in results)
    elif fmt == "csv":
        # several runs: one header, a run column first
        parts = [tables.render_csv(a, csv_table, run_column=len(results) > 1) for a in results]
        text = parts[0] + "".join(p.split("\n", 1)[1] for p in parts[1:])
    else:
        import io

        from rich.console import Console

        # A pipe or file gets a wide table rather than rich's 80-column default.
        buffer = io.StringIO() if output else None
        console = Console(file=buffer, width=None if output is None and sys.stdout.isatty() else 160)
        for a in results:
            tables.render_rich(a, console, per_step=per_step)
        if buffer is None:
            return
        text = buffer.getvalue()
    text = text.rstrip("\n")  # one line end at the end, never a blank line
    if output:
        write_text(output, text + "\n")  # atomic, the user's umask; a write failure is one line, exit 2
    else:
        click.echo(text)


def _register_optional_commands() -> None:
    """Commands that live beside their stage (capture, gate, dashboard): added when present."""
    import importlib

    for module, names in (
        ("overlapscope.capture.cli", ("profile",)),
        ("overlapscope.report.gate_cli", ("baseline", "check")),
        ("overlapscope.report.html_cli", ("report",)),
        ("overlapscope.dashboard.cli", ("dashboard", "export")),
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("overlapscope"):
                continue
            raise
        for name in names:
            if hasattr(mod, name):
                main.add_command(getattr(mod, name), name)


_register_optional_commands()

if __name__ == "__main__":
    main()
