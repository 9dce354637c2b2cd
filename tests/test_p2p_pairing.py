"""p2p pairing across ranks: a send a->b pairs with the recv on b from a, the k-th of that direction in
that group. Generated 4-stage NCCL pipeline over 2-rank groups, clocks milliseconds apart."""
from __future__ import annotations

import orjson
import pytest

from kineto_builder import KinetoTrace
from overlapscope import analyze, load_run

BASE = 1_711_964_646_000_000_000
CLOCK_NS = {0: 0, 1: 3_200_000, 2: -1_700_000, 3: 5_500_000}  # recorded = true + this
STAGES, MICROBATCHES, SLOW = 4, 4, 2
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
PG = [{"pg_name": "world", "pg_desc": "default_pg", "ranks": [0, 1, 2, 3]}] + [
    {"pg_name": f"pp{r}", "pg_desc": "pp", "ranks": [r, r + 1]} for r in range(STAGES - 1)]


def p2p(t: KinetoTrace, rank: int, op: str, group: str, post: int, end: int, seq: int | None,
        stream: int | None = None) -> None:
    """One nccl:send/recv on `rank`, posted at `post` and ending at `end` (true time, ns)."""
    off = CLOCK_NS[rank]
    launch = post + off - 2_000
    args = {"Collective name": op.split()[0].split(":")[1], "dtype": "Float", "In msg nelems": 1 << 20,
            "Out msg nelems": 1 << 20, "Process Group Name": group}
    if seq is not None:
        args["Seq"] = seq
    t.cpu_op(op, launch - 500, launch + 500)
    t.cpu_op("record_param_comms", launch - 400, launch + 400, **args)
    t.kernel(SENDRECV, post + off, end + off, stream=20 + len(op) if stream is None else stream, launch_ns=launch)


def pipeline(tmp_path, *, with_seq: bool, with_allreduce: bool = True):
    traces = {r: KinetoTrace(rank=r, world_size=STAGES, base_ns=BASE) for r in range(STAGES)}
    for r, t in traces.items():
        t.step(1, CLOCK_NS[r] - 100_000, CLOCK_NS[r] + 20_000_000)
        t.kernel("void gemm()", CLOCK_NS[r], CLOCK_NS[r] + 9_000_000, launch_ns=CLOCK_NS[r] - 50_000)
    seq = {r: 0 for r in range(STAGES - 1)}  # torch counts p2p per process group
    for m in range(MICROBATCHES):
        for r in range(STAGES - 1):
            b = m * 2_000_000 + r * 400_000
            send_post, recv_post = b + 20_000, b      # the receiver posts first...
            if r == SLOW:
                send_post = b + 100_000               # ...unless the slow stage sends
            if r + 1 == SLOW:
                send_post, recv_post = b, b + 100_000  # ...or receives
            end = max(send_post, recv_post) + 50_000
            p2p(traces[r], r, "nccl:send 0->1", f"pp{r}", send_post, end, seq[r] if with_seq else None)
            p2p(traces[r + 1], r + 1, "nccl:recv 1<-0", f"pp{r}", recv_post, end, seq[r] if with_seq else None)
            seq[r] += 1
    # One all-reduce over the world: the last stage arrives last there.
    for r, t in (traces.items() if with_allreduce else ()):
        start = 10_000_000 + (300_000 if r == STAGES - 1 else 0)
        t.cpu_op("record_param_comms", start + CLOCK_NS[r] - 3_000, start + CLOCK_NS[r] - 1_000,
                 **{"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 256,
                    "Process Group Name": "world"})
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", start + CLOCK_NS[r], 10_400_000 + CLOCK_NS[r],
                 stream=40, launch_ns=start + CLOCK_NS[r] - 2_000)
    run = tmp_path / f"{'seq' if with_seq else 'order'}{'_ar' if with_allreduce else ''}"
    run.mkdir()
    for r, t in traces.items():
        doc = t.document()
        doc["distributedInfo"]["pg_config"] = PG
        (run / f"rank{r}.trace.json").write_bytes(orjson.dumps(doc))
    return analyze(load_run(run, cache=False))


@pytest.mark.parametrize("with_allreduce", [True, False], ids=["with-allreduce", "pipeline-only"])
@pytest.mark.parametrize("with_seq", [True, False], ids=["by-seq", "by-order"])
def test_pipeline_p2p_pairs_align_clocks_and_name_the_slow_stage(tmp_path, with_seq, with_allreduce):
    """Without p2p in the straggler count, the world all-reduce alone would name rank 3; a
    pipeline-only run has nothing but p2p to align clocks with."""
    a = pipeline(tmp_path, with_seq=with_seq, with_allreduce=with_allreduce)
    assert a.unmatched.empty, a.unmatched
    p2p_rows = a.collectives[a.collectives["collective"].isin(["send", "recv"])]
    assert len(p2p_rows) == 2 * MICROBATCHES * (STAGES - 1)
    assert p2p_rows.groupby("instance")["collective"].apply(sorted).map(tuple).unique().tolist() == [("recv", "send")]
    # Clocks recovered to 1 µs: aligned = recorded + offset, rank 0 the reference.
    for r, off in CLOCK_NS.items():
        assert abs(a.clock_offsets_ns[r] + off - CLOCK_NS[0]) <= 1_000, (r, a.clock_offsets_ns)
    assert int(a.stragglers.iloc[0]["rank"]) == SLOW
    assert any(f"rank {SLOW} arrives last" in d for d in a.diagnoses)
    # Wait/transfer of the pair the slow stage receives in: the sender waited 100 µs, 50 µs transfer.
    pair = p2p_rows[(p2p_rows["group"] == f"pp{SLOW - 1}")]
    send = pair[pair["collective"] == "send"].iloc[0]
    recv = pair[pair["collective"] == "recv"].iloc[0]
    assert (send["wait_ns"], send["transfer_ns"], recv["wait_ns"], recv["transfer_ns"]) == (100_000, 50_000, 0, 50_000)
    # busbw of a send: S / transfer time, factor 1 (4 MiB in 50 µs).
    assert send["busbw_gbps"] == pytest.approx((4 << 20) / 50_000)


def test_larger_group_pairs_by_the_ranks_the_op_names():
    """Four ranks of one group send in a ring: the 2-rank inference cannot tell the peers apart; the
    op names (`nccl:send 1->2`, group ranks) can."""
    import pandas as pd

    from overlapscope.analysis.matching import stream_keys

    rows = []
    for r in range(4):
        rows.append({"rank": r, "group": "g", "collective": "send", "op": f"nccl:send {r}->{(r + 1) % 4}"})
        rows.append({"rank": r, "group": "g", "collective": "recv", "op": f"nccl:recv {r}<-{(r - 1) % 4}"})
    key, reason = stream_keys(pd.DataFrame(rows))
    assert list(reason) == [""] * 8
    assert key.tolist() == ["g|p2p|0->1", "g|p2p|3->0", "g|p2p|1->2", "g|p2p|0->1",
                            "g|p2p|2->3", "g|p2p|1->2", "g|p2p|3->0", "g|p2p|2->3"]
    rows[0]["op"] = "nccl:send"  # one op without ranks: the group falls back, and 4 ranks cannot pair
    key, reason = stream_keys(pd.DataFrame(rows))
    assert set(reason) == {"p2p peer unknown (4 ranks of the group do p2p)"}


@pytest.mark.parametrize("with_seq", [True, False], ids=["by-seq", "by-order"])
def test_ring_in_one_group_pairs_by_the_ranks_the_op_names(tmp_path, with_seq):
    """Four ranks of one group pass a ring: rank r sends to r+1 and receives from r-1, one NCCL stream
    per peer pair. torch's p2p `Seq` counts every p2p op of a rank in the group (seqP2P_), so a
    send's Seq (2m+2: each rank posts its recv first) is never its recv's (2m+1): they pair as the
    k-th of their direction, not by equal numbers. Rank 2 posts 100 µs late each round."""
    traces = {r: KinetoTrace(rank=r, world_size=4, base_ns=BASE) for r in range(4)}
    for r, t in traces.items():
        t.step(1, CLOCK_NS[r] - 100_000, CLOCK_NS[r] + 10_000_000)
        t.kernel("void gemm()", CLOCK_NS[r], CLOCK_NS[r] + 5_000_000, launch_ns=CLOCK_NS[r] - 50_000)
    post = {r: (100_000 if r == SLOW else 0) for r in range(4)}  # recv at b (+100 µs on rank 2)...
    for m in range(3):
        b = m * 2_000_000
        for r in range(4):
            nxt, prv = (r + 1) % 4, (r - 1) % 4
            send_post = b + post[r] + 20_000                # ...the send 20 µs after the recv
            end = max(send_post, b + post[nxt]) + 50_000    # ends when both ends are there
            p2p(traces[r], r, f"nccl:send {r}->{nxt}", "ring", send_post, end, 2 * m + 2 if with_seq else None,
                stream=40 + nxt)
            recv_end = max(b + post[prv] + 20_000, b + post[r]) + 50_000
            p2p(traces[r], r, f"nccl:recv {r}<-{prv}", "ring", b + post[r], recv_end,
                2 * m + 1 if with_seq else None, stream=40 + prv)
    run = tmp_path / "ring"
    run.mkdir()
    for r, t in traces.items():
        doc = t.document()
        doc["distributedInfo"]["pg_config"] = [{"pg_name": "ring", "pg_desc": "ring", "ranks": [0, 1, 2, 3]}]
        (run / f"rank{r}.trace.json").write_bytes(orjson.dumps(doc))
    a = analyze(load_run(run, cache=False))
    assert a.unmatched.empty, a.unmatched
    coll = a.collectives
    assert len(coll) == 24 and coll.groupby("instance")["collective"].apply(sorted).map(tuple).unique().tolist() == \
        [("recv", "send")]
    for r, off in CLOCK_NS.items():
        assert abs(a.clock_offsets_ns[r] + off - CLOCK_NS[0]) <= 1_000, (r, a.clock_offsets_ns)
    assert int(a.stragglers.iloc[0]["rank"]) == SLOW
    # Each pair is one sender and its receiver: 2 -> 3 (the receiver waits 120 µs) and 1 -> 2 (the
    # sender waits 80 µs), 50 µs of transfer each.
    pairs = {tuple(sorted(g["rank"])): g.set_index("collective") for _, g in coll[coll["step"] >= 0].groupby("instance")}
    assert set(pairs) == {(0, 1), (1, 2), (2, 3), (0, 3)}
    late_send, late_recv = pairs[(2, 3)], pairs[(1, 2)]
    assert (late_send.loc["send", "rank"], late_send.loc["recv", "wait_ns"], late_send.loc["send", "wait_ns"],
            late_send.loc["recv", "transfer_ns"]) == (2, 120_000, 0, 50_000)
    assert (late_recv.loc["send", "rank"], late_recv.loc["send", "wait_ns"], late_recv.loc["recv", "wait_ns"],
            late_recv.loc["send", "transfer_ns"]) == (1, 80_000, 0, 50_000)
