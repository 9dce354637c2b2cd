"""Kineto event categories: the pre-2022 names, and categories the reader does not know.

Traces from before ~2022 name the same activities `Kernel`, `Memcpy`, `Memset`, `Runtime`,
`Operator` (libkineto's old ActivityType names); they read as `kernel`, `gpu_memcpy`,
`gpu_memset`, `cuda_runtime`, `cpu_op`. Device activity in a category the reader does not know
(an MTIA trace's `mtia_ccp_events`, HCCL's) is never dropped silently: beside known device work it
is named in a warning; alone, the trace is refused, so a CPU report is never presented as the run.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import TraceError
from .kineto_parse import Columns

log = logging.getLogger(__name__)

OLD_SCHEMA_CATS = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
                   "Operator": "cpu_op", "Driver": "cuda_driver", "User": "user_annotation"}
# Categories with no work the numbers need (stacks, flows, profiler bookkeeping).
BENIGN_CATS = frozenset({"", "trace", "python_function", "python", "gpu_user_annotation", "ac2g", "fwdbwd",
                         "overhead", "cuda_profiler_range", "cpu_instant_event", "memory"})
# Words that say a category holds an accelerator's activity.
_DEVICE_WORDS = ("mtia", "ccp", "npu", "xpu", "hpu", "mlu", "gpu", "kernel", "device", "hccl", "memcpy", "memset",
                 "accelerator", "privateuse1")


def normalized(cols: Columns) -> Columns:
    """The columns with pre-2022 category names read as today's."""
    if not any(u in OLD_SCHEMA_CATS for u in cols.cat.uniques):
        return cols
    return replace(cols, cat=cols.cat.relabel(lambda c: OLD_SCHEMA_CATS.get(c, c)))


def check_unknown(cols: Columns, known: set[str], has_device: bool, path: Path) -> None:
    """Warn about (or, without any known device work, refuse) device-like activity in categories
    the reader does not read."""
    counts = np.bincount(cols.cat.codes, minlength=cols.cat.uniques.size)
    unknown = {str(c): int(n) for c, n in zip(cols.cat.uniques, counts)
               if n and c not in known and str(c).lower() not in BENIGN_CATS}
    if not unknown:
        return
    device_like = {c: n for c, n in unknown.items() if any(w in c.lower() for w in _DEVICE_WORDS)}
    shown = ", ".join(f"{c} ({n} events)" for c, n in sorted(unknown.items(), key=lambda kv: -kv[1])[:8])
    if device_like and not has_device:
        raise TraceError(f"device activity in categories overlapscope does not read ({shown}): its device work "
                         "cannot be analysed, and its CPU ops alone are not the run", path)
    log.warning("%s: events in categories overlapscope does not read were not analysed: %s", path, shown)
