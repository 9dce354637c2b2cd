"""CUDA stream waits from an nsys export, in the shape the dependency graph reads (RankMeta.stream_waits).

A cudaStreamWaitEvent is a CUPTI_ACTIVITY_KIND_SYNCHRONIZATION row of type STREAM_WAIT_EVENT on the
waiting stream with the event's id; the event's cudaEventRecord is a CUPTI_ACTIVITY_KIND_CUDA_EVENT row
with the same eventId, its stream and its correlation id (CUPTI's CUpti_ActivitySynchronization and
CUpti_ActivityCudaEvent records, which nsys exports as these tables). An event id is reused by later
records, so a wait pairs with the latest record of its event before it in call order: correlation ids
number a process's CUDA calls in call order.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from overlapscope.ingest import nsys_schema as S

SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
STREAM_WAIT_EVENT = "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT"
_COLS = ("key", "stream", "corr", "event")


def read_stream_waits(conn: Any, schema: S.Schema) -> dict[int, dict[str, list]]:
    """Per process key (globalPid >> 24): lane, corr, wait_lane, record_corr lists of its paired waits;
    processes without any (no CUDA_EVENT rows: nsys records them only with event tracing) are absent."""
    need = ("streamId", "correlationId", "eventId", "globalPid")
    if not (schema.has(SYNC, "syncType", *need) and schema.has(CUDA_EVENT, *need)):
        return {}
    wait_type = 2  # CUpti_ActivitySynchronizationType: STREAM_WAIT_EVENT = 2
    if schema.has("ENUM_CUPTI_SYNC_TYPE", "id", "name"):
        row = conn.execute("SELECT id FROM ENUM_CUPTI_SYNC_TYPE WHERE name = ?", (STREAM_WAIT_EVENT,)).fetchone()
        wait_type = row[0] if row else wait_type
    select = ("SELECT globalPid >> 24, streamId, correlationId, eventId FROM {} WHERE streamId IS NOT NULL "
              "AND correlationId IS NOT NULL AND eventId IS NOT NULL AND globalPid IS NOT NULL")
    waits = S.fetch(conn, select.format(SYNC) + " AND syncType = ?", _COLS, {}, (wait_type,))
    records = S.fetch(conn, select.format(CUDA_EVENT), _COLS, {})
    if waits["corr"].size == 0 or records["corr"].size == 0:
        return {}
    # the latest record of the same process and event before each wait: one sorted search
    order = np.lexsort((records["corr"], records["event"], records["key"]))
    rec = {c: v[order] for c, v in records.items()}
    rec_keys = np.stack([rec["key"], rec["event"], rec["corr"]], axis=1)
    wait_keys = np.stack([waits["key"], waits["event"], waits["corr"]], axis=1)
    flat = rec_keys.view([("", np.int64)] * 3).ravel()
    i = np.searchsorted(flat, wait_keys.view([("", np.int64)] * 3).ravel(), side="left") - 1
    ok = (i >= 0) & (rec["key"][np.maximum(i, 0)] == waits["key"]) & (rec["event"][np.maximum(i, 0)] == waits["event"])
    out: dict[int, dict[str, list]] = {}
    for key in np.unique(waits["key"][ok]).tolist():  # a loop over processes, not waits
        sel = np.flatnonzero(ok & (waits["key"] == key))
        out[int(key)] = {"lane": [f"stream:{s}" for s in waits["stream"][sel].tolist()],
                         "corr": waits["corr"][sel].tolist(),
                         "wait_lane": [f"stream:{s}" for s in rec["stream"][i[sel]].tolist()],
                         "record_corr": rec["corr"][i[sel]].tolist()}
    return out
