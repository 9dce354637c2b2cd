"""critical_path's tie rules, by hand: which constraint set a start when several bind at once, and
which member of a collective arrived last when several arrived together."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from overlapscope.analysis.critical_path import _binding, _last_arrivals
from overlapscope.analysis.longest_path import Graph


def _i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def test_the_binding_constraint_is_the_most_binding_type_then_the_lowest_source():
    """Node 4 starts at 10, where the edges from 0 (launch), 1 and 2 (lane, event) and 3 (gate) all
    end: the gate edge binds (gate, event, lane, launch). Node 5's two tight lane edges (from 2 and 1)
    give the lower source, 1; node 6's edge from 0 is not tight (ends 5 + lag 1 < 10): its base."""
    n = 7
    graph = Graph(chain=np.arange(n), head=np.ones(n, bool), base=np.zeros(n, np.int64), g=np.zeros(n, np.int64),
                  u=np.zeros(n, np.int64), dur=np.zeros(n, np.int64), inst=np.full(n, -1), transfer=np.zeros(n, np.int64),
                  src=_i64(0, 1, 2, 3, 2, 1, 0), dst=_i64(4, 4, 4, 4, 5, 5, 6), lag=_i64(5, 0, 0, 0, 0, 0, 1))
    nodes = pd.DataFrame({"x": _i64(0, 0, 0, 0, 10, 10, 10), "y": _i64(5, 10, 10, 10, 12, 12, 12)})
    edges = pd.DataFrame({"type": np.array(["launch", "lane", "event", "gate", "lane", "lane", "launch"], dtype=object)})
    bound = _binding(SimpleNamespace(graph=graph, nodes=nodes, edges=edges))
    assert bound.tolist() == [-1, -1, -1, -1, 3, 1, -1]


def test_the_last_arrival_is_the_latest_start_then_the_lowest_rank():
    """Collective 0: ranks 2 and 1 both arrive at 9 (the latest): rank 1's node. Collective 1: rank 0
    arrives last at 7. Node 5 is in no collective."""
    nodes = pd.DataFrame({"x": _i64(9, 9, 3, 7, 2, 50), "rank": _i64(2, 1, 0, 0, 1, 0)})
    inst = _i64(0, 0, 0, 1, 1, -1)
    assert _last_arrivals(nodes, inst).tolist() == [1, 3]


def _first_match_by_lexsort(query, table, values):
    """The oracle: one lexsort over all keys, the first table row of each key group kept."""
    n_table = table[0].size
    keys = [np.r_[t, q] for t, q in zip(table, query)]
    from_query = np.r_[np.zeros(n_table, bool), np.ones(query[0].size, bool)]
    out = np.full(query[0].size, -1, dtype=np.int64)
    first: dict[tuple, int] = {}
    for i in np.lexsort([from_query] + keys[::-1]).tolist():
        key = tuple(int(k[i]) for k in keys)
        if i < n_table:
            first.setdefault(key, int(values[i]))
        elif key in first:
            out[i - n_table] = first[key]
    return out


def test_first_match_with_rank_and_start_packed_or_not():
    """first_match joins rank and start into one int64 key where their ranges allow (one lexsort pass
    fewer): duplicate table rows give the first one's value, missing rows -1, with starts near 2^61
    (too far apart to pack) as with small ones."""
    from overlapscope.analysis.critical_path import first_match
    rng = np.random.default_rng(0)
    for trial in range(300):
        scale = [1, 10 ** 6, 2 ** 61][trial % 3]
        rows = lambda n: [rng.integers(0, 4, n), rng.integers(0, 5, n) * max(scale // 4, 1) - scale // 8,
                          rng.integers(0, 3, n)]
        table, query = rows(int(rng.integers(0, 30))), rows(int(rng.integers(0, 30)))
        values = rng.integers(0, 100, table[0].size)
        assert first_match(query, table, values).tolist() == _first_match_by_lexsort(query, table, values).tolist()


def test_first_match_searches_one_packed_key_or_sorts_both():
    """Keys whose spans multiply below 2^63 are packed into one int64 (_one_key) and searched; others
    (starts near 2^61) go to the lexsort of both. Both give the oracle's answer, duplicates and
    missing rows included."""
    from overlapscope.analysis import critical_path
    rng = np.random.default_rng(3)
    for trial in range(200):
        scale = [1, 10 ** 6, 2 ** 61][trial % 3]
        rows = lambda n: [rng.integers(0, 4, n), rng.integers(-2, 5, n) * max(scale // 4, 1),
                          rng.integers(0, 3, n)]
        table, query = rows(int(rng.integers(1, 30))), rows(int(rng.integers(1, 30)))
        values = rng.integers(0, 100, table[0].size)
        want = _first_match_by_lexsort(query, table, values).tolist()
        assert (critical_path._one_key(query, table) is None) == (scale == 2 ** 61)
        assert critical_path.first_match(query, table, values).tolist() == want
        assert critical_path._first_match_sorted(query, table, values).tolist() == want


def test_first_match_on_unsigned_keys_past_two_to_the_63():
    """uint64 keys past 2^63 are packed as their int64 (one-to-one), never as a garbled key."""
    from overlapscope.analysis.critical_path import first_match
    big = np.uint64(2 ** 63 + 5)
    table = [np.array([0, 0, 1], np.uint64), np.array([big, 7, big], np.uint64), np.array([big, 9, big], np.uint64)]
    query = [np.array([0, 1, 0, 1], np.uint64), np.array([big, big, 7, 7], np.uint64),
             np.array([big, big, 9, 9], np.uint64)]
    values = np.array([10, 20, 30])
    assert first_match(query, table, values).tolist() == _first_match_by_lexsort(query, table, values).tolist() \
        == [10, 30, 20, -1]
