"""`overlapscope profile [--out DIR] [--steps N] [--skip-first K] [--nsys] [--force] -- CMD...`"""
from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path

import click

from ..errors import OverlapscopeError
from ..extras import require


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("overlapscope-run"),
              show_default=True, help="Directory for rank{R}.trace.json.gz and manifest.json.")
@click.option("--steps", type=int, default=5, show_default=True,
              help="Steps recorded per rank (one per optimizer.step(), or the script's capture().step()).")
@click.option("--skip-first", type=int, default=1, show_default=True,
              help="Steps skipped first; one more warm-up step follows before recording.")
@click.option("--nsys", is_flag=True, help="Run each rank under Nsight Systems and export SQLite.")
@click.option("--force", is_flag=True, help="Write into a non-empty --out (replacing a previous run's traces).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, required=True)
def profile(out_dir: Path, steps: int, skip_first: int, nsys: bool, force: bool, cmd: tuple[str, ...]) -> None:
    """Profile CMD (usually `torchrun ... train.py`) without code changes: one trace per rank.

    Each optimizer.step() is a step boundary; the first one starts the profiler, then SKIP_FIRST
    steps are skipped, one is a warm-up, and STEPS are recorded. The job needs at least
    SKIP_FIRST + STEPS + 2 optimizer steps for a complete capture. CMD's exit status is kept.
    """
    try:
        # The launcher installs a profiler hook in every rank: PyTorch must be here.
        require("torch", "`overlapscope profile`")
        from .launcher import ProfileOptions, run_profile

        # -v (the CLI group's log level) shows the profiler's and torchrun's own lines too
        quiet = not logging.getLogger().isEnabledFor(logging.INFO)
        rc, written = run_profile(list(cmd), ProfileOptions(out_dir=out_dir, steps=steps, skip_first=skip_first,
                                                            nsys=nsys, force=force, quiet=quiet))
    except OverlapscopeError as exc:
        click.echo(f"overlapscope: error: {exc}", err=True)
        sys.exit(2)
    n_traces = len(written["traces"])
    click.echo(f"overlapscope: {n_traces} trace(s) in {out_dir}/ (manifest.json)"
               + (f"; missing rank(s) {written['missing_ranks']}" if written["missing_ranks"] else ""))
    if written.get("nsys_reports"):
        click.echo(f"overlapscope: nsys exports: {', '.join(written['nsys_reports'])}")
    if n_traces:
        click.echo(f"analyze with: overlapscope analyze {shlex.quote(str(out_dir))}")
    if rc != 0:
        click.echo(f"overlapscope: the command exited with status {rc}", err=True)
    sys.exit(rc)


if __name__ == "__main__":  # `python -m overlapscope.capture.cli` works before the CLI group registers it
    profile()
