"""Hand-built Kineto traces with answers known to the nanosecond.

`KinetoTrace` writes the same structure the PyTorch profiler does: X events with ts/dur in µs, GPU
kernels linked to a cuda_runtime launch by correlation id, ProfilerStep ranges on the main thread.
Times are given in integer ns; `float_ts=True` writes µs floats with three decimals (newer Kineto),
`float_ts=False` requires whole µs and writes ints (older Kineto).
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

MAIN_TID = 100
GPU_PID = 0


@dataclass
class KinetoTrace:
    rank: int | None = 0
    world_size: int = 2
    float_ts: bool = True
    base_ns: int | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 1000

    def _us(self, ns: int) -> Any:
        if self.float_ts:
            return round(ns / 1000, 3)
        assert ns % 1000 == 0, "int-µs traces need whole microseconds"
        return ns // 1000

    def x(self, cat: str, name: str, start_ns: int, end_ns: int, *, pid: Any = 1, tid: Any = MAIN_TID,
          **args: Any) -> dict[str, Any]:
        ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
              "ts": self._us(start_ns), "dur": self._us(end_ns - start_ns), "args": dict(args)}
        self.events.append(ev)
        return ev

    def step(self, n: int, start_ns: int, end_ns: int) -> None:
        self.x("user_annotation", f"ProfilerStep#{n}", start_ns, end_ns)

    def annotation(self, name: str, start_ns: int, end_ns: int, tid: int = MAIN_TID) -> None:
        self.x("user_annotation", name, start_ns, end_ns, tid=tid)

    def cpu_op(self, name: str, start_ns: int, end_ns: int, tid: int = MAIN_TID, **args: Any) -> None:
        self.x("cpu_op", name, start_ns, end_ns, tid=tid, **args)

    def kernel(self, name: str, start_ns: int, end_ns: int, *, stream: int = 7, launch_ns: int | None = None,
               cat: str = "kernel", launch_tid: int = MAIN_TID, **args: Any) -> None:
        """A device event; launched at launch_ns (default: 1 µs before it starts) by cudaLaunchKernel."""
        self._corr += 1
        launch = start_ns - 1000 if launch_ns is None else launch_ns
        self.x("cuda_runtime", "cudaLaunchKernel", launch, launch + (500 if self.float_ts else 1000), tid=launch_tid,
               correlation=self._corr)
        self.x(cat, name, start_ns, end_ns, pid=GPU_PID, tid=stream, stream=stream, device=0,
               correlation=self._corr, **args)

    def memcpy(self, start_ns: int, end_ns: int, nbytes: int = 1024, **kw: Any) -> None:
        self.kernel("Memcpy DtoD (Device -> Device)", start_ns, end_ns, cat="gpu_memcpy", bytes=nbytes, **kw)

    def sync(self, start_ns: int, end_ns: int, stream: int = 7, *, launch_ns: int | None = None,
             launch_tid: int = MAIN_TID) -> None:
        """A CUDA synchronization, tied by correlation to the cudaStreamSynchronize call that waited."""
        self._corr += 1
        launch = start_ns if launch_ns is None else launch_ns
        self.x("cuda_runtime", "cudaStreamSynchronize", launch, end_ns, tid=launch_tid, correlation=self._corr)
        self.x("cuda_sync", "Stream Sync", start_ns, end_ns, pid=GPU_PID, tid=stream, stream=stream,
               correlation=self._corr)

    def record_event(self, stream: int, at_ns: int) -> int:
        """A cudaEventRecord on `stream` called at at_ns; returns its correlation id."""
        self._corr += 1
        self.x("cuda_runtime", "cudaEventRecord", at_ns, at_ns + 500, correlation=self._corr)
        return self._corr

    def wait_event(self, stream: int, wait_on_stream: int, record_corr: int, at_ns: int) -> None:
        """`stream` waits for the event recorded (correlation record_corr) on wait_on_stream: the
        cudaStreamWaitEvent call and the cuda_sync "Stream Wait Event" Kineto writes with
        enable_cuda_sync_events (libkineto CuptiActivity.cpp eventSyncInfo)."""
        self._corr += 1
        self.x("cuda_runtime", "cudaStreamWaitEvent", at_ns, at_ns + 500, correlation=self._corr)
        self.x("cuda_sync", "Stream Wait Event", at_ns + 600, at_ns + 700, pid=GPU_PID, tid=stream, stream=stream,
               correlation=self._corr, wait_on_stream=wait_on_stream, wait_on_cuda_event_record_corr_id=record_corr,
               wait_on_cuda_event_id=1)

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": list(self.events)}
        if self.rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size}
        if self.base_ns is not None:
            doc["baseTimeNanoseconds"] = self.base_ns
        return doc

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        data = orjson.dumps(self.document())
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path
