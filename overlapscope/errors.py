"""One error type for everything a user can get wrong: the CLI prints it on one line and exits 2."""
from __future__ import annotations

from pathlib import Path


class OverlapscopeError(ValueError):
    """A user-facing problem with an input (file, run, option), printed as one line."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = str(path) if path is not None else None
        super().__init__(f"{self.path}: {message}" if self.path else message)


class TraceError(OverlapscopeError):
    """A trace file that cannot be read or does not mean what a trace must mean."""
