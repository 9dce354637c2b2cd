"""The one pipeline: (RUN path, RunOptions) -> Analysis.

Every command (analyze, baseline, check, export, dashboard), the pytest plugin and the Python API
go through `analyze_run`; `load_run` is its read half (the event tables, for notebooks and tests).
Both build the readers' options in one place (`read_options`) and read through the same jobs, cache
and pool, so a number never depends on which entry point asked for it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..analysis.result import Analysis
from ..core.table import Run
from ..ingest import ReadOptions, assemble, make_run, plan_jobs, trace_files
from ..ingest.config_file import with_config
from ..ingest.steps import DEFAULT_STEP_PATTERN
from .cache import CacheConfig, read_cached
from .distributed import map_ranks, reduce_outcomes
from .options import RunOptions
from .pool import map_files


def read_options(options: RunOptions, path: Path) -> ReadOptions:
    """The readers' share of RunOptions (the one place ReadOptions is built); the comm patterns of
    the run's config files (ingest/config_file.py) follow the command line's."""
    return ReadOptions(step_pattern=options.step_pattern or DEFAULT_STEP_PATTERN,
                       comm_patterns=with_config(options.comm_patterns, path))


def _options(options: RunOptions | None, fields: dict[str, Any]) -> RunOptions:
    if options is not None and fields:
        raise TypeError("give a RunOptions or its fields as keywords, not both")
    return options if options is not None else RunOptions(**fields)


def analyze_run(path: str | Path, options: RunOptions | None = None, *, keep_events: bool = False,
                **fields: Any) -> Analysis:
    """Every number of DESIGN.md for the run at `path`: read and analyze each rank where it is
    cheapest (in-process, a process pool, Dask), reduce here.

    options: a RunOptions, or its fields as keywords. keep_events: also keep the event tables, in
    `Analysis.traces` (the dashboard and the Perfetto export draw them); else only per-rank
    results come back from the workers.
    """
    options = _options(options, fields)
    path = Path(path)
    per_job = map_ranks(plan_jobs(trace_files(path)), read_options(options, path), options, keep_events=keep_events)
    return reduce_outcomes(path, per_job, keep_events=keep_events, cost=cost_config(options))


def cost_config(options: RunOptions) -> "CostConfig":
    """The cost model's share of RunOptions."""
    from ..analysis.costmodel import CostConfig

    return CostConfig(link_gbps=options.link_gbps, inter_node_gbps=options.inter_node_gbps,
                      latency_us=options.latency_us)


def load_run(path: str | Path, options: RunOptions | None = None, **fields: Any) -> Run:
    """Every rank's event table of the run at `path` (the read half of `analyze_run`).

    options: a RunOptions, or its fields as keywords; only the read options (step pattern, comm
    patterns, cache, pool_workers) matter here.
    """
    options = _options(options, fields)
    path = Path(path)
    ranks = assemble(map_files(read_cached, plan_jobs(trace_files(path)), read_options(options, path),
                               CacheConfig(enabled=options.cache), workers=options.pool_workers))
    return make_run(path, ranks)
