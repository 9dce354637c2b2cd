"""Capture: wrap a training run and get one Kineto trace per rank plus a run manifest.

    from overlapscope.capture import capture      # or: import overlapscope; overlapscope.capture(...)
    with capture("runs/a", steps=5) as cap:
        ...; cap.step()

This package is also callable (`overlapscope.capture(out_dir, ...)` is `capture(...)`), so the
top-level re-export and the subpackage can share the name. torch is imported on first use only,
so `import overlapscope` stays light for users who only analyze traces.
"""
from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["Capture", "CaptureConfig", "capture", "label", "set_layout"]

_LAZY = {"capture": "profiler", "Capture": "profiler", "CaptureConfig": "profiler",
         "label": "labels", "set_layout": "manifest"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .profiler import capture
        return capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
