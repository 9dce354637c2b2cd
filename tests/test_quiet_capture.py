"""Quiet capture: the profiler's and torchrun's chatter on the job's stderr is counted, the rest passes."""
from __future__ import annotations

import io
import os

from overlapscope.capture.quiet import ChatterFilter

# What a CPU run of instrumented_models.fsdp2 under `overlapscope profile` wrote to stderr (torch 2.13).
SEEN = """\
W1203 07:34:45.661000 28791 .venv/lib/python3.11/site-packages/torch/distributed/run.py:874] 
W1203 07:34:45.661000 28791 .venv/lib/python3.11/site-packages/torch/distributed/run.py:874] *****************************************
W1203 07:34:45.661000 28791 .venv/lib/python3.11/site-packages/torch/distributed/run.py:874] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. 
W1203 07:34:45.661000 28791 .venv/lib/python3.11/site-packages/torch/distributed/run.py:874] *****************************************
USDT:2026-12-03 07:34:55 28833:28833 SyncActivityProfilerHandler.cpp:52] profiler_start
my own warning: the learning rate is high
USDT:2026-12-03 07:34:56 28833:28833 SyncActivityProfilerHandler.cpp:59] profiler_stop
[rank0]:[W1203 07:34:56.063714265 collection.cpp:664] Warning: Optimizer.step#AdamW.step (function operator())
[rank1]:[W1203 07:34:56.084719224 collection.cpp:664] Warning: Optimizer.step#AdamW.step (function operator())
Traceback (most recent call last):
  File "train.py", line 3, in <module>
W1203 07:35:01.000000 28791 torch/distributed/run.py:874] a launcher warning worth reading
"""


def filtered(text: str) -> tuple[str, str | None]:
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    out = io.StringIO()
    summary = ChatterFilter(os.fdopen(read, "rb"), out).close()
    return out.getvalue(), summary


def test_chatter_is_counted_into_one_line_and_everything_else_passes_in_order():
    out, summary = filtered(SEEN)
    assert out.splitlines() == ["my own warning: the learning rate is high", "Traceback (most recent call last):",
                                '  File "train.py", line 3, in <module>',
                                "W1203 07:35:01.000000 28791 torch/distributed/run.py:874] a launcher warning worth reading"]
    assert summary == ("overlapscope: held back 4 torchrun banner lines, 2 Kineto probe lines, "
                       "2 profiler warning lines (-v shows them)")


def test_nothing_held_back_says_nothing():
    out, summary = filtered("plain line\n")
    assert out == "plain line\n" and summary is None
