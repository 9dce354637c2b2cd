"""overlapscope: how much of your NCCL communication is not hidden behind compute, and why.

Pipeline: capture -> ingest (one reader per format, one event table out) -> analysis (pure
functions on interval arrays) -> report / dashboard / check.
"""
from __future__ import annotations

from .analysis import Analysis, analyze
from .errors import OverlapscopeError
from .ingest import load_run
from .ingest.table import RankTrace, Run

__version__ = "0.1.0"
__all__ = ["analyze", "load_run", "Analysis", "Run", "RankTrace", "OverlapscopeError", "__version__"]
