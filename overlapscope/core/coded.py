"""Factorized per-event columns: codes into the few distinct values, decided once per value."""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from .table import coded_categorical


class Coded:
    """A factorized per-event column: codes into a small array of distinct values."""

    def __init__(self, codes: np.ndarray, uniques: np.ndarray) -> None:
        self.codes = np.asarray(codes, dtype=np.int64)
        self.uniques = np.asarray(uniques, dtype=object)

    @classmethod
    def of(cls, values: Iterable[Any]) -> "Coded":
        """Codes in order of first appearance, equal values sharing one (as pd.factorize for str).

        One dict lookup per value: half the time of pd.factorize on an object array of str, and
        `values` may be an iterator (the typed decode's `map(attrgetter(field), events)`), so
        no list of the values is built first.
        """
        index: dict[Any, int] = {}
        codes = [index.setdefault(v, len(index)) for v in values]
        uniques = np.empty(len(index), dtype=object)
        uniques[:] = list(index)
        return cls(np.array(codes, dtype=np.int64), uniques)

    def isin(self, wanted) -> np.ndarray:
        return np.isin(self.codes, [i for i, u in enumerate(self.uniques) if u in wanted])

    def values(self, rows: np.ndarray) -> np.ndarray:
        return self.uniques[self.codes[rows]]

    def relabel(self, func: Callable[[Any], str]) -> "Coded":
        """func of every value, evaluated once per distinct value; values with equal labels merge."""
        labels = Coded.of([func(u) for u in self.uniques])
        return Coded(labels.codes[self.codes], labels.uniques)

    def parts(self) -> tuple[np.ndarray, np.ndarray]:
        return self.codes, self.uniques

    def categorical(self, rows: np.ndarray) -> pd.Categorical:
        """The event-table column of the values at `rows` (`pd.Categorical` of those strings)."""
        return coded_categorical(self.codes[rows], self.uniques)

    def map(self, func, dtype, rows: np.ndarray | None = None) -> np.ndarray:
        """func of each row's value, evaluated once per distinct value present in `rows`."""
        return self.map_many(lambda values: [func(u) for u in values], rows, dtype)

    def map_many(self, func, rows: np.ndarray | None, dtype=object) -> np.ndarray:
        """Like map, with func taking the list of distinct values and returning one array for them."""
        codes = self.codes if rows is None else self.codes[rows]
        out = np.zeros(self.uniques.size, dtype=dtype) if dtype is not object else \
            np.full(self.uniques.size, "", dtype=object)
        used = np.unique(codes)
        if used.size:
            out[used] = func(list(self.uniques[used]))
        return out[codes]

    def map_parts(self, func, rows: np.ndarray) -> tuple[np.ndarray, ...]:
        """Like map_many for a func returning several arrays (one entry per distinct value each):
        one per-row array per part, for the rows at `rows`."""
        codes = self.codes[rows]
        used = np.unique(codes)
        parts = func(list(self.uniques[used]))
        out = []
        for part in parts:
            part = np.asarray(part)
            full = np.zeros(self.uniques.size, dtype=part.dtype) if part.dtype != object else \
                np.full(self.uniques.size, "", dtype=object)
            full[used] = part
            out.append(full[codes])
        return tuple(out)
