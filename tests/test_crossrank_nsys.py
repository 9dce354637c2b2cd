"""Cross-rank sections on a real Nsight export: both ranks of a 2-GPU FSDP job in one SQLite file."""
from __future__ import annotations

import pytest

from data_paths import REAL_TRACES

SQLITE = REAL_TRACES / "nsys" / "mfu_2gpu_before.sqlite"
pytestmark = pytest.mark.needs_data(SQLITE)


def test_every_sendrecv_kernel_matches_and_one_clock_gives_offset_near_zero():
    from overlapscope import analyze, load_run
    a = analyze(load_run(SQLITE), no_steps=True)
    c = a.collectives
    # 66 NCCL SendRecv kernels, 33 per GPU: every one pairs with the other GPU's
    assert len(c) == 66 and c["instance"].nunique() == 33 and (c["ranks"] == 2).all()
    assert a.unmatched.empty
    # one report, one clock: the estimate stays within the tail of a collective
    assert set(a.clock_offsets_ns) == {0, 1} and abs(a.clock_offsets_ns[1]) < 100_000
    assert (c["wait_ns"] >= 0).all() and (c["transfer_ns"] > 0).all()
    assert (c["wait_ns"] + c["transfer_ns"] == c["end_ns"] - c["start_ns"]).all()
