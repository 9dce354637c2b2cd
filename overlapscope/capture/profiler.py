"""`capture()`: torch.profiler around a training loop, one gzipped Kineto trace per rank.

    with overlapscope.capture("runs/a", steps=5, skip_first=1) as cap:
        for batch in data:
            train_step(batch)
            cap.step()

The same `Session` drives the start-up hook that `overlapscope profile` injects (hook.py), which
calls `step()` from torch's global optimizer-step hook instead of from the script.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from torch.profiler import ProfilerActivity

from ..io_atomic import atomic_path
from . import labels, manifest

log = logging.getLogger(__name__)

ENV_OUT = "OVERLAPSCOPE_CAPTURE_OUT"
ENV_STEPS = "OVERLAPSCOPE_CAPTURE_STEPS"
ENV_SKIP_FIRST = "OVERLAPSCOPE_CAPTURE_SKIP_FIRST"
ENV_NSYS = "OVERLAPSCOPE_CAPTURE_NSYS"

# Kineto allows one profiler per process: a script's own capture() wins over the injected hook.
_user_capture_active = False
_hook_session: "Session | None" = None


@dataclass(frozen=True, kw_only=True)
class CaptureConfig:
    out_dir: Path
    """Directory for rank{R}.trace.json.gz (and the manifest)."""
    steps: int = 5
    """Steps recorded (ProfilerStep ranges in the trace)."""
    skip_first: int = 1
    """Steps run unprofiled first (compilation, allocator and communicator warm-up)."""
    warmup: int = 1
    """Steps profiled but discarded before recording: the profiler's own start-up cost lands there."""
    nvtx: bool = True
    """Also emit NVTX ranges for steps and labels (seen by nsys; no-ops otherwise)."""
    nsys: bool = False
    """Running under nsys: no Kineto (one CUPTI subscriber; nsys writes the trace), NVTX `step N`
    ranges mark the steps and cudaProfilerStart/Stop bracket the recorded ones (nsys's capture range)."""
    record_shapes: bool = True

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.skip_first < 0 or self.warmup < 0:
            raise ValueError("skip_first and warmup must be >= 0")


def current_rank() -> int:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    rank = os.environ.get("RANK", "")
    return int(rank) if rank.isdigit() else 0


class Session:
    """One profiling run with a fixed schedule; writes its trace when the recorded steps are done or at stop().

    Kineto mode: torch.profiler with schedule(skip_first, warmup, active=steps). nsys mode: no Kineto at
    all (nsys owns CUPTI and the trace); the session only marks steps with NVTX ranges `step N` and opens
    nsys's capture range (cudaProfilerStart/Stop) around the recorded steps.
    """

    def __init__(self, config: CaptureConfig) -> None:
        self.config = config
        self.steps_taken = 0
        self.exported = False
        self.discard = False
        self._prof: torch.profiler.profile | None = None
        self._active = False
        self._step_range: Any = None
        self._cuda_range_open = False

    @property
    def running(self) -> bool:
        return self._active

    def start(self) -> None:
        cfg = self.config
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        labels.set_nvtx(cfg.nvtx)
        self._active = True
        if not cfg.nsys:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self._prof = torch.profiler.profile(
                activities=activities,
                schedule=torch.profiler.schedule(skip_first=cfg.skip_first, wait=0, warmup=cfg.warmup,
                                                 active=cfg.steps, repeat=1),
                on_trace_ready=self._export,
                record_shapes=cfg.record_shapes,
            )
            self._prof.start()
        self._begin_step()

    def step(self) -> None:
        """Mark a step boundary; stops profiling once the recorded steps are written."""
        if not self._active:
            return
        self._end_step()
        self.steps_taken += 1
        if self._prof is not None:
            self._prof.step()  # exports (on_trace_ready) after the last recorded step
        elif self.steps_taken >= self._first_recorded_step() + self.config.steps:
            self._write_fragment(None)
        if self.exported:
            self.stop()
            return
        self._begin_step()

    def stop(self) -> None:
        """Stop profiling; a trace still recording is written with the steps it has."""
        if not self._active:
            return
        self._active = False
        self._end_step()
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()  # in the recording phase this calls _export with the steps so far
        elif not self.exported and not self.discard:
            self._write_fragment(None)

    # -- internals --
    def _first_recorded_step(self) -> int:
        return self.config.skip_first + self.config.warmup

    def _begin_step(self) -> None:
        # the capture range opens before the step's NVTX range so nsys sees the range whole
        if (self.config.nsys and torch.cuda.is_available() and not self._cuda_range_open
                and self.steps_taken == self._first_recorded_step()):
            torch.cuda.profiler.start()
            self._cuda_range_open = True
        self._step_range = labels.range_start(f"step {self.steps_taken}")

    def _end_step(self) -> None:
        labels.range_end(self._step_range)
        self._step_range = None
        last = self._first_recorded_step() + self.config.steps - 1
        if self._cuda_range_open and (self.steps_taken >= last or not self._active):
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            self._cuda_range_open = False

    def _export(self, prof: torch.profiler.profile) -> None:
        if self.discard or self.exported:
            return
        out_dir = Path(self.config.out_dir)
        rank = current_rank()
        final = out_dir / manifest.trace_name(rank)
        # export_chrome_trace gzips when the name ends in .gz; the hidden .part name matches no trace glob
        with atomic_path(final, suffix=".gz") as part:
            prof.export_chrome_trace(str(part))
        self._write_fragment(final.name)
        log.info("rank %d: trace written to %s", rank, final)

    def _write_fragment(self, trace: str | None) -> None:
        self.exported = True
        rank = current_rank()
        recorded = min(self.config.steps, max(0, self.steps_taken - self._first_recorded_step()))
        info = manifest.rank_info(rank)
        info.update(trace=trace, steps_recorded=recorded, complete=recorded == self.config.steps)
        manifest.write_fragment(Path(self.config.out_dir), info)


class Capture:
    """Context manager returned by `capture()`; call `.step()` once per training step."""

    def __init__(self, config: CaptureConfig) -> None:
        launcher_out = os.environ.get(ENV_OUT)
        self.under_launcher = bool(launcher_out)
        if launcher_out and Path(launcher_out).resolve() != Path(config.out_dir).resolve():
            # `overlapscope profile --out X` decides where traces go, so its manifest finds them
            log.info("capture(): writing to the profile launcher's %s instead of %s", launcher_out, config.out_dir)
            config = dataclasses.replace(config, out_dir=Path(launcher_out),
                                         nsys=config.nsys or os.environ.get(ENV_NSYS) == "1")
        self.config = config
        self.session = Session(config)
        self._start = manifest.utc_now()

    def __enter__(self) -> "Capture":
        global _user_capture_active
        _user_capture_active = True
        if _hook_session is not None and _hook_session.running:
            log.info("capture(): the script profiles itself; the injected optimizer-step hook stands down")
            _hook_session.discard = True
            _hook_session.stop()
        self.session.start()
        return self

    def step(self) -> None:
        self.session.step()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        global _user_capture_active
        try:
            self.session.stop()
        finally:
            _user_capture_active = False
        if not self.under_launcher:
            self._write_manifest(clean=exc_type is None)

    def _write_manifest(self, *, clean: bool) -> None:
        import sys
        import torch.distributed as dist
        distributed = dist.is_available() and dist.is_initialized()
        if distributed and clean:
            dist.barrier()  # every rank's trace and fragment exist before rank 0 merges them
        if current_rank() == 0:
            manifest.finish_manifest(
                self.config.out_dir, command=[sys.executable, *sys.argv], start_time=self._start[0],
                start_time_ns=self._start[1], steps=self.config.steps, skip_first=self.config.skip_first,
                mode="nsys" if self.config.nsys else "kineto",
                world_size=dist.get_world_size() if distributed else 1)


def capture(out_dir: str | Path, steps: int = 5, skip_first: int = 1, nvtx: bool = True, *,
            warmup: int = 1, record_shapes: bool = True) -> Capture:
    """Profile `steps` training steps after `skip_first` (+ `warmup`) into `out_dir/rank{R}.trace.json.gz`.

    Step `skip_first + warmup` is the first one recorded; call `.step()` at the end of every step.
    """
    return Capture(CaptureConfig(out_dir=Path(out_dir), steps=steps, skip_first=skip_first,
                                 warmup=warmup, nvtx=nvtx, record_shapes=record_shapes))


def user_capture_active() -> bool:
    return _user_capture_active


def register_hook_session(session: "Session | None") -> None:
    global _hook_session
    _hook_session = session
