"""Process-wide caches of derived values, bounded: each forgets all it holds once full.

The per-rank map and the reduce keep small caches keyed by what ranks share (a categories Index, a
list of labels, a schema): a job's ranks hit a few dozen keys. A caller with ever-new keys (any
library user) must not grow one without end, so a cache that reaches its limit is emptied and fills
again: a miss costs one recomputation, never a wrong value.
"""
from __future__ import annotations

from typing import Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

LIMIT = 4096
"""Entries a cache holds at most (each is small: a names array, a dtype, an empty frame)."""


class BoundedCache(dict[K, V]):
    """A dict whose `put` and `setdefault` empty it first when it holds `limit` entries."""

    def __init__(self, limit: int = LIMIT) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: K, value: V) -> V:
        """self[key] = value (the cache emptied first if full); the value."""
        if len(self) >= self.limit and key not in self:
            self.clear()
        self[key] = value
        return value

    def setdefault(self, key: K, default: V) -> V:  # type: ignore[override]
        if key in self:
            return self[key]
        return self.put(key, default)
