"""core/memo.BoundedCache: the process-wide caches stay bounded whatever their keys."""
from __future__ import annotations

from overlapscope.core import codes, frames
from overlapscope.core.memo import LIMIT, BoundedCache


def test_a_full_cache_empties_before_it_takes_a_new_key():
    cache: BoundedCache[int, str] = BoundedCache(limit=3)
    assert [cache.put(k, str(k)) for k in range(3)] == ["0", "1", "2"] and len(cache) == 3
    assert cache.put(1, "one") == "one" and len(cache) == 3  # a key it holds: replaced, nothing forgotten
    assert cache.put(9, "9") == "9" and dict(cache) == {9: "9"}
    assert cache.setdefault(9, "x") == "9" and cache.setdefault(4, "4") == "4" and cache == {9: "9", 4: "4"}


def test_the_frames_and_codes_caches_are_bounded():
    for cache in (codes._NAMES, codes._MAPPED, codes._DTYPES, frames._TEMPLATES, frames._BUILT, frames._NAMES,
                  frames._LABELS, frames._EMPTY):
        assert isinstance(cache, BoundedCache) and cache.limit == LIMIT
    for i in range(LIMIT + 10):
        codes.categorical_dtype([f"name {i}"])
    assert len(codes._DTYPES) <= LIMIT and codes.categorical_dtype(["a"]) is codes.categorical_dtype(["a"])
