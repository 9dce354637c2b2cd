"""Name classification: which kernels are communication, and which collective they perform.

Names are few and events are many, so every function here works on the distinct names of a
categorical column and the caller maps the codes back (`classify_names(cat.categories)`).
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

import numpy as np

# DESIGN.md "What counts as what": NCCL of every generation, RCCL/HCCL, and the NCCL-free
# all-reduces (torch symmetric memory, vLLM custom all-reduce).
DEFAULT_COMM_PATTERNS: tuple[str, ...] = (
    r"nccl", r"rccl", r"hccl", r"multimem_", r"one_?shot_?all_?reduce",
    r"two_?shot_?all_?reduce", r"cross_device_reduce",
)

# Checked in order: the first match wins (AllReduce before Reduce, ReduceScatter before Reduce...).
_COLLECTIVE_RULES: tuple[tuple[str, str], ...] = (
    (r"all_?reduce|one_?shot|two_?shot|cross_device_reduce", "all_reduce"),
    (r"reduce_?scatter", "reduce_scatter"),
    (r"all_?gather", "all_gather"),
    (r"all_?to_?all|alltoall", "all_to_all"),
    (r"send_?recv", "send_recv"),
    (r"broadcast|bcast", "broadcast"),
    (r"barrier", "barrier"),
    (r"reduce", "reduce"),
    (r"(?<![a-z])send|ncclsend|:send", "send"),
    (r"(?<![a-z])recv|ncclrecv|:recv", "recv"),
)
_COLLECTIVE_RE = [(re.compile(p, re.IGNORECASE), c) for p, c in _COLLECTIVE_RULES]


def comm_regex(extra_patterns: Iterable[str] = ()) -> re.Pattern[str]:
    patterns = list(DEFAULT_COMM_PATTERNS) + [p for p in extra_patterns if p]
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def is_comm_name(names: Sequence[str], extra_patterns: Iterable[str] = ()) -> np.ndarray:
    """Boolean per distinct kernel name: does it run a collective?"""
    rx = comm_regex(extra_patterns)
    return np.fromiter((bool(rx.search(n)) for n in names), dtype=bool, count=len(names))


def collective_of(name: str) -> str:
    """Collective type of one kernel/op name ('' when the name does not say).

    For `ncclDevKernel_AllReduce_Sum_f32_RING_LL` this reads `AllReduce` only: the suffix is the
    compiled entry point, not the algorithm or reduction that ran.
    """
    base = _strip_signature(name)
    low = base.lower()
    # NCCL kernel names: the collective is the token after the kernel prefix.
    m = re.match(r"^(?:void\s+)?(?:nccl|rccl)\w*?kernel_([A-Za-z]+)", base, re.IGNORECASE)
    if m:
        low = m.group(1).lower()
    for rx, collective in _COLLECTIVE_RE:
        if rx.search(low):
            return collective
    return ""


def collective_from_arg(value: str | None) -> str:
    """Kineto `Collective name` arg ('allreduce', '_allgather_base', 'reduce_scatter_tensor_coalesced', ...)."""
    if not value:
        return ""
    return collective_of(value)


def collectives_of(names: Sequence[str]) -> np.ndarray:
    return np.array([collective_of(n) for n in names], dtype=object)


def _strip_signature(name: str) -> str:
    # "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ...)" -> before the argument list
    cut = name.find("(")
    return name[:cut] if cut > 0 else name
