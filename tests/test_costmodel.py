"""The α-β cost model (DESIGN.md "Cost model"): nccl-tests' bus bandwidth definitions and a worked example."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from overlapscope.analysis.collectives import busbw_factor
from overlapscope.analysis.costmodel import CostConfig, algorithm_times, cost_model
from overlapscope.analysis.link_peaks import intra_node_link

GB = 1_000_000_000


def test_busbw_factors_are_nccl_tests_definitions():
    # nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n, allgather / reducescatter / alltoall (n-1)/n,
    # broadcast / reduce / sendrecv 1
    coll = np.array(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send_recv"],
                    dtype=object)
    assert busbw_factor(coll, np.full(coll.size, 8)).tolist() == [1.75, 0.875, 0.875, 0.875, 1.0, 1.0, 1.0]


def test_worked_example_all_reduce_of_1_gb_on_8_a100():
    # S = 1 GB, n = 8, B = 300 GB/s per direction (NVLink 3), α = 1 µs:
    #   ring 2(n-1) α + 2(n-1)/n S/B = 14 µs + 1.75 · 3.333 ms = 5.847 ms
    #   tree 2 log2(n) α + 2 S/B     =  6 µs + 6.667 ms      = 6.673 ms
    #   flat (NVSwitch) 2 α + 1.75 S/B = 5.835 ms: the model's pick
    t = algorithm_times(np.array(["all_reduce"], dtype=object), np.array([GB]), np.array([8]), np.array([300.0]),
                        np.array([1000.0]), np.array([True]), np.array([False]))
    assert t["ring"][0] == pytest.approx(14_000 + 1.75 * GB / 300)
    assert t["tree"][0] == pytest.approx(6_000 + 2 * GB / 300)
    assert t["flat"][0] == pytest.approx(2_000 + 1.75 * GB / 300)
    assert np.isnan(t["nvls"][0])


def _collectives(rows: list[tuple]) -> pd.DataFrame:
    out = []
    for inst, coll, nbytes, n, transfer_ns, ranks, group in rows:
        busbw = nbytes / transfer_ns * busbw_factor(np.array([coll], dtype=object), np.array([n]))[0]
        out += [{"instance": inst, "rank": r, "group": group, "collective": coll, "bytes": nbytes, "group_size": n,
                 "instance_transfer_ns": transfer_ns, "instance_busbw_gbps": busbw} for r in ranks]
    return pd.DataFrame(out)


def test_cost_model_flags_and_peak_share():
    coll = _collectives([
        (0, "all_reduce", GB, 8, 10_000_000, range(8), "0"),          # 175 GB/s busbw of 300: 58%
        (1, "all_reduce", 8192, 8, 30_000, range(8), "0"),           # 8 KB: latency-bound
        (2, "all_gather", GB, 8, 35_000_000, range(8), "0"),          # 25 GB/s of 300: far below peak
        (3, "all_reduce", 64_000_000, 2, 5_000_000, (0, 8), "tp"),   # a tp group across two hosts
    ])
    hosts = {r: ("a" if r < 8 else "b") for r in range(16)}
    out = cost_model(coll, hosts=hosts, device_name="NVIDIA A100-SXM4-80GB", tp_groups={"tp"}).set_index("instance")
    assert out.loc[0, "pct_of_peak"] == pytest.approx(100 * 175 / 300)
    assert out.loc[0, "algorithm"] == "flat" and out.loc[0, "peak_gbps"] == 300.0
    assert out["latency_bound"].tolist() == [False, True, False, False]
    assert out["below_peak"].tolist() == [False, False, True, False]
    assert out["tp_across_hosts"].tolist() == [False, False, False, True]
    # across hosts the NIC is the peak (DGX A100: HDR, 25 GB/s per GPU), α 5 µs, no flat algorithm
    assert out.loc[3, "peak_gbps"] == 25.0 and out.loc[3, "hosts"] == 2
    assert out.loc[3, "expected_ns"] == pytest.approx(min(2 * 5000 + 1.0 * 64e6 / 25, 2 * 5000 + 2 * 64e6 / 25))


def test_overrides_replace_the_table():
    coll = _collectives([(0, "all_reduce", GB, 4, 10_000_000, range(4), "0")])
    out = cost_model(coll, hosts={}, device_name=None, config=CostConfig(link_gbps=100.0, latency_us=2.0))
    assert out["peak_gbps"].tolist() == [100.0]
    assert out["ring_ns"].iloc[0] == pytest.approx(6 * 2000 + 1.5 * GB / 100)
    assert out["link"].iloc[0].startswith("intra-node 100 GB/s")
    with pytest.raises(ValueError):
        CostConfig(link_gbps=-1)


def test_gpu_models_map_to_links():
    assert intra_node_link("NVIDIA H100 80GB HBM3").name == "NVLink 4"
    assert intra_node_link("NVIDIA A100-PCIE-40GB").name == "PCIe 4.0 x16"
    assert intra_node_link("NVIDIA A100-PG509-200").gbps == 300.0
    assert intra_node_link("AMD EPYC") is None and intra_node_link(None) is None
