"""Quiet capture: the job's own output passes through; the profiler's and launcher's chatter is counted.

What the profiled job writes to stderr is read line by line; lines that only say the profiler or
torchrun is working (below) are dropped and counted into one line at the end, everything else is
written through at once. `overlapscope -v profile ...` passes every line untouched.
"""
from __future__ import annotations

import re
import sys
import threading
from collections import Counter
from typing import IO

# (what it is, the line) - each seen in a CPU run of instrumented_models under torch 2.13.
CHATTER: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Kineto's USDT probe lines: "USDT:2026-12-03 07:34:55 28833:28833 SyncActivityProfilerHandler.cpp:52] profiler_start"
    ("Kineto probe", re.compile(r"^(USDT|STAGE):")),
    # torch's per-step warning while profiling an optimizer: "[rank0]:[W1203 ... collection.cpp:664] Warning:
    # Optimizer.step#AdamW.step (function operator())"
    ("profiler warning", re.compile(r"collection\.cpp:\d+\] Warning: ")),
    # torchrun's OMP_NUM_THREADS banner: four "W... torch/distributed/run.py:874] ..." lines
    ("torchrun banner", re.compile(r"torch/distributed/run\.py:\d+\] ?(\*+|Setting OMP_NUM_THREADS.*|)\s*$")),
)


class ChatterFilter:
    """Copies a child's stderr pipe to `out` on a thread, holding back CHATTER; `close()` waits for
    the end of the stream and returns the summary line (None when nothing was held back)."""

    def __init__(self, stream: IO[bytes], out: IO[str] | None = None) -> None:
        self.counts: Counter[str] = Counter()
        self._stream, self._out = stream, out or sys.stderr
        self._thread = threading.Thread(target=self._copy, name="overlapscope-stderr", daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        for raw in iter(self._stream.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            kind = next((k for k, pattern in CHATTER if pattern.search(line)), None)
            if kind is None:
                self._out.write(line)
                self._out.flush()
            else:
                self.counts[kind] += 1
        self._stream.close()

    def close(self) -> str | None:
        self._thread.join()
        if not self.counts:
            return None
        parts = ", ".join(f"{n} {kind} line{'s' if n > 1 else ''}" for kind, n in self.counts.most_common())
        return f"overlapscope: held back {parts} (-v shows them)"
