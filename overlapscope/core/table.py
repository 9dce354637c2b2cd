"""The event table: the one schema every reader produces and every analyzer consumes.

One row per interval, one table per rank (columns and meanings in DESIGN.md, "The event table").
Two columns beyond DESIGN.md's list make launches format-neutral: `launch_ns` and `launch_lane` say
when and on which CPU thread a device event was launched (for CPU events they repeat `start_ns` and
`lane`), so analyzers can tie GPU work to the annotation that launched it without knowing whether
the link was a Kineto correlation id or an nsys (correlationId, pid) pair. Two more carry an
all-to-all's traffic per peer: `send_split_bytes` / `recv_split_bytes`, bytes to / from each group
member in group order joined by commas ("" unknown; see ingest/splits.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

KINDS = ("compute", "comm", "memcpy", "memset", "sync", "cpu_op", "annotation")
COLLECTIVES = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
    "all_to_all", "send", "recv", "send_recv", "barrier", "",
)

# column -> dtype; str columns are object (names repeat: readers make them categoricals)
COLUMNS: dict[str, str] = {
    "rank": "int32",
    "lane": "category",
    "kind": "category",
    "name": "category",
    "start_ns": "int64",
    "end_ns": "int64",
    "collective": "category",
    "bytes": "int64",
    "group": "category",
    "seq": "int64",
    "step": "int32",
    "correlation": "int64",
    "launch_ns": "int64",
    "launch_lane": "category",
    "send_split_bytes": "category",
    "recv_split_bytes": "category",
}


def make_table(rank: int, **columns: Any) -> pd.DataFrame:
    """Build a rank's event table from column arrays; missing optional columns get their defaults.

    Required: lane, kind, name, start_ns, end_ns. Defaults: collective "", bytes -1, group "",
    seq -1, step -1, correlation -1, launch_ns = start_ns, launch_lane = lane, send_split_bytes and
    recv_split_bytes "".
    """
    n = len(columns["start_ns"])
    start = np.asarray(columns["start_ns"], dtype=np.int64)
    defaults = {
        "collective": "", "bytes": -1, "group": "", "seq": -1, "step": -1, "correlation": -1,
        "send_split_bytes": "", "recv_split_bytes": "",
    }
    data: dict[str, Any] = {"rank": np.full(n, rank, dtype=np.int32)}
    for col, dtype in COLUMNS.items():
        if col == "rank":
            continue
        if col in columns and columns[col] is not None:
            value = columns[col]
        elif col == "launch_ns":
            value = start
        elif col == "launch_lane":
            value = columns["lane"]
        else:
            value = defaults[col]
        if dtype == "category":
            if isinstance(value, pd.Categorical):
                data[col] = value  # built from codes by the reader (`coded_categorical`)
                continue
            arr = np.asarray(value, dtype=object) if not np.isscalar(value) else np.full(n, value, dtype=object)
            data[col] = pd.Categorical(arr)
        else:
            data[col] = np.broadcast_to(np.asarray(value, dtype=dtype), (n,)).copy()
    table = pd.DataFrame(data)
    bad_kind = set(table["kind"].cat.categories) - set(KINDS)
    assert not bad_kind, f"reader produced unknown kinds {bad_kind}"
    return table


def coded_categorical(codes: np.ndarray, uniques: Sequence[str]) -> pd.Categorical:
    """`pd.Categorical(values)` for values = uniques[codes], from the codes a reader already has.

    pd.Categorical hashes every row's string again (tens of ms per 100k-row column); this sorts the
    distinct strings that occur and renumbers the codes to them, which gives the same categorical:
    the categories present, in sorted order. `uniques` must be distinct str; codes index them.
    """
    codes = np.asarray(codes, dtype=np.int64)
    uniques = np.asarray(uniques, dtype=object)
    if codes.size == 0:
        return pd.Categorical(uniques[codes])
    used = np.flatnonzero(np.bincount(codes, minlength=uniques.size))
    present = uniques[used]
    order = np.argsort(present, kind="stable")  # Python str order: the order pandas sorts them in
    renumber = np.empty(uniques.size, dtype=np.int64)
    renumber[used[order]] = np.arange(used.size)
    return pd.Categorical.from_codes(renumber[codes], categories=present[order])


def empty_table(rank: int) -> pd.DataFrame:
    return make_table(rank, lane=[], kind=[], name=[], start_ns=[], end_ns=[])


@dataclass
class RankTrace:
    """One rank's events plus what the reader learned about where they came from."""

    rank: int
    events: pd.DataFrame
    """The event table (COLUMNS)."""
    steps: pd.DataFrame
    """Step ranges on the CPU: columns step (int), start_ns, end_ns; empty when the trace has none."""
    source: str
    """The file the events were read from."""
    device: str
    """"gpu" when the rank has device (stream) activity, else "cpu"."""
    rank_from: str = "distributedInfo"
    """How the rank number was found: distributedInfo, filename, order, device, process."""
    world_size: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    """Reader facts worth reporting: backend, device name, pg_config, pid, ..."""


@dataclass
class Run:
    """All ranks of one run, ordered by rank, and the run manifest when one was written."""

    ranks: list[RankTrace]
    manifest: dict[str, Any]
    path: str

    @property
    def world_size(self) -> int | None:
        sizes = {r.world_size for r in self.ranks if r.world_size}
        return max(sizes) if sizes else (len(self.ranks) or None)

    def rank(self, rank: int) -> RankTrace:
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(rank)
