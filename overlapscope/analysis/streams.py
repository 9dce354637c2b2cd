"""Collectives on a compute stream: they serialize with the kernels around them and cannot overlap."""
from __future__ import annotations

import numpy as np
import pandas as pd


def comm_on_compute_lanes(events: pd.DataFrame) -> pd.DataFrame:
    """Device lanes (streams) that run both comm and compute kernels.

    Columns lane, comm_count, comm_ns (summed kernel durations). Empty when every collective has a
    stream of its own, as NCCL normally does.
    """
    ev = events[events["lane"].astype(str).str.startswith("stream:").to_numpy()]
    kind = ev["kind"].astype(str)
    compute_lanes = set(ev.loc[(kind == "compute").to_numpy(), "lane"].astype(str))
    comm = ev[(kind == "comm").to_numpy()]
    comm = comm[comm["lane"].astype(str).isin(compute_lanes).to_numpy()]
    if comm.empty:
        return pd.DataFrame({"lane": [], "comm_count": np.array([], np.int64), "comm_ns": np.array([], np.int64)})
    dur = (comm["end_ns"] - comm["start_ns"]).to_numpy(np.int64)
    out = pd.DataFrame({"lane": comm["lane"].astype(str).to_numpy(), "dur": dur})
    return (out.groupby("lane", as_index=False)
            .agg(comm_count=("dur", "size"), comm_ns=("dur", "sum"))
            .sort_values("comm_ns", ascending=False, kind="stable").reset_index(drop=True))


def diagnose(rank: int, lanes: pd.DataFrame) -> list[str]:
    return [f"rank {rank}: {int(r.comm_count)} collective kernel(s), {r.comm_ns / 1e6:.3f} ms, run on "
            f"{r.lane}, which also runs compute: they cannot overlap anything there"
            for r in lanes.itertuples(index=False)]
