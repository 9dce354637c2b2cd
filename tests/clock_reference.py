"""The clock solve as it was before the incremental one (one recomputation over all rows per aligned
rank, quadratic in ranks): kept as the oracle tests/test_clock.py compares `estimate_offsets` with."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from overlapscope.analysis.clock import ClockOffsets, most_feasible


def reference_offsets(ends: pd.DataFrame, ranks: list[int] | None = None) -> ClockOffsets:
    """Offsets from matched collectives.

    `ends`: one row per (instance, rank) of matched collectives, columns instance, rank, end_ns and
    optionally start_ns (recorded). `ranks`: every rank of the run (those absent get 0, unaligned).
    """
    all_ranks = sorted(set(ranks or []) | set(ends["rank"].astype(int).tolist()))
    if not all_ranks:
        return ClockOffsets({}, {}, [])
    has_start = "start_ns" in ends.columns
    cols = ["instance", "rank", "end_ns"] + (["start_ns"] if has_start else [])
    frame = ends[cols].astype({c: np.int64 for c in cols if c != "instance"})
    # Epoch ns exceed float64's 2^53: work relative to the earliest end so every difference is exact.
    base = int(frame["end_ns"].min()) if len(frame) else 0
    for c in cols[2:]:
        frame[c] = frame[c] - base
    reference = all_ranks[0]
    offsets: dict[int, int] = {reference: 0}
    pairs: dict[int, int] = {reference: 0}
    pending = set(all_ranks) - {reference}
    # NumPy columns: the loop runs once per rank, and a pandas groupby per round cost ~10 ms.
    instance = frame["instance"].to_numpy()
    rank = frame["rank"].to_numpy(np.int64)
    end_ns = frame["end_ns"].to_numpy(np.int64)
    start_ns = frame["start_ns"].to_numpy(np.int64) if has_start else np.zeros(end_ns.size, np.int64)
    while pending:
        known = np.isin(rank, list(offsets))
        shift = np.array([offsets[r] for r in rank[known].tolist()], dtype=np.int64)
        per = _per_instance(instance[known], end_ns[known] + shift, start_ns[known] + shift)
        cand = np.flatnonzero(np.isin(rank, list(pending)) & np.isin(instance, per.instance))
        if cand.size == 0:
            break
        ranks_c, counts = np.unique(rank[cand], return_counts=True)
        # Align the best-supported rank first: later ranks then have more anchors to lean on.
        best = int(ranks_c[np.argmax(counts)])
        mine = cand[rank[cand] == best]
        at = np.searchsorted(per.instance, instance[mine])
        diff = per.anchor[at] - end_ns[mine].astype(np.float64)
        offset = float(np.median(diff))
        if has_start:
            offset = most_feasible(per.last_start[at] - end_ns[mine].astype(np.float64),
                                   per.first_end[at] - start_ns[mine].astype(np.float64), offset)
        offsets[best] = int(np.rint(offset))
        pairs[best] = int(counts.max())
        pending.discard(best)
    unaligned = sorted(pending)
    for r in unaligned:
        offsets[r] = 0
        pairs[r] = 0
    return ClockOffsets({r: offsets[r] for r in all_ranks}, {r: pairs[r] for r in all_ranks}, unaligned)


class _PerInstance(NamedTuple):
    instance: np.ndarray
    """Sorted distinct instances."""
    anchor: np.ndarray
    """Median aligned end (float64: the mean of the two middle ends for an even count)."""
    first_end: np.ndarray
    last_start: np.ndarray


def _per_instance(instance: np.ndarray, end_ns: np.ndarray, start_ns: np.ndarray) -> _PerInstance:
    """Per instance: median and min of the ends, max of the starts (pandas' groupby median, min, max)."""
    if instance.size == 0:
        nothing = np.empty(0, np.float64)
        return _PerInstance(instance, nothing, nothing, nothing)
    order = np.lexsort((end_ns, instance))
    inst, ends = instance[order], end_ns[order].astype(np.float64)
    first = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    count = np.diff(np.r_[first, inst.size])
    anchor = (ends[first + (count - 1) // 2] + ends[first + count // 2]) / 2
    last_start = np.maximum.reduceat(start_ns[order], first).astype(np.float64)
    return _PerInstance(inst[first], anchor, ends[first], last_start)
