"""Collectives on a compute stream: they serialize with the kernels around that stream.

They can still overlap compute on other streams, so the diagnosis "cannot overlap" is given only
where they did not (at most NO_OVERLAP_FRACTION of their time overlapped any compute).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.codes import codes_names, isin, per_name
from ..core.frames import built_once, column_values

NO_OVERLAP_FRACTION = 0.05


def comm_on_compute_lanes(events: pd.DataFrame, compute: iv.Intervals | None = None) -> pd.DataFrame:
    """Device lanes (streams) that run both comm and compute kernels.

    Columns lane, comm_count, comm_ns (summed kernel durations), overlapped_ns (their time that
    overlapped the rank's compute, any stream; compute: the merged compute set when known). Empty
    when every collective has a stream of its own, as NCCL normally does.
    """
    # Lanes decided per distinct lane (categorical codes), not per event.
    lane, lane_names = codes_names(column_values(events, "lane"))
    on_stream = per_name(column_values(events, "lane"), lambda n: n.startswith("stream:"), dtype=bool)
    compute_lane = np.zeros(lane_names.size, dtype=bool)
    compute_lane[lane[on_stream & isin(column_values(events, "kind"), ("compute",))]] = True
    comm = np.flatnonzero(on_stream & isin(column_values(events, "kind"), ("comm",)) & compute_lane[lane])
    if comm.size == 0:  # most ranks: the same frame, empty, built once (pandas' constructor: ~0.15 ms)
        return built_once("comm_on_compute_lanes", lambda: pd.DataFrame({
            "lane": [], "comm_count": np.array([], np.int64), "comm_ns": np.array([], np.int64),
            "overlapped_ns": np.array([], np.int64)}))
    start = column_values(events, "start_ns", np.int64)
    end = column_values(events, "end_ns", np.int64)
    if compute is None:
        sel = isin(column_values(events, "kind"), ("compute",))
        compute = iv.merge(start[sel], end[sel])
    # Kernels of one stream never overlap each other: per-kernel overlaps add up without double counting.
    out = pd.DataFrame({"lane": lane_names[lane[comm]], "dur": end[comm] - start[comm],
                        "over": iv.overlap_lengths(start[comm], end[comm], compute)})
    return (out.groupby("lane", as_index=False)
            .agg(comm_count=("dur", "size"), comm_ns=("dur", "sum"), overlapped_ns=("over", "sum"))
            .sort_values("comm_ns", ascending=False, kind="stable").reset_index(drop=True))


def diagnose(rank: int, lanes: pd.DataFrame) -> list[str]:
    if lanes.empty:  # most ranks; and itertuples would build a namedtuple class per call (0.4 ms)
        return []
    columns = [lanes[c].tolist() for c in ("comm_count", "comm_ns", "lane", "overlapped_ns")]
    return [f"rank {rank}: {int(count)} collective kernel(s), {comm_ns / 1e6:.3f} ms, run on "
            f"{lane}, which also runs compute: they cannot overlap anything there"
            for count, comm_ns, lane, overlapped_ns in zip(*columns) if overlapped_ns <= NO_OVERLAP_FRACTION * comm_ns]
