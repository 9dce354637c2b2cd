"""Labels that Kineto and Nsight both see: one `record_function` plus one NVTX range per name.

NVTX comes from the `nvtx` package; without an attached tool (nsys) its calls are cheap no-ops, so
labels cost the same on a CPU run as a bare `record_function`.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Any, Iterator

from torch.profiler import record_function

log = logging.getLogger(__name__)

try:  # the nvtx package is optional: labels still reach Kineto without it
    import nvtx as _nvtx
except ImportError:  # pragma: no cover - depends on the environment
    _nvtx = None

_NVTX_ENABLED = _nvtx is not None and os.environ.get("OVERLAPSCOPE_NVTX", "1") != "0"


def set_nvtx(enabled: bool) -> None:
    """Turn the NVTX half of every label on or off (record_function labels stay)."""
    global _NVTX_ENABLED
    _NVTX_ENABLED = bool(enabled) and _nvtx is not None


def nvtx_enabled() -> bool:
    return _NVTX_ENABLED


@contextmanager
def label(name: str) -> Iterator[None]:
    """`with label("layer3"):` marks the block in Kineto (record_function) and in nsys (NVTX)."""
    if _NVTX_ENABLED:
        _nvtx.push_range(name)
    try:
        with record_function(name):
            yield
    finally:
        if _NVTX_ENABLED:
            _nvtx.pop_range()


def range_start(name: str) -> Any:
    """Start an NVTX range that may end on another call (a training step); None when NVTX is off."""
    if _NVTX_ENABLED:
        return _nvtx.start_range(name)
    return None


def range_end(handle: Any) -> None:
    if handle is not None and _NVTX_ENABLED:
        _nvtx.end_range(handle)
