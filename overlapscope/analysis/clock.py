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
from bisect import insort
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..core.intervals import concat_ranges

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
    if bool(((lo <= target) & (target <= hi)).all()):  # inside every interval: the deepest point itself
        return float(target)
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

    Ranks are aligned one at a time (the best-supported first), each against the instances' median
    aligned end over the ranks aligned before it. That state is kept per instance and updated with
    each aligned rank's rows (`_Anchors`, its ends in an `EndsMatrix`), so the whole solve touches
    every row a constant number of times: 1,024 ranks x 200 collectives take ~0.3 s, not the minutes
    a recomputation per round takes.
    """
    row_rank = ends["rank"].to_numpy(np.int64)
    rank_ids = np.union1d(np.asarray(ranks or [], dtype=np.int64), row_rank)  # sorted, distinct
    all_ranks = rank_ids.tolist()
    if not all_ranks:
        return ClockOffsets({}, {}, [])
    has_start = "start_ns" in ends.columns
    # Epoch ns exceed float64's 2^53: work relative to the earliest end so every difference is exact.
    end_ns = ends["end_ns"].to_numpy(np.int64)
    base = int(end_ns.min()) if end_ns.size else 0
    end_ns = end_ns - base
    start_ns = ends["start_ns"].to_numpy(np.int64) - base if has_start else np.zeros(end_ns.size, np.int64)
    _, instance = np.unique(ends["instance"].to_numpy(), return_inverse=True)
    instance = instance.reshape(-1).astype(np.int64)
    rank_index = np.searchsorted(rank_ids, row_rank)
    anchors = _Anchors(instance, rank_index, end_ns, start_ns, len(all_ranks))

    offsets = np.zeros(len(all_ranks), np.int64)
    pairs = np.zeros(len(all_ranks), np.int64)
    pending = np.ones(len(all_ranks), bool)
    pending[0] = False  # the reference: the lowest rank
    anchors.add(0, 0)
    while pending.any():
        support = np.where(pending, anchors.support, -1)
        best = int(np.argmax(support))  # the best-supported rank; the lowest of equals
        if support[best] <= 0:
            break
        mine = anchors.rows_of(best)
        mine = mine[anchors.active[instance[mine]]]
        at = instance[mine]
        diff = anchors.median_end(at) - end_ns[mine].astype(np.float64)
        offset = _median(diff)
        if has_start:
            offset = most_feasible(anchors.last_start[at].astype(np.float64) - end_ns[mine].astype(np.float64),
                                   anchors.first_end[at].astype(np.float64) - start_ns[mine].astype(np.float64),
                                   offset)
        offsets[best] = int(np.rint(offset))
        pairs[best] = support[best]
        pending[best] = False
        anchors.add(best, int(offsets[best]))
    unaligned = [all_ranks[i] for i in np.flatnonzero(pending)]
    offsets[pending] = 0
    pairs[pending] = 0
    if unaligned:
        log.debug("ranks %s share no matched collective with the others: clocks used as recorded", unaligned)
    return ClockOffsets({r: int(o) for r, o in zip(all_ranks, offsets)},
                        {r: int(p) for r, p in zip(all_ranks, pairs)}, unaligned)


def _median(values: np.ndarray) -> float:
    """np.median of a non-empty float array (the mean of the two middle values for an even count), by
    one np.partition: np.median's dispatch costs ~60 us, paid once per aligned rank."""
    half = values.size // 2
    if values.size % 2:
        return float(np.partition(values, half)[half])
    middle = np.partition(values, (half - 1, half))
    return float((middle[half - 1] + middle[half]) / 2)


class _Anchors:
    """Per instance, over the rows of the ranks aligned so far: their aligned ends (for the median),
    the earliest end and the latest start; per rank, how many of its rows lie in an instance some
    aligned rank shares (its support)."""

    def __init__(self, instance: np.ndarray, rank_index: np.ndarray, end_ns: np.ndarray, start_ns: np.ndarray,
                 n_ranks: int) -> None:
        self.instance, self.rank_index, self.end_ns, self.start_ns = instance, rank_index, end_ns, start_ns
        n_inst = int(instance.max()) + 1 if instance.size else 0
        self.by_rank = np.argsort(rank_index, kind="stable")  # rows of each rank, in row order
        self.rank_bounds = np.searchsorted(rank_index[self.by_rank], np.arange(n_ranks + 1))
        self.by_instance = np.argsort(instance, kind="stable")
        self.inst_bounds = np.searchsorted(instance[self.by_instance], np.arange(n_inst + 1))
        self.first_end = np.full(n_inst, np.iinfo(np.int64).max, np.int64)
        self.last_start = np.full(n_inst, np.iinfo(np.int64).min, np.int64)
        self.active = np.zeros(n_inst, bool)
        self.support = np.zeros(n_ranks, np.int64)
        # ranks with one row per instance (the rule: a rank is in a collective once) update the
        # instances' earliest end and latest start by plain indexing, not the slower ufunc.at
        pair = np.sort(rank_index.astype(np.int64) * max(n_inst, 1) + instance)
        self.one_row_each = np.ones(n_ranks, bool)
        self.one_row_each[pair[1:][pair[1:] == pair[:-1]] // max(n_inst, 1)] = False
        self.ends = ends_store(np.diff(self.inst_bounds), end_ns, start_ns, repeats=not self.one_row_each.all())

    def rows_of(self, rank: int) -> np.ndarray:
        return self.by_rank[self.rank_bounds[rank]:self.rank_bounds[rank + 1]]

    def add(self, rank: int, offset: int) -> None:
        """Rank `rank` is aligned with `offset`: its rows join the anchors."""
        rows = self.rows_of(rank)
        at = self.instance[rows]
        ends = self.end_ns[rows] + offset
        starts = self.start_ns[rows] + offset
        self.ends.insert(at, ends, distinct=bool(self.one_row_each[rank]))
        if self.one_row_each[rank]:
            self.first_end[at] = np.minimum(self.first_end[at], ends)
            self.last_start[at] = np.maximum(self.last_start[at], starts)
            new = at[~self.active[at]]
        else:
            np.minimum.at(self.first_end, at, ends)
            np.maximum.at(self.last_start, at, starts)
            new = np.unique(at[~self.active[at]])
        if new.size:
            self.active[new] = True
            members = self.by_instance[concat_ranges(self.inst_bounds[new], self.inst_bounds[new + 1])]
            self.support += np.bincount(self.rank_index[members], minlength=self.support.size)

    def median_end(self, at: np.ndarray) -> np.ndarray:
        """The median aligned end of each instance in `at` (the mean of the two middle ones for an
        even count, in float64)."""
        lo, hi = self.ends.middle(at)
        return (lo.astype(np.float64) + hi.astype(np.float64)) / 2


# An instance's ends are held in a matrix row (EndsMatrix) when the matrix holds at most this many
# cells per row of the table: instances of similar size (collectives of a few groups) fit, one huge
# instance beside many small ones would not, and goes to sorted lists (EndsLists).
MATRIX_CELLS_PER_ROW = 4


def ends_store(counts: np.ndarray, end_ns: np.ndarray, start_ns: np.ndarray, *,
               repeats: bool = False) -> "EndsMatrix | EndsLists":
    """The store for the aligned ends of instances with counts[i] rows each: EndsMatrix where it is
    small and every aligned value stays clear of its int64 sentinels, EndsLists otherwise, and where
    a rank repeats an instance (repeats: against the rule that a rank is in a collective once; a
    rank's rows then enter the matrix in one round per repeat)."""
    rows = int(counts.sum())
    if counts.size == 0 or rows == 0 or repeats:
        return EndsLists(counts.size)
    cap = EndsMatrix.buffer_for(int(counts.max()))
    cells = counts.size * EndsMatrix.width_for(int(counts.max()), cap)
    # offsets are differences of these ends and starts, so aligned values stay within 3x their span
    span = max(int(end_ns.max()), int(start_ns.max())) - min(int(end_ns.min()), int(start_ns.min()))
    if cells > MATRIX_CELLS_PER_ROW * rows + 4096 or span >= 1 << 60:
        return EndsLists(counts.size)
    return EndsMatrix(counts, cap)


class EndsLists:
    """Per instance, its values in one sorted Python list (bisect.insort): any sizes, ~1 us a value."""

    def __init__(self, n_instances: int) -> None:
        self.lists: list[list[int]] = [[] for _ in range(n_instances)]

    def insert(self, at: np.ndarray, values: np.ndarray, *, distinct: bool = False) -> None:
        """Adds values[j] to instance at[j]'s values (at may repeat an instance)."""
        for i, v in zip(at.tolist(), values.tolist()):
            insort(self.lists[i], v)

    def middle(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per instance of `at` (each holding a value), its values' two middle order statistics, the
        (count-1)//2-th and the count//2-th (one and the same for an odd count)."""
        lists = list(map(self.lists.__getitem__, at.tolist()))
        count = np.fromiter(map(len, lists), np.int64, len(lists))
        lo = np.fromiter(map(list.__getitem__, lists, ((count - 1) // 2).tolist()), np.int64, len(lists))
        hi = np.fromiter(map(list.__getitem__, lists, (count // 2).tolist()), np.int64, len(lists))
        return lo, hi


_LOW, _HIGH = np.iinfo(np.int64).min, np.iinfo(np.int64).max


class EndsMatrix:
    """Per instance, a matrix row: its values merged so far in sorted order, padded by _LOW on the left
    and _HIGH on the right, plus an unsorted buffer of up to `cap` newer values. An insert writes the
    buffer (merged into the sorted rows, one row sort each, when it would overflow); the k-th smallest
    of a row and its b buffered values is the b'-th smallest of the row's window [k - b', k + 2) and
    the buffer (b' >= b, padded by _HIGH): at most b buffered values precede it, so every sorted value
    left of the window does, and none right of it can. That is one np.partition over a few dozen
    columns per aligned rank, where sorted lists take an insort per value (1,024 ranks x 200
    collectives: ~0.1 s against ~0.35 s)."""

    def __init__(self, counts: np.ndarray, cap: int) -> None:
        self.cap = cap
        self.pad = cap + 1  # a window starts at most cap left of column pad
        self.sorted = np.full((counts.size, self.width_for(int(counts.max()), cap)), _HIGH, np.int64)
        self.sorted[:, :self.pad] = _LOW
        self.merged = np.zeros(counts.size, np.int64)
        self.buffer = np.full((counts.size, cap), _HIGH, np.int64)
        self.buffered = np.zeros(counts.size, np.int64)

    @staticmethod
    def buffer_for(most: int) -> int:
        return max(1, min(16, most))  # a window of ~2 x 32 columns; a merge per 32 ranks

    @staticmethod
    def width_for(most: int, cap: int) -> int:
        return (cap + 1) + most + 2  # left pad, every value, and a window's two columns past the last

    def insert(self, at: np.ndarray, values: np.ndarray, *, distinct: bool = False) -> None:
        """Adds values[j] to instance at[j]'s values; distinct: `at` repeats no instance."""
        if distinct or at.size < 2:
            self._insert_distinct(at, values)
            return
        # an instance repeated: its first occurrences first, then its second ones... (each round
        # distinct), the rounds sliced from one sort by occurrence
        by_inst = np.argsort(at, kind="stable")
        fresh = np.r_[True, at[by_inst][1:] != at[by_inst][:-1]]
        occurrence = np.empty(at.size, np.int64)
        occurrence[by_inst] = np.arange(at.size) - np.maximum.accumulate(np.where(fresh, np.arange(at.size), 0))
        by_round = np.argsort(occurrence, kind="stable")
        bounds = np.searchsorted(occurrence[by_round], np.arange(int(occurrence.max()) + 2))
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            self._insert_distinct(at[by_round[lo:hi]], values[by_round[lo:hi]])

    def _insert_distinct(self, at: np.ndarray, values: np.ndarray) -> None:
        if at.size == 0:
            return
        if int(self.buffered[at].max()) >= self.cap:
            self.merge()
        slot = self.buffered[at]
        self.buffer[at, slot] = values
        self.buffered[at] = slot + 1

    def merge(self) -> None:
        """Every buffer into its sorted row."""
        rows = np.flatnonzero(self.buffered)
        if rows.size == 0:
            return
        held = self.buffered[rows]
        column = np.arange(self.cap)
        keep = column[None, :] < held[:, None]
        target = self.pad + self.merged[rows][:, None] + column[None, :]
        self.sorted[np.broadcast_to(rows[:, None], keep.shape)[keep], target[keep]] = self.buffer[rows][keep]
        self.merged[rows] += held
        self.buffer[rows] = _HIGH
        self.buffered[rows] = 0
        used = slice(self.pad, self.pad + int(self.merged[rows].max()))
        if rows.size == self.sorted.shape[0]:
            self.sorted[:, used].sort(axis=1, kind="stable")  # in place: a sorted run then a short one, per row
        else:
            self.sorted[rows, used] = np.sort(self.sorted[rows, used], axis=1, kind="stable")

    def middle(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As EndsLists.middle."""
        count = self.merged[at] + self.buffered[at]
        low_k = (count - 1) // 2
        reach = int(self.buffered[at].max()) if at.size else 0
        if reach == 0:
            return self.sorted[at, self.pad + low_k], self.sorted[at, self.pad + count // 2]
        first = at * self.sorted.shape[1] + (self.pad + low_k - reach)  # flat: one take, not 2-D indexing
        both = np.empty((at.size, 2 * reach + 2), np.int64)
        np.take(self.sorted.reshape(-1), first[:, None] + np.arange(reach + 2), out=both[:, :reach + 2])
        both[:, reach + 2:] = self.buffer[at, :reach]
        both.partition((reach, reach + 1), axis=1)
        lo = both[:, reach]
        return lo, np.where(count % 2 == 0, both[:, reach + 1], lo)
