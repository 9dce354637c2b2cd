"""Atomic output files: the one way overlapscope writes a file (baseline, JUnit, summary, Perfetto,
cache entry, trace, manifest).

The bytes go to a hidden temporary name in the target's folder and are renamed over the target only
once whole, so a reader (or a killed job) never sees half a file. The file gets the mode a plain
`open(path, "w")` would give it - 0o666 less the user's umask - not mkstemp's private 0o600.
Standard library only: the capture hook in every training process uses it.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import OverlapscopeError


def umask() -> int:
    """The process umask, read without changing it where the OS says it (Linux), else by setting it back."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path, *, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside `path` to write (or to hand to a writer that wants a file name); it
    replaces `path` when the block ends normally and is removed when it raises. suffix: the end the
    temporary name needs (torch gzips a trace whose name ends in .gz)."""
    path = Path(path)
    existing = next((p for p in path.parents if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise OverlapscopeError(f"cannot write: {existing} is not a directory", path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".part{suffix}", dir=path.parent)
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~umask())
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise _cannot_write(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    write_bytes(path, text.encode("utf-8"))


def _cannot_write(path: Path, exc: OSError) -> OverlapscopeError:
    return OverlapscopeError(f"cannot write: {exc.strerror or exc}", path)
