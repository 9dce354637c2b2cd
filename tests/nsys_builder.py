"""Write synthetic Nsight Systems SQLite exports with the real exporter's CREATE TABLE statements.

A test describes a run (processes, kernels, copies, syncs, NVTX ranges, each with exact ns
times); `Export.write(path)` creates the tables the way `nsys export --type sqlite` does (same
statements, serialized globalPid/globalTid, StringIds, ENUM tables, session start) and inserts
the rows in shuffled order, because real exports do not promise sorted rows.
"""
from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

VM_ID = 1  # real exports put the VM/host id above the pid: globalPid = (vm << 48) | (pid << 24)
SESSION_START_UTC_NS = 1_779_782_330_176_752_435


def global_pid(pid: int) -> int:
    return (VM_ID << 48) | (pid << 24)


def global_tid(pid: int, tid: int) -> int:
    return global_pid(pid) | tid


@dataclass
class Kernel:
    pid: int
    device: int
    stream: int
    name: str
    start: int
    end: int
    launch: int | None = None
    """Start of the launching cudaLaunchKernel call (None: no runtime row, as in a windowed export)."""
    tid: int | None = None
    """Launching thread (default: the main thread, tid == pid)."""
    corr: int | None = None
    """Correlation id (default: the next of the process's, in list order); set to order calls."""
    api: str = "cudaLaunchKernel"
    """The launching runtime call (`cudaGraphLaunch`: one call, one correlation id, many kernels)."""


@dataclass
class Copy:
    pid: int
    device: int
    stream: int
    start: int
    end: int
    nbytes: int = 1024
    memset: bool = False
    copy_kind: int = 1  # CUDA_MEMCPY_KIND_HTOD
    src_kind: int = 0  # Pageable
    dst_kind: int = 2  # Device
    launch: int | None = None
    tid: int | None = None


@dataclass
class Sync:
    pid: int
    device: int
    stream: int
    start: int
    end: int
    sync_type: int = 3  # stream synchronize
    event_id: int = 0
    """The waited-for event (sync_type 2, stream wait event)."""
    corr: int | None = None


@dataclass
class EventRecord:
    """A cudaEventRecord: a CUPTI_ACTIVITY_KIND_CUDA_EVENT row (no device time, as without event timing)."""
    pid: int
    device: int
    stream: int
    event_id: int
    corr: int


@dataclass
class Range:
    pid: int
    name: str
    start: int
    end: int
    tid: int | None = None
    domain: int = 0
    registered: bool = False
    """True: text NULL and the name in StringIds via textId (nvtxDomainRegisterString)."""
    start_end: bool = False
    """True: an nvtxRangeStart/End range (event type NvtxStartEndRange) instead of push/pop."""
    json: str | None = None


@dataclass
class Export:
    processes: dict[int, str] = field(default_factory=dict)
    kernels: list[Kernel] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    domains: dict[int, str] = field(default_factory=dict)
    """domainId -> name, written as NvtxDomainCreate rows."""
    session_start_utc_ns: int | None = SESSION_START_UTC_NS
    hostname: str = "node0"
    gpus: dict[int, str] = field(default_factory=dict)
    omit: set[str] = field(default_factory=set)
    """Tables to leave out (nsys creates tables lazily; old exports lack some)."""
    seed: int = 0

    def write(self, path: Path) -> Path:
        path = Path(path)
        if path.exists():
            path.unlink()
        conn = sqlite3.connect(path)
        try:
            conn.execute("PRAGMA page_size = 1024")  # small files; the reader does not care
            self._write(conn)
            conn.commit()
        finally:
            conn.close()
        return path

    def _write(self, conn: sqlite3.Connection) -> None:
        rng = random.Random(self.seed)
        for table, sql in CREATE_STATEMENTS.items():
            if table not in self.omit:
                conn.execute(sql)
        for table, rows in ENUM_ROWS.items():
            _insert(conn, table, [{"id": i, "name": n, "label": lab} for i, n, lab in rows], self.omit)
        strings: dict[str, int] = {}

        def sid(text: str) -> int:
            return strings.setdefault(text, len(strings) + 1)

        corr: dict[int, int] = {}

        def next_corr(pid: int) -> int:
            # Correlation ids are per process: both ranks reuse the same numbers, as CUPTI does.
            corr[pid] = corr.get(pid, 100) + 1
            return corr[pid]

        kernels, runtime, memcpy, memset = [], [], [], []
        for k in self.kernels:
            c = next_corr(k.pid) if k.corr is None else k.corr
            kernels.append({"start": k.start, "end": k.end, "deviceId": k.device, "contextId": 1,
                            "streamId": k.stream, "correlationId": c, "globalPid": global_pid(k.pid),
                            "demangledName": sid(k.name), "shortName": sid(k.name.split("(")[0].split("<")[0]),
                            "gridX": 1, "gridY": 1, "gridZ": 1, "blockX": 128, "blockY": 1, "blockZ": 1})
            if k.launch is not None:
                runtime.append(_api(k.pid, k.tid, k.launch, c, sid(k.api)))
        for cp in self.copies:
            c = next_corr(cp.pid)
            row = {"start": cp.start, "end": cp.end, "deviceId": cp.device, "contextId": 1, "streamId": cp.stream,
                   "correlationId": c, "globalPid": global_pid(cp.pid), "bytes": cp.nbytes}
            if cp.memset:
                memset.append({**row, "value": 0, "memKind": 2})
            else:
                memcpy.append({**row, "copyKind": cp.copy_kind, "srcKind": cp.src_kind, "dstKind": cp.dst_kind})
            if cp.launch is not None:
                api = "cudaMemsetAsync" if cp.memset else "cudaMemcpyAsync"
                runtime.append(_api(cp.pid, cp.tid, cp.launch, c, sid(api)))
        syncs = []
        for s in self.syncs:
            c = next_corr(s.pid) if s.corr is None else s.corr
            syncs.append({"start": s.start, "end": s.end, "deviceId": s.device, "contextId": 1, "streamId": s.stream,
                          "correlationId": c, "globalPid": global_pid(s.pid), "syncType": s.sync_type,
                          "eventId": s.event_id})
            api = "cudaStreamWaitEvent" if s.sync_type == 2 else "cudaStreamSynchronize"
            runtime.append(_api(s.pid, None, s.start, c, sid(api)))
        events = [{"timestamp": 0, "deviceId": e.device, "contextId": 1, "streamId": e.stream, "correlationId": e.corr,
                   "globalPid": global_pid(e.pid), "eventId": e.event_id} for e in self.events]
        nvtx = []
        for r in self.ranges:
            tid = r.pid if r.tid is None else r.tid
            nvtx.append({"start": r.start, "end": r.end, "eventType": 60 if r.start_end else 59,
                         "text": None if r.registered else r.name, "textId": sid(r.name) if r.registered else None,
                         "globalTid": global_tid(r.pid, tid), "domainId": r.domain, "jsonText": r.json})
        for domain, name in self.domains.items():
            nvtx.append({"start": 0, "end": None, "eventType": 75, "text": name, "domainId": domain,
                         "globalTid": global_tid(next(iter(self.processes), 1), 0)})
        for table, rows in ((KERNEL, kernels), (RUNTIME, runtime), (MEMCPY, memcpy), (MEMSET, memset),
                            (SYNC, syncs), ("CUPTI_ACTIVITY_KIND_CUDA_EVENT", events), ("NVTX_EVENTS", nvtx)):
            rng.shuffle(rows)
            _insert(conn, table, rows, self.omit)
        _insert(conn, "PROCESSES", [{"globalPid": global_pid(p), "pid": p, "name": n}
                                    for p, n in self.processes.items()], self.omit)
        _insert(conn, "ThreadNames", [{"nameId": sid("python3"), "priority": 0, "globalTid": global_tid(p, p)}
                                      for p in self.processes], self.omit)
        if self.session_start_utc_ns is not None:
            _insert(conn, "TARGET_INFO_SESSION_START_TIME", [{"utcEpochNs": self.session_start_utc_ns,
                                                               "utcTime": "", "localTime": "", "systemClockNs": 0}],
                    self.omit)
        _insert(conn, "TARGET_INFO_SYSTEM_ENV", [{"globalVid": VM_ID << 48, "devStateName": "", "name": "Hostname",
                                                  "nameEnum": 0, "value": self.hostname}], self.omit)
        _insert(conn, "TARGET_INFO_GPU", [{"vmId": VM_ID, "id": i, "name": n} for i, n in self.gpus.items()],
                self.omit)
        _insert(conn, "StringIds", [{"id": i, "value": v} for v, i in strings.items()], self.omit)
        _insert(conn, "META_DATA_EXPORT", [{"name": "EXPORT_SCHEMA_VERSION", "value": "3.25.0"},
                                           {"name": "EXPORT_PRODUCT_VERSION", "value": "synthetic"}], self.omit)


def _api(pid: int, tid: int | None, start: int, corr: int, name_id: int) -> dict:
    return {"start": start, "end": start + 1_000, "eventClass": 0,
            "globalTid": global_tid(pid, pid if tid is None else tid),
            "correlationId": corr, "nameId": name_id, "returnValue": 0}


def _insert(conn: sqlite3.Connection, table: str, rows: list[dict], omit: set[str]) -> None:
    """Insert rows, filling the table's other NOT NULL columns with 0 / '' as nsys writes defaults."""
    if table in omit or not rows:
        return
    info = conn.execute(f"PRAGMA table_info({table})").fetchall()
    names = [c[1] for c in info]
    required = {c[1]: ("" if "TEXT" in (c[2] or "").upper() else 0) for c in info if c[3]}
    cols = [n for n in names if n in required or any(n in r for r in rows)]
    values = [tuple(r.get(c, required.get(c)) for c in cols) for r in rows]
    conn.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", values)


def small_run() -> Export:
    """One process, one kernel and one NVTX range: the smallest export the reader accepts."""
    return Export(processes={10: "python3"},
                  kernels=[Kernel(10, 0, 7, "void gemm<1>(float*)", 1_000, 2_000, launch=500)],
                  ranges=[Range(10, "forward", 0, 3_000)])


def write_bad_corpus(out: Path) -> None:
    """The committed bad-input corpus of tests/data/nsys_bad (run this module to regenerate it)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "not_sqlite.sqlite").write_text("this is a CSV export, not SQLite\nstart,end\n1,2\n")
    (out / "empty.sqlite").write_bytes(b"")
    no_kernels = Export(processes={10: "python3"}, ranges=[Range(10, "forward", 0, 3_000)],
                        omit={KERNEL, MEMCPY, MEMSET, SYNC, RUNTIME})
    no_kernels.write(out / "no_kernel_table.sqlite")
    Export(processes={10: "python3"}, ranges=[Range(10, "forward", 0, 3_000)]).write(out / "no_gpu_activity.sqlite")
    whole = small_run().write(out / "truncated.sqlite").read_bytes()
    (out / "truncated.sqlite").write_bytes(whole[: len(whole) // 2])
    # Same length, but the pages after the schema overwritten: damage only a query can find.
    (out / "damaged.sqlite").write_bytes(whole[: len(whole) // 2] + b"\xff" * (len(whole) - len(whole) // 2))
    for p in out.glob("*-journal"):
        p.unlink()


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"

# CREATE TABLE statements captured verbatim from mfu_2gpu_before.sqlite (nsys 2026.2.1, export schema
# 3.25.0); TARGET_INFO_GPU from mock.sqlite (nsys 2026.1.1, schema 3.24.14). test_nsys.py checks they
# still equal the real files' statements (tests/data/real).
CREATE_STATEMENTS: dict[str, str] = {
    'StringIds': '''CREATE TABLE StringIds (
    -- Consolidation of repetitive string values.

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- ID reference value.
    value                       TEXT      NOT NULL                     -- String value.
)''',
    'CUPTI_ACTIVITY_KIND_KERNEL': '''CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    demangledName               INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Kernel function name w/ templates
    shortName                   INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Base kernel function name
    mangledName                 INTEGER,                               -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name
    launchType                  INTEGER,                               -- REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)
    cacheConfig                 INTEGER,                               -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)
    registersPerThread          INTEGER   NOT NULL,                    -- Number of registers required for each thread executing the kernel.
    gridX                       INTEGER   NOT NULL,                    -- X-dimension grid size.
    gridY                       INTEGER   NOT NULL,                    -- Y-dimension grid size.
    gridZ                       INTEGER   NOT NULL,                    -- Z-dimension grid size.
    blockX                      INTEGER   NOT NULL,                    -- X-dimension block size.
    blockY                      INTEGER   NOT NULL,                    -- Y-dimension block size.
    blockZ                      INTEGER   NOT NULL,                    -- Z-dimension block size.
    staticSharedMemory          INTEGER   NOT NULL,                    -- Static shared memory allocated for the kernel (B).
    dynamicSharedMemory         INTEGER   NOT NULL,                    -- Dynamic shared memory reserved for the kernel (B).
    localMemoryPerThread        INTEGER   NOT NULL,                    -- Amount of local memory reserved for each thread (B).
    localMemoryTotal            INTEGER   NOT NULL,                    -- Total amount of local memory reserved for the kernel (B).
    gridId                      INTEGER   NOT NULL,                    -- Unique grid ID of the kernel assigned at runtime.
    sharedMemoryExecuted        INTEGER,                               -- Shared memory size set by the driver.
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    sharedMemoryLimitConfig     INTEGER,                               -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)
    qmdBulkReleaseDone          INTEGER,                               -- QMD bulk release done timestamp from CWD events.
    qmdPreexitDone              INTEGER,                               -- QMD pre-exit done timestamp from CWD events.
    qmdLastCtaDone              INTEGER,                               -- QMD last CTA done timestamp from CWD events.
    graphId                     INTEGER,                               -- Kernel graph ID.
    clusterX                    INTEGER,                               -- Cluster X dimension.
    clusterY                    INTEGER,                               -- Cluster Y dimension.
    clusterZ                    INTEGER,                               -- Cluster Z dimension.
    clusterSchedulingPolicy     INTEGER,                               -- Cluster scheduling policy.
    maxPotentialClusterSize     INTEGER,                               -- Maximum potential cluster size.
    maxActiveClusters           INTEGER,                               -- Maximum active clusters.
    sharedMemoryRequestedPercentage   INTEGER,                         -- Shared memory requested percentage.
    tensorSizeMinusOneElements   TEXT      NOT NULL                    -- TMA descriptor tensor size minus one elements array.
)''',
    'CUPTI_ACTIVITY_KIND_MEMCPY': '''CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes transferred (B).
    copyKind                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)
    deprecatedSrcId             INTEGER,                               -- Deprecated, use srcDeviceId instead.
    srcKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    dstKind                     INTEGER,                               -- REFERENCES ENUM_CUDA_MEM_KIND(id)
    srcDeviceId                 INTEGER,                               -- Source device ID.
    srcContextId                INTEGER,                               -- Source context ID.
    dstDeviceId                 INTEGER,                               -- Destination device ID.
    dstContextId                INTEGER,                               -- Destination context ID.
    migrationCause              INTEGER,                               -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    virtualAddress              INTEGER,                               -- Virtual base address of the page/s being transferred.
    copyCount                   INTEGER                                -- The total number of memcopy operations traced in this record. In CUDA MemcpyBatchAsync APIs, multiple memcpy operations may be batched together for optimization purposes based on certain heuristics.
)''',
    'CUPTI_ACTIVITY_KIND_MEMSET': '''CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    value                       INTEGER   NOT NULL,                    -- Value assigned to memory.
    bytes                       INTEGER   NOT NULL,                    -- Number of bytes set (B).
    graphNodeId                 INTEGER,                               -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)
    memKind                     INTEGER                                -- REFERENCES ENUM_CUDA_MEM_KIND(id)
)''',
    'CUPTI_ACTIVITY_KIND_SYNCHRONIZATION': '''CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- Correlation ID of the synchronization API to which this result is associated.
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    deprecatedSyncType          INTEGER,                               -- Deprecated, use syncType instead. For older report, REFERENCES ENUM_CUPTI_SYNC_TYPE(id)
    syncType                    INTEGER   NOT NULL,                    -- REFERENCES ENUM_CUPTI_SYNC_TYPE(id)
    eventId                     INTEGER   NOT NULL,                    -- Event ID for which the synchronization API is called.
    eventSyncId                 INTEGER                                -- CUDA Event Sync ID to link the synchronization API to associated event record API.
)''',
    'CUPTI_ACTIVITY_KIND_CUDA_EVENT': '''CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (
    timestamp                   INTEGER,                               -- The device-side CUDA Event completion timestamp. 0 if not collected.
    deviceId                    INTEGER   NOT NULL,                    -- Device ID.
    contextId                   INTEGER   NOT NULL,                    -- Context ID.
    greenContextId              INTEGER,                               -- Green context ID.
    streamId                    INTEGER   NOT NULL,                    -- Stream ID.
    correlationId               INTEGER,                               -- Correlation ID of the event record API to which this result is associated.
    globalPid                   INTEGER,                               -- Serialized GlobalId.
    eventId                     INTEGER   NOT NULL,                    -- Event ID for which the event record API is called.
    eventSyncId                 INTEGER                                -- CUDA Event Sync ID to link event record API to related synchronization APIs.
)''',
    'CUPTI_ACTIVITY_KIND_RUNTIME': '''CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER   NOT NULL,                    -- Event end timestamp (ns).
    eventClass                  INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    correlationId               INTEGER,                               -- ID used to identify events that this function call has triggered.
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Function name
    returnValue                 INTEGER   NOT NULL,                    -- Return value of the function call.
    callchainId                 INTEGER                                -- REFERENCES CUDA_CALLCHAINS(id)
)''',
    'NVTX_EVENTS': '''CREATE TABLE NVTX_EVENTS (
    start                       INTEGER   NOT NULL,                    -- Event start timestamp (ns).
    end                         INTEGER,                               -- Event end timestamp (ns).
    eventType                   INTEGER   NOT NULL,                    -- REFERENCES ENUM_NSYS_EVENT_TYPE(id)
    rangeId                     INTEGER,                               -- Correlation ID returned from a nvtxRangeStart call.
    category                    INTEGER,                               -- User-controlled ID that can be used to group events.
    color                       INTEGER,                               -- Encoded ARGB color value.
    text                        TEXT,                                  -- Explicit name/text (non-registered string)
    globalTid                   INTEGER,                               -- Serialized GlobalId.
    endGlobalTid                INTEGER,                               -- Serialized GlobalId.
    textId                      INTEGER,                               -- REFERENCES StringIds(id) -- Registered NVTX domain/string
    domainId                    INTEGER,                               -- User-controlled ID that can be used to group events.
    uint64Value                 INTEGER,                               -- One of possible payload value union members.
    int64Value                  INTEGER,                               -- One of possible payload value union members.
    doubleValue                 REAL,                                  -- One of possible payload value union members.
    uint32Value                 INTEGER,                               -- One of possible payload value union members.
    int32Value                  INTEGER,                               -- One of possible payload value union members.
    floatValue                  REAL,                                  -- One of possible payload value union members.
    jsonTextId                  INTEGER,                               -- One of possible payload value union members.
    jsonText                    TEXT,                                  -- One of possible payload value union members.
    binaryData                  TEXT                                   -- Binary payload. See docs for format.
)''',
    'ENUM_NSYS_EVENT_TYPE': '''CREATE TABLE ENUM_NSYS_EVENT_TYPE (
    -- Nsys event type labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)''',
    'ENUM_CUPTI_SYNC_TYPE': '''CREATE TABLE ENUM_CUPTI_SYNC_TYPE (
    -- CUPTI synchronization type labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)''',
    'ENUM_CUDA_MEMCPY_OPER': '''CREATE TABLE ENUM_CUDA_MEMCPY_OPER (
    -- CUDA memcpy operation labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)''',
    'ENUM_CUDA_MEM_KIND': '''CREATE TABLE ENUM_CUDA_MEM_KIND (
    -- CUDA memory kind labels

    id                          INTEGER   NOT NULL   PRIMARY KEY,      -- Enum numerical value.
    name                        TEXT,                                  -- Enum symbol name.
    label                       TEXT                                   -- Enum human name.
)''',
    'TARGET_INFO_SESSION_START_TIME': '''CREATE TABLE TARGET_INFO_SESSION_START_TIME (
    utcEpochNs                  INTEGER,                               -- UTC Epoch timestamp at start of the capture (ns).
    utcTime                     TEXT,                                  -- Start of the capture in UTC.
    localTime                   TEXT,                                  -- Start of the capture in local time of target.
    systemClockNs               INTEGER                                -- Target system clock timestamp at start of the capture (ns).
)''',
    'TARGET_INFO_SYSTEM_ENV': '''CREATE TABLE TARGET_INFO_SYSTEM_ENV (
    globalVid                   INTEGER,                               -- Serialized GlobalId.
    devStateName                TEXT      NOT NULL,                    -- Device state name.
    name                        TEXT      NOT NULL,                    -- Property name.
    nameEnum                    INTEGER   NOT NULL,                    -- Property enum value.
    value                       TEXT      NOT NULL                     -- Property value.
)''',
    'PROCESSES': '''CREATE TABLE PROCESSES (
    -- Names and identifiers of processes captured in the report.

    globalPid                   INTEGER,                               -- Serialized GlobalId.
    pid                         INTEGER,                               -- The process ID.
    name                        TEXT                                   -- The process name.
)''',
    'ThreadNames': '''CREATE TABLE ThreadNames (
    nameId                      INTEGER   NOT NULL,                    -- REFERENCES StringIds(id) -- Thread name
    priority                    INTEGER,                               -- Priority of the thread.
    globalTid                   INTEGER                                -- Serialized GlobalId.
)''',
    'META_DATA_EXPORT': '''CREATE TABLE META_DATA_EXPORT (
    -- information about nsys export process

    name                        TEXT      NOT NULL,                    -- Name of meta-data record
    value                       TEXT                                   -- Value of meta-data record
)''',
    'TARGET_INFO_GPU': '''CREATE TABLE TARGET_INFO_GPU (
    vmId                        INTEGER   NOT NULL,                    -- Serialized GlobalId.
    id                          INTEGER   NOT NULL,                    -- Device ID.
    name                        TEXT,                                  -- Device name.
    busLocation                 TEXT,                                  -- PCI bus location.
    isDiscrete                  INTEGER,                               -- True if discrete, false if integrated.
    l2CacheSize                 INTEGER,                               -- Size of L2 cache (B).
    totalMemory                 INTEGER,                               -- Total amount of memory on the device (B).
    memoryBandwidth             INTEGER,                               -- Amount of memory transferred (B).
    clockRate                   INTEGER,                               -- Clock frequency (Hz).
    smCount                     INTEGER,                               -- Number of multiprocessors on the device.
    pwGpuId                     INTEGER,                               -- PerfWorks GPU ID.
    uuid                        TEXT,                                  -- Device UUID.
    luid                        INTEGER,                               -- Device LUID.
    chipName                    TEXT,                                  -- Chip name.
    cuDevice                    INTEGER,                               -- CUDA device ID.
    ctxswDevPath                TEXT,                                  -- GPU context switch device node path.
    ctrlDevPath                 TEXT,                                  -- GPU control device node path.
    revision                    INTEGER,                               -- Revision number.
    nodeMask                    INTEGER,                               -- Device node mask.
    constantMemory              INTEGER,                               -- Memory available on device for __constant__ variables (B).
    maxIPC                      INTEGER,                               -- Maximum instructions per count.
    maxRegistersPerBlock        INTEGER,                               -- Maximum number of 32-bit registers available per block.
    maxShmemPerBlock            INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerBlockOptin       INTEGER,                               -- Maximum optin shared memory per block.
    maxShmemPerSm               INTEGER,                               -- Maximum shared memory available per multiprocessor (B).
    maxRegistersPerSm           INTEGER,                               -- Maximum number of 32-bit registers available per multiprocessor.
    threadsPerWarp              INTEGER,                               -- Warp size in threads.
    asyncEngines                INTEGER,                               -- Number of asynchronous engines.
    maxWarpsPerSm               INTEGER,                               -- Maximum number of warps per multiprocessor.
    maxBlocksPerSm              INTEGER,                               -- Maximum number of blocks per multiprocessor.
    maxThreadsPerBlock          INTEGER,                               -- Maximum number of threads per block.
    maxBlockDimX                INTEGER,                               -- Maximum X-dimension of a block.
    maxBlockDimY                INTEGER,                               -- Maximum Y-dimension of a block.
    maxBlockDimZ                INTEGER,                               -- Maximum Z-dimension of a block.
    maxGridDimX                 INTEGER,                               -- Maximum X-dimension of a grid.
    maxGridDimY                 INTEGER,                               -- Maximum Y-dimension of a grid.
    maxGridDimZ                 INTEGER,                               -- Maximum Z-dimension of a grid.
    computeMajor                INTEGER,                               -- Major compute capability version number.
    computeMinor                INTEGER,                               -- Minor compute capability version number.
    smMajor                     INTEGER,                               -- Major multiprocessor version number.
    smMinor                     INTEGER                                -- Minor multiprocessor version number.
)''',
}

# Enum rows (id, name, label) captured from the same file; event types only the NVTX ones.
ENUM_ROWS: dict[str, list[tuple[int, str, str]]] = {
    'ENUM_NSYS_EVENT_TYPE': [
        (32, 'NvtxEvents', 'NvtxEvents'),
        (33, 'NvtxCategory', 'NvtxCategory'),
        (34, 'NvtxMark', 'NvtxMark'),
        (35, 'NvtxPushRange', 'NvtxPushRange'),
        (36, 'NvtxPopRange', 'NvtxPopRange'),
        (37, 'NvtxStartRange', 'NvtxStartRange'),
        (38, 'NvtxEndRange', 'NvtxEndRange'),
        (39, 'NvtxThread', 'NvtxThread'),
        (59, 'NvtxPushPopRange', 'NvtxPushPopRange'),
        (60, 'NvtxStartEndRange', 'NvtxStartEndRange'),
        (64, 'NvtxtCategory', 'NvtxtCategory'),
        (65, 'NvtxtMark', 'NvtxtMark'),
        (66, 'NvtxtPushRange', 'NvtxtPushRange'),
        (67, 'NvtxtPopRange', 'NvtxtPopRange'),
        (68, 'NvtxtStartRange', 'NvtxtStartRange'),
        (69, 'NvtxtEndRange', 'NvtxtEndRange'),
        (70, 'NvtxtPushPopRange', 'NvtxtPushPopRange'),
        (71, 'NvtxtStartEndRange', 'NvtxtStartEndRange'),
        (72, 'NvtxtMetaThread', 'NvtxtMetaThread'),
        (73, 'NvtxtMetaProcess', 'NvtxtMetaProcess'),
        (74, 'NvtxtMetaFileDisplay', 'NvtxtMetaFileDisplay'),
        (75, 'NvtxDomainCreate', 'NvtxDomainCreate'),
        (76, 'NvtxDomainDestroy', 'NvtxDomainDestroy'),
        (97, 'NvtxNameCudaDevice', 'NvtxNameCudaDevice'),
        (98, 'NvtxNameCudaContext', 'NvtxNameCudaContext'),
        (99, 'NvtxNameCudaStream', 'NvtxNameCudaStream'),
    ],
    'ENUM_CUPTI_SYNC_TYPE': [
        (0, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN', 'Unknown'),
        (1, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE', 'Event sync'),
        (2, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT', 'Stream wait sync'),
        (3, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE', 'Stream sync'),
        (4, 'CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE', 'Context sync'),
    ],
    'ENUM_CUDA_MEMCPY_OPER': [
        (0, 'CUDA_MEMCPY_KIND_UNKNOWN', 'Unknown'),
        (1, 'CUDA_MEMCPY_KIND_HTOD', 'Host-to-Device'),
        (2, 'CUDA_MEMCPY_KIND_DTOH', 'Device-to-Host'),
        (3, 'CUDA_MEMCPY_KIND_HTOA', 'Host-to-Array'),
        (4, 'CUDA_MEMCPY_KIND_ATOH', 'Array-to-Host'),
        (5, 'CUDA_MEMCPY_KIND_ATOA', 'Array-to-Array'),
        (6, 'CUDA_MEMCPY_KIND_ATOD', 'Array-to-Device'),
        (7, 'CUDA_MEMCPY_KIND_DTOA', 'Device-to-Array'),
        (8, 'CUDA_MEMCPY_KIND_DTOD', 'Device-to-Device'),
        (9, 'CUDA_MEMCPY_KIND_HTOH', 'Host-to-Host'),
        (10, 'CUDA_MEMCPY_KIND_PTOP', 'Peer-to-Peer'),
        (11, 'CUDA_MEMCPY_KIND_UVM_HTOD', 'Unified Host-to-Device'),
        (12, 'CUDA_MEMCPY_KIND_UVM_DTOH', 'Unified Device-to-Host'),
        (13, 'CUDA_MEMCPY_KIND_UVM_DTOD', 'Unified Device-to-Device'),
    ],
    'ENUM_CUDA_MEM_KIND': [
        (0, 'CUDA_MEMOPR_MEMORY_KIND_PAGEABLE', 'Pageable'),
        (1, 'CUDA_MEMOPR_MEMORY_KIND_PINNED', 'Pinned'),
        (2, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE', 'Device'),
        (3, 'CUDA_MEMOPR_MEMORY_KIND_ARRAY', 'Array'),
        (4, 'CUDA_MEMOPR_MEMORY_KIND_MANAGED', 'Managed'),
        (5, 'CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC', 'Device Static'),
        (6, 'CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC', 'Managed Static'),
        (7, 'CUDA_MEMOPR_MEMORY_KIND_UNKNOWN', 'Unknown'),
    ],
}


if __name__ == "__main__":
    import sys

    write_bad_corpus(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data" / "nsys_bad")
