"""Readers: one per format, one event table out. `load_run` picks the reader by file type."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import orjson

from ..errors import OverlapscopeError, TraceError
from .kineto import read_kineto
from .steps import DEFAULT_STEP_PATTERN
from .table import RankTrace, Run

log = logging.getLogger(__name__)

KINETO_SUFFIXES = (".json", ".json.gz")
MANIFEST = "manifest.json"


def _kineto(path: Path, step_pattern: str, comm_patterns: tuple[str, ...]) -> list[RankTrace]:
    return [read_kineto(path, step_pattern=step_pattern, comm_patterns=comm_patterns)]


def _nsys(path: Path, step_pattern: str, comm_patterns: tuple[str, ...]) -> list[RankTrace]:
    from .nsys import read_nsys  # optional reader: imported only for nsys input
    return read_nsys(path, step_pattern=step_pattern, comm_patterns=comm_patterns)


# suffix -> reader; each returns the ranks found in one file.
READERS: dict[str, Callable[[Path, str, tuple[str, ...]], list[RankTrace]]] = {
    ".json": _kineto, ".json.gz": _kineto, ".sqlite": _nsys, ".nsys-rep": _nsys,
}


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    for suffix in sorted(READERS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    return None


def trace_files(path: Path) -> list[Path]:
    """The trace files a RUN argument names: the file itself, or a directory's traces."""
    if not path.exists():
        raise OverlapscopeError("no such file or directory", path)
    if path.is_file():
        if _suffix(path) is None:
            raise OverlapscopeError("not a trace (expected .json, .json.gz, .sqlite or .nsys-rep)", path)
        return [path]
    files = sorted(p for p in path.iterdir()
                   if p.is_file() and _suffix(p) is not None and p.name != MANIFEST)
    if not files:
        raise OverlapscopeError("directory holds no traces (*.json, *.json.gz, *.sqlite)", path)
    return files


def load_manifest(path: Path) -> dict:
    manifest = (path if path.is_dir() else path.parent) / MANIFEST
    if not manifest.is_file():
        return {}
    try:
        data = orjson.loads(manifest.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OverlapscopeError(f"unreadable run manifest ({exc})", manifest) from None
    return data if isinstance(data, dict) else {}


def load_run(path: str | Path, *, step_pattern: str = DEFAULT_STEP_PATTERN,
             comm_patterns: tuple[str, ...] = ()) -> Run:
    """Read every rank of a run: a directory of per-rank traces, one trace file, or an nsys export."""
    path = Path(path)
    files = trace_files(path)
    ranks: list[RankTrace] = []
    for f in files:
        ranks.extend(READERS[_suffix(f)](f, step_pattern, comm_patterns))
    _number_ranks(ranks)
    _check_same_run(ranks)
    ranks.sort(key=lambda r: r.rank)
    return Run(ranks=ranks, manifest=load_manifest(path), path=str(path))


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
