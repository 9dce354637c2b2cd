"""Collectives on a compute stream: they serialize with the kernels around them and cannot overlap."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core.codes import codes_names, isin, per_name


def comm_on_compute_lanes(events: pd.DataFrame) -> pd.DataFrame:
    """Device lanes (streams) that run both comm and compute kernels.

    Columns lane, comm_count, comm_ns (summed kernel durations). Empty when every collective has a
    stream of its own, as NCCL normally does.
    """
    # Lanes decided per distinct lane (categorical codes), not per event.
    lane, lane_names = codes_names(events["lane"])
    on_stream = per_name(events["lane"], lambda n: n.startswith("stream:"), dtype=bool)
    compute_lane = np.zeros(lane_names.size, dtype=bool)
    compute_lane[lane[on_stream & isin(events["kind"], ("compute",))]] = True
    comm = np.flatnonzero(on_stream & isin(events["kind"], ("comm",)) & compute_lane[lane])
    if comm.size == 0:
        return pd.DataFrame({"lane": [], "comm_count": np.array([], np.int64), "comm_ns": np.array([], np.int64)})
    dur = events["end_ns"].to_numpy(np.int64)[comm] - events["start_ns"].to_numpy(np.int64)[comm]
    out = pd.DataFrame({"lane": lane_names[lane[comm]], "dur": dur})
    return (out.groupby("lane", as_index=False)
            .agg(comm_count=("dur", "size"), comm_ns=("dur", "sum"))
            .sort_values("comm_ns", ascending=False, kind="stable").reset_index(drop=True))


def diagnose(rank: int, lanes: pd.DataFrame) -> list[str]:
    return [f"rank {rank}: {int(r.comm_count)} collective kernel(s), {r.comm_ns / 1e6:.3f} ms, run on "
            f"{r.lane}, which also runs compute: they cannot overlap anything there"
            for r in lanes.itertuples(index=False)]
