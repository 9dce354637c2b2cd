"""Which device rows are communication, and which collective each performs, from a reader's columns.

Format-neutral (both readers call it): the name rules decide kernels (comm_rules.py), and device
work launched inside a communication op (`c10d::*`, `nccl:*`, `record_param_comms`...) is
communication whatever its name - copy-engine all-gathers are memcpys. The collective is the one
the user called: the innermost launching op that names one, else the kernel's (DESIGN.md).
Decisions are per distinct name; per row there is only array indexing.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np
import pandas as pd

from ..core.intervals import innermost_containing
from .classify import collective_of
from .comm_rules import CommRule, is_comm_op

DEVICE_WORK = ("kernel", "memcpy", "memset")
LAUNCH_CONTEXT = "launch context (inside a communication op)"
# NCCL runs all_to_all and batched p2p as SendRecv kernels: that kernel agrees with those ops.
_SENDRECV_OPS = ("all_to_all", "send", "recv", "send_recv")


class LaunchContext(NamedTuple):
    inside: np.ndarray
    """Per query: launched inside a communication op."""
    op_collective: np.ndarray
    """Per query: the collective the innermost launching op that names one names ('' none)."""
    op_index: np.ndarray
    """Per query: that op's index in the op arrays given (-1 none)."""


class Verdict(NamedTuple):
    kind: np.ndarray
    """Per device row: comm, compute (other kernels), memcpy, memset, sync."""
    collective: np.ndarray
    """Per row: the op's collective, else the name's ('' for non-comm rows)."""
    op_collective: np.ndarray
    """Per row: what the launching op names ('' none)."""
    name_collective: np.ndarray
    """Per row: what the kernel name (or its rule) says ('' none)."""
    comm_by: np.ndarray
    """Per row: the label of the rule that made it comm ('' not comm)."""


def _per_distinct(values: np.ndarray, func) -> np.ndarray:
    codes, uniques = pd.factorize(np.asarray(values, dtype=object))
    out = np.array([func(u) for u in uniques], dtype=object)
    return out[codes] if codes.size else np.array([], dtype=object)


def launch_context(op_lane: np.ndarray, op_start: np.ndarray, op_end: np.ndarray, op_name: np.ndarray,
                   q_lane: np.ndarray, q_time: np.ndarray) -> LaunchContext:
    """For device rows launched at (q_lane, q_time): inside which communication op, among the CPU
    ranges (op_*: every cpu_op/annotation of the rank; the comm ones are picked here)."""
    op_name = np.asarray(op_name, dtype=object)
    is_op = _per_distinct(op_name, lambda n: is_comm_op(str(n))).astype(bool)
    ops = np.flatnonzero(is_op)
    inside = np.zeros(len(q_time), dtype=bool)
    op_coll = np.full(len(q_time), "", dtype=object)
    op_index = np.full(len(q_time), -1, dtype=np.int64)
    if ops.size == 0 or len(q_time) == 0:
        return LaunchContext(inside, op_coll, op_index)
    q_time = np.asarray(q_time, dtype=np.int64)
    known = q_time >= 0
    lanes, starts, ends = np.asarray(op_lane, dtype=object), np.asarray(op_start), np.asarray(op_end)
    hit = innermost_containing(lanes[ops], starts[ops], ends[ops], np.asarray(q_lane, dtype=object), q_time)
    inside = (hit >= 0) & known
    coll = _per_distinct(op_name[ops], collective_of)
    named = np.flatnonzero(coll != "")
    if named.size:
        sub = ops[named]
        hit = innermost_containing(lanes[sub], starts[sub], ends[sub], np.asarray(q_lane, dtype=object), q_time)
        found = (hit >= 0) & known
        op_coll = np.where(found, coll[named][np.maximum(hit, 0)], "").astype(object)
        op_index = np.where(found, sub[np.maximum(hit, 0)], -1)
    return LaunchContext(inside, op_coll, op_index)


def decide(kind: np.ndarray, rule_of: np.ndarray, name_collective: np.ndarray, context: LaunchContext,
           rules: Sequence[CommRule]) -> Verdict:
    """kind: per device row kernel / memcpy / memset / sync; rule_of, name_collective: classify_kernels
    of each row's name (kernel rows; ignored for the others)."""
    kind = np.asarray(kind, dtype=object)
    is_kernel = kind == "kernel"
    by_name = is_kernel & (np.asarray(rule_of) >= 0)
    by_context = np.isin(kind, DEVICE_WORK) & context.inside & ~by_name
    comm = by_name | by_context
    out_kind = kind.copy()
    out_kind[is_kernel] = "compute"
    out_kind[comm] = "comm"
    name_coll = np.where(by_name, name_collective, "").astype(object)
    # A kernel that only the context claims may still name its collective (ncclDevKernel_* in a
    # build the rules do not know); a memcpy never does.
    name_coll[by_context & is_kernel] = np.asarray(name_collective, dtype=object)[by_context & is_kernel]
    op_coll = np.where(comm, context.op_collective, "").astype(object)
    collective = np.where(op_coll != "", op_coll, name_coll).astype(object)
    collective[~comm] = ""
    labels = np.array([r.label for r in rules] + [""], dtype=object)
    comm_by = labels[np.where(by_name, rule_of, len(rules))]
    comm_by[by_context] = LAUNCH_CONTEXT
    return Verdict(out_kind, collective, op_coll, name_coll, comm_by)


def collective_conflicts(names: np.ndarray, name_collective: np.ndarray, collective: np.ndarray) -> list[dict]:
    """Comm rows whose kernel name says one collective and the op they ran in another, counted per
    (op's collective, kernel's collective, kernel name). SendRecv under all_to_all or p2p ops agrees."""
    name_collective = np.asarray(name_collective, dtype=object)
    collective = np.asarray(collective, dtype=object)
    clash = (name_collective != "") & (collective != "") & (name_collective != collective)
    clash &= ~((name_collective == "send_recv") & np.isin(collective, _SENDRECV_OPS))
    if not clash.any():
        return []
    frame = pd.DataFrame({"collective": collective[clash], "kernel_collective": name_collective[clash],
                          "kernel": np.asarray(names, dtype=object)[clash]})
    counts = frame.groupby(["collective", "kernel_collective", "kernel"], sort=True).size()
    return [{"collective": c, "kernel_collective": k, "kernel": n, "count": int(v)}
            for (c, k, n), v in counts.items()]
