"""Clock offsets from matched collective ends: median, chained through shared groups, unaligned reported."""
from __future__ import annotations

import pandas as pd

from crossrank_tables import MS, US
from overlapscope.analysis.clock import estimate_offsets


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
