"""Clock alignment across ranks from matched collectives (DESIGN.md "Clock alignment").

Once the last rank arrives, every rank of a collective finishes within a short tail of the others,
so for a matched collective the difference of two ranks' recorded end times is their clock offset
plus that tail. Each rank's offset is the median of those differences (a few mismatched or slow-tailed
collectives cannot move a median the way they move a mean).

The tail can be milliseconds on a loaded CPU (gloo), more than a short collective lasts. So when
starts are known the median is then clamped into the offsets that keep the most matched collectives
possible: every rank of a collective must be inside it at one common instant, which bounds the offset
of rank r by [latest start of the others - r's end, earliest end of the others - r's start]. Short
collectives pin the offset tightly; the median only decides within what they allow.

Aligned time = recorded time + offset; the lowest rank is the reference (offset 0). A rank that shares
no collective with the reference is aligned through a rank that does (best supported first), and one
that shares none with any aligned rank keeps offset 0 and is reported.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


class ClockOffsets(NamedTuple):
    offsets_ns: dict[int, int]
    """rank -> offset; aligned = recorded + offset."""
    pairs: dict[int, int]
    """rank -> number of matched collectives its offset was estimated from (0: not estimated)."""
    unaligned: list[int]
    """Ranks that share no matched collective with any aligned rank (their offset is 0)."""


def most_feasible(lo: np.ndarray, hi: np.ndarray, target: float) -> float:
    """The point nearest `target` among those inside the most closed intervals [lo, hi]."""
    if lo.size == 0:
        return target
    coord = np.concatenate([lo, hi]).astype(np.float64)
    is_lo = np.concatenate([np.ones(lo.size, bool), np.zeros(hi.size, bool)])
    order = np.lexsort((~is_lo, coord))  # at equal coordinates an interval opens before another closes
    coord, is_lo = coord[order], is_lo[order]
    depth = np.cumsum(np.where(is_lo, 1, -1))
    # After each opening boundary the depth holds on [coord_i, coord_{i+1}]
    best = depth.max()
    at = np.flatnonzero((depth == best) & is_lo)
    region_lo, region_hi = coord[at], coord[np.minimum(at + 1, coord.size - 1)]
    clipped = np.clip(target, region_lo, region_hi)
    return float(clipped[np.argmin(np.abs(clipped - target))])


def estimate_offsets(ends: pd.DataFrame, ranks: list[int] | None = None) -> ClockOffsets:
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
    if unaligned:
        log.debug("ranks %s share no matched collective with the others: clocks used as recorded", unaligned)
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
