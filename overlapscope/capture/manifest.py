"""The run manifest: what ran, where, with which layout, and which ranks left a trace.

Each rank writes a small fragment (`.overlapscope-rank{R}.meta`, JSON, a name no trace reader
globs) when it exports its trace; whoever finishes the run (the `profile` launcher, or rank 0 of a
script that uses `capture()`) merges the fragments into `manifest.json` and removes them.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Any

from ..io_atomic import write_text

log = logging.getLogger(__name__)

SCHEMA = "overlapscope.manifest/1"
MANIFEST_NAME = "manifest.json"
FRAGMENT_RE = re.compile(r"^\.overlapscope-rank(\d+)\.meta$")
# Kineto traces, or the SQLite exports of `profile --nsys`
TRACE_RE = re.compile(r"^rank(\d+)\.(?:trace\.json\.gz|sqlite)$")

_LAYOUT: dict[str, Any] = {}


def set_layout(**layout: Any) -> None:
    """Record the parallel layout and knobs of this run (e.g. parallel="pp", schedule="1f1b",
    stages=2, microbatches=8); it lands in manifest.json["layout"] so analyzers can compare with theory."""
    _LAYOUT.update(layout)


def layout() -> dict[str, Any]:
    return dict(_LAYOUT)


def trace_name(rank: int) -> str:
    return f"rank{rank}.trace.json.gz"


def fragment_name(rank: int) -> str:
    return f".overlapscope-rank{rank}.meta"


def overlapscope_version() -> str:
    try:
        import overlapscope
        version = getattr(overlapscope, "__version__", None)
        if version:
            return str(version)
    except ImportError:  # pragma: no cover
        pass
    try:
        from importlib.metadata import PackageNotFoundError, version as dist_version
        return dist_version("overlapscope")
    except PackageNotFoundError:
        return "unknown"


def utc_now() -> tuple[str, int]:
    """(ISO-8601 UTC string, epoch ns) of now."""
    ns = time.time_ns()
    iso = dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat(timespec="milliseconds")
    return iso, ns


def rank_info(rank: int) -> dict[str, Any]:
    """Facts one rank can know about itself: host, device, backend, versions, layout."""
    import torch
    import torch.distributed as dist

    info: dict[str, Any] = {
        "rank": rank, "host": socket.gethostname(), "pid": os.getpid(),
        "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "nccl_version": None, "backend": None, "world_size": None,
        "device": "cpu", "device_name": _cpu_name(), "layout": layout(),
    }
    if dist.is_available() and dist.is_initialized():
        info["backend"] = str(dist.get_backend())
        info["world_size"] = dist.get_world_size()
    elif os.environ.get("WORLD_SIZE", "").isdigit():
        info["world_size"] = int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        info["device"] = f"cuda:{index}"
        info["device_name"] = torch.cuda.get_device_name(index)
        try:
            info["nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):  # torch built without NCCL
            pass
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write through io_atomic, so a reader never sees half a file."""
    write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_fragment(out_dir: Path, info: dict[str, Any]) -> None:
    write_json_atomic(Path(out_dir) / fragment_name(int(info["rank"])), info)


def read_fragments(out_dir: Path) -> dict[int, dict[str, Any]]:
    frags: dict[int, dict[str, Any]] = {}
    for p in Path(out_dir).iterdir():
        m = FRAGMENT_RE.match(p.name)
        if not m:
            continue
        try:
            frags[int(m.group(1))] = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as exc:  # a rank killed mid-write: keep going
            log.warning("unreadable rank fragment %s: %s", p, exc)
    return frags


def traces_present(out_dir: Path) -> dict[int, str]:
    return {int(m.group(1)): p.name for p in Path(out_dir).iterdir() if (m := TRACE_RE.match(p.name))}


def build_manifest(out_dir: Path, *, command: list[str], start_time: str, start_time_ns: int,
                   steps: int, skip_first: int, mode: str = "kineto", exit_code: int | None = None,
                   world_size: int | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge the rank fragments and the trace files found in `out_dir` into one manifest dict."""
    out_dir = Path(out_dir)
    frags = read_fragments(out_dir)
    traces = traces_present(out_dir)
    sizes = [f["world_size"] for f in frags.values() if f.get("world_size")]
    if world_size is None and sizes:
        world_size = max(sizes)
    known = sorted(set(frags) | set(traces))
    if world_size is None and known:
        world_size = max(known) + 1
    missing = [r for r in range(world_size or 0) if r not in traces]
    first = frags[min(frags)] if frags else {}
    layout_ = next((f["layout"] for _, f in sorted(frags.items()) if f.get("layout")), {})
    end_time, _ = utc_now()
    manifest: dict[str, Any] = {
        "schema": SCHEMA,
        "overlapscope_version": overlapscope_version(),
        "command": list(command),
        "cwd": os.getcwd(),
        "start_time": start_time,
        "start_time_ns": start_time_ns,
        "end_time": end_time,
        "exit_code": exit_code,
        "mode": mode,
        "steps": steps,
        "skip_first": skip_first,
        "world_size": world_size,
        "backend": first.get("backend"),
        "torch_version": first.get("torch_version"),
        "cuda_version": first.get("cuda_version"),
        "nccl_version": first.get("nccl_version"),
        "hosts": sorted({f["host"] for f in frags.values() if f.get("host")}),
        "devices": {str(r): f.get("device_name") for r, f in sorted(frags.items())},
        "layout": layout_,
        "ranks": {str(r): {k: f.get(k) for k in ("host", "pid", "device", "steps_recorded", "complete")}
                  for r, f in sorted(frags.items())},
        "traces": {str(r): name for r, name in sorted(traces.items())},
        "missing_ranks": missing,
    }
    if extra:
        manifest.update(extra)
    return manifest


def finish_manifest(out_dir: Path, **kwargs: Any) -> dict[str, Any]:
    """Write `out_dir/manifest.json` from the fragments, then remove the fragments."""
    out_dir = Path(out_dir)
    manifest = build_manifest(out_dir, **kwargs)
    write_json_atomic(out_dir / MANIFEST_NAME, manifest)
    for p in out_dir.iterdir():
        if FRAGMENT_RE.match(p.name):
            p.unlink(missing_ok=True)
    if manifest["missing_ranks"]:
        log.warning("no trace from rank(s) %s in %s", manifest["missing_ranks"], out_dir)
    return manifest
