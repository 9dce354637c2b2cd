"""Wait and transfer per process group, collective and op as lengths of time (DESIGN.md "Wait vs transfer").

Per collective instance and rank, wait + transfer is the event's duration. Summed over instances,
that counts twice the time two collectives of one key run at once: gloo runs DDP's bucket all-reduces
on two worker threads, so traces/ddp summed to 162.4 ms wait + 222.1 ms transfer against 242.4 ms
of all-reduce comm. Here, per rank and key, transfer = |union of the transfer parts| and
wait = |union of the wait parts \\ transfer| (while any collective of the key moves data, the key is
transferring), so wait + transfer = |union of the key's matched comm| <= its comm time, on every
backend. The exposed parts are the same sets intersected with the rank's uncovered time (W \\ C).
Every (rank, key) pair at once: each lifted onto its own stretch of one time axis (intervals.Lifted).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.frames import owned_intervals

KEYS = ("group", "collective", "op")
WAIT_TRANSFER_COLUMNS = ("rank", *KEYS, "collectives", "wait_ns", "transfer_ns", "exposed_wait_ns",
                         "exposed_transfer_ns")


def wait_transfer_time(rows: pd.DataFrame, uncovered: Mapping[int, pd.DataFrame] | iv.OwnedIntervals,
                       windows: Mapping[int, pd.DataFrame | None] | iv.OwnedIntervals | None = None) -> pd.DataFrame:
    """WAIT_TRANSFER_COLUMNS, one row per rank and key. rows: one per (instance, rank) with rank, KEYS,
    instance and, in the rank's recorded time, start_ns, split_ns (where its wait ends and its
    transfer begins) and end_ns. uncovered: rank -> start_ns, end_ns of its W \\ C. windows: rank ->
    its step windows (start_ns, end_ns), which clip the times as comm_ns is clipped (whole trace when
    absent). Either may come stacked already (`intervals.OwnedIntervals`)."""
    grouped = rows.groupby(["rank", *KEYS], sort=True, observed=True)
    labels = grouped["instance"].nunique()
    n = len(labels)
    at = grouped.ngroup().to_numpy(np.int64)
    group_rank = labels.index.get_level_values(0).to_numpy(np.int64) if n else np.empty(0, np.int64)
    start, split, end = (rows[c].to_numpy(np.int64) for c in ("start_ns", "split_ns", "end_ns"))
    # each key's rank's uncovered time and step windows, repeated per key (keys per rank are few)
    uncovered = uncovered if isinstance(uncovered, iv.OwnedIntervals) else owned_intervals(uncovered)
    windows = windows if isinstance(windows, iv.OwnedIntervals) else owned_intervals(windows or {})
    gap_s, gap_e, gap_at = uncovered.rows_of(group_rank)
    clipped = windows.held(group_rank)
    win_s, win_e, win_at = windows.rows_of(group_rank[clipped])
    win_at = np.flatnonzero(clipped)[win_at]
    unclipped = np.flatnonzero(~clipped)
    lift = iv.Lifted.of([start, split, end, gap_s, gap_e, win_s, win_e], n)
    if lift is None:  # times too far apart to lift together: one key at a time
        totals = np.zeros((4, n), np.int64)
        for k in range(n):
            r, g, w, c = at == k, gap_at == k, win_at == k, unclipped == k
            one = [start[r], split[r], end[r], gap_s[g], gap_e[g], win_s[w], win_e[w]]
            totals[:, k] = _times(iv.Lifted.of(one, 1), 1, *one[:3], at[r] * 0, *one[3:5], gap_at[g] * 0,
                                  *one[5:], win_at[w] * 0, unclipped[c] * 0)[:, 0]
    else:  # every key at once, each on its own stretch of one axis
        totals = _times(lift, n, start, split, end, at, gap_s, gap_e, gap_at, win_s, win_e, win_at, unclipped)
    frame = pd.DataFrame([(int(key[0]), *key[1:]) for key in labels.index], columns=["rank", *KEYS])
    for c, values in zip(WAIT_TRANSFER_COLUMNS[4:], (labels.to_numpy(np.int64), *totals)):
        frame[c] = values
    return frame.astype({c: np.int64 for c in WAIT_TRANSFER_COLUMNS if c not in KEYS})


def _times(lift: iv.Lifted, n: int, start, split, end, at, gap_s, gap_e, gap_at, win_s, win_e, win_at,
           unclipped) -> np.ndarray:
    """wait, transfer, exposed wait, exposed transfer (rows) of keys 0..n-1 (columns), the times of
    key k lifted as group k; keys in unclipped have no step windows (the whole trace counts)."""
    transfer = iv.merge(lift(split, at), lift(end, at))
    wait = iv.difference(iv.merge(lift(start, at), lift(split, at)), transfer)
    whole = np.full(unclipped.size, lift.lo, np.int64)
    inside = iv.merge(np.r_[lift(win_s, win_at), lift(whole, unclipped)],
                      np.r_[lift(win_e, win_at), lift(whole + lift.stride - 1, unclipped)])
    transfer, wait = iv.intersect(transfer, inside), iv.intersect(wait, inside)
    gaps = iv.Intervals(lift(gap_s, gap_at), lift(gap_e, gap_at))
    return np.array([lift.totals(s, n) for s in (wait, transfer, iv.intersect(wait, gaps),
                                                 iv.intersect(transfer, gaps))], dtype=np.int64).reshape(4, n)
