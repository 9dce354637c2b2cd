"""Bytes-read reports: a reader says how many bytes of a trace file it has read; a progress bar listens.

Readers cannot know the bar (ingest does not import the pipeline), so they call `bytes_read(n)`,
which goes to the listener installed in this process - the pipeline's progress bar in-process, a
shared counter in a pool worker - or nowhere.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

_listener: Callable[[int], None] | None = None


def bytes_read(n: int) -> None:
    """Report n more bytes of a trace file read (file bytes: compressed ones for a .gz)."""
    if _listener is not None:
        _listener(n)


@contextlib.contextmanager
def listening(listener: Callable[[int], None]) -> Iterator[None]:
    """Send this process's `bytes_read` reports to `listener` inside the block."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous
