"""FSDP prefetch gaps on hand-built GPU and CPU (gloo) timelines with known answers."""
from __future__ import annotations

import pandas as pd
import pytest

from crossrank_tables import MS, US, ev, table, windows
from overlapscope.analysis.prefetch import (PREFETCH_COLUMNS, PrefetchConfig, compress_units, diagnose,
                                            prefetch_gaps, worst_units)


def cpu_range(name: str, start_us: int, end_us: int) -> dict:
    return ev("thread:1", "annotation", name, start_us * US, end_us * US)


def kernel(lane: str, kind: str, name: str, launch_us: int, start_us: int, end_us: int, **kw) -> dict:
    return ev(lane, kind, name, start_us * US, end_us * US, launch_ns=launch_us * US, launch_lane="thread:1", **kw)


def gpu_rank() -> pd.DataFrame:
    """Three units. layers.0's all-gather lands after the prior compute ended (late); layers.1's was
    prefetched and done in time; layers.2's is issued too late. Backward: layers.2 again, late by 600 µs."""
    ag = lambda launch, s, e: kernel("stream:20", "comm", "ncclDevKernel_AllGather", launch, s, e, collective="all_gather")
    comp = lambda launch, s, e, name="gemm": kernel("stream:7", "compute", name, launch, s, e)
    rows = [
        comp(50, 0, 150),                                   # earlier compute
        cpu_range("FSDP::pre_forward (layers.0)", 100, 400),
        cpu_range("FSDP::all_gather (layers.0)", 110, 150), ag(120, 200, 1200),
        cpu_range("FSDP::all_gather_copy_out (layers.0)", 160, 180), comp(170, 1200, 1300, "copy_out"),
        cpu_range("FSDP::forward_prefetch for layers.1", 185, 240),
        cpu_range("FSDP::all_gather (layers.1)", 190, 230), ag(200, 1200, 2000),
        comp(450, 1300, 2500),                              # layers.0 forward
        cpu_range("FSDP::pre_forward (layers.1)", 500, 600),
        cpu_range("FSDP::all_gather_copy_out (layers.1)", 510, 520), comp(515, 2500, 2550, "copy_out"),
        comp(650, 2550, 3000),                              # layers.1 forward
        cpu_range("FSDP::pre_forward (layers.2)", 700, 800),
        cpu_range("FSDP::all_gather (layers.2)", 710, 730), comp(715, 2560, 2580, "copy_in"), ag(720, 2600, 4000),
        cpu_range("FSDP::all_gather_copy_out (layers.2)", 740, 760), comp(750, 4000, 4100, "copy_out"),
        comp(850, 4100, 4400),                              # loss and the start of backward
        cpu_range("FSDP::pre_backward (layers.2)", 900, 1000),
        cpu_range("FSDP::all_gather (layers.2)", 910, 930), ag(920, 4500, 5000),
        cpu_range("FSDP::all_gather_copy_out (layers.2)", 940, 950), comp(945, 5000, 5100, "copy_out"),
    ]
    return table(0, rows)


def test_gpu_gaps_and_leads_exact():
    p = prefetch_gaps(gpu_rank(), windows((7, 0, 6000 * US)))
    assert list(p.columns) == list(PREFETCH_COLUMNS)
    got = [(u, ps, g // US, l // US) for u, ps, g, l in p[["unit", "pass", "prefetch_gap_ns", "lead_ns"]].values]
    assert got == [("layers.0", "forward", 1050, 1000), ("layers.1", "forward", 0, 1300),
                   ("layers.2", "forward", 1000, 1400), ("layers.2", "backward", 600, 500)]
    assert set(p["step"]) == {7} and set(p["rank"]) == {0}
    assert p["prev_end_ns"].tolist() == [150 * US, 2500 * US, 3000 * US, 4400 * US]


def test_gap_never_reaches_before_the_window_start():
    p = prefetch_gaps(gpu_rank(), windows((0, 0, 160 * US), (1, 160 * US, 6000 * US)))
    first = p.iloc[0]
    # no compute ends inside step 1 before the copy-out: prev_end is the window start
    assert first["step"] == 1 and first["prev_end_ns"] == 160 * US and first["prefetch_gap_ns"] == 1040 * US


def test_cpu_gloo_all_gather_on_a_worker_thread():
    """Synchronous CPU FSDP2: the gloo transfer runs on a worker, enqueued by the c10d op inside
    FSDP::all_gather; the main thread blocks until it ends."""
    rows = [
        ev("thread:1", "compute", "aten::mm", 0, 90 * US),
        cpu_range("FSDP::pre_forward (0)", 95, 5000),
        cpu_range("FSDP::all_gather (0)", 100, 4000),
        ev("thread:1", "compute", "aten::cat", 110 * US, 190 * US),          # copy-in
        ev("thread:1", "cpu_op", "c10d::_allgather_base_", 200 * US, 300 * US),
        ev("thread:2", "comm", "gloo:all_gather", 300 * US, 3900 * US, collective="all_gather",
           launch_ns=200 * US, launch_lane="thread:1"),
        cpu_range("FSDP::all_gather_copy_out (0)", 4000, 4500),
        ev("thread:1", "compute", "aten::split_with_sizes_copy", 4100 * US, 4400 * US),
    ]
    p = prefetch_gaps(table(3, rows), windows((2, 0, 6000 * US)))
    assert p[["rank", "step", "unit", "pass"]].values.tolist() == [[3, 2, "0", "forward"]]
    assert p["prefetch_gap_ns"].tolist() == [3710 * US]      # [190, 3900) with nothing computing
    assert p["lead_ns"].tolist() == [3800 * US]              # copy-out 4100 - transfer start 300


def test_without_copy_out_label_first_compute_after_the_issue():
    rows = [
        cpu_range("FSDP::pre_forward (blk)", 0, 1000),
        cpu_range("FSDP::all_gather (blk)", 10, 50),
        kernel("stream:7", "compute", "copy_in", 20, 20, 30),
        kernel("stream:20", "comm", "nccl_ag", 30, 40, 400, collective="all_gather"),
        kernel("stream:7", "compute", "first_use", 60, 500, 600),
    ]
    p = prefetch_gaps(table(0, rows), windows((0, 0, 1000 * US)))
    assert p["first_compute_ns"].tolist() == [500 * US]
    assert p["prefetch_gap_ns"].tolist() == [370 * US] and p["lead_ns"].tolist() == [460 * US]


def test_no_fsdp_labels_no_rows():
    rows = [ev("stream:7", "compute", "gemm", 0, 10)]
    p = prefetch_gaps(table(0, rows), windows((0, 0, 10)))
    assert p.empty and list(p.columns) == list(PREFETCH_COLUMNS)


def test_diagnosis_names_the_late_units_and_the_mean_delay():
    rows = pd.DataFrame({
        "rank": 0, "step": 0, "unit": ["layers.3", "layers.4", "layers.5", "layers.6", "layers.7", "layers.8", "norm"],
        "pass": "forward", "prefetch_gap_ns": [1 * MS, 1.4 * MS, 1.2 * MS, 1.0 * MS, 1.4 * MS, 0, 0],
        "lead_ns": 0})
    # without the prefetched column the all-gathers count as prefetched (issued early, still late)
    assert diagnose(rows) == ["forward all-gathers of layers.3-7 are prefetched but arrive 1.2 ms late on average: "
                              "prefetch is not issued early enough (prefetch more modules ahead)"]
    assert diagnose(rows.assign(prefetch_gap_ns=rows["prefetch_gap_ns"] / 1000)) == []  # 1.2 µs: noise
    assert diagnose(rows, PrefetchConfig(min_gap_ns=2 * MS)) == []


def test_gpu_diagnosis_and_worst_units():
    p = prefetch_gaps(gpu_rank(), windows((0, 0, 6000 * US)))
    # layers.1's all-gather was issued in layers.0's forward_prefetch; layers.0's and layers.2's in their own
    # pre-hooks
    assert p.loc[p["pass"] == "forward", ["unit", "prefetched"]].values.tolist() == [
        ["layers.0", False], ["layers.1", True], ["layers.2", False]]
    # layers.0 and layers.2 (backward) open their pass: nothing earlier in it could prefetch them, so the
    # line says what keeps them unsharded instead; layers.2's forward all-gather could have been prefetched
    assert diagnose(p, PrefetchConfig(min_gap_ns=0)) == [
        "forward all-gathers of layers.0 open the forward pass (the first all-gather of each step's forward) and "
        "arrive 1.05 ms late on average: no earlier unit can prefetch them (FSDP2 "
        "`module.set_reshard_after_backward(False)` keeps it unsharded into the next step)",
        "forward all-gathers of layers.2 are not prefetched (issued on demand when the unit runs) and "
        "arrive 1 ms late on average: forward prefetch is off for them (turn it on with FSDP2 "
        "`module.set_modules_to_forward_prefetch([next modules])`, or `unshard(async_op=True)` ahead of use; "
        "the reference runs: `--prefetch N`)",
        "backward all-gathers of layers.2 open the backward pass (the first all-gather of each step's backward) "
        "and arrive 0.6 ms late on average: no earlier unit can prefetch them (FSDP2 "
        "`fully_shard(module, reshard_after_forward=False)` keeps it unsharded from forward to backward)"]
    w = worst_units(p)
    assert w[["unit", "pass"]].values.tolist()[:2] == [["layers.0", "forward"], ["layers.2", "forward"]]
    assert w["mean_gap_ns"].tolist()[0] == pytest.approx(1050 * US)


def test_compress_units():
    assert compress_units(["layers.3", "layers.4", "layers.5", "layers.7", "norm", "0", "1"]) == "layers.3-5, layers.7, 0-1, norm"


def test_root_module_and_parameter_group_suffix():
    """The root module's labels carry no fqn; a module with several parameter groups adds [pg=N]."""
    rows = [
        cpu_range("FSDP::pre_forward", 0, 100), cpu_range("FSDP::all_gather", 10, 20),
        kernel("stream:20", "comm", "nccl_ag", 15, 15, 50, collective="all_gather"),
        cpu_range("FSDP::all_gather_copy_out", 30, 40), kernel("stream:7", "compute", "copy_out", 35, 60, 70),
        cpu_range("FSDP::pre_forward (layers.0) [pg=2]", 200, 300),
        cpu_range("FSDP::all_gather (layers.0) [pg=2]", 210, 220),
        kernel("stream:20", "comm", "nccl_ag", 215, 215, 400, collective="all_gather"),
        cpu_range("FSDP::all_gather_copy_out (layers.0) [pg=2]", 230, 240),
        kernel("stream:7", "compute", "copy_out", 235, 400, 410),
    ]
    p = prefetch_gaps(table(0, rows), windows((0, 0, 500 * US)))
    assert p["unit"].tolist() == ["(root)", "layers.0"]
    assert [g // US for g in p["prefetch_gap_ns"]] == [50, 330]


def test_the_reference_run_without_prefetch_is_told_prefetch_is_off_and_the_knob():
    from pathlib import Path

    import overlapscope

    traces = Path(__file__).resolve().parents[1] / "traces"
    notes = overlapscope.analyze(overlapscope.load_run(traces / "fsdp2_no_prefetch")).diagnoses
    forward = next(n for n in notes if n.startswith("forward all-gathers of layers.0-1"))
    assert "forward prefetch is off" in forward and "set_modules_to_forward_prefetch" in forward
    backward = next(n for n in notes if n.startswith("backward all-gathers of layers.0"))
    assert "backward prefetch is off" in backward and "set_modules_to_backward_prefetch" in backward
    # with --prefetch 1, the blocks after the first are prefetched: no "off" line names them
    ahead = overlapscope.analyze(overlapscope.load_run(traces / "fsdp2")).diagnoses
    assert not any("layers.1" in n and "prefetch is off" in n for n in ahead)
