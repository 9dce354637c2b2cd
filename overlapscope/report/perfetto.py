"""Chrome-trace JSON for Perfetto (ui.perfetto.dev): every event of the run plus an "exposed comm" track.

One process per rank, one thread per lane (stream or CPU thread), and one extra thread per rank that
holds exactly the intervals analyze() counts as exposed communication, so the cause of a number can
be found by eye next to the kernels around it. Timestamps are µs from the run's first event (aligned
clock), written with ns decimals: relative times keep every ns that epoch µs in a double would lose.
"""
from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from ..analysis.overlap import exposed_intervals
from ..analysis.windows import step_windows
from ..io_atomic import write_bytes
from ..core.table import Run

log = logging.getLogger(__name__)

EXPOSED_TRACK = "exposed comm"
EXPOSED_TID = 999_999_999  # above any lane index: Perfetto sorts threads by tid after sort_index
SCHEMA = "overlapscope.perfetto/1"


def _records(frame: pd.DataFrame) -> bytes:
    """A JSON array body (no brackets) from columns, written by pandas in C rather than row by row."""
    if frame.empty:
        return b""
    text = frame.to_json(orient="records", double_precision=15)
    return text[1:-1].encode()


def _rank_events(trace, t0_ns: int, offset_ns: int, no_steps: bool) -> tuple[list[bytes], int, int]:
    ev = trace.events
    lanes = ev["lane"].astype(str)
    lane_names = sorted(lanes.unique())
    tid = pd.Categorical(lanes, categories=lane_names).codes.astype(np.int64)
    start = ev["start_ns"].to_numpy(np.int64) + offset_ns - t0_ns
    dur = ev["end_ns"].to_numpy(np.int64) - ev["start_ns"].to_numpy(np.int64)
    base = pd.DataFrame({
        "ph": "X", "name": ev["name"].astype(str).to_numpy(), "cat": ev["kind"].astype(str).to_numpy(),
        "ts": start / 1000.0, "dur": dur / 1000.0, "pid": trace.rank, "tid": tid,
    })
    comm = (ev["kind"] == "comm").to_numpy()
    # Comm events carry what the hover in the dashboard shows; a few per step, so a dict each is fine.
    base["args"] = None
    if comm.any():
        args = pd.DataFrame({
            "collective": ev["collective"].astype(str).to_numpy()[comm],
            "bytes": ev["bytes"].to_numpy(np.int64)[comm],
            "group": ev["group"].astype(str).to_numpy()[comm],
            "seq": ev["seq"].to_numpy(np.int64)[comm],
            "step": ev["step"].to_numpy(np.int64)[comm],
        }).to_dict(orient="records")
        base.loc[comm, "args"] = pd.Series(args, index=base.index[comm], dtype=object)
    parts = [_records(base[~comm].drop(columns="args")), _records(base[comm])]

    windows = step_windows(trace, no_steps=no_steps)
    exposed = exposed_intervals(ev, windows)
    xs = exposed.starts + offset_ns - t0_ns
    parts.append(_records(pd.DataFrame({
        "ph": "X", "name": EXPOSED_TRACK, "cat": "exposed", "ts": xs / 1000.0,
        "dur": (exposed.ends - exposed.starts) / 1000.0, "pid": trace.rank, "tid": EXPOSED_TID})))
    meta = [{"ph": "M", "name": "process_name", "pid": trace.rank, "tid": 0, "args": {"name": f"rank {trace.rank}"}},
            {"ph": "M", "name": "process_sort_index", "pid": trace.rank, "tid": 0, "args": {"sort_index": trace.rank}}]
    for i, name in enumerate(lane_names):
        meta.append({"ph": "M", "name": "thread_name", "pid": trace.rank, "tid": i, "args": {"name": name}})
    meta.append({"ph": "M", "name": "thread_name", "pid": trace.rank, "tid": EXPOSED_TID,
                 "args": {"name": EXPOSED_TRACK}})
    meta.append({"ph": "M", "name": "thread_sort_index", "pid": trace.rank, "tid": EXPOSED_TID,
                 "args": {"sort_index": -1}})
    parts.append(b", ".join(orjson.dumps(m) for m in meta))
    return [p for p in parts if p], len(ev) + len(exposed), exposed.total


def write_perfetto(run: Run, out: str | Path, *, no_steps: bool = False,
                   clock_offsets_ns: dict[int, int] | None = None) -> int:
    """Write the run as Chrome-trace JSON to `out` (atomically, io_atomic); returns the event count."""
    out = Path(out)
    offsets = clock_offsets_ns or {}
    t0 = min(int(t.events["start_ns"].min()) + int(offsets.get(t.rank, 0)) for t in run.ranks if len(t.events))
    body: list[bytes] = []
    count = 0
    exposed_ns = {}
    for trace in run.ranks:
        parts, n, exposed_total = _rank_events(trace, t0, int(offsets.get(trace.rank, 0)), no_steps)
        body += parts
        count += n
        exposed_ns[str(trace.rank)] = exposed_total
    other = {"schema": SCHEMA, "run": run.path, "t0_ns": t0, "exposed_comm_ns": exposed_ns,
             "clock_offsets_ns": {str(k): int(v) for k, v in offsets.items()}}
    buf = io.BytesIO()
    buf.write(b'{"displayTimeUnit": "ns", "otherData": ' + orjson.dumps(other) + b', "traceEvents": [')
    buf.write(b", ".join(body))
    buf.write(b"]}\n")
    write_bytes(out, buf.getvalue())
    log.info("wrote %s: %d events", out, count)
    return count
