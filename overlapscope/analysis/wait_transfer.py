"""Wait and transfer per process group, collective and op as lengths of time (DESIGN.md "Wait vs transfer").

Per collective instance and rank, wait + transfer is the event's duration. Summed over instances,
that counts twice the time two collectives of one key run at once: gloo runs DDP's bucket all-reduces
on two worker threads, so traces/ddp summed to 162.4 ms wait + 222.1 ms transfer against 242.4 ms
of all-reduce comm. Here, per rank and key, transfer = |union of the transfer parts| and
wait = |union of the wait parts \\ transfer| (while any collective of the key moves data, the key is
transferring), so wait + transfer = |union of the key's matched comm| <= its comm time, on every
backend. The exposed parts are the same sets intersected with the rank's uncovered time (W \\ C).
Loops over (rank, key) pairs, never over events.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ..core import intervals as iv

KEYS = ("group", "collective", "op")
WAIT_TRANSFER_COLUMNS = ("rank", *KEYS, "collectives", "wait_ns", "transfer_ns", "exposed_wait_ns",
                         "exposed_transfer_ns")


def wait_transfer_time(rows: pd.DataFrame, uncovered: Mapping[int, pd.DataFrame],
                       windows: Mapping[int, pd.DataFrame | None] | None = None) -> pd.DataFrame:
    """WAIT_TRANSFER_COLUMNS, one row per rank and key. rows: one per (instance, rank) with rank, KEYS,
    instance and, in the rank's recorded time, start_ns, split_ns (where its wait ends and its
    transfer begins) and end_ns. uncovered: rank -> start_ns, end_ns of its W \\ C. windows: rank ->
    its step windows (start_ns, end_ns), which clip the times as comm_ns is clipped (whole trace when
    absent)."""
    out = []
    for (rank, *key), sub in rows.groupby(["rank", *KEYS], sort=True, observed=True):
        start, split, end = (sub[c].to_numpy(np.int64) for c in ("start_ns", "split_ns", "end_ns"))
        transfer = iv.merge(split, end)
        wait = iv.difference(iv.merge(start, split), transfer)
        w = (windows or {}).get(int(rank))
        if w is not None:
            inside = iv.merge(w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64))
            transfer, wait = iv.intersect(transfer, inside), iv.intersect(wait, inside)
        u = uncovered[int(rank)]
        gaps = iv.Intervals(u["start_ns"].to_numpy(np.int64), u["end_ns"].to_numpy(np.int64))
        out.append((int(rank), *key, int(sub["instance"].nunique()), wait.total, transfer.total,
                    iv.intersect(wait, gaps).total, iv.intersect(transfer, gaps).total))
    frame = pd.DataFrame(out, columns=list(WAIT_TRANSFER_COLUMNS))
    return frame.astype({c: np.int64 for c in WAIT_TRANSFER_COLUMNS if c not in KEYS})
