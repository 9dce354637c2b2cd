"""`overlapscope dashboard RUN [RUN2]` and `overlapscope export RUN --perfetto OUT.json`."""
from __future__ import annotations

import click

from ..cli import one_line_errors
from ..extras import require
from ..pipeline.options import RunOptions, run_options


@click.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--port", type=int, default=8050, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; the default serves this machine only.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Also answer requests addressed to NAME (repeatable); others than the bound address and "
                   "localhost get 403.")
@run_options
@one_line_errors
def dashboard(runs: tuple[str, ...], port: int, host: str, allow_hosts: tuple[str, ...], options: RunOptions) -> None:
    """Serve the dashboard for RUN (and RUN2 to compare) and print its address."""
    if len(runs) > 2:
        raise click.UsageError("give one run, or two to compare")
    require("dash", "the dashboard")
    from . import create_app, serve

    click.echo(f"overlapscope dashboard: reading {' and '.join(runs)} ...", err=True)
    app = create_app(runs, options, host=host, allow_hosts=allow_hosts, refuse_unreadable=True)
    click.echo(f"overlapscope dashboard: http://{host}:{port}/  (Ctrl-C to stop)")
    serve(app, host=host, port=port)


@click.command()
@click.argument("run")
@click.option("--perfetto", "out", required=True, type=click.Path(dir_okay=False),
              help="Write a Chrome-trace JSON (open in ui.perfetto.dev) with an exposed-comm track per rank.")
@run_options
@one_line_errors
def export(run: str, out: str, options: RunOptions) -> None:
    """Export RUN as a Chrome trace with the exposed communication as an extra track."""
    from ..output_paths import check_output
    from ..pipeline.run import analyze_run
    from ..report.perfetto import write_perfetto

    check_output(out, "--perfetto", [run])
    analysis = analyze_run(run, options, keep_events=True)
    n = write_perfetto(analysis.traces, out, no_steps=options.no_steps, clock_offsets_ns=analysis.clock_offsets_ns)
    click.echo(f"wrote {out}: {n} events")
