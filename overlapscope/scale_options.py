"""CLI options for reading runs at scale; kept free of heavy imports so `overlapscope --help` stays fast."""
from __future__ import annotations

from typing import Callable

import click

from .errors import OverlapscopeError


def scale_options(func: Callable) -> Callable:
    """Click options of commands that read whole runs: --no-cache, --workers N, --scheduler ADDRESS."""
    func = click.option("--scheduler", metavar="ADDRESS", default=None,
                        help="Run the per-rank work on the Dask cluster at ADDRESS (e.g. tcp://host:8786); "
                             "its workers must see the trace paths.")(func)
    func = click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
                        help="Run the per-rank work on a local Dask cluster of N processes "
                             "(default: a process pool sized by cores and memory).")(func)
    func = click.option("--no-cache", is_flag=True,
                        help="Neither read nor write the Parquet cache of event tables.")(func)
    return func


def check_scale_options(workers: int | None, scheduler: str | None) -> None:
    if workers and scheduler:
        raise OverlapscopeError("use --workers N or --scheduler ADDRESS, not both")
