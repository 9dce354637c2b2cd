"""gloo names no message size; the recorded shapes of its gloo:<op> ranges give it, so busbw is shown."""
from __future__ import annotations

from pathlib import Path

import numpy as np

import overlapscope

TRACES = Path(__file__).resolve().parents[1] / "traces"


def collectives(run: str):
    return overlapscope.analyze(overlapscope.load_run(TRACES / run)).collectives


def test_ddp_buckets_carry_their_size_and_a_bus_bandwidth():
    c = collectives("ddp")
    assert (c["bytes"] > 0).all() and np.isfinite(c["instance_busbw_gbps"]).all()
    # 0.25 MB buckets of float32 parameters: no bucket above the cap by more than one tensor
    assert c["bytes"].max() <= 2 * 262144 and (c["bytes"] % 4 == 0).all()


def test_fsdp2_all_gathers_are_sized_by_the_whole_tensor_not_the_shard():
    c = collectives("fsdp2")
    ag = c[c["collective"] == "all_gather"]
    rs = c[c["collective"] == "reduce_scatter"]
    assert (ag["bytes"] > 0).all() and (rs["bytes"] > 0).all()
    # each unit all-gathers what its reduce-scatter reduces: the same whole (unsharded) sizes
    assert set(ag["bytes"]) == set(rs["bytes"])
