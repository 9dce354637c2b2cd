"""The expert- and context-parallel reference runs under `overlapscope profile` find their known causes:
skewed routing's imbalance and hot rank, micro-batch overlap hiding dispatch/combine, ring overlap
hiding the K/V transfer. Real torchrun runs (CPU + gloo), each once per session (test_reference_models)."""
from __future__ import annotations

from overlapscope.analysis.all_to_all import waited_for_most
from test_reference_models import LOSS, RECORDED, knob_effect, profiled  # noqa: F401 - profiled: a fixture


def _dispatches(p):
    a = p.analysis.all_to_all
    return a[a["scope"].str.endswith(":dispatch")]


def test_moe_runs_train_and_label_every_layer_and_microbatch(profiled) -> None:
    p = profiled("moe_none")
    first, last = map(float, LOSS.search(p.done.stdout).groups())
    assert last < 0.8 * first
    assert p.manifest["layout"]["parallel"] == "ep" and p.manifest["layout"]["overlap"] == "none"
    moe = p.analysis.moe_layers
    fwd = moe[moe["pass"] == "forward"]
    # 2 layers x 4 micro-batches x (dispatch, combine) on every rank and recorded step
    assert len(fwd) == 2 * 2 * 4 * 2 * len(RECORDED)
    assert set(moe["pass"]) == {"forward", "backward"}
    assert (p.analysis.all_to_all["missing"] == "").all(), "gloo's alltoall_base_ shapes give every split"


def test_skewed_routing_shows_the_imbalance_and_names_the_hot_rank(profiled) -> None:
    skewed, uniform = _dispatches(profiled("moe_skewed")), _dispatches(profiled("moe_uniform"))
    # --skew 0.8 of every rank's tokens to rank 1's experts (the default --hot-rank), 4 ranks
    assert (skewed["imbalance"] >= 2.0).all(), skewed["imbalance"].describe()
    assert set(skewed["hot_rank"]) == {1}
    assert (uniform["imbalance"] <= 1.2).all() and set(uniform["hot_rank"]) == {-1}
    a = profiled("moe_skewed").analysis
    assert any("rank 1 receives the most" in d for d in a.diagnoses)
    # the hot rank computes the most experts: the combines wait for it
    assert waited_for_most(a.all_to_all)[0] == 1
    # the byte matrix is exact: each sender sends its tokens' rows of 64 floats (256 B)
    traffic = a.all_to_all_traffic
    assert (traffic["bytes"] % 256 == 0).all()
    assert traffic.groupby("instance")["bytes"].sum().eq(4 * 16 * 64 // 2 * 256).all()  # 4 ranks x 512 tokens


def _forward_per_step(frame):
    """Forward exposed and total comm per recorded step, summed over ranks and labels."""
    return frame[frame["pass"] == "forward"].groupby("step")[["exposed_comm_ns", "comm_ns"]].sum()


def test_microbatch_overlap_hides_dispatch_and_combine(profiled) -> None:
    # The exposed share per step, not summed ns: load on a shared machine stretches comm and compute
    # alike (measured under load: 1.0 for none in every step; 0.38-0.55 for microbatch while per-step
    # exposed ns varied 3x), and the median over steps ignores one descheduled step.
    def median_exposed_share(p) -> float:
        per_step = _forward_per_step(p.analysis.moe_passes)
        return float((per_step["exposed_comm_ns"] / per_step["comm_ns"]).median())

    # microbatch overlaps half the micro-batches' dispatch/combine with expert compute: well below 0.8
    knob_effect(profiled, ("moe_none", "moe_microbatch"), median_exposed_share,
                lambda none, mb: none == 1.0 and mb < 0.8)
    m = profiled("moe_none").analysis.moe_passes
    fwd = m[m["pass"] == "forward"]
    assert (fwd["exposed_comm_ns"] == fwd["comm_ns"]).all(), "nothing computes while a synchronous all-to-all runs"


def test_ring_overlap_hides_the_kv_transfer(profiled) -> None:
    def exposed_forward(p) -> float:  # median over steps: one descheduled step does not decide
        return float(_forward_per_step(p.analysis.ring_passes)["exposed_comm_ns"].median())

    knob_effect(profiled, ("cp_off", "cp_on"), exposed_forward, lambda off, on: on < off)
    ring = profiled("cp_on").analysis.ring_steps
    fwd = ring[ring["pass"] == "forward"]
    assert set(fwd["ring_step"]) == {0} and set(fwd["layer"]) == {0, 1}  # 2 ranks: one transfer per layer
    assert (fwd["hidden_by_attn_ns"] > 0).all() and (fwd["hidden_by_attn_ns"] <= fwd["hidden_ns"]).all()


def test_ring_at_world_size_4_labels_every_transfer(profiled) -> None:
    """4 ranks, one block: every rank runs ring steps 0-2 with a transfer (step 3 has none) in forward
    and backward, every recorded step; the ring section adds up; overlap on lets attention hide some."""
    p = profiled("cp_on_4")
    m = p.manifest
    assert m["world_size"] == 4 and m["missing_ranks"] == [] and m["layout"]["cp"] == 4
    first, last = map(float, LOSS.search(p.done.stdout).groups())
    assert last < 0.8 * first
    ring = p.analysis.ring_steps
    want = {(rank, step, pass_, k) for rank in range(4) for step in RECORDED
            for pass_ in ("forward", "backward") for k in range(3)}
    assert set(zip(ring["rank"], ring["step"], ring["pass"], ring["ring_step"])) == want
    assert (ring["layer"] == 0).all() and (ring["comm_ns"] > 0).all()
    assert (ring["exposed_comm_ns"] + ring["hidden_ns"] == ring["comm_ns"]).all()
    # each transfer is one send and one recv on gloo
    assert (ring["count"] == 2).all(), ring["count"].value_counts()
    fwd = ring[ring["pass"] == "forward"]
    assert (fwd["attn_ns"] > 0).all() and (fwd["hidden_by_attn_ns"] <= fwd["hidden_ns"]).all()
    # the transfer is in flight during the step's attention; how much it hides depends on the load
    assert fwd["hidden_by_attn_ns"].sum() > 0
    bwd = ring[ring["pass"] == "backward"]
    assert (bwd["attn_ns"] == 0).all(), "the backward shifts have no attention label of their own"


def test_moe_at_world_size_4_with_microbatch_overlap(profiled) -> None:
    """4 ranks, 4 experts each, uniform routing, --overlap microbatch: every rank labels both
    micro-batches' dispatch, experts and combine, and every all-to-all moves exactly 128 tokens of 64
    floats between every pair of ranks (512 tokens per micro-batch over 16 experts, 32 each)."""
    p = profiled("moe_uniform")
    layout = p.manifest["layout"]
    assert p.manifest["world_size"] == 4 and (layout["overlap"], layout["experts_per_rank"]) == ("microbatch", 4)
    for trace in p.run.ranks:
        names = trace.events["name"].astype(str)
        for mb in range(2):  # at least one per recorded step (the warm-up step's may be cut off)
            assert (names == f"moe:L0:mb{mb}:experts").sum() >= len(RECORDED), (trace.rank, mb)
    moe = p.analysis.moe_layers
    want = {(rank, step, pass_, mb, phase) for rank in range(4) for step in RECORDED
            for pass_ in ("forward", "backward") for mb in range(2) for phase in ("dispatch", "combine")}
    assert set(zip(moe["rank"], moe["step"], moe["pass"], moe["microbatch"], moe["phase"])) == want
    assert (moe["count"] == 1).all()
    a2a = p.analysis.all_to_all
    assert (a2a["ranks"] == 4).all() and (a2a["missing"] == "").all()
    traffic = p.analysis.all_to_all_traffic
    assert (traffic["bytes"] == 128 * 64 * 4).all()
    assert traffic.groupby("instance").size().eq(16).all() and traffic["instance"].nunique() == len(a2a)
