"""overlapscope: how much of your NCCL communication is not hidden behind compute, and why.

Pipeline: capture -> ingest (one reader per format, one event table out) -> analysis (pure
functions on interval arrays) -> report / dashboard / check.

The public names load lazily: the pytest plugin entry point imports this package in every pytest
session, which must not pay for pandas and NumPy unless overlapscope is used.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "analyze": ("overlapscope.analysis", "analyze"),
    "Analysis": ("overlapscope.analysis.result", "Analysis"),
    "analyze_run": ("overlapscope.pipeline.run", "analyze_run"),
    "RunOptions": ("overlapscope.pipeline.options", "RunOptions"),
    "load_run": ("overlapscope.pipeline.run", "load_run"),
    "Run": ("overlapscope.core.table", "Run"),
    "RankTrace": ("overlapscope.core.table", "RankTrace"),
    "OverlapscopeError": ("overlapscope.errors", "OverlapscopeError"),
    "capture": ("overlapscope.capture", "capture"),
}
__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        module, attr = _EXPORTS[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'overlapscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
