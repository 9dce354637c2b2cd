"""Per-file work on a process pool bounded by cores and memory, with a progress bar for long ingests.

Results come back in input order, and a job's exception is returned rather than raised, so the
caller raises the first failure in file order: the same error a serial read would have stopped at.
Log records of warning level and above that a worker emits are replayed in the calling process.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

from ..core.progress import listening

if TYPE_CHECKING:
    import multiprocessing.context

log = logging.getLogger(__name__)

PROGRESS_AFTER_S = 1.0
"""An ingest shows a progress bar once it has run this long (and stderr is a terminal)."""
BASE_WORKER_BYTES = 250 << 20
"""Resident size of a worker before it reads anything (Python, NumPy, pandas, pyarrow)."""
BYTES_PER_JSON_BYTE = 3
"""Peak working set of a read per byte of uncompressed JSON (bytes + decoded events + columns)."""
PARALLEL_MIN_BYTES = 32 << 20
"""Runs with less JSON than this are read in-process: a pool would cost more than it saves..."""
PARALLEL_MIN_FILES = 64
"""...unless they have at least this many files: each file's fixed cost (read, analyze) adds up."""
BATCHES_PER_WORKER = 16
"""Files go to the pool in consecutive batches, about this many per worker: one task per file costs
a round trip each (pickling, a queue, a wake-up), which at 4,096 tiny files outweighed the work;
a few batches per worker still balance the load when files differ in size."""
BATCH_MAX_BYTES = 16 << 20
"""A batch is closed once its files hold this many bytes on disk, so large files stay one a task."""


@dataclass
class JobResult:
    value: Any = None
    error: BaseException | None = None
    records: list[logging.LogRecord] | None = None


def json_bytes(path: Path) -> int:
    """Uncompressed size: gzip's ISIZE trailer (mod 4 GiB) for .gz, else the file size."""
    try:
        size = path.stat().st_size
        if path.name.endswith(".gz") and size >= 18:
            with open(path, "rb") as fh:
                fh.seek(-4, os.SEEK_END)
                isize = int.from_bytes(fh.read(4), "little")
            # ISIZE wraps at 4 GiB; a compression ratio below 1 means it wrapped.
            return isize if isize >= size else isize + (1 << 32)
        return size
    except OSError:
        return 0


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no way to know: bound by cores only
        return None


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _paths(item: Path | Sequence[Path]) -> Sequence[Path]:
    return [item] if isinstance(item, Path) else item


def pool_size(items: Sequence[Path | Sequence[Path]], workers: int | None = None) -> int:
    """Processes for `items` (files, or lists of files read together): at most one per item and
    core, and as many as memory holds."""
    if not items:
        return 1
    limit = min(len(items), workers or cpu_count())
    avail = available_memory()
    if avail is not None:
        biggest = max(sum(json_bytes(f) for f in _paths(item)) for item in items)
        limit = min(limit, max(1, avail // (BASE_WORKER_BYTES + BYTES_PER_JSON_BYTE * biggest)))
    return max(1, limit)


def should_parallelize(items: Sequence[Path | Sequence[Path]]) -> bool:
    if len(items) <= 1:
        return False
    if len(items) >= PARALLEL_MIN_FILES:
        return True
    return sum(json_bytes(f) for item in items for f in _paths(item)) >= PARALLEL_MIN_BYTES


def batches(sizes: Sequence[int], workers: int) -> list[range]:
    """Consecutive index ranges over items of `sizes` (bytes on disk): about BATCHES_PER_WORKER per
    worker, a batch closed early once it holds BATCH_MAX_BYTES. A loop per file, not per event."""
    per_batch = max(1, -(-len(sizes) // (max(1, workers) * BATCHES_PER_WORKER)))
    out, start, held = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and (i - start >= per_batch or held + size > BATCH_MAX_BYTES):
            out.append(range(start, i))
            start, held = i, 0
        held += size
    if sizes:
        out.append(range(start, len(sizes)))
    return out


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None  # picklable whatever the args were
        record.exc_info = record.exc_text = None
        self.records.append(record)


def run_job(func: Callable[..., Any], item: Any, *args: Any) -> JobResult:
    """func(item, *args) with its exception and its warnings captured for the caller."""
    handler = _Collect()
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    if root.level > logging.WARNING or root.level == logging.NOTSET:
        root.setLevel(logging.WARNING)
    try:
        return JobResult(value=func(item, *args), records=handler.records)
    except Exception as exc:  # noqa: BLE001 - returned, re-raised by the caller in file order
        return JobResult(error=exc, records=handler.records)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


REPEATS_SHOWN = 3
"""A worker warning that repeats for many files (the same words after the file's name: 4,096 tiled
ranks gave 8,192 lines) is shown for the first REPEATS_SHOWN files, then once with the count of the
rest and the last file's name."""


def _repeat_key(record: logging.LogRecord) -> tuple[str, int, str] | None:
    """(logger, level, the words after "FILE: "), or None for a message that names no file first."""
    head, sep, words = record.getMessage().partition(": ")
    return (record.name, record.levelno, words) if sep and head and " " not in head else None


class _Repeats:
    """Which warnings to show: each one that names no file first, and a repeat of the same words
    after another file's name only for its first REPEATS_SHOWN files; the rest are counted and
    summed up in one record (summaries)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int, str], list[Any]] = {}  # key -> [times seen, the last record held back]

    def admit(self, record: logging.LogRecord) -> bool:
        key = _repeat_key(record)
        if key is None:
            return True
        seen = self.seen.setdefault(key, [0, None])
        seen[0] += 1
        if seen[0] > REPEATS_SHOWN:
            seen[1] = record
            return False
        return True

    def summaries(self) -> Iterator[logging.LogRecord]:
        for (_, _, words), (count, last) in self.seen.items():
            if last is not None:
                head = last.getMessage().partition(": ")[0]
                yield logging.makeLogRecord({**last.__dict__, "args": None, "msg": (
                    f"{words} [the same in {count - REPEATS_SHOWN:,} more files, the last {head}]")})


def replay(results: Iterable[JobResult]) -> list[Any]:
    """Values in order; replays worker warnings here (repeats across files counted, not repeated),
    then raises the first job's error."""
    values = []
    repeats = _Repeats()
    try:
        for r in results:
            for record in r.records or ():
                if repeats.admit(record):
                    logging.getLogger(record.name).handle(record)
            if r.error is not None:
                raise r.error
            values.append(r.value)
    finally:
        for summary in repeats.summaries():
            logging.getLogger(summary.name).handle(summary)
    return values


class _AdmitOnce(logging.Filter):
    """A handler filter asking _Repeats once per record, however many handlers it reaches."""

    def __init__(self, repeats: _Repeats) -> None:
        super().__init__()
        self.repeats, self.last, self.verdict = repeats, None, True

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if record is not self.last:
            self.last, self.verdict = record, self.repeats.admit(record)
        return self.verdict


@contextlib.contextmanager
def folded_repeats() -> Iterator[None]:
    """Warnings logged in-process while reading file after file, folded as replay folds a pool's:
    a filter on the root logger's handlers for the duration, then the summaries."""
    repeats = _Repeats()
    once = _AdmitOnce(repeats)
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(once)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(once)
        for summary in repeats.summaries():
            logging.getLogger(summary.name).handle(summary)


class Progress:
    """A rich progress bar that appears only once the work has run PROGRESS_AFTER_S on a terminal.

    unit "files" counts items; "bytes" counts bytes of the trace files (shown as sizes)."""

    def __init__(self, total: int, label: str, unit: str = "files") -> None:
        self.total, self.label, self.unit, self.done = total, label, unit, 0
        self.t0 = time.monotonic()
        self._bar = None
        self._task = None

    def tick(self, advance: int = 0) -> None:
        self.done += advance
        if self._bar is None and time.monotonic() - self.t0 >= PROGRESS_AFTER_S and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            count = DownloadColumn() if self.unit == "bytes" else MofNCompleteColumn()
            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(), count,
                                     TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(self.label, total=self.total)
        if self._bar is not None:
            self._bar.update(self._task, completed=min(self.done, self.total))

    def reach(self, done: int) -> None:
        """Advance to at least `done` (a count known from outside, e.g. finished jobs' bytes)."""
        self.tick(max(0, done - self.done))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def file_bytes(item: Path | Sequence[Path]) -> int:
    """Bytes on disk of a job's files: what its reads report (core/progress.py) once it is done."""
    total = 0
    for path in _paths(item):
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


@contextlib.contextmanager
def counted(size: int, report: Callable[[int], None]) -> Iterator[None]:
    """Inside: the bytes the reads report (core/progress.py) go on to `report` as they come; at the
    end, the rest of the job's `size` (a cached or nsys read reports nothing while it runs)."""
    seen = 0

    def listener(n: int) -> None:
        nonlocal seen
        seen += n
        report(n)

    with listening(listener):
        yield
    if size > seen:
        report(size - seen)


_worker_counter: Any = None
"""In a pool worker: the shared count of bytes read (a multiprocessing Value) the parent shows."""


def _init_worker(counter: Any) -> None:
    global _worker_counter
    _worker_counter = counter
    gc.enable()  # the parent paused its collector across the fork (frozen_heap)
    # A forked worker inherits the parent's log handlers (the CLI's stderr line): each warning was
    # printed there as it happened and again when the parent replayed it. Replay is the one way out.
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)


def _add_to_counter(n: int) -> None:
    with _worker_counter.get_lock():
        _worker_counter.value += n


def _pool_batch(func: Callable[..., Any], items: Sequence[Any], sizes: Sequence[int],
                *args: Any) -> list[JobResult]:
    """run_job of each item in turn. Over several files the collector is paused and run once at the
    end: the readers allocate millions of short-lived acyclic objects, and the collections they
    trigger walk every live one (1,024 tiny ranks: workers 26.6 -> 23.7 CPU s)."""
    pause = len(items) > 1 and gc.isenabled()
    if pause:
        gc.disable()
    try:
        results = []
        for item, size in zip(items, sizes):
            with counted(size, _add_to_counter):
                results.append(run_job(func, item, *args))
        return results
    finally:
        if pause:
            gc.enable()
            gc.collect()


@contextlib.contextmanager
def frozen_heap(*, collect: bool = False) -> Iterator[None]:
    """The heap as it is now frozen for the duration (gc.freeze: the collector never walks it), and
    the collector paused unless collect. Around the pool (collect False): frozen before the fork
    (children do not copy-on-write it by touching refcounts in collections, and never walk it) with
    the collector paused (the parent only unpickles results, acyclic, whose allocations would trigger
    full collections: 1,024 tiny ranks, parent 5.7 -> 1.9 CPU s). Around the reduce (collect True):
    every rank's results frozen, so a full collection walks only what the reduce builds (4,096 tiny
    ranks: reduce 7.9 -> 4.4 s)."""
    was_enabled = gc.isenabled()
    if not collect:
        gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        # what was made meanwhile joins the oldest generation with the rest (frozen, then all
        # unfrozen), not the youngest: the next young collection does not walk every result
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def pool_context() -> multiprocessing.context.BaseContext:
    """fork where it is safe (no other thread could hold a lock across it): instant, and no
    re-import of the caller's __main__; else forkserver (preloaded), else spawn."""
    import multiprocessing  # here, not at the top: a small run never starts a pool

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["overlapscope.pipeline.distributed"])
        return ctx
    return multiprocessing.get_context("spawn")


def map_files(func: Callable[..., Any], files: Sequence[Path | Sequence[Path]], *args: Any,
              workers: int | None = None, label: str = "reading traces") -> list[Any]:
    """[func(f, *args) for f in files], on a process pool when it pays; errors as a serial loop's.

    An item of `files` is a path or a list of paths read together. The progress bar counts bytes
    of the files read, as the readers report them: it moves inside one large file too."""
    n = pool_size(files, workers) if (workers and workers > 1) or (workers is None and should_parallelize(files)) else 1
    sizes = [file_bytes(f) for f in files]
    with Progress(sum(sizes), label, unit="bytes") as progress:
        if n <= 1:
            values = []
            with folded_repeats():
                for f, size in zip(files, sizes):
                    with counted(size, progress.tick):
                        values.append(func(f, *args))  # in-process: errors and warnings as they happen
            return values
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        groups = batches(sizes, n)
        log.debug("%s: %d files in %d batches on %d processes", label, len(files), len(groups), n)
        ctx = pool_context()
        counter = ctx.Value("q", 0)
        with frozen_heap(), ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker,
                                                 initargs=(counter,)) as pool:
            futures = [pool.submit(_pool_batch, func, [files[i] for i in group], [sizes[i] for i in group], *args)
                       for group in groups]
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                progress.reach(counter.value)
            return replay(r for f in futures for r in f.result())
