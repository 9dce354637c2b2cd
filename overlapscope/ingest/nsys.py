"""Nsight Systems reader: `nsys export --type sqlite` files (and `.nsys-rep` reports) -> event tables.

One export may hold several processes (all ranks of a `torchrun` under one `nsys`), and a run may be
one export per rank; `read_nsys` takes a file or a directory of them and returns one RankTrace per
process with GPU work. Filtering and joins happen in SQL, distinct names are classified once, and
no Python code runs per row.
"""
from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from overlapscope.errors import TraceError
from overlapscope.ingest import nsys_schema as S
from overlapscope.ingest.classify import classify_kernels
from overlapscope.ingest.comm_context import collective_conflicts, decide, launch_context
from overlapscope.ingest.comm_rules import CommRule, is_comm_op, rule_set
from overlapscope.ingest.comm_summary import summarize
from overlapscope.ingest.nsys_checks import check_export, check_string_ids
from overlapscope.ingest.nsys_nvtx import NvtxRanges, attach_nccl, read_nvtx
from overlapscope.ingest.steps import DEFAULT_STEP_PATTERN, step_ranges, steps_at
from overlapscope.core.table import RankMeta, RankTrace, make_table

log = logging.getLogger(__name__)

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SUFFIXES = (".sqlite", ".nsys-rep")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
_TID_MASK = 0xFFFFFF
# Device row kinds in the UNION query, in this order.
_KERNEL, _MEMCPY, _MEMSET, _SYNC = range(4)
# Kineto's names for CUPTI synchronization types, so both readers name sync events alike.
_SYNC_NAMES = {
    "EVENT_SYNCHRONIZE": "Event Sync", "STREAM_WAIT_EVENT": "Stream Wait Event",
    "STREAM_SYNCHRONIZE": "Stream Sync", "CONTEXT_SYNCHRONIZE": "Context Sync",
}


@dataclass
class _Process:
    """One process with GPU work in one export, before it has a rank."""

    source: str
    key: int  # globalPid >> 24: host/VM id and pid, unique within one export
    pid: int
    devices: tuple[int, ...]
    hostname: str
    columns: dict[str, np.ndarray]
    steps: pd.DataFrame
    meta: RankMeta


def read_nsys(path: str | Path | Sequence[str | Path], *, step_pattern: str = DEFAULT_STEP_PATTERN,
              comm_patterns: Sequence[str] = (), no_steps: bool = False) -> list[RankTrace]:
    """Read an nsys SQLite export, a `.nsys-rep` report, a directory of them, or a list of such paths.

    Returns one RankTrace per process with GPU work, sorted by rank. Ranks are assigned over all
    the files together (see `_assign_ranks`), so pass every export of one run in one call.
    """
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    files = sorted({f for p in paths for f in S.report_files(Path(p))})
    procs: list[_Process] = []
    for file in files:
        procs.extend(_read_report(file, step_pattern=step_pattern, comm_patterns=tuple(comm_patterns),
                                  no_steps=no_steps))
    ranks = _assign_ranks(procs)
    # The export does not say the world size: at least the ranks found, and above the highest rank.
    world_size = max([len(procs)] + [r + 1 for r, _ in ranks])
    traces = []
    for proc, (rank, rank_from) in zip(procs, ranks):
        events = make_table(rank, step_pattern=step_pattern, **proc.columns)
        traces.append(RankTrace(rank=rank, events=events, steps=proc.steps, device="gpu", rank_from=rank_from,
                                meta=replace(proc.meta, world_size=world_size)))
    return sorted(traces, key=lambda t: t.rank)


def _read_report(path: Path, **options: Any) -> list[_Process]:
    if path.suffix == ".nsys-rep":
        with tempfile.TemporaryDirectory(prefix="overlapscope-nsys-") as tmp:
            exported = S.export_sqlite(path, Path(tmp))
            return _read_export(exported, source=path, **options)
    return _read_export(path, source=path, **options)


def _read_export(path: Path, *, source: Path, step_pattern: str, comm_patterns: tuple[str, ...],
                 no_steps: bool) -> list[_Process]:
    conn = S.connect_readonly(path)
    try:
        with S.sql_errors(source):
            schema = S.read_schema(conn)
            if KERNEL not in schema.columns:
                what = "no tables" if not schema.columns else f"no {KERNEL} table"
                raise TraceError(f"not an nsys export with CUDA kernels ({what}); profile with `nsys profile "
                                 "--trace=cuda,nvtx` and export with `nsys export --type sqlite`", source)
            drops = check_export(conn, schema, (KERNEL, MEMCPY, MEMSET, SYNC), source)
            info = S.export_info(conn, schema)
            rules = rule_set(comm_patterns)
            dev = _read_device(conn, schema, source, rules)
            if dev["start"].size == 0 or not dev["gpu"].any():
                raise TraceError("no GPU activity (no kernels, memcpy or memset rows"
                                 + (f"; {drops.summary()})" if drops.count else ")"), source)
            keys = np.unique(dev["key"][dev["gpu"]])
            nvtx = read_nvtx(conn, schema, keys.tolist())
            threads = S.thread_names(conn, schema, keys)
            procs = S.process_names(conn, schema)
    finally:
        conn.close()
    drops.warn(source)
    if drops.count:
        info = {**info, "dropped_events": drops.as_dict()}
    out = []
    offset = info["offset_ns"]
    for key in keys.tolist():
        rows = np.flatnonzero(dev["key"] == key)
        out.append(_build_process(int(key), rows, dev, nvtx.subset(key), offset, str(source),
                                  step_pattern=None if no_steps else step_pattern,
                                  hostname=info["hostname"], threads=threads, procs=procs, info=info,
                                  rules=rules))
    return out


def _device_select(schema: S.Schema, table: str, kind: int) -> str | None:
    """One arm of the UNION over device tables; None when the table or a required column is absent."""
    if not schema.has(table, "start", "end", "streamId", "deviceId"):
        return None
    def col(name: str, default: str = "-1") -> str:
        return name if schema.has(table, name) else default
    if kind == _KERNEL:
        name_col = schema.pick(table, "demangledName", "shortName", "mangledName")
        if name_col is None:
            return None
        a, b, c, nbytes = name_col, "0", "0", "-1"
    elif kind == _MEMCPY:
        a, b, c, nbytes = col("copyKind"), col("srcKind"), col("dstKind"), col("bytes")
    elif kind == _MEMSET:
        a, b, c, nbytes = col("memKind"), "0", "0", col("bytes")
    else:
        a, b, c, nbytes = schema.pick(table, "syncType", "deprecatedSyncType") or "-1", "0", "0", "-1"
    # Rows with a NULL key column are left out here and counted by nsys_checks.
    return (f"SELECT {kind}, start, end, COALESCE(streamId, -1), COALESCE(deviceId, -1), "
            f"COALESCE({col('correlationId')}, -1), COALESCE({col('globalPid', 'NULL')}, 0) >> 24, "
            f"COALESCE({a}, -1), COALESCE({b}, -1), COALESCE({c}, -1), COALESCE({nbytes}, -1) FROM {table} "
            f"WHERE start IS NOT NULL AND end IS NOT NULL AND streamId IS NOT NULL AND deviceId IS NOT NULL"
            f"{' AND globalPid IS NOT NULL' if schema.has(table, 'globalPid') else ''}")


_DEVICE_COLS = ("kind", "start", "end", "stream", "device", "corr", "key", "a", "b", "c", "bytes", "launch", "gtid")


def _read_device(conn: Any, schema: S.Schema, source: Path, rules: tuple[CommRule, ...]) -> dict[str, np.ndarray]:
    arms = [s for s in (_device_select(schema, t, k) for t, k in
                        ((KERNEL, _KERNEL), (MEMCPY, _MEMCPY), (MEMSET, _MEMSET), (SYNC, _SYNC))) if s]
    if not arms:
        raise TraceError(f"{KERNEL} lacks start/end/streamId/deviceId or a name column", source)
    if schema.has(RUNTIME, "start", "correlationId", "globalTid"):
        # The launching API call of each device row: (correlationId, process) is unique per export.
        launch = (f"LEFT JOIN (SELECT correlationId AS cid, globalTid >> 24 AS gk, MIN(start) AS ls, "
                  f"MIN(globalTid) AS gtid FROM {RUNTIME} WHERE correlationId IS NOT NULL GROUP BY 1, 2) r "
                  "ON r.cid = d.corr AND r.gk = d.key")
        launch_cols = "COALESCE(r.ls, -1), COALESCE(r.gtid, -1)"
    else:
        launch, launch_cols = "", "-1, -1"
    sql = (f"WITH d({', '.join(_DEVICE_COLS[:11])}) AS ({' UNION ALL '.join(arms)}) "
           f"SELECT d.*, {launch_cols} FROM d {launch} WHERE d.end >= d.start")
    dev = S.fetch(conn, sql, _DEVICE_COLS, {})
    # Name, kind and collective per distinct (kind, a, b, c): a is the kernel's StringIds id.
    inverse, first = _combo_codes(dev)
    combos = np.stack([dev["kind"], dev["a"], dev["b"], dev["c"]], axis=1)[first]
    names = _combo_names(conn, schema, combos, source)
    kinds = np.array(["kernel", "memcpy", "memset", "sync"], dtype=object)[combos[:, 0]]
    is_kernel = combos[:, 0] == _KERNEL
    rule_of, collectives = classify_kernels(list(names), rules)
    rule_of[~is_kernel] = -1
    dev.update(name=names[inverse], kind_name=kinds[inverse], rule=rule_of[inverse], name_coll=collectives[inverse])
    dev["gpu"] = dev["kind"] != _SYNC  # sync rows alone do not make a process a GPU process
    return dev


def _combo_codes(dev: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Code per row of its distinct (kind, a, b, c) and the first row of each code, by hashing one int64."""
    parts = (dev["kind"], dev["a"], dev["b"], dev["c"])
    if dev["a"].size and all(p.min() >= 0 for p in parts[2:]) and max(int(p.max()) for p in parts[2:]) < 256 \
            and 0 <= dev["a"].min() and dev["a"].max() < 2**40:
        key = (dev["kind"] << 56) | (dev["a"] << 16) | (dev["b"] << 8) | dev["c"]
    else:  # unusual enum values: fall back to sorting whole rows
        _, key = np.unique(np.stack(parts, axis=1), axis=0, return_inverse=True)
        key = key.reshape(-1)
    c, _ = S.codes(key)
    first = np.full(int(c.max()) + 1 if c.size else 0, -1, dtype=np.int64)
    first[c[::-1]] = np.arange(c.size - 1, -1, -1)  # last write wins: the first row of each code
    return c, first


def _combo_names(conn: Any, schema: S.Schema, combos: np.ndarray, source: Path) -> np.ndarray:
    kernel_ids = combos[combos[:, 0] == _KERNEL, 1]
    kernel_names = S.strings(conn, schema, kernel_ids)
    check_string_ids(kernel_ids, kernel_names, KERNEL,
                     schema.pick(KERNEL, "demangledName", "shortName", "mangledName") or "name", source)
    copy_kinds = S.enum_labels(conn, schema, "ENUM_CUDA_MEMCPY_OPER")
    mem_kinds = S.enum_labels(conn, schema, "ENUM_CUDA_MEM_KIND")
    sync_types = S.enum_labels(conn, schema, "ENUM_CUPTI_SYNC_TYPE")
    out = []
    for kind, a, b, c in combos.tolist():  # one per distinct name, not per row
        if kind == _KERNEL:
            out.append(kernel_names.get(a, f"kernel#{a}"))
        elif kind == _MEMCPY:
            direction = copy_kinds.get(a, ("", ""))[0].rsplit("_", 1)[-1].replace("TO", "to") or "Unknown"
            src, dst = mem_kinds.get(b, ("", ""))[1], mem_kinds.get(c, ("", ""))[1]
            out.append(f"Memcpy {direction} ({src} -> {dst})" if src and dst else f"Memcpy {direction}")
        elif kind == _MEMSET:
            where = mem_kinds.get(a, ("", ""))[1]
            out.append(f"Memset ({where})" if where else "Memset")
        else:
            sym = sync_types.get(a, ("", ""))[0].replace("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_", "")
            out.append(_SYNC_NAMES.get(sym, sync_types.get(a, ("", "Sync"))[1] or "Sync"))
    return np.array(out, dtype=object)


def _build_process(key: int, rows: np.ndarray, dev: dict[str, np.ndarray], nvtx: NvtxRanges, offset: int,
                   source: str, *, step_pattern: str | None, hostname: str, threads: dict[int, str],
                   procs: dict[int, str], info: dict[str, Any], rules: tuple[CommRule, ...]) -> _Process:
    pid = key & _TID_MASK
    gpu_rows = rows[dev["gpu"][rows]]
    devices = tuple(int(d) for d in np.unique(dev["device"][gpu_rows]))
    launch = dev["launch"][rows]
    known = launch >= 0
    launch_ns = np.where(known, launch + offset, -1)
    launch_tid = np.where(known, dev["gtid"][rows] & _TID_MASK, -1)
    nvtx = nvtx.shifted(offset)
    # Launch context: NVTX ranges of communication ops (torch's, and NCCL's own domain).
    launch_lane = np.where(known, _labels("thread:", launch_tid), "")
    # Launch context from torch's communication ranges; NCCL's own domain (ncclGroupEnd...) launches
    # only NCCL kernels, which the name rules know, and attach_nccl reads it below.
    ops = _comm_ops(nvtx)
    context = launch_context(_labels("thread:", nvtx.tid[ops]), nvtx.start_ns[ops], nvtx.end_ns[ops],
                             nvtx.name[ops], launch_lane, launch_ns)
    verdict = decide(dev["kind_name"][rows], dev["rule"][rows], dev["name_coll"][rows], context, rules)
    device_cols = {
        "lane": _labels("stream:", dev["stream"][rows]),
        "kind": verdict.kind, "name": dev["name"][rows],
        "start_ns": dev["start"][rows] + offset, "end_ns": dev["end"][rows] + offset,
        "collective": verdict.collective, "bytes": dev["bytes"][rows].copy(),
        "group": np.full(rows.size, "", dtype=object), "correlation": dev["corr"][rows],
        "launch_ns": launch_ns, "launch_lane": launch_lane,
    }
    device_cols["bytes"][device_cols["kind"] == "sync"] = -1
    attach_nccl(device_cols, launch_tid, nvtx)
    is_comm = verdict.kind == "comm"
    classification = {
        **summarize(device_cols["name"], verdict.kind, device_cols["lane"], device_cols["start_ns"],
                    device_cols["end_ns"], verdict.comm_by),
        "collective_conflicts": collective_conflicts(device_cols["name"][is_comm], verdict.name_collective[is_comm],
                                                     device_cols["collective"][is_comm])}
    steps = _steps(nvtx, step_pattern, source)
    device_cols["step"] = steps_at(launch_ns, steps)
    cols = _concat(device_cols, nvtx.as_columns(steps_at(nvtx.start_ns, steps)))
    used_tids = set(np.unique(launch_tid[known]).tolist()) | set(np.unique(nvtx.tid).tolist())
    gpus = info.get("gpus", {})
    meta = RankMeta(
        source_format="nsys", source_file=str(source),
        device_name=gpus.get(devices[0]) if len(devices) == 1 else None,
        backend="nccl" if nvtx.nccl.any() else None,
        clock="unix" if info["clock"] == "session+utcEpochNs" else "session", clock_base_ns=offset,
        host=hostname or None,
        extra={"pid": pid, "device": devices[0] if len(devices) == 1 else list(devices),
               "process_name": procs.get(key, ""), "nsys_version": info.get("nsys_version", ""),
               "schema_version": info.get("schema_version", ""),
               "threads": {str(t): threads.get((key << 24) | t, "") for t in sorted(used_tids)},
               "launches_unmatched": int((~known & dev["gpu"][rows]).sum()),
               **({"dropped_events": info["dropped_events"]} if "dropped_events" in info else {})},
        comm_classification=classification)
    return _Process(source=source, key=key, pid=pid, devices=devices, hostname=hostname, columns=cols,
                    steps=steps, meta=meta)


def _comm_ops(nvtx: NvtxRanges) -> np.ndarray:
    """NVTX ranges of torch communication calls (decided once per distinct name)."""
    code, uniq = S.codes(nvtx.name)
    is_op = np.array([is_comm_op(str(u)) for u in uniq], dtype=bool)[code] if code.size else np.zeros(0, bool)
    return np.flatnonzero(is_op & ~nvtx.nccl)


def _steps(nvtx: NvtxRanges, pattern: str | None, source: str = "") -> pd.DataFrame:
    """Step ranges among the NVTX ranges; the pattern is tried once per distinct name."""
    sel = np.zeros(nvtx.name.size, dtype=bool)
    if pattern and nvtx.name.size:
        rx = re.compile(pattern, re.IGNORECASE)
        code, uniq = S.codes(nvtx.name)
        sel = np.array([bool(rx.fullmatch(str(u))) for u in uniq], dtype=bool)[code]
    return step_ranges(nvtx.name[sel], nvtx.start_ns[sel], nvtx.end_ns[sel], pattern or DEFAULT_STEP_PATTERN, source)


def _labels(prefix: str, values: np.ndarray) -> np.ndarray:
    """`prefix + str(v)` per row, formatting each distinct value once."""
    c, uniq = S.codes(np.asarray(values, dtype=np.int64))
    text = np.array([f"{prefix}{u}" for u in uniq.tolist()], dtype=object)
    return text[c] if c.size else np.array([], dtype=object)


def _concat(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([np.asarray(a[k]), np.asarray(b[k], dtype=np.asarray(a[k]).dtype)]) for k in a}


def _assign_ranks(procs: list[_Process]) -> list[tuple[int, str]]:
    """Rank per process: from a `rank<N>` file name (one process per file, numbers distinct), else by
    (host, CUDA device) when each process uses one device and no two share one, else by (file, pid)."""
    per_file: dict[str, int] = {}
    for p in procs:
        per_file[p.source] = per_file.get(p.source, 0) + 1
    numbers = [_rank_in_name(p.source) for p in procs]
    if (all(per_file[p.source] == 1 for p in procs) and all(n is not None for n in numbers)
            and len(set(numbers)) == len(numbers)):
        return [(int(n), "filename") for n in numbers]  # type: ignore[arg-type]
    # Host name, then the VM/host id nsys puts above the pid (several hosts in one report), then device.
    device_keys = [(p.hostname, p.key >> 24, p.devices[0]) if len(p.devices) == 1 else None for p in procs]
    if all(k is not None for k in device_keys) and len(set(device_keys)) == len(device_keys):
        order = sorted(range(len(procs)), key=lambda i: device_keys[i])  # type: ignore[arg-type,return-value]
        how = "device"
    else:
        order = sorted(range(len(procs)), key=lambda i: (procs[i].source, procs[i].pid))
        how = "process"
    ranks = [0] * len(procs)
    for rank, i in enumerate(order):
        ranks[i] = rank
    return [(r, how) for r in ranks]


def _rank_in_name(source: str) -> int | None:
    m = _RANK_IN_NAME.search(Path(source).name)
    return int(m.group(1)) if m else None
