"""The hostile-input corpus: small traces with one thing wrong each, built from a known-good base.

Each case is a mutation of the base Kineto document or the base nsys export; test_hostile_inputs.py
pins what overlapscope must answer for it: the exact one-line error, or the exact numbers (and the
warning) after a counted drop. The base traces' own numbers are known to the ns.
"""
from __future__ import annotations

import copy
import sqlite3
from pathlib import Path
from typing import Any, Callable

from kineto_builder import KinetoTrace
from nsys_builder import Export, Kernel, Range

BASE_NS = 1_700_000_000_000_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
COMM_ARGS = {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "dtype": "Float",
             "Process Group Name": "0", "Seq": 1}


def base_kineto() -> dict[str, Any]:
    """Two steps of 10 µs; per step a 3 µs gemm and a 3 µs all-reduce overlapping it by 1 µs.

    Per step: compute 3000, comm 3000, exposed comm 2000, idle = window - 5000. Event order (X
    event #): 0-1 the steps, then launch/kernel pairs: 2/3 gemm, 4/5 nccl, 6/7 gemm, 8/9 nccl.
    """
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE_NS)
    t.step(1, 0, 10_000)
    t.step(2, 10_000, 20_000)
    for offset in (0, 10_000):
        t.kernel("void gemm()", offset + 2_000, offset + 5_000)
        t.kernel(NCCL, offset + 4_000, offset + 7_000, **COMM_ARGS)
    return t.document()


def set_event(index: int, key: str, value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        if value is _DELETE:
            del x[index][key]
        else:
            x[index][key] = value
    return mutate


def set_arg(index: int, key: str, value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        x[index]["args"][key] = value
    return mutate


def set_top(path: tuple[str, ...], value: Any) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


def duplicate_events(*indices: int) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        doc["traceEvents"].extend(copy.deepcopy(x[i]) for i in indices)
    return mutate


def add_step(number: int, start_ns: int, end_ns: int) -> Callable[[dict], None]:
    def mutate(doc: dict) -> None:
        doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{number}", "pid": 1,
                                   "tid": 100, "ts": start_ns / 1000, "dur": (end_ns - start_ns) / 1000, "args": {}})
    return mutate


DEEP = "__nested_lists__"
DEEP_DEPTH = 100_000


def deep_args(doc: dict) -> None:
    """An args value nested 100,000 lists deep (written as text: no encoder recurses that far)."""
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    x[3]["args"]["deep"] = DEEP


_DELETE = object()


def write_kineto(path: Path, mutate: Callable[[dict], None] | None = None) -> Path:
    import json  # not orjson: it cannot write the integers beyond 64 bits some cases need

    doc = base_kineto()
    if mutate:
        mutate(doc)
    path.write_text(json.dumps(doc).replace(f'"{DEEP}"', "[" * DEEP_DEPTH + "]" * DEEP_DEPTH))
    return path


# ---- nsys ----

def base_nsys() -> Export:
    """One process; step 1 and 2 as NVTX ranges; per step a gemm and an all-reduce overlapping it by 1 µs."""
    kernels, ranges = [], []
    for n, offset in ((1, 0), (2, 10_000)):
        ranges.append(Range(10, f"ProfilerStep#{n}", offset, offset + 10_000))
        kernels.append(Kernel(10, 0, 7, "void gemm()", offset + 2_000, offset + 5_000, launch=offset + 1_000))
        kernels.append(Kernel(10, 0, 13, NCCL, offset + 4_000, offset + 7_000, launch=offset + 1_500))
    return Export(processes={10: "python3"}, kernels=kernels, ranges=ranges)


def write_nsys(path: Path, *sql: str) -> Path:
    base_nsys().write(path)
    conn = sqlite3.connect(path)
    try:
        for statement in sql:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    return path


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
# The exporter declares most columns NOT NULL: a copy without the constraints takes the NULLs a
# damaged or hand-made export can hold.
UNCONSTRAINED = (f"CREATE TABLE k2 AS SELECT * FROM {KERNEL}", f"DROP TABLE {KERNEL}",
                 f"ALTER TABLE k2 RENAME TO {KERNEL}")
NCCL_ROW = f"(SELECT rowid FROM {KERNEL} WHERE streamId = 13 ORDER BY start LIMIT 1)"
