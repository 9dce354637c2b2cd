"""NVTX ranges of an nsys export: names (registered strings resolved), domains, NCCL ranges.

NVTX text is NULL for registered strings (then `textId` -> StringIds), ranges are push/pop or
start/end (ids read from ENUM_NSYS_EVENT_TYPE), and NCCL's own domain holds `ncclAllReduce`,
`ncclSend`, `ncclGroupStart`... ranges. Windowed exports lose the domain-create rows, so NCCL
ranges are recognised by domain name when known and by name otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
import pandas as pd

from overlapscope.core.intervals import innermost_containing
from overlapscope.ingest import nsys_schema as S
from overlapscope.ingest.classify import collective_of

NVTX = "NVTX_EVENTS"
_TID_MASK = 0xFFFFFF
# torch.autograd.profiler.emit_nvtx appends ", op_id = N", ", seq = N", ", sizes = [...]" and
# ", input_op_ids = [...]": the op is the part before, as Kineto names it.
_EMIT_NVTX_SUFFIX = re.compile(r", (?:seq|op_id|sizes|input_op_ids) = .*$", re.DOTALL)
_NCCL_NAME = re.compile(r"^nccl[A-Z]\w*$")
# NCCL's NVTX payload schema labels, read from a JSON payload when the export includes one.
_PAYLOAD_BYTES = r'"?Message size \[bytes\]"?\s*[:=]\s*(\d+)'
_PAYLOAD_COMM = r'"?NCCL communicator ID"?\s*[:=]\s*"?([0-9A-Za-z_]+)'


@dataclass(frozen=True)
class NvtxRanges:
    """NVTX ranges as columns; `key` is globalTid >> 24 (the process), `tid` the thread."""

    key: np.ndarray
    tid: np.ndarray
    name: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    nccl: np.ndarray
    collective: np.ndarray
    bytes: np.ndarray
    group: np.ndarray

    def subset(self, key: int) -> "NvtxRanges":
        sel = self.key == key
        return NvtxRanges(**{f: getattr(self, f)[sel] for f in self.__dataclass_fields__})

    def shifted(self, offset_ns: int) -> "NvtxRanges":
        return replace(self, start_ns=self.start_ns + offset_ns, end_ns=self.end_ns + offset_ns)

    def as_columns(self, step: np.ndarray) -> dict[str, np.ndarray]:
        """Event-table columns: kind `annotation` on lane `thread:<tid>`."""
        code, uniq = S.codes(self.tid)
        lanes = np.array([f"thread:{t}" for t in uniq.tolist()], dtype=object)[code]
        n = self.tid.size
        return {
            "lane": lanes, "kind": np.full(n, "annotation", dtype=object), "name": self.name,
            "start_ns": self.start_ns, "end_ns": self.end_ns, "collective": self.collective,
            "bytes": self.bytes, "group": self.group, "correlation": np.full(n, -1, np.int64),
            "launch_ns": self.start_ns, "launch_lane": lanes, "step": step,
        }


def empty_ranges() -> NvtxRanges:
    ints, objs = np.array([], np.int64), np.array([], dtype=object)
    return NvtxRanges(ints, ints, objs, ints, ints, np.array([], bool), objs, ints, objs)


def read_nvtx(conn: Any, schema: S.Schema, keys: Sequence[int]) -> NvtxRanges:
    """Closed push/pop and start/end ranges of the given processes (globalTid >> 24 in keys)."""
    if not keys or not schema.has(NVTX, "start", "end", "eventType", "globalTid"):
        return empty_ranges()
    types = S.enum_ids(conn, schema, "ENUM_NSYS_EVENT_TYPE")
    range_types = [types[t] for t in ("NvtxPushPopRange", "NvtxStartEndRange") if t in types]
    if not range_types:
        return empty_ranges()
    text = "n.text" if schema.has(NVTX, "text") else "NULL"
    join = ""
    if schema.has(NVTX, "textId") and schema.has("StringIds", "id", "value"):
        text, join = f"COALESCE({text}, s.value)", "LEFT JOIN StringIds s ON s.id = n.textId"
    domain = "COALESCE(n.domainId, 0)" if schema.has(NVTX, "domainId") else "0"
    payload = _payload_sql(schema, domain)
    wanted = ",".join(str(int(k)) for k in keys)
    sql = (f"SELECT n.globalTid >> 24, n.globalTid & {_TID_MASK}, {text}, n.start, n.end, {domain}, {payload} "
           f"FROM {NVTX} n {join} WHERE n.eventType IN ({','.join(map(str, range_types))}) "
           f"AND n.end IS NOT NULL AND n.end >= n.start AND (n.globalTid >> 24) IN ({wanted})")
    cols = ("key", "tid", "name", "start", "end", "domain", "payload")
    raw = S.fetch(conn, sql, cols, {"name": "object", "payload": "object"})
    names = _normalize(raw["name"])
    domains = _domain_names(conn, schema, types)
    dcode, duniq = S.codes(raw["domain"])
    in_nccl_domain = np.array([domains.get(int(d), "") == "NCCL" for d in duniq], dtype=bool)[dcode]
    code, uniq = S.codes(names)
    named_nccl = np.array([bool(_NCCL_NAME.match(str(u))) for u in uniq], dtype=bool)
    nccl = in_nccl_domain | named_nccl[code]
    coll_of_name = np.array([collective_of(str(u)) for u in uniq], dtype=object)
    collective = np.where(nccl, coll_of_name[code], "").astype(object)
    nbytes, group = _parse_payload(raw["payload"], nccl)
    return NvtxRanges(raw["key"], raw["tid"], names, raw["start"], raw["end"], nccl, collective, nbytes, group)


def _payload_sql(schema: S.Schema, domain: str) -> str:
    # Only non-default domains (NCCL's) can carry the schema payload we read: skip the rest in SQL.
    parts = []
    if schema.has(NVTX, "jsonText"):
        parts.append("n.jsonText")
    if schema.has(NVTX, "jsonTextId") and schema.has("StringIds", "id", "value"):
        parts.append("(SELECT value FROM StringIds WHERE id = n.jsonTextId)")
    if not parts:
        return "NULL"
    value = parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"
    return f"CASE WHEN {domain} != 0 THEN {value} END"


def _normalize(names: np.ndarray) -> np.ndarray:
    """Strip emit_nvtx suffixes, once per distinct name."""
    if names.size == 0:
        return np.array([], dtype=object)
    code, uniq = S.codes(np.where(pd.isna(names), "", names))
    clean = np.array([_EMIT_NVTX_SUFFIX.sub("", str(u)) for u in uniq], dtype=object)
    return clean[code]


def _domain_names(conn: Any, schema: S.Schema, types: dict[str, int]) -> dict[int, str]:
    create = types.get("NvtxDomainCreate")
    if create is None or not schema.has(NVTX, "domainId"):
        return {}
    text = "text" if schema.has(NVTX, "text") else "NULL"
    if schema.has(NVTX, "textId") and schema.has("StringIds", "id", "value"):
        text = f"COALESCE({text}, (SELECT value FROM StringIds WHERE id = textId))"
    rows = conn.execute(f"SELECT domainId, {text} FROM {NVTX} WHERE eventType = ?", (create,)).fetchall()
    return {int(d): str(t) for d, t in rows if d is not None and t is not None}


def _parse_payload(payload: np.ndarray, nccl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    nbytes = np.full(payload.size, -1, dtype=np.int64)
    group = np.full(payload.size, "", dtype=object)
    has = nccl & pd.notna(pd.Series(payload, dtype=object)).to_numpy()
    if has.any():
        text = pd.Series(payload[has], dtype=object).astype(str)
        size = pd.to_numeric(text.str.extract(_PAYLOAD_BYTES, expand=False), errors="coerce")
        nbytes[has] = size.fillna(-1).to_numpy(np.int64)
        comm = text.str.extract(_PAYLOAD_COMM, expand=False)
        group[has] = np.where(comm.notna(), "nccl:" + comm.fillna(""), "").astype(object)
    return nbytes, group


def attach_nccl(device: dict[str, np.ndarray], launch_tid: np.ndarray, nvtx: NvtxRanges) -> None:
    """Give comm kernels the collective, bytes and group of the NCCL range that launched them.

    A grouped call launches its kernel inside `ncclGroupEnd`: that range stands for the calls
    since the thread's last `ncclGroupStart` (bytes summed; send + recv is send_recv). The
    kernel's own name wins for the collective when it says one.
    """
    comm = np.flatnonzero((device["kind"] == "comm") & (launch_tid >= 0))
    if comm.size == 0 or not nvtx.nccl.any():
        return
    r = np.flatnonzero(nvtx.nccl)
    order = r[np.lexsort((nvtx.start_ns[r], nvtx.tid[r]))]
    tid, start, end = nvtx.tid[order], nvtx.start_ns[order], nvtx.end_ns[order]
    coll, nbytes, group = _group_effective(nvtx.name[order], tid, nvtx.collective[order],
                                           nvtx.bytes[order], nvtx.group[order])
    hit = innermost_containing(tid, start, end, launch_tid[comm], device["launch_ns"][comm])
    found = hit >= 0
    rows, src = comm[found], hit[found]
    fill = (device["collective"][rows] == "") & (coll[src] != "")
    device["collective"][rows[fill]] = coll[src][fill]
    fill = (device["bytes"][rows] < 0) & (nbytes[src] >= 0)
    device["bytes"][rows[fill]] = nbytes[src][fill]
    fill = (device["group"][rows] == "") & (group[src] != "")
    device["group"][rows[fill]] = group[src][fill]


def _group_effective(name: np.ndarray, tid: np.ndarray, coll: np.ndarray, nbytes: np.ndarray,
                     group: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per NCCL range (sorted by thread, start): what a kernel launched inside it performs."""
    coll, nbytes, group = coll.copy(), nbytes.copy(), group.copy()
    n = name.size
    if n == 0:
        return coll, nbytes, group
    # s[j]: the last ncclGroupStart at or before row j on the same thread (-1 when none).
    s = np.maximum.accumulate(np.where(name == "ncclGroupStart", np.arange(n), -1))
    thread_first = np.r_[0, np.flatnonzero(np.diff(tid)) + 1]
    s = np.where(s >= np.repeat(thread_first, np.diff(np.r_[thread_first, n])), s, -1)
    ends = np.flatnonzero((name == "ncclGroupEnd") & (s >= 0))
    if ends.size == 0:
        return coll, nbytes, group
    lo, hi = s[ends], ends - 1  # members are rows lo+1 .. hi; prefix sums below are inclusive

    def between(values: np.ndarray) -> np.ndarray:
        c = np.cumsum(values)
        return c[hi] - c[lo]

    kinds = [k for k in np.unique(coll).tolist() if k]
    counts = np.stack([between(coll == k) for k in kinds]) if kinds else np.zeros((0, ends.size), np.int64)
    present = counts > 0
    single = present.sum(axis=0) == 1
    pair = ((present.sum(axis=0) == 2) & present[kinds.index("send")] & present[kinds.index("recv")]
            if "send" in kinds and "recv" in kinds else np.zeros(ends.size, bool))
    kind_names = np.array(kinds + [""], dtype=object)
    choice = np.where(single, present.argmax(axis=0) if kinds else 0, len(kinds))
    coll[ends] = np.where(pair, "send_recv", kind_names[choice]).astype(object)
    known = between(nbytes >= 0) > 0
    nbytes[ends] = np.where(known, between(np.where(nbytes > 0, nbytes, 0)), nbytes[ends])
    # First member with a group: the next row at or after lo+1 whose group is set.
    has_group = np.where(group != "", np.arange(n), n)
    nxt = np.minimum.accumulate(has_group[::-1])[::-1]
    first = np.append(nxt, n)[lo + 1]
    take = first <= hi
    group[ends[take]] = group[first[take]]
    return coll, nbytes, group
