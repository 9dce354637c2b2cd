"""Many ranks: read and analyze each rank where it is cheapest, reduce the results here (`run.analyze_run`).

Map (one job per trace file - per nsys run - anywhere): read it (through the cache) and run
`analyze_rank`. Reduce (here): number the ranks as `load_run` does, then `combine` - the very
function `analyze` uses, cross-rank sections included - so the `Analysis` is the serial one.
Workers send back compact per-rank results: the sections (per-step rows, breakdown rows, the
cross-rank parts: comm rows, uncovered time, ...) and the rank's RankMeta, with its event table cut
to the two rows the reduce's run checks read (the earliest start and the latest end), so the
reducer's memory grows with collectives, not events. Only `keep_events` (the dashboard, the Perfetto
export) brings whole tables back.

Where the jobs run: in-process or on a local process pool sized by cores and memory (default), on
a Dask LocalCluster (`workers=N`), or on a running Dask cluster (`scheduler="tcp://host:8786"`;
its workers need overlapscope installed and the trace paths visible).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..analysis import Analysis, analyze_rank, combine
from ..core.frames import column_values, frame_of
from ..core.table import RankTrace
from ..ingest import ReadOptions, assemble, make_run
from ..ingest.run_manifest import load_manifest, mark_incomplete
from .cache import CacheConfig, read_cached
from .options import RunOptions
from .pool import JobResult, Progress, frozen_heap, map_files, replay, run_job

log = logging.getLogger(__name__)


@dataclass
class RankOutcome:
    """What one rank's job sends back: the rank and its `analyze_rank` results, or the analysis
    error, raised only after every read has succeeded and ranks are numbered (as serially)."""

    trace: RankTrace
    sections: dict[str, pd.DataFrame] | None
    error: BaseException | None = None


def rank_job(paths: list[Path], options: ReadOptions, cache: CacheConfig, no_steps: bool,
             keep_events: bool = False) -> list[RankOutcome]:
    """The map step for one job's files (runs in a worker)."""
    out = []
    traces = read_cached(paths, options, cache)
    mark_incomplete(traces, load_manifest(paths[0]))  # a rank that stopped early: its whole steps only
    for trace in traces:
        try:
            sections, error = analyze_rank(trace, no_steps=no_steps), None
        except Exception as exc:  # noqa: BLE001 - raised by the reduce, in rank order
            sections, error = None, exc
        if not keep_events:
            trace.events = span_rows(trace.events)
        out.append(RankOutcome(trace=trace, sections=sections, error=error))
    return out


SPAN_COLUMNS = ("rank", "start_ns", "end_ns")


def span_rows(events: pd.DataFrame) -> pd.DataFrame:
    """The rows of `events` that start first and end last, and of their columns rank, start_ns and
    end_ns: all that numbering and checking the ranks of a run reads of a table once it is analyzed
    (ingest.assemble, crossrank's empty-rank test). Whole rows of the event table cost the parent
    ~0.4 ms a rank to unpickle (17 columns, 11 blocks) and the worker ~0.4 ms to cut."""
    rows = np.unique([int(column_values(events, "start_ns").argmin()), int(column_values(events, "end_ns").argmax())]) \
        if len(events) else np.empty(0, np.intp)
    return frame_of({c: column_values(events, c)[rows] for c in SPAN_COLUMNS})


def map_ranks(jobs: list[list[Path]], read: ReadOptions, options: RunOptions, *,
              keep_events: bool = False) -> list[list[RankOutcome]]:
    """`rank_job` of every job, where `options` says: a Dask client, a Dask cluster, or the local pool."""
    args = (read, CacheConfig(enabled=options.cache), options.no_steps, keep_events)
    if options.dask_client is not None:
        from distributed import as_completed

        return run_on_client(options.dask_client, jobs, args, as_completed)
    if options.scheduler or options.dask_workers:
        return _on_dask(jobs, args, workers=options.dask_workers, scheduler=options.scheduler)
    return map_files(rank_job, jobs, *args, workers=options.pool_workers, label="reading and analyzing ranks")


def reduce_outcomes(path: Path, per_job: list[list[RankOutcome]], *, keep_events: bool = False,
                    cost: Any = None) -> Analysis:
    """Number ranks, raise the first analysis error in rank order, combine (cost: the cost model's
    CostConfig, default when None)."""
    with frozen_heap(collect=True):  # the ranks' results are long-lived: full collections skip them
        by_trace = {id(o.trace): o for outcomes in per_job for o in outcomes}
        ranks = assemble([[o.trace for o in outcomes] for outcomes in per_job])
        run = make_run(path, ranks)
        ordered = [by_trace[id(t)] for t in ranks]
        for o in ordered:
            if o.error is not None:
                raise o.error
        analysis = combine(run, [o.sections for o in ordered], cost=cost)
    if keep_events:
        analysis.traces = run
    return analysis


def _on_dask(jobs: list[list[Path]], args: tuple, *, workers: int | None,
             scheduler: str | None) -> list[list[RankOutcome]]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        from ..errors import OverlapscopeError

        raise OverlapscopeError("--workers/--scheduler need Dask: pip install 'overlapscope[dask]'") from None
    cluster = None
    if scheduler:
        client = _connect(Client, scheduler)
    else:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, silence_logs=logging.ERROR)
        client = Client(cluster)
    try:
        return run_on_client(client, jobs, args, as_completed)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _connect(client_cls: Callable[..., Any], address: str) -> Any:
    from ..errors import OverlapscopeError

    try:
        return client_cls(address, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise OverlapscopeError(f"cannot reach the Dask scheduler ({exc})", address) from None


def run_on_client(client: Any, jobs: list[list[Path]], args: tuple,
                  as_completed: Callable[..., Any]) -> list[list[RankOutcome]]:
    """The map on a Dask client: one task per job, results in job order, errors as a serial read's.
    args: rank_job's arguments after the job."""
    futures = [client.submit(run_job, rank_job, job, *args, pure=False) for job in jobs]
    with Progress(len(jobs), "analyzing ranks on Dask") as progress:
        for _ in as_completed(futures):
            progress.tick(1)
    results: list[JobResult] = client.gather(futures)
    return replay(results)

