"""Parquet cache of one rank's event table, so re-opening a run costs a Parquet read, not a JSON parse.

Safety (DESIGN.md "Safety and no data loss"):
- The key hashes the trace's bytes, its file name (ranks can come from it), the reader options
  (step pattern, comm patterns), the overlapscope version and CACHE_FORMAT. Any change gives a new
  key, so a stale entry is never found.
- The key is in the file name and again in the file's metadata; an entry whose metadata, columns
  or dtypes do not check out is ignored (and replaced), so a damaged entry can never change a number.
- Entries are written to a temporary name in the same directory and renamed into place: readers
  see a whole file or none. Nothing but JSON metadata and Arrow columns is stored (no pickle).
- The cache lives beside the trace in `.overlapscope-cache/` when that directory is writable, else
  under the user cache directory ($OVERLAPSCOPE_CACHE_DIR, $XDG_CACHE_HOME/overlapscope or
  ~/.cache/overlapscope). A set $OVERLAPSCOPE_CACHE_DIR is the only place used: whoever names a
  folder wants every entry there (the test suite does, so no test writes beside committed traces).
  The trace itself is only ever read.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import orjson
import pandas as pd

from ..core.table import COLUMNS, RankMeta, RankTrace
from ..io_atomic import atomic_path
from ..ingest import ReadOptions, cacheable, read_job

log = logging.getLogger(__name__)

CACHE_FORMAT = 6
"""Bump when the event table's meaning changes without a version bump."""
LOCAL_DIR = ".overlapscope-cache"
META_KEY = b"overlapscope.cache"
STEP_DTYPES = {"step": "int32", "start_ns": "int64", "end_ns": "int64"}


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    enabled: bool = True
    min_bytes: int = 1 << 20
    """Smaller traces parse faster than a cache lookup pays back: they are never cached."""
    user_dir: Path | None = None
    """Fallback directory when the trace's own is not writable (default: user_cache_dir())."""
    beside_trace: bool | None = None
    """Use `.overlapscope-cache/` beside the trace when that folder is writable. None: yes, unless
    $OVERLAPSCOPE_CACHE_DIR is set (then that folder alone holds the cache)."""

    def use_beside(self) -> bool:
        return self.beside_trace if self.beside_trace is not None else not os.environ.get("OVERLAPSCOPE_CACHE_DIR")


def user_cache_dir() -> Path:
    env = os.environ.get("OVERLAPSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "overlapscope"


def content_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_key(path: Path, options: dict[str, Any]) -> str:
    from .. import __version__

    ident = {"format": CACHE_FORMAT, "version": __version__, "content": content_digest(path),
             "name": path.name, "options": options}
    return hashlib.blake2b(orjson.dumps(ident, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def entry_paths(path: Path, key: str, config: CacheConfig) -> list[Path]:
    """Where an entry may live, in lookup order: beside the trace (unless config says no), then the
    user cache dir."""
    user = (config.user_dir or user_cache_dir()) / f"{key}.parquet"
    return [path.parent / LOCAL_DIR / f"{path.name}.{key}.parquet", user] if config.use_beside() else [user]


def writable_dir(directory: Path) -> bool:
    """May we add files here? A directory with no write bit counts as read-only even for root,
    who could write anyway: a read-only trace collection must stay untouched."""
    try:
        mode = directory.stat().st_mode
    except OSError:
        return False
    return bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) and os.access(directory, os.W_OK)


def cached_read(path: Path, reader: Callable[[Path], RankTrace], options: dict[str, Any],
                config: CacheConfig = CacheConfig()) -> RankTrace:
    """reader(path), from the cache when a valid entry exists; a fresh result is stored for next time.

    `options` are the reader options that change its output (they are part of the key).
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        size = -1  # let the reader report the problem
    if not config.enabled or size < config.min_bytes:
        return reader(path)
    key = cache_key(path, options)
    candidates = entry_paths(path, key, config)
    for entry in candidates:
        if entry.is_file():
            trace = load_entry(entry, key, path)
            if trace is not None:
                log.debug("%s: event table from cache %s", path, entry)
                return trace
    trace = reader(path)
    *beside, user = candidates
    if not (beside and writable_dir(path.parent) and store_entry(beside[0], key, trace)):
        store_entry(user, key, trace)
    return trace


def read_cached(paths: list[Path], options: ReadOptions, config: CacheConfig) -> list[RankTrace]:
    """The ranks of one job's files (`ingest.read_job`); a lone Kineto file goes through the cache."""
    if cacheable(paths) and config.enabled:
        return [cached_read(paths[0], lambda p: read_job([p], options)[0], options.cache_key(), config)]
    return read_job(paths, options)


def load_entry(entry: Path, key: str, source: Path) -> RankTrace | None:
    """The cached RankTrace, or None when the entry is not a complete, matching, undamaged one.

    Every data and dictionary page carries a CRC (verified as it is read) and the metadata a
    checksum of its own content: a damaged entry is discarded with a warning, never served."""
    import pyarrow.parquet as pq  # here, not at the top: traces under min_bytes never need it

    try:
        table = pq.read_table(entry, page_checksum_verification=True)
        info = orjson.loads((table.schema.metadata or {})[META_KEY])
        if info.get("key") != key or info.get("format") != CACHE_FORMAT:
            return None  # another key's or format's entry: stale, not damaged
        if info.pop("checksum", None) != _checksum(info):
            raise ValueError("metadata checksum mismatch")
        events = table.to_pandas()
        if list(events.columns) != list(COLUMNS) or \
                any(str(events[c].dtype) != d for c, d in COLUMNS.items()) or len(events) != info["rows"]:
            raise ValueError("columns do not match the event table")
        steps = pd.DataFrame({c: np.asarray(info["steps"][c], dtype=d) for c, d in STEP_DTYPES.items()})
        meta = RankMeta.from_json(info["meta"])
        if meta.source_file != str(source):  # the same bytes under another name (a copied run)
            meta = dataclasses.replace(meta, source_file=str(source))
        return RankTrace(rank=info["rank"], events=events, steps=steps, device=info["device"],
                         rank_from=info["rank_from"], meta=meta)
    except Exception as exc:  # noqa: BLE001 - a damaged entry is a miss, never an error
        first = str(exc).splitlines()[0] if str(exc) else ""
        log.warning("%s: cache entry %s is damaged (%s: %s); discarded, the trace is read again and the entry "
                    "rewritten", source, entry, type(exc).__name__, first[:120])
        with contextlib.suppress(OSError):
            entry.unlink()
        return None


def _checksum(info: dict[str, Any]) -> str:
    """Digest of an entry's metadata (steps, rank, meta...), which no page CRC covers."""
    return hashlib.blake2b(orjson.dumps(info, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


def store_entry(entry: Path, key: str, trace: RankTrace) -> bool:
    """Write the entry atomically (io_atomic); False when the directory is not writable."""
    info = {
        "key": key, "format": CACHE_FORMAT, "rows": len(trace.events), "rank": trace.rank,
        "rank_from": trace.rank_from, "device": trace.device, "meta": trace.meta.to_json(),
        "steps": {c: trace.steps[c].to_numpy().tolist() for c in STEP_DTYPES},
    }
    info["checksum"] = _checksum(info)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pa.Table.from_pandas(trace.events, preserve_index=False)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: orjson.dumps(info)})
        with atomic_path(entry) as tmp:
            # Dictionary pages only for the categorical columns (int64 columns of distinct
            # times gain nothing from them) and no column statistics (a whole entry is always
            # read): half the encode time and half the file of the defaults.
            pq.write_table(table, str(tmp), compression="zstd", write_statistics=False, write_page_checksum=True,
                           use_dictionary=[f.name for f in table.schema if pa.types.is_dictionary(f.type)])
        _drop_older(entry)
        return True
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written is no cache, not an error
        log.debug("%s: cannot write cache entry (%s: %s)", entry, type(exc).__name__, exc)
        return False


def _drop_older(entry: Path) -> None:
    """Entries beside a trace are per file name: keep only the newest key for that name."""
    if entry.parent.name != LOCAL_DIR:
        return
    trace_name = entry.name.rsplit(".", 2)[0]
    for other in entry.parent.glob(f"{glob_escape(trace_name)}.*.parquet"):
        if other != entry and other.name.rsplit(".", 2)[0] == trace_name:
            with contextlib.suppress(OSError):
                other.unlink()


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)
