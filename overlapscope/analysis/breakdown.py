"""Exposed comm broken down by a key (collective, process group, launching scope).

For key k: |M_k \\ C| with M_k the union of k's comm intervals inside the step windows; when comm of
two keys overlaps in time both count it (DESIGN.md). Loops over keys (a few to a few hundred),
never over events.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import intervals as iv
from .overlap import lane_sets, window_set

# Annotations that say "a collective runs here" rather than which model part launched it.
_COMM_WRAPPER_PREFIXES = ("nccl:", "gloo:", "c10d::", "_c10d_functional::", "record_param_comms",
                          "ncclGroup", "ProfilerStep#")


def exposed_by_key(events: pd.DataFrame, windows: pd.DataFrame, keys: np.ndarray, column: str) -> pd.DataFrame:
    """keys: one label per row of `events` (only comm rows are used). Columns column, count, comm_ns,
    exposed_comm_ns; sorted by exposed time, largest first."""
    comm = events["kind"].to_numpy() == "comm"
    compute = lane_sets(events)["compute"]
    inside = iv.merge(*window_set(windows))
    start = events["start_ns"].to_numpy(np.int64)[comm]
    end = events["end_ns"].to_numpy(np.int64)[comm]
    labels = np.asarray(keys, dtype=object)[comm]
    rows = []
    uniq, inverse = np.unique(labels.astype(str), return_inverse=True)
    for code, label in enumerate(uniq):
        sel = inverse == code
        m_k = iv.intersect(iv.merge(start[sel], end[sel]), inside)
        comm_ns = m_k.total
        hidden_ns = int(iv.overlap_lengths(m_k.starts, m_k.ends, compute).sum())
        rows.append((label, int(sel.sum()), comm_ns, comm_ns - hidden_ns))
    out = pd.DataFrame(rows, columns=[column, "count", "comm_ns", "exposed_comm_ns"])
    out = out.astype({"count": np.int64, "comm_ns": np.int64, "exposed_comm_ns": np.int64})
    return out.sort_values(["exposed_comm_ns", column], ascending=[False, True], kind="stable").reset_index(drop=True)


def launch_scopes(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For each selected row (boolean mask `rows`), the innermost annotation (record_function / NVTX range) on its launching thread
    that held its launch, skipping step ranges and comm wrappers; '' when none."""
    kind = events["kind"].to_numpy()
    names = events["name"].astype(str).to_numpy()
    is_ann = kind == "annotation"
    ann_names = names[is_ann]
    wrapper = np.zeros(ann_names.size, dtype=bool)
    for prefix in _COMM_WRAPPER_PREFIXES:
        wrapper |= np.char.startswith(ann_names.astype(str), prefix)
    # NCCL API ranges (ncclAllReduce, ...) carry a collective: they are comm wrappers too.
    wrapper |= events["collective"].astype(str).to_numpy()[is_ann] != ""
    ann = np.flatnonzero(is_ann)[~wrapper]
    lanes = events["lane"].astype(str).to_numpy()
    launch_lanes = events["launch_lane"].astype(str).to_numpy()
    query = np.flatnonzero(rows)
    found = iv.innermost_containing(
        lanes[ann], events["start_ns"].to_numpy(np.int64)[ann], events["end_ns"].to_numpy(np.int64)[ann],
        launch_lanes[query], events["launch_ns"].to_numpy(np.int64)[query])
    scopes = np.full(len(events), "", dtype=object)
    hit = found >= 0
    scopes[query[hit]] = names[ann[found[hit]]]
    return scopes
