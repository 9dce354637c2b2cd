"""Clock offsets from matched collective ends: median, chained through shared groups, unaligned reported."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from crossrank_tables import MS, US
from clock_reference import reference_offsets
from overlapscope.analysis import clock
from overlapscope.analysis.clock import EndsLists, EndsMatrix, ends_store, estimate_offsets, most_feasible


def ends(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["instance", "rank", "end_ns"])


def test_offset_is_the_median_so_one_wrong_pair_cannot_move_it():
    # rank 1 reads 2 ms behind; instance 3 is a wrong pair 50 ms off.
    rows = [(i, 0, 10 * MS * i) for i in range(5)] + [(i, 1, 10 * MS * i - 2 * MS) for i in range(5)]
    rows[8] = (3, 1, 30 * MS - 50 * MS)
    clock = estimate_offsets(ends(rows))
    assert clock.offsets_ns == {0: 0, 1: 2 * MS}
    assert clock.pairs == {0: 0, 1: 5} and clock.unaligned == []


def test_ranks_on_one_clock_come_out_zero_despite_tail_noise():
    # the tail of a collective differs by a few µs per rank, symmetric around the common end
    noise = [3, -2, 1, 0, -4, 2, -1]
    rows = [(i, 0, i * MS) for i in range(7)] + [(i, 1, i * MS + n * US) for i, n in enumerate(noise)]
    assert estimate_offsets(ends(rows)).offsets_ns == {0: 0, 1: 0}


def test_rank_sharing_nothing_with_the_reference_is_chained_through_another():
    # groups {0, 1} and {1, 2}: rank 2 is aligned through rank 1
    rows = [(0, 0, 100 * MS), (0, 1, 100 * MS + 3 * MS), (1, 1, 200 * MS + 3 * MS), (1, 2, 200 * MS - 7 * MS),
            (2, 1, 300 * MS + 3 * MS), (2, 2, 300 * MS - 7 * MS)]
    clock = estimate_offsets(ends(rows))
    assert clock.offsets_ns == {0: 0, 1: -3 * MS, 2: 7 * MS}
    assert clock.pairs == {0: 0, 1: 1, 2: 2}


def test_rank_without_matched_collectives_is_unaligned():
    clock = estimate_offsets(ends([(0, 0, 5), (0, 1, 9)]), ranks=[0, 1, 3])
    assert clock.offsets_ns == {0: 0, 1: -4, 3: 0}
    assert clock.unaligned == [3]


def test_reference_is_the_lowest_rank_present():
    clock = estimate_offsets(ends([(0, 4, 1000), (0, 6, 1500)]))
    assert clock.offsets_ns == {4: 0, 6: -500}


def test_no_ranks_no_offsets():
    assert estimate_offsets(ends([])).offsets_ns == {}


def test_short_collectives_pin_the_offset_when_tails_are_long():
    """Same clock; rank 1's long collectives end 3 ms after rank 0's (a loaded CPU's tail). The median
    says -3 ms, but then the two 100 µs collectives could not have had both ranks inside at once:
    the offset is clamped to the nearest value that keeps every collective possible, -100 µs."""
    rows = []
    for i in range(5):
        t = 100 * MS * (i + 1)
        rows += [(i, 0, t, t + 10 * MS), (i, 1, t, t + 13 * MS)]
    for i, t in ((5, 700 * MS), (6, 800 * MS)):
        rows += [(i, 0, t + 100 * US, t + 200 * US), (i, 1, t + 100 * US, t + 200 * US)]
    frame = pd.DataFrame(rows, columns=["instance", "rank", "start_ns", "end_ns"])
    assert estimate_offsets(frame).offsets_ns == {0: 0, 1: -100 * US}


def test_most_feasible_ignores_a_minority_of_impossible_pairs():
    lo = np.array([-5, -3, -4, 20], dtype=np.int64)
    hi = np.array([5, 2, 1, 30], dtype=np.int64)
    assert most_feasible(lo, hi, 10.0) == 1.0     # [-3, 1] holds three; the wrong pair [20, 30] loses
    assert most_feasible(lo, hi, 0.0) == 0.0
    assert most_feasible(np.array([0]), np.array([0]), 7.0) == 0.0
    assert most_feasible(np.array([], np.int64), np.array([], np.int64), 7.0) == 7.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 8), st.integers(0, 6), st.integers(-10**15, 10**15),
                          st.integers(0, 10**7)), min_size=1, max_size=60),
       st.booleans(), st.lists(st.integers(0, 9), max_size=3))
def test_incremental_solve_equals_the_recomputing_one(rows, with_starts, extra_ranks):
    """The incremental solve gives the old one's offsets, pairs and unaligned ranks, to the ns: chained
    groups, ties in support, ranks with no rows, several rows of a rank in one instance."""
    frame = pd.DataFrame([(i, r, e, e - d) for i, r, e, d in rows], columns=["instance", "rank", "end_ns", "start_ns"])
    if not with_starts:
        frame = frame.drop(columns="start_ns")
    assert estimate_offsets(frame, extra_ranks) == reference_offsets(frame, extra_ranks)


def test_incremental_solve_on_many_ranks_equals_the_recomputing_one():
    rng = np.random.default_rng(7)
    ranks, collectives = 48, 30
    skew = rng.integers(-5 * MS, 5 * MS, ranks)
    rows = [(i, r, 10**18 + i * MS + skew[r] + int(rng.integers(0, 50 * US)), int(rng.integers(1 * US, 300 * US)))
            for i in range(collectives) for r in range(ranks) if (i + r) % 5]
    frame = pd.DataFrame([(i, r, e, e - d) for i, r, e, d in rows], columns=["instance", "rank", "end_ns", "start_ns"])
    assert estimate_offsets(frame) == reference_offsets(frame)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(0, 40)), min_size=1, max_size=12),
       st.integers(-60, 60))
def test_most_feasible_is_the_nearest_deepest_point(intervals, target):
    """Against the definition, by brute force over every boundary and the target: the deepest points
    (inside the most closed intervals), the nearest to target of them (the lower of two as near).
    Covers the shortcut for a target inside every interval and the general sweep."""
    lo = np.array([a for a, _ in intervals], dtype=np.int64)
    hi = lo + np.array([w for _, w in intervals], dtype=np.int64)
    points = np.unique(np.r_[lo, hi, target]).astype(np.float64)
    depth = ((lo[None, :] <= points[:, None]) & (points[:, None] <= hi[None, :])).sum(axis=1)
    deepest = points[depth == depth.max()]
    want = min(deepest.tolist(), key=lambda p: (abs(p - target), p))
    assert most_feasible(lo.astype(np.float64), hi.astype(np.float64), float(target)) == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(-10**17, 10**17)), max_size=9), max_size=30),
       st.integers(1, 4))
def test_matrix_of_ends_keeps_the_middle_values_sorted_lists_do(batches, cap):
    """EndsMatrix against EndsLists: after each batch of inserts (an instance may repeat in a batch,
    as a rank with two rows in one collective does), the two middle values of every instance that
    holds one. Small buffers merge often; values far apart and equal ones both occur."""
    counts = np.full(6, sum(len(b) for b in batches) + 1, np.int64)
    matrix, lists = EndsMatrix(counts, cap), EndsLists(6)
    for batch in batches:
        at = np.array([i for i, _ in batch], np.int64)
        values = np.array([v for _, v in batch], np.int64)
        matrix.insert(at, values, distinct=len(set(at.tolist())) == at.size)
        lists.insert(at, values)
        held = np.array([i for i in range(6) if lists.lists[i]], np.int64)
        for mine, theirs in zip(matrix.middle(held), lists.middle(held)):
            assert mine.tolist() == theirs.tolist()


def test_sizes_the_matrix_would_not_hold_go_to_sorted_lists():
    even = np.full(200, 1024, np.int64)
    ends = np.zeros(2, np.int64)
    assert isinstance(ends_store(even, ends, ends), EndsMatrix)
    lopsided = np.r_[100_000, np.full(10_000, 2)].astype(np.int64)  # one huge instance, many pairs
    assert isinstance(ends_store(lopsided, ends, ends), EndsLists)
    far = np.array([0, 1 << 61], np.int64)  # aligned values could reach the sentinels
    assert isinstance(ends_store(even, far, ends), EndsLists)
    assert isinstance(ends_store(even, ends, ends, repeats=True), EndsLists)  # a rank twice in a collective


def test_matrix_takes_many_repeats_of_one_instance_in_rounds():
    """One insert of 5,000 values into one instance (rounds sliced from one sort, not one pass over
    the rest per repeat): the middle values are the sorted values' middle."""
    values = np.random.default_rng(5).integers(-10**9, 10**9, 5001)
    matrix = EndsMatrix(np.array([5001, 1]), 16)
    matrix.insert(np.zeros(5001, np.int64), values)
    lo, hi = matrix.middle(np.array([0]))
    assert lo.tolist() == hi.tolist() == [int(np.sort(values)[2500])]


def test_solve_with_sorted_lists_equals_the_recomputing_one(monkeypatch):
    monkeypatch.setattr(clock, "MATRIX_CELLS_PER_ROW", -10**12)  # every size to EndsLists
    rng = np.random.default_rng(11)
    rows = [(i, r, 10**18 + i * MS + int(rng.integers(0, 5 * MS)), int(rng.integers(1 * US, 300 * US)))
            for i in range(20) for r in range(12) if (i * r) % 7 != 3]
    rows += [(4, 5, 10**18 + 4 * MS + 7 * US, 2 * US)]  # a second row of rank 5 in instance 4
    frame = pd.DataFrame([(i, r, e, e - d) for i, r, e, d in rows], columns=["instance", "rank", "end_ns", "start_ns"])
    assert estimate_offsets(frame) == reference_offsets(frame)
