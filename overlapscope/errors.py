"""One error type for everything a user can get wrong: the CLI prints it on one line and exits 2."""
from __future__ import annotations

from pathlib import Path


class OverlapscopeError(ValueError):
    """A user-facing problem with an input (file, run, option), printed as one line."""

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = str(path) if path is not None else None
        message = " ".join(message.splitlines())  # one line, whatever a library put in it
        super().__init__(f"{self.path}: {message}" if self.path else message)


class TraceError(OverlapscopeError):
    """A trace file that cannot be read or does not mean what a trace must mean."""


class ReadBug(Exception):
    """A bug met while reading one file: not the user's error, but the report still names the file."""

    def __init__(self, path: str | Path, detail: str) -> None:
        self.path = str(path)
        self.detail = detail
        super().__init__(path, detail)

    def __str__(self) -> str:
        return f"{self.path}: {self.detail}"


def bug_line(exc: BaseException) -> str:
    """The one line a bug is reported with: what it was, and the file being read when there was one."""
    if isinstance(exc, ReadBug):
        return f"internal error while reading {exc.path}, please report it with OVERLAPSCOPE_DEBUG=1 output: {exc.detail}"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"internal error, please report it with OVERLAPSCOPE_DEBUG=1 output: {type(exc).__name__}: {first}"
