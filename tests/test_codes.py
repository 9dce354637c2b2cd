"""Categorical columns through codes: the same strings as astype(str), decided once per name."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from overlapscope.core.codes import as_str, codes_names, isin, per_name, shared_codes
from overlapscope.core.table import coded_categorical


def cat(*values):
    return pd.Series(pd.Categorical(np.array(values, dtype=object)))


def test_as_str_equals_astype_str_with_missing_values():
    col = cat("b", None, "a", "b")
    expected = col.astype(str).to_numpy()
    got = as_str(col)
    assert got.dtype == object
    assert got[0] == "b" and got[2] == "a" and got[3] == "b"
    assert isinstance(got[1], float) and np.isnan(got[1]) and np.isnan(expected[1])
    assert [type(v) for v in got[[0, 2]]] == [str, str]


def test_plain_object_column_is_factorized():
    codes, names = codes_names(pd.Series(["x", "y", "x"], dtype=object))
    assert list(names[codes]) == ["x", "y", "x"]
    assert codes[0] == codes[2] != codes[1]


def test_shared_codes_equal_exactly_when_strings_equal():
    a = cat("thread:1", "thread:2", None, "thread:3")
    b = cat("thread:3", "thread:9", "thread:1", None)
    ca, cb = shared_codes(a, b)
    assert ca[3] == cb[0] and ca[0] == cb[2]           # thread:3, thread:1
    assert cb[1] not in ca                              # thread:9 only in b
    assert ca[2] == -1 and cb[3] == -2                  # missing matches nothing


def test_isin_and_per_name_decide_once_per_distinct_name():
    col = cat("nccl:all_reduce", "aten::mm", "nccl:all_reduce", "aten::mm", "c10d::x")
    assert list(isin(col, ("aten::mm",))) == [False, True, False, True, False]
    calls = []

    def starts_with_nccl(name):
        calls.append(name)
        return name.startswith("nccl:")

    assert list(per_name(col, starts_with_nccl, dtype=bool)) == [True, False, True, False, False]
    assert sorted(calls) == ["aten::mm", "c10d::x", "nan", "nccl:all_reduce"]  # 3 names + the missing slot


def test_per_name_keeps_tuples_as_objects():
    out = per_name(cat("Forward 1", "x"), lambda n: (1, "F") if n.startswith("Forward") else None)
    assert out[0] == (1, "F") and out[1] is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=6), min_size=1, max_size=8, unique=True).flatmap(
    lambda u: st.tuples(st.just(u), st.lists(st.integers(0, len(u) - 1), max_size=40))))
def test_coded_categorical_is_the_categorical_of_the_strings(case):
    """The reader's categoricals from codes equal pd.Categorical of the strings: categories,
    their order and dtype, codes."""
    uniques, codes = case
    values = np.array(uniques, dtype=object)[np.array(codes, dtype=np.int64)]
    got, expected = coded_categorical(np.array(codes, dtype=np.int64), uniques), pd.Categorical(values)
    assert got.dtype == expected.dtype and got.categories.dtype == expected.categories.dtype
    pd.testing.assert_series_equal(pd.Series(got), pd.Series(expected), check_exact=True)


def test_category_names_are_computed_once_per_categories_and_shared_read_only():
    column = pd.Series(pd.Categorical(["b", None, "a", "b"]))
    codes, names = codes_names(column)
    assert list(names[codes][[0, 2, 3]]) == ["b", "a", "b"] and pd.isna(names[codes][1])
    sliced = column.iloc[[3, 0]]  # a slice of the table shares its categories: the same names object
    assert codes_names(sliced)[1] is names and codes_names(column)[1] is names
    assert list(codes_names(sliced)[0]) == [codes[3], codes[0]]
    with pytest.raises(ValueError):
        names[0] = "c"  # shared by every caller: never written
    other = pd.Series(pd.Categorical(["c"]))
    assert list(codes_names(other)[1][:-1]) == ["c"]  # other categories, other names


@pytest.mark.parametrize("dtype", [object, "str"])
def test_str_codes_give_numpys_text_of_every_value(dtype):
    from overlapscope.core.codes import str_codes

    values = ["b", None, "a", "b", float("nan"), "a", None, ""]
    column = pd.Series(values, dtype=dtype)
    codes, names = str_codes(column)
    assert names[codes].tolist() == column.to_numpy(object).astype(str).tolist()
    assert names.dtype == object and all(type(n) is str for n in names)
    assert len(set(codes[[0, 3]])) == 1 and len(set(codes[[2, 5]])) == 1  # a value converted once
