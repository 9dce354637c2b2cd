"""Interval algebra: one edge case per test, then properties against a naive reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from overlapscope.core import intervals as iv


def I(*pairs):
    return iv.Intervals(np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64))


def pairs(s):
    return list(zip(s.starts.tolist(), s.ends.tolist()))


def test_merge_overlapping_and_nested():
    assert pairs(iv.merge(*I((0, 10), (5, 20), (6, 7), (30, 40)))) == [(0, 20), (30, 40)]


def test_merge_touching_becomes_one():
    assert pairs(iv.merge(*I((0, 10), (10, 20)))) == [(0, 20)]


def test_merge_drops_zero_and_negative_length():
    assert pairs(iv.merge(*I((5, 5), (8, 3), (1, 2)))) == [(1, 2)]


def test_merge_unsorted_input():
    assert pairs(iv.merge(*I((30, 40), (0, 10), (5, 35)))) == [(0, 40)]


def test_merge_empty():
    assert len(iv.merge(np.array([], np.int64), np.array([], np.int64))) == 0


def test_difference_and_intersection():
    a, b = I((0, 100)), I((10, 20), (50, 60))
    assert pairs(iv.difference(a, b)) == [(0, 10), (20, 50), (60, 100)]
    assert pairs(iv.intersect(a, b)) == [(10, 20), (50, 60)]


def test_difference_identical_sets_is_empty():
    assert len(iv.difference(I((0, 5)), I((0, 5)))) == 0


def test_clip():
    assert pairs(iv.clip(I((0, 10), (20, 30)), 5, 25)) == [(5, 10), (20, 25)]


def test_overlap_lengths_partial_and_outside():
    c = I((10, 20), (30, 40))
    got = iv.overlap_lengths(np.array([0, 15, 25, 35, 50]), np.array([5, 35, 28, 100, 60]), c)
    assert got.tolist() == [0, 10, 0, 5, 0]


def test_large_epoch_values_stay_exact():
    base = 1_700_000_000_123_456_789
    s = iv.merge(np.array([base, base + 3]), np.array([base + 2, base + 7]))
    assert pairs(s) == [(base, base + 2), (base + 3, base + 7)] and s.total == 6


def test_segments_per_window_sum_exactly():
    wins = I((0, 10), (10, 25))
    c = I((5, 12), (20, 30))
    seg = iv.segments(wins, c)
    inside = iv.covered_at(c, seg.starts)
    assert iv.sum_by_window(seg, inside, 2).tolist() == [5, 2 + 5]
    assert iv.sum_by_window(seg, ~inside, 2).tolist() == [5, 8]


def test_innermost_containing_nested_and_lanes():
    lanes = np.array(["a", "a", "a", "b"])
    starts = np.array([0, 10, 12, 0])
    ends = np.array([100, 50, 20, 100])
    q_lane = np.array(["a", "a", "a", "a", "b", "c", "a"])
    q_t = np.array([5, 11, 15, 30, 15, 15, 100])
    assert iv.innermost_containing(lanes, starts, ends, q_lane, q_t).tolist() == [0, 1, 2, 1, 3, -1, -1]


def test_innermost_containing_equal_bounds_and_zero_length():
    # [0,10) contains [0,10) (same bounds, outer first by order) and a zero-length range at 5.
    lanes = np.array(["t", "t", "t"])
    got = iv.innermost_containing(lanes, np.array([0, 0, 5]), np.array([10, 10, 5]), np.array(["t", "t"]),
                                  np.array([5, 9]))
    assert set(got.tolist()) <= {0, 1} and got[0] == got[1]


# --- properties against a naive per-nanosecond reference ------------------------------------------
span = st.integers(0, 60)
interval_lists = st.lists(st.tuples(span, span).map(lambda t: (min(t), max(t))), max_size=12)


def naive(points):
    covered = set()
    for s, e in points:
        covered.update(range(s, e))
    return covered


def as_set(lst):
    return iv.merge(np.array([p[0] for p in lst], np.int64), np.array([p[1] for p in lst], np.int64))


@settings(max_examples=300, deadline=None)
@given(interval_lists, interval_lists, interval_lists)
def test_properties_match_naive(a, b, c):
    A, B, C = as_set(a), as_set(b), as_set(c)
    na, nb = naive(a), naive(b)
    assert A.total == len(na)
    assert iv.intersect(A, B).total == len(na & nb)
    assert iv.difference(A, B).total == len(na - nb)
    assert iv.union(A, B).total == len(na | nb)
    # DESIGN identity on one window [0, 60): compute + exposed comm + exposed copy + idle = |W|
    wins = iv.Intervals(np.array([0], np.int64), np.array([60], np.int64))
    seg = iv.segments(wins, A, B, C)
    in_c, in_m, in_x = (iv.covered_at(s, seg.starts) for s in (A, B, C))
    parts = [iv.sum_by_window(seg, m, 1)[0] for m in (in_c, in_m & ~in_c, in_x & ~in_c & ~in_m, ~in_c & ~in_m & ~in_x)]
    assert sum(parts) == 60
    assert parts[1] == len(nb - na)
    assert parts[2] == len(naive(c) - na - nb)


def test_cut_at_splits_only_at_points_strictly_inside():
    s = iv.merge(np.array([0, 20]), np.array([10, 30]))
    out = iv.cut_at(s, np.array([5, 10, 20, 25, 25, 40, -3]))  # 10, 20 are edges; 40, -3 outside
    assert out.starts.tolist() == [0, 5, 20, 25] and out.ends.tolist() == [5, 10, 25, 30]
    assert iv.cut_at(s, np.array([10, 50])) is s


@pytest.mark.parametrize("build", ["OwnedIntervals.of", "frames.owned_intervals"])
def test_owned_intervals_rows_of_each_owner_in_the_order_asked(build):
    """OwnedIntervals.of, and frames.owned_intervals (the frames' columns read from one stack of them)."""
    import pandas as pd
    from overlapscope.core.frames import owned_intervals

    of = iv.OwnedIntervals.of if build == "OwnedIntervals.of" else owned_intervals
    frame = lambda s, e: pd.DataFrame({"start_ns": np.array(s, np.int64), "end_ns": np.array(e, np.int64)})
    # columns in either order, a frame of more columns, an empty table and no table at all
    tables = {7: frame([1, 5], [2, 9]), 3: frame([], []), 4: None,
              2: pd.DataFrame({"end_ns": [30], "start_ns": [20]}),
              9: pd.DataFrame({"x": [0.5], "start_ns": [100], "end_ns": [200]})}
    owned = of(tables)
    starts, ends, at = owned.rows_of(np.array([7, 2, 7, 3, 9, 4]))
    # the oracle: each owner's table read column by column, in the order asked
    want = [(s, e, k) for k, o in enumerate([7, 2, 7, 3, 9, 4]) if tables[o] is not None
            for s, e in zip(tables[o]["start_ns"], tables[o]["end_ns"])]
    assert list(zip(starts.tolist(), ends.tolist(), at.tolist())) == want
    assert starts.dtype == ends.dtype == at.dtype == np.int64
    assert owned.held(np.array([7, 3, 4, 5, 2, 100, -1])).tolist() == [True, True, False, False, True, False, False]
    with pytest.raises(KeyError):
        owned.rows_of(np.array([7, 5]))
    empty = of({})
    assert [a.size for a in empty.rows_of(np.empty(0, np.int64))] == [0, 0, 0]
    assert empty.held(np.array([1])).tolist() == [False]


def test_owned_intervals_from_one_stack_are_those_read_frame_by_frame():
    """Many frames of one schema (joined block by block), and a float frame among them: epoch ns past
    2^53 that a float64 join would round are read frame by frame instead, exactly."""
    import pandas as pd
    from overlapscope.core.frames import owned_intervals

    rng = np.random.default_rng(3)
    big = 1_700_000_000_000_000_001
    tables = {r: pd.DataFrame({"start_ns": big + rng.integers(0, 1000, r % 4), "end_ns": big + 2000 + np.arange(r % 4)})
              for r in range(300)}
    tables[301] = None
    for case in (tables, {**tables, 5: pd.DataFrame({"start_ns": [1.0], "end_ns": [2.0]})}):
        want, got = iv.OwnedIntervals.of(case), owned_intervals(case)
        for field in want._fields:
            assert np.array_equal(getattr(got, field), getattr(want, field)), field
            assert getattr(got, field).dtype == getattr(want, field).dtype, field


def test_concat_ranges_is_each_arange_in_turn():
    starts, stops = np.array([3, 0, 7, 7, 10]), np.array([6, 2, 7, 9, 11])  # one empty range
    want = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)])
    got = iv.concat_ranges(starts, stops)
    assert got.tolist() == want.tolist() == [3, 4, 5, 0, 1, 7, 8, 10] and got.dtype == np.int64
    assert iv.concat_ranges(np.empty(0, np.int64), np.empty(0, np.int64)).size == 0


def _segment_sweep(a, b, op):
    """intersect / difference as they were computed before (every boundary sorted, each elementary
    segment tested against both sets, the kept ones merged): the oracle for the binary-search form."""
    points = iv.distinct(np.concatenate([a.starts, a.ends, b.starts, b.ends]))
    if points.size < 2:
        return iv.empty()
    seg_starts = points[:-1]
    mask = op(iv.covered_at(a, seg_starts), iv.covered_at(b, seg_starts))
    return iv.merge(seg_starts[mask], points[1:][mask])


def _touching_pieces(s):
    """A merged set cut at each interval's midpoint: sorted, disjoint, touching (not merged)."""
    mid = s.starts + (s.ends - s.starts) // 2
    return iv.cut_at(s, mid[mid > s.starts])


@settings(max_examples=400, deadline=None)
@given(interval_lists, interval_lists, st.booleans())
def test_intersect_and_difference_equal_the_segment_sweep(a, b, touching):
    """The same arrays as the segment sweep (so the same merged sets): on merged inputs, and on sorted
    disjoint inputs whose pieces touch (the result still merged: touching pieces joined)."""
    A, B = as_set(a), as_set(b)
    if touching:
        A, B = _touching_pieces(A), _touching_pieces(B)
    for got, want in ((iv.intersect(A, B), _segment_sweep(A, B, np.logical_and)),
                      (iv.difference(A, B), _segment_sweep(A, B, lambda x, y: x & ~y))):
        assert got.starts.tolist() == want.starts.tolist() and got.ends.tolist() == want.ends.tolist()
        assert got.starts.dtype == np.int64 and got.ends.dtype == np.int64
