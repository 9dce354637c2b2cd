"""Capture: wrap a training run and get one Kineto trace per rank plus a run manifest.

The names below load on first use (PEP 562): they import torch (~1 s), and the CLI imports
`overlapscope.capture.cli` to register `profile` on every start, `overlapscope analyze` included.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"label": ".labels", "set_layout": ".manifest", "Capture": ".profiler", "CaptureConfig": ".profiler",
          "capture": ".profiler"}

__all__ = ["Capture", "CaptureConfig", "capture", "label", "set_layout"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name], __name__), name)
    globals()[name] = value
    return value
