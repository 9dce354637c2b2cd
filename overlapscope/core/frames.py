"""Empty result frames: one template per (columns, dtypes), built once and copied.

An analyzer with nothing to report still returns its columns with their dtypes, so that combining
ranks and writing JSON see one schema. Building that frame from a Series per column costs ~0.2 ms
(more with many columns), paid by every rank of every section that is empty on it (most are: a
DDP rank has no pipeline, MoE or ring rows); a copy of a cached template costs a tenth of it.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

_TEMPLATES: dict[tuple, pd.DataFrame] = {}


def empty_frame(columns: Iterable[str], dtypes: Mapping[str, Any] | None = None,
                default: Any = np.int64) -> pd.DataFrame:
    """A frame of no rows with `columns`, column c of dtype dtypes[c] (default `default`); a new
    frame each call (callers may add to it), copied from the cached template."""
    columns = tuple(columns)
    types = tuple((dtypes or {}).get(c, default) for c in columns)
    key = (columns, types)
    template = _TEMPLATES.get(key)
    if template is None:
        template = _TEMPLATES[key] = pd.DataFrame({c: pd.Series(dtype=t) for c, t in zip(columns, types)})
    return template.copy()


_BUILT: dict[str, pd.DataFrame] = {}


def built_once(key: str, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """A copy of build()'s frame, built on the first call for `key` only: for an analyzer's result
    with no rows, built by the analyzer's own constructor from empty arrays (so its dtypes are the
    ones a full result has), which every rank without such rows would otherwise build again."""
    frame = _BUILT.get(key)
    if frame is None:
        frame = _BUILT[key] = build()
    return frame.copy()
