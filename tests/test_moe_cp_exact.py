"""Expert and context parallelism on hand-built traces: every all-to-all, MoE and ring-step number
known to the byte and the nanosecond."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import overlapscope
from kineto_builder import KinetoTrace
from overlapscope.analysis.all_to_all import moe_summary, traffic_matrices, waited_for_most
from overlapscope.analysis.ring import ring_summary
from overlapscope.cli import main
from overlapscope.ingest import splits
from overlapscope.ingest.kineto import DTYPE_BYTES, read_kineto

BASE = 1_711_964_646_000_000_000
SENDRECV = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
MAIN, WORKER = 100, 200


def a2a_args(in_split: str, out_split: str, in_nelems: int, out_nelems: int, **extra) -> dict:
    return {"Collective name": "all_to_allv", "In split size": in_split, "Out split size": out_split,
            "In msg nelems": in_nelems, "Out msg nelems": out_nelems, "dtype": "Float", "Group size": 2,
            "Process Group Name": "0", **extra}


def moe_run(tmp_path, *, rank1_split: str = "both"):
    """Two ranks, one step [0, 100 µs), rows of 8 floats (32 B). The dispatch of layer 0, micro-batch 1:
    rank 0 sends 1 row to itself and 3 to rank 1 and receives 1 + 2; rank 1 sends 2 to rank 0 and 5 to
    itself. Rank 0's kernel [10, 50) µs under compute [0, 20); rank 1 arrives at 30 µs, no compute.
    Then the combine's backward (`:bwd`) on [60, 70) µs on both, rank 0 computing [65, 70)."""
    ranks = []
    for rank, start, split in ((0, 10_000, ("[1, 3]", "[1, 2]", 32, 24)),
                               (1, 30_000, ("[2, 5]", "[3, 5]", 56, 64))):
        t = KinetoTrace(rank=rank, base_ns=BASE)
        t.step(1, 0, 100_000)
        t.annotation("moe:L0:mb1:dispatch", 1_000, 9_000)
        if rank == 1 and rank1_split != "both":  # libkineto truncated rank 1's lists
            split = ("[2, 5, ...]", "[3, 5]" if rank1_split == "recv" else "[3, 5, ...]", 56, 64)
        args = a2a_args(*split)
        t.kernel(SENDRECV, start, 50_000, stream=20, launch_ns=2_000, **args)
        t.annotation("moe:L0:mb1:combine:bwd", 55_000, 58_000)
        t.kernel(SENDRECV, 60_000, 70_000, stream=20, launch_ns=56_000,
                 **a2a_args("[1, 1]", "[1, 1]", 16, 16))
        if rank == 0:
            t.kernel("void gemm_kernel()", 0, 20_000, launch_ns=500)
            t.kernel("void gemm_kernel()", 65_000, 70_000, launch_ns=54_000)
        ranks.append(t.write(tmp_path / f"rank{rank}.json"))
    return overlapscope.analyze(overlapscope.load_run(tmp_path))


def test_split_bytes_from_record_param_comms():
    assert splits.from_param_comms(a2a_args("[1, 3]", "[1, 2]", 32, 24), DTYPE_BYTES) == ("32,96", "32,64")
    # an even all-to-all records empty splits: nelems / group size each
    assert splits.from_param_comms(a2a_args("[]", "[]", 8, 8), DTYPE_BYTES) == ("16,16", "16,16")
    # libkineto truncates long lists; a row count that does not divide nelems is inconsistent
    assert splits.from_param_comms(a2a_args("[1, 3, ...]", "[1, 2]", 33, 24), DTYPE_BYTES) == ("", "32,64")
    assert splits.from_param_comms({"In split size": "[1, 3]", "In msg nelems": 32}, DTYPE_BYTES) == ("", "")


def test_gloo_splits_from_the_alltoall_enqueue(tmp_path):
    t = KinetoTrace(rank=0, base_ns=BASE)
    t.step(1, 0, 100_000)
    t.cpu_op("c10d::alltoall_base_", 10_000, 11_000, **{
        "Concrete Inputs": ["", "", "", "[26, 26]", "[26, 230]", "True", "-1"],
        "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
        "Input Dims": [[52, 128], [256, 128], [], [], [], [], []]})
    t.annotation("gloo:all_to_all", 12_000, 40_000, tid=WORKER)
    ev = read_kineto(t.write(tmp_path / "rank0.json")).events
    comm = ev[ev["kind"] == "comm"].iloc[0]
    assert comm["collective"] == "all_to_all"
    assert (comm["send_split_bytes"], comm["recv_split_bytes"]) == ("13312,117760", "13312,13312")  # x 512 B/row


def test_all_to_all_matrix_imbalance_and_who_was_waited_for(tmp_path):
    a = moe_run(tmp_path)
    inst = a.all_to_all.set_index("scope")
    d = inst.loc["moe:L0:mb1:dispatch"]
    assert (d["ranks"], d["bytes"], d["max_received_bytes"]) == (2, 32 + 96 + 64 + 160, 96 + 160)
    assert d["mean_received_bytes"] == 176.0
    assert d["imbalance"] == pytest.approx(256 / 176, abs=0)
    assert (d["hot_rank"], d["waited_for_rank"], d["max_wait_ns"]) == (1, 1, 20_000)
    assert d["missing"] == ""
    matrix = traffic_matrices(a.all_to_all_traffic)[int(d["instance"])]
    assert matrix == ([0, 1], [[32, 96], [64, 160]])  # [src][dst]
    assert waited_for_most(a.all_to_all) == (1, 20_000, 1)
    c = inst.loc["moe:L0:mb1:combine:bwd"]
    assert (c["imbalance"], c["hot_rank"], c["waited_for_rank"]) == (1.0, -1, -1)  # balanced, simultaneous


def test_receiver_splits_fill_the_matrix(tmp_path):
    # rank 1's send split is lost: 1 -> 0 comes from rank 0's recv split, 1 -> 1 from rank 1's own
    a = moe_run(tmp_path, rank1_split="recv")
    d = a.all_to_all.set_index("scope").loc["moe:L0:mb1:dispatch"]
    assert d["missing"] == "" and d["imbalance"] == pytest.approx(256 / 176, abs=0)
    assert traffic_matrices(a.all_to_all_traffic)[int(d["instance"])] == ([0, 1], [[32, 96], [64, 160]])


def test_missing_splits_are_named_never_guessed(tmp_path):
    # both of rank 1's lists lost: 1 -> 1 is unknown, so the instance has no imbalance and says why
    a = moe_run(tmp_path, rank1_split="none")
    d = a.all_to_all.set_index("scope").loc["moe:L0:mb1:dispatch"]
    assert d["missing"] == "no split sizes for ranks 1"
    assert d["imbalance"] != d["imbalance"] and d["bytes"] == -1  # NaN: never a number printed as if right
    assert any("1 of 2 all-to-alls have no per-peer bytes" in n for n in a.diagnoses)


def test_moe_exposure_per_layer_microbatch_phase_and_pass(tmp_path):
    a = moe_run(tmp_path)
    moe = a.moe_layers.set_index(["rank", "phase", "pass"])
    # rank 0: dispatch [10, 50) minus compute [0, 20) -> 30 µs exposed; rank 1: [30, 50) all exposed
    assert moe.loc[(0, "dispatch", "forward"), ["layer", "microbatch", "comm_ns", "exposed_comm_ns"]].tolist() == \
        [0, 1, 40_000, 30_000]
    assert moe.loc[(1, "dispatch", "forward"), ["comm_ns", "exposed_comm_ns"]].tolist() == [20_000, 20_000]
    # combine backward [60, 70): rank 0 hides [65, 70)
    assert moe.loc[(0, "combine", "backward"), ["comm_ns", "exposed_comm_ns"]].tolist() == [10_000, 5_000]
    summary = moe_summary(a.moe_layers).set_index(["phase", "pass"])
    assert summary.loc[("dispatch", "forward"), "exposed_comm_ns"] == 50_000
    assert summary.loc[("combine", "backward"), "exposed_comm_ns"] == 15_000


def ring_trace() -> KinetoTrace:
    """One gloo rank, step [0, 100 µs). Ring step 0 of layer 0: label [1, 60), its send [2, 50) and recv
    [2.5, 50) on the main thread; its attention label [5, 40) computes [5, 40); other compute [42, 45).
    The transfer's backward under `ring:L0:step0:bwd` [70, 80): a send [71, 75), nothing computing."""
    t = KinetoTrace(rank=0, base_ns=BASE)
    t.step(1, 0, 100_000)
    t.annotation("ring:L0:step0", 1_000, 60_000)
    t.annotation("gloo:send", 2_000, 50_000)
    t.annotation("gloo:recv", 2_500, 50_000)
    t.annotation("ring:L0:step0:attn", 5_000, 40_000)
    t.cpu_op("aten::bmm", 5_000, 40_000)
    t.cpu_op("aten::add", 42_000, 45_000)
    t.annotation("ring:L0:step0:bwd", 70_000, 80_000)
    t.annotation("gloo:send", 71_000, 75_000)
    return t


def test_ring_step_exposed_p2p_and_the_compute_that_hid_it(tmp_path):
    a = overlapscope.analyze(overlapscope.load_run(ring_trace().write(tmp_path / "rank0.json")))
    ring = a.ring_steps.set_index("pass")
    fwd = ring.loc["forward"]
    assert (fwd["layer"], fwd["ring_step"], fwd["count"]) == (0, 0, 2)
    # M = [2, 50): 48 µs; hidden by [5, 40) + [42, 45) = 38; exposed 10; the step's attention hid 35 of it
    assert fwd[["comm_ns", "exposed_comm_ns", "hidden_ns", "attn_ns", "hidden_by_attn_ns"]].tolist() == \
        [48_000, 10_000, 38_000, 35_000, 35_000]
    bwd = ring.loc["backward"]
    assert bwd[["comm_ns", "exposed_comm_ns", "hidden_ns", "attn_ns", "hidden_by_attn_ns"]].tolist() == \
        [4_000, 4_000, 0, 0, 0]
    assert ring_summary(a.ring_steps).set_index("pass").loc["forward", "exposed_comm_ns"] == 10_000


def test_ring_step_on_a_gpu_counts_the_kernels_its_attention_launched(tmp_path):
    """CUDA + NCCL: the labels are CPU ranges of a few µs of launching, the work runs later on the
    GPU. Ring step 0 [1, 8) µs launches the transfer at 2 (a SendRecv kernel [10, 50) on the comm
    stream) and, under `:attn` [3, 6), the attention kernel at 4 ([15, 45)); a kernel launched at 7,
    outside the attention label, runs [45, 48). The step's attention is the [15, 45) kernel, not the
    3 µs label: it hid 30 of the 40 µs transfer; all compute hid 33."""
    t = KinetoTrace(rank=0, base_ns=BASE)
    t.step(1, 0, 100_000)
    t.annotation("ring:L0:step0", 1_000, 8_000)
    t.kernel(SENDRECV, 10_000, 50_000, stream=20, launch_ns=2_000)
    t.annotation("ring:L0:step0:attn", 3_000, 6_000)
    t.kernel("void gemm_kernel()", 15_000, 45_000, stream=7, launch_ns=4_000)
    t.kernel("void elementwise_kernel()", 45_000, 48_000, stream=7, launch_ns=7_000)
    a = overlapscope.analyze(overlapscope.load_run(t.write(tmp_path / "rank0.json")))
    fwd = a.ring_steps.set_index("pass").loc["forward"]
    assert fwd[["comm_ns", "exposed_comm_ns", "hidden_ns", "attn_ns", "hidden_by_attn_ns"]].tolist() == \
        [40_000, 7_000, 33_000, 30_000, 30_000]


@pytest.mark.parametrize("first, second, backward, section", [
    ("moe:L0:mb0:dispatch", "moe:L0:mb1:dispatch", "moe:L0:mb0:combine:bwd", "moe_passes"),
    ("ring:L0:step0", "ring:L1:step0", "ring:L0:step0:bwd", "ring_passes"),
])
def test_pass_totals_count_transfers_in_flight_together_once(tmp_path, first, second, backward, section):
    """Two transfers of one pass in flight at once: [10, 40) µs (launched under `first`) and [30, 60)
    (under `second`), compute [20, 35): the pass moved comm over [10, 60) = 50 µs, exposed [10, 20) +
    [35, 60) = 35 (the per-label rows sum to 60 and 40). Backward: [75, 85) under `backward`, compute
    [80, 90): 10, exposed 5."""
    t = KinetoTrace(rank=0, base_ns=BASE)
    t.step(1, 0, 100_000)
    for label, at, start, end, stream in ((first, 1_000, 10_000, 40_000, 20), (second, 3_000, 30_000, 60_000, 21),
                                          (backward, 70_000, 75_000, 85_000, 20)):
        t.annotation(label, at, at + 1_000)
        t.kernel(SENDRECV, start, end, stream=stream, launch_ns=at + 100)
    t.kernel("void gemm_kernel()", 20_000, 35_000, launch_ns=5_000)
    t.kernel("void gemm_kernel()", 80_000, 90_000, launch_ns=72_000)
    a = overlapscope.analyze(overlapscope.load_run(t.write(tmp_path / "rank0.json")))
    passes = getattr(a, section).set_index("pass")
    assert passes.loc["forward", ["count", "comm_ns", "exposed_comm_ns"]].tolist() == [2, 50_000, 35_000]
    assert passes.loc["backward", ["count", "comm_ns", "exposed_comm_ns"]].tolist() == [1, 10_000, 5_000]
    rows = a.moe_layers if section == "moe_passes" else a.ring_steps
    fwd = rows[rows["pass"] == "forward"]
    assert (fwd["comm_ns"].sum(), fwd["exposed_comm_ns"].sum()) == (60_000, 40_000)


def test_json_sections_and_report_tables(tmp_path):
    moe_run(tmp_path)
    out = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", "json", "--no-cache"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    dispatch = next(r for r in doc["all_to_all"] if r["scope"] == "moe:L0:mb1:dispatch")
    assert dispatch["members"] == [0, 1] and dispatch["traffic_bytes"] == [[32, 96], [64, 160]]
    assert dispatch["hot_rank"] == 1 and dispatch["waited_for_rank"] == 1
    assert {r["phase"] for r in doc["moe_layers"]} == {"dispatch", "combine"} and doc["ring_steps"] == []
    md = CliRunner().invoke(main, ["analyze", str(tmp_path), "--format", "markdown", "--no-cache"]).stdout
    assert "## All-to-all traffic (most imbalanced)" in md and "| moe:L0:mb1:dispatch | 1 | 2 |" in md
    assert "1.45x" in md and "## Exposed MoE dispatch/combine per layer" in md
