"""`RunOptions`: every option that changes how a run is read and analyzed, declared once.

Each command that reads runs (analyze, baseline, check, export, dashboard) takes the same options
through `run_options`, which builds its click options from RunOptions' fields: a field's docstring
is its --help text, and its `cli` metadata its flag. The pytest plugin and the Python API take a
RunOptions too. This module imports only click and the standard library, so `overlapscope --help`
stays fast.
"""
from __future__ import annotations

import ast
import functools
import inspect
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import click

from ..errors import OverlapscopeError


def _cli(*decls: str, **attrs: Any) -> dict[str, Any]:
    """Field metadata: the click option declarations of a field shown on the command line."""
    return {"cli": (decls, attrs)}


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to read and analyze a run (a directory of per-rank traces, one trace, or an nsys export)."""

    step_pattern: str | None = field(default=None, metadata=_cli("--step-pattern", metavar="REGEX"))
    """Names of step ranges (default: ProfilerStep#N or 'step N')."""
    comm_patterns: tuple[str, ...] = field(default=(), metadata=_cli("--comm-pattern", "comm_patterns",
                                                                      multiple=True, metavar="REGEX[=COLL]"))
    """Kernel-name regex that counts as communication, optionally =collective (e.g.
    'my_ep::dispatch=all_to_all'); repeatable, tried before the built-in rules and the config file's."""
    no_steps: bool = field(default=False, metadata=_cli("--no-steps", is_flag=True))
    """Analyze each rank as one window, ignoring step markers."""
    cache: bool = field(default=True, metadata=_cli("--cache/--no-cache"))
    """Read and write the Parquet cache of event tables (beside the traces, else the user cache)."""
    dask_workers: int | None = field(default=None, metadata=_cli(
        "--workers", "dask_workers", type=click.IntRange(min=1), metavar="N"))
    """Run the per-rank work on a local Dask cluster of N processes (default: a process pool sized by
    cores and memory)."""
    scheduler: str | None = field(default=None, metadata=_cli("--scheduler", metavar="ADDRESS"))
    """Run the per-rank work on the Dask cluster at ADDRESS (e.g. tcp://host:8786); its workers must
    see the trace paths."""
    pool_workers: int | None = None
    """Most processes of the local pool (1: everything in this process; None: sized by cores and
    memory, and used only when the run is big enough to pay for one)."""
    dask_client: Any = field(default=None, compare=False)
    """A running `distributed.Client` to run the per-rank work on (Python API)."""
    link_gbps: float | None = field(default=None, metadata=_cli(
        "--link-gbps", type=click.FloatRange(min=0, min_open=True), metavar="GBPS"))
    """Cost model: intra-node link peak, GB/s per direction per GPU (default: from the GPU model)."""
    inter_node_gbps: float | None = field(default=None, metadata=_cli(
        "--inter-node-gbps", type=click.FloatRange(min=0, min_open=True), metavar="GBPS"))
    """Cost model: inter-node peak, GB/s per GPU (default: the NIC of the GPU's reference system)."""
    latency_us: float | None = field(default=None, metadata=_cli(
        "--latency-us", type=click.FloatRange(min=0, min_open=True), metavar="US"))
    """Cost model: latency per algorithm step, µs (default 1 inside a node, 5 across nodes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "comm_patterns", tuple(self.comm_patterns))
        if sum(x is not None for x in (self.dask_workers, self.scheduler, self.dask_client)) > 1:
            raise OverlapscopeError("use --workers N or --scheduler ADDRESS, not both")
        for name in ("dask_workers", "pool_workers"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise OverlapscopeError(f"{name} must be a positive number of processes, not {value!r}")


def run_options(func: Callable) -> Callable:
    """Give a click command RunOptions' options; it receives them as one `options: RunOptions`."""
    cli_fields = [f for f in fields(RunOptions) if "cli" in f.metadata]
    docs = field_docs(RunOptions)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {f.name: kwargs.pop(f.name) for f in cli_fields}
        try:
            options = RunOptions(**values)
        except OverlapscopeError as exc:
            raise click.UsageError(str(exc)) from None
        return func(*args, options=options, **kwargs)

    for f in reversed(cli_fields):
        decls, attrs = f.metadata["cli"]
        if len(decls) == 1 or decls[1].startswith("-"):
            decls = (*decls, f.name)
        wrapper = click.option(*decls, default=f.default, help=docs.get(f.name, ""), **attrs)(wrapper)
    return wrapper


@functools.lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, whitespace folded (empty when no source)."""
    try:
        tree = ast.parse(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for stmt, nxt in zip(body, body[1:]):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and \
                isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs
