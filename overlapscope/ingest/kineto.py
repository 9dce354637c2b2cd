"""Kineto (PyTorch profiler Chrome-trace JSON) reader: one file, one rank, one event table.

GPU traces: kernels / memcpy / memset / cuda_sync on `stream:<id>` lanes, launched by the
cuda_runtime/driver call with the same correlation id. CPU (gloo) traces: the rule of DESIGN.md
"CPU (gloo) traces" - gloo transfers on the runloop workers are comm, main-thread ops that neither
are nor enclose a wait are compute.
"""
from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..core.intervals import innermost_containing
from . import classify, splits
from ..core.coded import Coded
from .classify import classify_kernels
from .comm_context import collective_conflicts, decide, launch_context
from .comm_rules import CommRule, is_comm_op, rule_set
from .comm_summary import summarize
from .kineto_cats import OLD_SCHEMA_CATS, check_unknown, normalized
from .kineto_checks import MAX_WORLD_SIZE, EventChecks, checked_events, checked_top
from .kineto_columns import ArgsWanted
from .kineto_parse import Columns, columns_of_document, no_gc, read_columns
from .kineto_parse import load_document, read_bytes  # noqa: F401 - re-exported: they lived here before
from .steps import DEFAULT_STEP_PATTERN, step_ranges, step_regex, steps_at
from ..core.table import ProcessGroup, RankMeta, RankTrace, coded_categorical, make_table

log = logging.getLogger(__name__)

DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync"}
# Host calls that launch device work, tied to it by correlation id: CUDA and ROCm (hip* calls under
# cuda_runtime), Intel XPU and PrivateUse1 backends (libkineto ActivityType names); their kernels
# are `kernel` events as CUDA's are.
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "xpu_runtime", "xpu_driver", "privateuse1_runtime", "privateuse1_driver")
CPU_CATS = {"cpu_op": "cpu_op", "user_annotation": "annotation"}
# Element sizes by dtype name, lower case: record_param_comms' `dtype` is a ScalarType name
# ("Float", "BFloat16", "Long"); an op's `Input type` is the C++ type torch prints ("float",
# "c10::BFloat16", "c10::Half", "long int", "unsigned char": seen in real traces).
DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "int64": 8, "short": 2, "int16": 2, "char": 1, "int8": 1,
    "byte": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1, "complexfloat": 8, "complexdouble": 16,
    "c10::half": 2, "c10::bfloat16": 2, "c10::float8_e4m3fn": 1, "c10::float8_e5m2": 1,
    "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
    "long int": 8, "short int": 2, "signed char": 1, "unsigned char": 1, "unsigned int": 4,
}
# Ops whose CPU time is spent waiting for a collective (DESIGN.md): they are never compute.
_WAIT_PREFIXES = ("c10d::", "_c10d_functional::", "record_param_comms", "gloo:", "FSDP::all_gather (")
_WAIT_SUFFIX = re.compile(r"^FSDP::\w*_wait\b")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
# The events whose args this reader reads (cols.arg, cols.args_dict): device work, its launches,
# and the ops it takes comm args or recorded shapes from (record_param_comms, nccl:*, c10d::*,
# gloo:*). The typed decode keeps no args of other events (kineto_parse.ArgsWanted).
_ARGS_OF_OPS = ("record_param_comms", "nccl:", "c10d::", "gloo:")
ARGS_WANTED = ArgsWanted(
    cats=frozenset(c for c in (*DEVICE_CATS, *LAUNCH_CATS, *OLD_SCHEMA_CATS)
                   if OLD_SCHEMA_CATS.get(c, c) in DEVICE_CATS or OLD_SCHEMA_CATS.get(c, c) in LAUNCH_CATS),
    name=lambda name: name.startswith(_ARGS_OF_OPS))


def rank_of(doc: dict[str, Any], path: Path) -> tuple[int | None, str]:
    info = doc.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"], "distributedInfo"
    m = _RANK_IN_NAME.search(path.name)
    if m:
        if int(m.group(1)) >= MAX_WORLD_SIZE:
            raise TraceError(f"the rank in the file name ({m.group(0)}) is not below {MAX_WORLD_SIZE}", path)
        return int(m.group(1)), "filename"
    return None, "order"


def read_kineto(path: str | Path, *, step_pattern: str = DEFAULT_STEP_PATTERN,
                comm_patterns: tuple[str, ...] = (), doc: dict[str, Any] | None = None) -> RankTrace:
    """One rank's event table from a Kineto trace file (or an already-parsed document)."""
    with no_gc():
        return _read(Path(path), step_pattern, comm_patterns, doc)


def _read(path: Path, step_pattern: str, comm_patterns: tuple[str, ...], doc: dict[str, Any] | None) -> RankTrace:
    cols = normalized(read_columns(path, ARGS_WANTED) if doc is None else columns_of_document(doc))
    # Every field used below is checked first (kineto_checks); unusable events are dropped, counted.
    info, base_ns, device_props = checked_top(cols.top, path)
    rank, rank_from = rank_of({"distributedInfo": info}, path)
    cols, start, dur, drops, checks = checked_events(cols, path, base_ns, DEVICE_CATS, LAUNCH_CATS)
    end = start + dur

    # Categories and names repeat: factorize once, decide per distinct value, map back by code.
    cats = cols.cat
    is_device = cats.isin(DEVICE_CATS)
    is_launch = cats.isin(LAUNCH_CATS)
    is_cpu = cats.isin(CPU_CATS)
    check_unknown(cols, set(DEVICE_CATS) | set(LAUNCH_CATS) | set(CPU_CATS), bool(is_device.any()), path)
    if not (is_device.any() or is_cpu.any()):
        raise TraceError("no device or CPU activity (no kernels, memcpy or CPU ops"
                         + (f"; {drops.summary()})" if drops.count else ")"), path)

    names = cols.name
    # step_ranges keeps only rows whose name fully matches the pattern: hand it just those.
    rx = step_regex(step_pattern)
    step_rows = is_cpu & names.map(lambda n: bool(rx.fullmatch(n)), bool)
    steps = step_ranges(names.values(step_rows), start[step_rows], end[step_rows], step_pattern, str(path))
    comm_meta: dict[str, Any] = {}
    if is_device.any():
        parts, comm_meta = _gpu_events(cols, cats, names, start, end, is_device, is_launch, is_cpu,
                                       rule_set(comm_patterns), checks)
    else:
        parts = _cpu_events(cols, cats, names, start, end, is_cpu)
    parts["step"] = steps_at(parts["launch_ns"], steps)
    events = make_table(-1 if rank is None else rank, step_pattern=step_pattern, **parts)
    meta = _meta(info, device_props, path, base_ns, comm_classification=comm_meta.get("comm_classification"),
                 stream_waits=_stream_waits(cols, cats, names, is_device),
                 extra={"dropped_events": drops.as_dict()} if drops.count else {})
    if drops.count:
        drops.warn(path)  # only once the trace is known to be usable: an error stays one line
    return RankTrace(rank=-1 if rank is None else rank, events=events, steps=steps, meta=meta,
                     device="gpu" if is_device.any() else "cpu", rank_from=rank_from)


def _meta(info: dict[str, Any], device_props: list[dict[str, Any]], path: Path, base_ns: int, *,
          extra: dict[str, Any], **facts: Any) -> RankMeta:
    """RankMeta from distributedInfo (backend, world size, pg_config) and deviceProperties (both
    checked by kineto_checks); `facts`: the comm classification and stream waits the reader found."""
    device_name = device_props[0].get("name") if device_props else None
    groups = []
    for pg in info.get("pg_config") or []:
        if not isinstance(pg, dict) or pg.get("pg_name") is None:
            continue
        ranks = pg.get("ranks")
        ranks = tuple(r for r in ranks if isinstance(r, int)) if isinstance(ranks, list) else ()
        size = len(ranks) if ranks else pg.get("pg_size") if isinstance(pg.get("pg_size"), int) else None
        groups.append(ProcessGroup(name=str(pg["pg_name"]), ranks=ranks, size=size, desc=str(pg.get("pg_desc") or "")))
    world_size = info.get("world_size")
    return RankMeta(
        source_format="kineto", source_file=str(path), device_name=device_name,
        backend=str(info["backend"]) if info.get("backend") is not None else None,
        world_size=world_size if isinstance(world_size, int) else None, process_groups=tuple(groups),
        clock="unix" if base_ns else "", clock_base_ns=base_ns, **facts,
        extra={**{k: info[k] for k in ("nccl_version",) if info.get(k) is not None}, **extra})


def _joined(*parts: tuple[np.ndarray, np.ndarray]) -> pd.Categorical:
    """The categorical of several (codes, distinct labels) parts laid end to end (a label may
    recur in several parts)."""
    codes, offset = [], 0
    for part_codes, uniques in parts:
        codes.append(part_codes + offset)
        offset += uniques.size
    labels = Coded.of(np.concatenate([u for _, u in parts]))  # merge labels the parts share
    return coded_categorical(labels.codes[np.concatenate(codes)], labels.uniques)


def _gpu_events(cols: Columns, cats: Coded, names: Coded, start, end, is_device, is_launch, is_cpu,
                rules: tuple[CommRule, ...], checks: EventChecks) -> tuple[dict[str, Any], dict[str, Any]]:
    dev = np.flatnonzero(is_device)
    cpu = np.flatnonzero(is_cpu)
    dev_l = dev.tolist()
    threads = cols.tid.relabel("thread:{}".format)
    dev_kind = cats.map(lambda c: DEVICE_CATS[c], object, dev)
    is_kernel = dev_kind == "kernel"
    streams = cols.arg(dev_l, "stream", None)
    checks.optional(streams, dev_l, "args.stream", frozenset({int, str}), "a stream id")
    dev_lane = Coded.of([f"stream:{s}" if s is not None else "stream:" + t
                         for s, t in zip(streams, cols.tid.values(dev).tolist())])
    corr = checks.ids(cols.arg(dev_l, "correlation", -1), dev_l, "args.correlation")

    # Launch of each device event: the runtime/driver call with the same correlation id.
    lau = np.flatnonzero(is_launch)
    lau_corr = checks.ids(cols.arg(lau.tolist(), "correlation", -1), lau, "args.correlation")
    order = np.argsort(lau_corr, kind="stable")
    lau_corr, lau = lau_corr[order], lau[order]
    pos = np.clip(np.searchsorted(lau_corr, corr), 0, max(lau.size - 1, 0))
    found = (lau.size > 0) & (lau_corr[pos] == corr) & (corr >= 0) if lau.size else np.zeros(corr.size, bool)
    launch_ns = np.full(dev.size, -1, dtype=np.int64)
    launch_ns[found] = start[lau[pos[found]]]
    # The launching thread's lane, as a code into the thread lanes plus one for "" (no launch found).
    launch_labels = np.append(threads.uniques, "")
    launch_code = np.full(dev.size, threads.uniques.size, dtype=np.int64)
    launch_code[found] = threads.codes[lau[pos[found]]]

    # What counts as comm (DESIGN.md "What counts as what"): a rule on the kernel's name, or a
    # launch inside a communication op; the collective is the one that op names.
    ops = cpu[names.map(is_comm_op, bool, cpu)]
    context = launch_context(threads.values(ops), start[ops], end[ops], names.values(ops),
                             launch_labels[launch_code], launch_ns)
    rule_of, name_coll = names.map_parts(lambda u: classify_kernels(u, rules), dev)
    verdict = decide(dev_kind, rule_of, name_coll, context, rules)
    dev_kind = verdict.kind
    is_comm = dev_kind == "comm"
    collective = verdict.collective
    nbytes = np.full(dev.size, -1, dtype=np.int64)
    group = np.full(dev.size, "", dtype=object)
    seq = np.full(dev.size, -1, dtype=np.int64)
    send_split = np.full(dev.size, "", dtype=object)
    recv_split = np.full(dev.size, "", dtype=object)
    is_copy = np.isin(verdict.kind, ("memcpy", "memset")) | (is_comm & ~is_kernel)
    copies = np.flatnonzero(is_copy)
    nbytes[copies] = checks.ids(cols.arg(dev[copies].tolist(), "bytes", -1), dev[copies], "args.bytes")
    comm_idx = np.flatnonzero(is_comm)
    if comm_idx.size:
        args = [cols.args_dict(i) for i in dev[comm_idx].tolist()]
        # Kernels of newer traces carry the record_param_comms args themselves; else take them from
        # the innermost record_param_comms around the launch.
        rpc = cpu[names.values(cpu) == "record_param_comms"]
        if rpc.size:
            hit = innermost_containing(threads.values(rpc), start[rpc], end[rpc],
                                       launch_labels[launch_code[comm_idx]], launch_ns[comm_idx])
            for j, h in enumerate(hit):
                if h >= 0 and "Collective name" not in args[j]:
                    args[j] = cols.args_dict(int(rpc[h]))
        checks.comm_args(args, dev[comm_idx])
        for j, a in enumerate(args):
            k = comm_idx[j]
            if not verdict.op_collective[k]:
                # No op names the collective: record_param_comms' name does, else the kernel's.
                collective[k] = classify.collective_from_arg(a.get("Collective name")) or collective[k]
            size = _message_bytes(a, collective[k])
            if size >= 0 or not is_copy[k]:  # a copy the collective launched keeps its own size
                nbytes[k] = size
            pg = a.get("Process Group Name")
            group[k] = str(pg) if pg is not None else ""
            s = a.get("Seq", a.get("seq"))
            seq[k] = int(s) if isinstance(s, int) else -1
            if collective[k] == "all_to_all":
                send_split[k], recv_split[k] = splits.from_param_comms(a, DTYPE_BYTES)
        # No record_param_comms size: the launching nccl:* op's first input tensor (Input Dims,
        # Input type) is nccl-tests' S for every collective but all_gather (its input is one shard).
        op_of = context.op_index[comm_idx]
        todo = np.flatnonzero((nbytes[comm_idx] < 0) & (op_of >= 0) & (collective[comm_idx] != "all_gather"))
        for j in todo.tolist():
            op = int(ops[op_of[j]])
            if names.values(np.array([op]))[0].startswith("nccl:"):
                nbytes[comm_idx[j]] = _input_bytes(cols.args_dict(op))

    dev_names = names.values(dev)
    comm_meta = {"comm_classification": {
        **summarize(dev_names, dev_kind, dev_lane.values(np.arange(dev.size)), start[dev], end[dev], verdict.comm_by),
        "collective_conflicts": collective_conflicts(dev_names[is_comm], verdict.name_collective[is_comm],
                                                     collective[is_comm])}}

    # String columns go to the table as categoricals built from codes: no string hashed per row.
    # Device rows are factorized (few); CPU rows take their kind from the category's code, and
    # "" for collective and group.
    cpu_kind = cats.relabel(lambda c: CPU_CATS.get(c, ""))
    cpu_lane = (threads.codes[cpu], threads.uniques)
    no_value = (np.zeros(cpu.size, dtype=np.int64), np.array([""], dtype=object))
    return {
        "lane": _joined((dev_lane.codes, dev_lane.uniques), cpu_lane),
        "kind": _joined(Coded.of(dev_kind).parts(), (cpu_kind.codes[cpu], cpu_kind.uniques)),
        "name": names.categorical(np.concatenate([dev, cpu])),
        "start_ns": np.concatenate([start[dev], start[cpu]]),
        "end_ns": np.concatenate([end[dev], end[cpu]]),
        "collective": _joined(Coded.of(collective).parts(), no_value),
        "bytes": np.concatenate([nbytes, np.full(cpu.size, -1, np.int64)]),
        "group": _joined(Coded.of(group).parts(), no_value),
        "seq": np.concatenate([seq, np.full(cpu.size, -1, np.int64)]),
        "correlation": np.concatenate([corr, np.full(cpu.size, -1, np.int64)]),
        "launch_ns": np.concatenate([launch_ns, start[cpu]]),
        "launch_lane": coded_categorical(np.concatenate([launch_code, threads.codes[cpu]]), launch_labels),
        "send_split_bytes": _joined(Coded.of(send_split).parts(), no_value),
        "recv_split_bytes": _joined(Coded.of(recv_split).parts(), no_value),
    }, comm_meta


def _stream_waits(cols: Columns, cats: Coded, names: Coded, is_device: np.ndarray) -> dict[str, list] | None:
    """CUDA stream waits on events (Kineto cuda_sync "Stream Wait Event", recorded with the profiler's
    enable_cuda_sync_events): per wait the waiting lane, its cudaStreamWaitEvent correlation, the lane
    the event was recorded on and the cudaEventRecord correlation - the dependency graph's event edges."""
    rows = np.flatnonzero(is_device & cats.isin(("cuda_sync",)))
    rows = rows[names.values(rows) == "Stream Wait Event"] if rows.size else rows
    if rows.size == 0:
        return None
    idx = rows.tolist()
    stream, corr = cols.arg(idx, "stream", None), cols.arg(idx, "correlation", None)
    waited, record = cols.arg(idx, "wait_on_stream", None), cols.arg(idx, "wait_on_cuda_event_record_corr_id", None)
    keep = [i for i in range(len(idx)) if all(isinstance(v[i], int) and v[i] >= 0
                                             for v in (stream, corr, waited, record))]
    if not keep:
        return None
    return {"lane": [f"stream:{stream[i]}" for i in keep], "corr": [corr[i] for i in keep],
            "wait_lane": [f"stream:{waited[i]}" for i in keep], "record_corr": [record[i] for i in keep]}


def _input_bytes(args: dict[str, Any]) -> int:
    """Bytes of an op's first input tensor from its recorded shapes; -1 unknown."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not (isinstance(dims, list) and dims and isinstance(types, list) and types):
        return -1
    shape, size = dims[0], DTYPE_BYTES.get(str(types[0]).lower())
    if size is None or not isinstance(shape, list) or not all(isinstance(v, int) and v >= 0 for v in shape):
        return -1
    return math.prod(shape) * size


def _message_bytes(args: dict[str, Any], collective: str) -> int:
    """nccl-tests' S: the whole tensor (Out for all_gather, In for reduce_scatter), else In."""
    size = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
    key = "Out msg nelems" if collective == "all_gather" else "In msg nelems"
    nelems = args.get(key)
    if size is None or not isinstance(nelems, int):
        return -1
    return nelems * size


def _cpu_events(cols: Columns, cats: Coded, names: Coded, start, end, is_cpu) -> dict[str, Any]:
    cpu = np.flatnonzero(is_cpu)
    name = names.values(cpu)
    tid = cols.tid.values(cpu)
    s, e = start[cpu], end[cpu]
    kind = cats.map(lambda c: CPU_CATS[c], object, cpu)

    is_gloo = names.map(lambda n: n.startswith("gloo:"), bool, cpu)
    is_p2p = names.map(lambda n: n in ("gloo:send", "gloo:recv"), bool, cpu)
    is_wait = names.map(lambda n: n.startswith(_WAIT_PREFIXES) or bool(_WAIT_SUFFIX.match(n)), bool, cpu)
    is_enqueue = names.map(lambda n: n.startswith("c10d::"), bool, cpu)

    # Comm workers are found by their gloo:* transfers (thread names are unreliable); the main
    # thread's gloo:send/recv are pipeline p2p that span post to wait.
    workers = np.unique(tid[is_gloo & ~is_p2p])
    on_worker = np.isin(tid, workers)
    comm = is_gloo
    encloses_wait = _encloses(tid, s, e, is_wait)
    compute = (kind == "cpu_op") & ~on_worker & ~is_wait & ~encloses_wait
    kind = kind.copy()
    kind[compute] = "compute"
    kind[comm] = "comm"

    lane = cols.tid.relabel("thread:{}".format).values(cpu)
    launch_ns, launch_lane = s.copy(), lane.copy()
    collective = np.where(comm, names.map_many(classify.collectives_of, cpu), "").astype(object)
    other_backend = names.map(lambda n: n.startswith(_OTHER_BACKENDS), bool, cpu)
    gloo_enqueue = ~on_worker & is_enqueue & ~_encloses(tid, s, e, other_backend)
    worker, enqueue = _link_worker_transfers(comm & on_worker, gloo_enqueue, name, s, lane, launch_ns,
                                             launch_lane, collective)
    send_split = np.full(cpu.size, "", dtype=object)
    recv_split = np.full(cpu.size, "", dtype=object)
    a2a = name[enqueue] == "c10d::alltoall_base_" if enqueue.size else np.zeros(0, bool)
    for w, q in zip(worker[a2a].tolist(), enqueue[a2a].tolist()):
        send_split[w], recv_split[w] = splits.from_alltoall_base(cols.args_dict(int(cpu[q])), DTYPE_BYTES)
    # gloo records no message size, but its gloo:<op> ranges carry the recorded shapes of their
    # tensor (Input Dims, Input type: [[65536]], ['float'] for a 0.25 MB DDP bucket): nccl-tests'
    # S for every collective but all_gather, whose input is one shard. Loops over comm events only.
    nbytes = np.full(cpu.size, -1, dtype=np.int64)
    for k in np.flatnonzero(comm & (collective != "all_gather")).tolist():
        nbytes[k] = _input_bytes(cols.args_dict(int(cpu[k])))
    # An all-gather's whole tensor is the first input of the op that enqueued it when that op is
    # c10d::_allgather_base_ (output first: [[73984], [36992]] for a 2-rank FSDP2 all-gather).
    gathers = name[enqueue] == "c10d::_allgather_base_" if enqueue.size else np.zeros(0, bool)
    for w, q in zip(worker[gathers].tolist(), enqueue[gathers].tolist()):
        nbytes[w] = _input_bytes(cols.args_dict(int(cpu[q])))
    return {"lane": lane, "kind": kind, "name": name, "start_ns": s, "end_ns": e, "bytes": nbytes,
            "collective": collective, "launch_ns": launch_ns, "launch_lane": launch_lane,
            "send_split_bytes": send_split, "recv_split_bytes": recv_split}


def _encloses(tid: np.ndarray, s: np.ndarray, e: np.ndarray, is_wait: np.ndarray) -> np.ndarray:
    """Does each op enclose (on its own thread) a wait event? Uses the leaf waits: a nested op
    encloses some wait iff the first leaf wait starting at or after it ends inside it."""
    out = np.zeros(s.size, dtype=bool)
    for t in np.unique(tid[is_wait]):
        on_t = tid == t
        w = np.flatnonzero(on_t & is_wait)
        order = np.lexsort((-e[w], s[w]))
        ws, we = s[w][order], e[w][order]
        leaf = np.ones(ws.size, dtype=bool)
        leaf[:-1] = ~((ws[1:] < we[:-1]) | ((ws[1:] == ws[:-1]) & (we[1:] <= we[:-1])))
        ws, we = ws[leaf], we[leaf]
        ops = np.flatnonzero(on_t)
        j = np.searchsorted(ws, s[ops], side="left")
        ok = j < ws.size
        jj, op_s, op_e = j[ok], s[ops[ok]], e[ops[ok]]
        starts_inside = (ws[jj] < op_e) | (ws[jj] == op_s)
        out[ops[ok]] = starts_inside & (we[jj] <= op_e)
    return out


# gloo performs reduce-scatter as an all-reduce of the full tensor: those enqueues feed gloo:all_reduce.
_GLOO_RUNS_AS = {"reduce_scatter": "all_reduce"}
# Ranges that say an enqueue ran on another backend (an NCCL collective launches `nccl:<op>`).
_OTHER_BACKENDS = ("nccl:", "ucc:", "mpi:", "xccl:", "hccl:")


def _link_worker_transfers(worker: np.ndarray, enqueue: np.ndarray, name, s, lane, launch_ns, launch_lane,
                           collective) -> tuple[np.ndarray, np.ndarray]:
    """Tie each gloo transfer on a runloop worker to the c10d op that enqueued it on the main thread.

    gloo runs its work queue in FIFO order, so the k-th transfer of a collective to start is the
    k-th gloo enqueue of that collective: an enqueue pairs only with a transfer of its own backend
    (`enqueue` excludes ops that ran on another one) and collective. The enqueue names the
    collective the user asked for (FSDP2's reduce-scatter runs as gloo:all_reduce).
    Returns the linked (transfer, enqueue) positions.
    """
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    w_all = np.flatnonzero(worker)
    enq_all = np.flatnonzero(enqueue)
    if w_all.size == 0 or enq_all.size == 0:
        return none
    enq_coll_all = classify.collectives_of(list(name[enq_all]))
    runs_as = np.array([_GLOO_RUNS_AS.get(c, c) for c in enq_coll_all], dtype=object)
    linked_w, linked_q, unordered = [], [], 0
    for coll in np.unique(collective[w_all]):
        w = w_all[collective[w_all] == coll]
        take = runs_as == coll
        enq, enq_coll = enq_all[take], enq_coll_all[take]
        if w.size == 0 or enq.size == 0 or not coll:
            continue
        w = w[np.argsort(s[w], kind="stable")]
        order = np.argsort(s[enq], kind="stable")
        enq, enq_coll = enq[order], enq_coll[order]
        # Transfers that started before the first enqueue in the trace were enqueued before profiling.
        w = w[int(np.searchsorted(s[w], s[enq[0]], side="left")):]
        n = min(w.size, enq.size)
        w, enq, enq_coll = w[:n], enq[:n], enq_coll[:n]
        consistent = s[enq] <= s[w]
        unordered += int((~consistent).sum())
        w, enq, enq_coll = w[consistent], enq[consistent], enq_coll[consistent]
        launch_ns[w] = s[enq]
        launch_lane[w] = lane[enq]
        collective[w] = enq_coll
        linked_w.append(w)
        linked_q.append(enq)
    if unordered:
        log.warning("gloo transfers do not follow their enqueues in order; %d left unlinked", unordered)
    if not linked_w:
        return none
    w, enq = np.concatenate(linked_w), np.concatenate(linked_q)
    order = np.argsort(w, kind="stable")
    return w[order], enq[order]
