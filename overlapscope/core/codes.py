"""Categorical columns as (codes, distinct names): classify the few names, index back by code.

The event table's string columns are categoricals (names repeat: ~100k events, a few thousand
names). Under pandas 3 their categories are Arrow-backed strings, and `col.astype(str).to_numpy()`
rebuilds a Python object per row through Arrow (tens of ms per column per rank); `np.unique` on the
result sorts 100k Python strings. Working on the categories and indexing by code does the same work
once per distinct name.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .memo import BoundedCache


def codes_names(column: pd.Series | pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) with names[codes] equal to `column.astype(str).to_numpy()`, element for element.
    column: a Series, or a column's values (frames.column_values: a Categorical, an array).

    names is an object array of Python str; its last entry is NaN, which code -1 (a missing value)
    indexes, as astype(str) keeps a missing value missing.
    """
    if isinstance(column.dtype, pd.CategoricalDtype):
        # .array.codes, not .cat.codes (a new Series each call: ~20x the cost); the names are
        # computed once per categories Index, which every slice of the table shares
        codes = column.array.codes if isinstance(column, pd.Series) else column.codes
        return codes.astype(np.intp), _category_names(column.dtype.categories)
    if not isinstance(column, pd.Series):
        column = pd.Series(column, copy=False)
    codes, cats = pd.factorize(column.astype(str).to_numpy(dtype=object))
    return codes.astype(np.intp), _with_nan(np.asarray(cats, dtype=object))


def _with_nan(names: np.ndarray) -> np.ndarray:
    return np.append(names, np.array([np.nan], dtype=object))


_NAMES: BoundedCache[int, tuple[pd.Index, np.ndarray]] = BoundedCache()
"""id(categories Index) -> (that Index, its names): the entry holds the Index, so its id is not reused."""


def _category_names(categories: pd.Index) -> np.ndarray:
    """categories as str, NaN appended (code -1). Cached by id: the entry holds the Index, so its id
    cannot be reused while the entry exists (bounded: memo.BoundedCache)."""
    hit = _NAMES.get(id(categories))
    if hit is not None:
        return hit[1]
    names = _with_nan(categories.astype(str).to_numpy(dtype=object))
    names.flags.writeable = False  # shared by every caller
    _NAMES.put(id(categories), (categories, names))
    return names


def category_strings(categories: pd.Index) -> np.ndarray:
    """categories.astype(str) as an object array of str, read once per categories Index (cached as
    codes_names reads them; read-only). Columns that share a CategoricalDtype share the answer."""
    return _category_names(categories)[:-1]


def as_str(column: pd.Series | pd.Categorical) -> np.ndarray:
    """`column.astype(str).to_numpy()` (object array of str) without the per-row Arrow round trip."""
    codes, names = codes_names(column)
    return names[codes]


def shared_codes(a: pd.Series | pd.Categorical, b: pd.Series | pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of two string columns in one code space: equal codes <=> equal strings.

    Missing values get codes that equal nothing (NaN equals nothing), -1 in `a` and -2 in `b`.
    """
    a_codes, a_names = codes_names(a)
    b_codes, b_names = codes_names(b)
    return a_codes.astype(np.int64), _b_into_a(a_names, b_names)[b_codes]


_MAPPED: BoundedCache[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = BoundedCache()


def _b_into_a(a_names: np.ndarray, b_names: np.ndarray) -> np.ndarray:
    """Per b name (and -2 for b's missing code), its code in shared_codes' space. Kept per pair of
    names arrays: a categorical column's are cached per categories Index (codes_names), which the
    ranks' tables share, so two Index builds and a hash lookup (~0.3 ms) are paid once per pair. The
    entry holds both arrays, so their ids are not reused while it exists."""
    key = (id(a_names), id(b_names))
    hit = _MAPPED.get(key)
    if hit is not None and hit[0] is a_names and hit[1] is b_names:
        return hit[2]
    a_index = pd.Index(a_names[:-1], dtype=object)
    mapped = a_index.get_indexer(pd.Index(b_names[:-1], dtype=object))
    new = mapped < 0
    mapped[new] = len(a_index) + np.arange(int(new.sum()))
    out = np.append(mapped, -2).astype(np.int64)
    out.flags.writeable = False  # shared by every caller
    _MAPPED.put(key, (a_names, b_names, out))
    return out


def isin(column: pd.Series | pd.Categorical, values: tuple[str, ...] | list[str] | set[str]) -> np.ndarray:
    """Boolean per row: is the row's string one of `values` (decided once per distinct name)."""
    codes, names = codes_names(column)
    wanted = set(values)
    return np.fromiter((n in wanted for n in names), dtype=bool, count=names.size)[codes]


def per_name(column: pd.Series | pd.Categorical, fn, dtype=object) -> np.ndarray:
    """fn(name) for each row's string, calling fn once per distinct name (missing rows: fn('nan'),
    as for `astype(str)` followed by a string test)."""
    codes, names = codes_names(column)
    values = [fn(n if isinstance(n, str) else "nan") for n in names]
    if dtype is object:
        out = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):  # one by one: tuples stay objects, not rows
            out[i] = value
    else:
        out = np.array(values, dtype=dtype)
    return out[codes]


def str_codes(column: pd.Series | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, names) with names[codes] equal to `column.to_numpy(object).astype(str)` (NumPy's text
    of each value: a missing one reads "nan" or "None"), element for element; each distinct value
    converted once (a factorize, Arrow-native for a str column), each missing row on its own."""
    codes, uniq = pd.factorize(column)
    names = np.asarray(uniq, dtype=object).astype(str).astype(object)
    missing = codes < 0
    if missing.any():
        codes = codes.copy()
        codes[missing] = names.size + np.arange(int(missing.sum()))
        names = np.concatenate([names, np.asarray(column, dtype=object)[missing].astype(str).astype(object)])
    return codes.astype(np.intp), names


def text_categoricals(columns: list[np.ndarray]) -> list[pd.Categorical]:
    """Object arrays of str as Categoricals that share one dtype: the columns' distinct values together
    (object categories, in order of first appearance, column by column; a missing value stays
    missing). A rank graph's text columns are coded so, and the reduce joins them over ranks as codes
    (frames.united_categoricals), reading each rank's categories once, not once per column."""
    sizes = np.cumsum([len(c) for c in columns])[:-1]
    codes, names = pd.factorize(np.concatenate(columns) if columns else np.empty(0, dtype=object))
    dtype = categorical_dtype(names.tolist(), object_categories=True)
    return [pd.Categorical.from_codes(part, dtype=dtype, validate=False) for part in np.split(codes, sizes)]


_DTYPES: BoundedCache[tuple[bool, tuple[str, ...]], pd.CategoricalDtype] = BoundedCache()


def categorical_dtype(names: list[str], *, object_categories: bool = False) -> pd.CategoricalDtype:
    """The CategoricalDtype of these categories, one object per distinct list in this process.
    Building one validates its categories (~0.2 ms; a tiny rank builds ~10: ~2 ms of its ~25), and
    the ranks of one job name the same kernels, lanes and groups. A dtype is immutable, so sharing
    it is safe; a pool batch then pickles it once (a tiny rank's results: 20 -> 7 KB), and readers
    of categories cached by Index (codes_names) hit across ranks.

    names: distinct str. object_categories: categories of dtype object (else pandas infers them, as
    pd.Categorical.from_codes(categories=<object array>) does: str under pandas 3)."""
    key = (object_categories, tuple(names))
    dtype = _DTYPES.get(key)
    if dtype is None:
        values = np.array(names, dtype=object) if names else np.empty(0, dtype=object)
        dtype = _DTYPES.put(key, pd.CategoricalDtype(pd.Index(values, dtype=object) if object_categories else values))
    return dtype
