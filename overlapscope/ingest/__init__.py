"""Readers: one per format, one event table out; `read_job` picks the reader by file type.

This layer reads files and numbers ranks; it imports only `overlapscope.core` (the event table,
interval and factorize helpers). Caching, process pools and Dask live above it, in
`overlapscope.pipeline`, which also holds `load_run`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


from ..core.table import RankTrace, Run
from ..errors import OverlapscopeError, ReadBug, TraceError
from .kineto import read_kineto
from .own_outputs import written_by_overlapscope
from .run_manifest import MANIFEST, load_manifest, mark_incomplete
from .steps import DEFAULT_STEP_PATTERN, step_regex

log = logging.getLogger(__name__)

KINETO_SUFFIXES = (".json", ".json.gz")


def _kineto(paths: list[Path], step_pattern: str, comm_patterns: tuple[str, ...]) -> list[RankTrace]:
    return [read_kineto(p, step_pattern=step_pattern, comm_patterns=comm_patterns) for p in paths]


def _nsys(paths: list[Path], step_pattern: str, comm_patterns: tuple[str, ...]) -> list[RankTrace]:
    from .nsys import read_nsys  # imported only for nsys input
    # One call for all exports of a run: ranks are numbered over the files together.
    return read_nsys(paths, step_pattern=step_pattern, comm_patterns=comm_patterns)


# suffix -> reader; a reader takes all files of its format in a run and returns their ranks.
READERS: dict[str, Callable[[list[Path], str, tuple[str, ...]], list[RankTrace]]] = {
    ".json": _kineto, ".json.gz": _kineto, ".sqlite": _nsys, ".nsys-rep": _nsys,
}


# Readers whose files hold exactly one rank: their tables are cached (pipeline/cache.py).
CACHED_SUFFIXES = (".json", ".json.gz")
# Readers that read each file on its own (so files can be read in parallel).
PER_FILE_READERS = (_kineto,)


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """What the readers need to know; built from `RunOptions` in one place (pipeline.run.read_options)."""

    step_pattern: str = DEFAULT_STEP_PATTERN
    """Regex a step range's name fully matches (case-insensitive)."""
    comm_patterns: tuple[str, ...] = ()
    """Extra kernel-name patterns that count as communication."""

    def __post_init__(self) -> None:
        step_regex(self.step_pattern)  # a bad --step-pattern is named before any file is read

    def cache_key(self) -> dict:
        """The options that change a reader's output, as a cache key part."""
        return {"step_pattern": self.step_pattern, "comm_patterns": list(self.comm_patterns)}


def read_job(paths: list[Path], options: ReadOptions) -> list[RankTrace]:
    """The ranks in one job's trace files (see `plan_jobs`).

    A bug (any error that is not the input's fault) is reported with the file it was reading."""
    try:
        return READERS[_suffix(paths[0])](paths, options.step_pattern, options.comm_patterns)
    except (OverlapscopeError, MemoryError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised with the file named
        if os.environ.get("OVERLAPSCOPE_DEBUG"):
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ReadBug(paths[0] if len(paths) == 1 else paths[0].parent, f"{type(exc).__name__}: {first}") from exc


def cacheable(paths: list[Path]) -> bool:
    """Is this job one file of a one-rank-per-file format (its table can be cached alone)?"""
    return len(paths) == 1 and _suffix(paths[0]) in CACHED_SUFFIXES


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    for suffix in sorted(READERS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    return None


def trace_files(path: Path) -> list[Path]:
    """The trace files a RUN argument names: the file itself, or a directory's traces.

    Files overlapscope wrote (a report, baseline or Perfetto export saved in the run directory) are
    skipped with a warning: they are recognised by their content, whatever their name."""
    if not path.exists():
        raise OverlapscopeError("no such file or directory", path)
    if path.is_file():
        if _suffix(path) is None:
            raise OverlapscopeError("not a trace (expected .json, .json.gz, .sqlite or .nsys-rep)", path)
        own = written_by_overlapscope(path)
        if own:
            raise OverlapscopeError(f"is an overlapscope {own}, not a trace", path)
        return [path]
    if not path.is_dir():
        raise OverlapscopeError("not a regular file or directory (a FIFO or device?); give a trace or a run "
                                "directory", path)
    try:
        entries = sorted(path.iterdir())
    except OSError as exc:
        raise OverlapscopeError(f"cannot list the directory: {exc.strerror or exc}", path) from None
    files = [p for p in entries if p.is_file() and _suffix(p) is not None and p.name != MANIFEST]
    own = {p: kind for p in files if (kind := written_by_overlapscope(p))}
    for p, kind in own.items():
        log.warning("%s: skipped, an overlapscope %s (not a trace)", p, kind)
    files = [p for p in files if p not in own]
    # A report and its export are one trace: read the export.
    exported = {p.name[: -len(".sqlite")] for p in files if p.name.endswith(".sqlite")}
    files = [p for p in files if not (p.name.endswith(".nsys-rep") and p.name[: -len(".nsys-rep")] in exported)]
    if not files:
        raise OverlapscopeError("directory holds no traces (*.json, *.json.gz, *.sqlite)", path)
    return files


def make_run(path: Path, ranks: list[RankTrace]) -> Run:
    """The Run of assembled ranks, with the run's manifest; warns about ranks the run lacks."""
    manifest = load_manifest(path)
    mark_incomplete(ranks, manifest)
    _check_complete(ranks, manifest, path)
    return Run(ranks=ranks, manifest=manifest, path=str(path))


def plan_jobs(files: list[Path]) -> list[list[Path]]:
    """Units of reading work, in the order a serial read takes them: readers in order of first
    appearance; a per-file reader (Kineto) gets a job per file, a reader that numbers ranks over
    all its files together (nsys) one job for all of them."""
    by_reader: dict[Callable, list[Path]] = {}
    for f in files:
        by_reader.setdefault(READERS[_suffix(f)], []).append(f)
    jobs: list[list[Path]] = []
    for reader, paths in by_reader.items():
        jobs.extend([[p] for p in paths] if reader in PER_FILE_READERS else [paths])
    return jobs


def assemble(per_job: list[list[RankTrace]]) -> list[RankTrace]:
    """The ranks of every job, numbered and checked as one run, ordered by rank."""
    ranks = [r for rs in per_job for r in rs]
    _number_ranks(ranks)
    _check_same_run(ranks)
    ranks.sort(key=lambda r: r.rank)
    return ranks


def _number_ranks(ranks: list[RankTrace]) -> None:
    """Ranks without a number get the lowest free ones in file order; two claims of one rank fail."""
    seen: dict[int, str] = {}
    for r in ranks:
        if r.rank >= 0:
            if r.rank in seen:
                raise TraceError(f"rank {r.rank} appears twice (also in {seen[r.rank]})", r.source)
            seen[r.rank] = r.source
    free = (i for i in range(len(ranks) + len(seen) + 1) if i not in seen)
    for r in ranks:
        if r.rank < 0:
            r.rank = next(free)
            r.rank_from = "order"
            r.events["rank"] = r.rank
            log.warning("%s: no rank in the trace or its name; taking rank %d by file order", r.source, r.rank)


def _check_same_run(ranks: list[RankTrace]) -> None:
    sizes = {r.world_size for r in ranks if r.world_size}
    if len(sizes) > 1:
        log.warning("traces disagree on world size (%s): are ranks of different runs mixed?",
                    ", ".join(f"{r.source}={r.world_size}" for r in ranks))
    spans = [(int(r.events["start_ns"].to_numpy().min()), int(r.events["end_ns"].to_numpy().max()), r.source)
             for r in ranks if len(r.events)]
    if len(spans) > 1 and max(s[0] for s in spans) > min(s[1] for s in spans):
        first = min(spans, key=lambda s: s[1])
        last = max(spans, key=lambda s: s[0])
        log.warning("%s ends %.3f s before %s starts: different runs, or clocks apart by more than the "
                    "trace; cross-rank numbers rely on estimated clock offsets",
                    first[2], (last[0] - first[1]) / 1e9, last[2])


def _check_complete(ranks: list[RankTrace], manifest: dict, path: Path) -> None:
    """Say which ranks the run should have but lacks (a crashed rank, a trace not copied)."""
    expected = manifest.get("world_size") if isinstance(manifest.get("world_size"), int) else None
    if expected is None:
        sizes = {r.world_size for r in ranks if r.world_size}
        # A single file of a large job is a normal thing to analyze; only a directory should be whole.
        expected = max(sizes) if sizes and path.is_dir() else None
    if expected is None:
        return
    missing = sorted(set(range(expected)) - {r.rank for r in ranks})
    if missing and path.is_dir():
        shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
        log.warning("%s: %d of %d ranks have no trace (missing: %s); cross-rank numbers cover the others only",
                    path, len(missing), expected, shown)
