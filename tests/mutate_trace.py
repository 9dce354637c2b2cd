"""Make controlled variants of a real Kineto trace: slower NCCL kernels, or noise on every kernel.

    python tests/mutate_trace.py IN.json.gz OUT.json.gz --stretch-comm 30 --jitter 2 --seed 0

Durations change, start times stay: a stretched NCCL kernel overlaps more of what follows it, as it
would when the network slows down while the launch schedule stays the same. Always writes a new
file (refuses to overwrite its input); the shared reference traces are never touched.
"""
from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
import orjson

from overlapscope.ingest.classify import is_comm_name

KERNEL_CATS = ("kernel",)


def read_trace(path: Path) -> dict:
    raw = path.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def mutate(trace: dict, *, stretch_comm_pct: float = 0.0, jitter_pct: float = 0.0, seed: int = 0) -> dict:
    """Scale each comm kernel's `dur` by (1 + stretch); then every kernel's by (1 + U(-jitter, +jitter))."""
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") in KERNEL_CATS and "dur" in e]
    names = [str(e.get("name", "")) for e in events]
    uniq, inverse = np.unique(np.array(names, dtype=object).astype(str), return_inverse=True)
    comm = is_comm_name(list(uniq))[inverse] if events else np.zeros(0, bool)
    dur = np.array([float(e["dur"]) for e in events], dtype=np.float64)
    scale = np.where(comm, 1.0 + stretch_comm_pct / 100.0, 1.0)
    rng = np.random.default_rng(seed)
    scale *= 1.0 + rng.uniform(-jitter_pct / 100.0, jitter_pct / 100.0, size=dur.size)
    new = dur * scale
    for e, value in zip(events, new):
        # keep the trace's own number format: int µs in older traces, float µs (ns in decimals) in newer
        e["dur"] = int(round(value)) if isinstance(e["dur"], int) else round(float(value), 3)
    return trace


def write_trace(trace: dict, path: Path) -> None:
    data = orjson.dumps(trace)
    path.write_bytes(gzip.compress(data, compresslevel=1) if path.name.endswith(".gz") else data)


def mutate_file(src: Path, dst: Path, **kw: float) -> Path:
    src, dst = Path(src), Path(dst)
    if dst.resolve() == src.resolve():
        raise SystemExit("refusing to overwrite the input trace")
    write_trace(mutate(read_trace(src), **kw), dst)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("--stretch-comm", type=float, default=0.0, metavar="PCT")
    ap.add_argument("--jitter", type=float, default=0.0, metavar="PCT")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    mutate_file(a.src, a.dst, stretch_comm_pct=a.stretch_comm, jitter_pct=a.jitter, seed=a.seed)


if __name__ == "__main__":
    main()
