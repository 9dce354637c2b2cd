"""Name classification: which kernels are communication, and which collective they perform.

Names are few and events are many, so every function here works on the distinct names of a
categorical column and the caller maps the codes back (`classify_names(cat.categories)`).
"""
from __future__ import annotations

import functools
import re
from typing import Iterable, Sequence

import numpy as np

from .comm_rules import RULES, CommRule, rule_set, token_collective

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


_CLASSIFIED: dict[tuple[CommRule, ...], dict[str, tuple[int, str]]] = {}
"""Per rule set, each name's (rule index, collective), kept across calls: a worker reads many ranks
of one job, whose kernel names repeat (14 kernels x ~25 rules was 350 regex searches, 2 ms, a rank)."""
_CLASSIFIED_MAX_NAMES = 200_000
"""A rule set's names are forgotten past this many (memory stays bounded on odd traces)."""


def classify_kernels(names: Sequence[str], rules: Sequence[CommRule] = RULES) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct kernel name: the index of the first rule that matches it (-1: not comm) and
    the collective it performs ('' when neither the rule nor the name says)."""
    rules = tuple(rules)
    known = _CLASSIFIED.get(rules)
    if known is None or len(known) > _CLASSIFIED_MAX_NAMES:
        if len(_CLASSIFIED) > 16:
            _CLASSIFIED.clear()
        known = _CLASSIFIED[rules] = {}
    rule_of = np.empty(len(names), dtype=np.int64)
    collective = np.empty(len(names), dtype=object)
    for i, name in enumerate(names):
        hit = known.get(name)
        if hit is None:
            hit = known[name] = _classify(name, rules)
        rule_of[i], collective[i] = hit
    return rule_of, collective


def _classify(name: str, rules: tuple[CommRule, ...]) -> tuple[int, str]:
    for j, rule in enumerate(rules):
        if rule.regex.search(name):
            return j, rule.collective or collective_of(name) or token_collective(name)
    return -1, ""


def is_comm_name(names: Sequence[str], extra_patterns: Iterable[str] = ()) -> np.ndarray:
    """Boolean per distinct kernel name: does a rule (user patterns first) claim it?"""
    return classify_kernels(names, rule_set(tuple(extra_patterns)))[0] >= 0


@functools.lru_cache(maxsize=1 << 16)  # a worker reads many ranks of one job: their names repeat
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
