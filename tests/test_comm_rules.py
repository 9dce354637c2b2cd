"""What counts as communication: the rule table, user rules, launch context, the candidates warning.

Hand-built traces pin each rule to exact ns; the rule table is tested one rule at a time on the
example name it cites.
"""
from __future__ import annotations

import logging

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from kineto_builder import KinetoTrace
from overlapscope import analyze, load_run
from overlapscope.cli import main
from overlapscope.errors import OverlapscopeError
from overlapscope.ingest.classify import classify_kernels
from overlapscope.ingest.comm_rules import RULES, parse_user_rule, rule_set
from overlapscope.ingest import comm_summary
from overlapscope.ingest.comm_summary import kernel_base, suggested_pattern
from overlapscope.ingest.config_file import config_comm_patterns

BASE = 1_711_964_646_000_000_000
DEEPEP_DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)"
FORK_COMBINE = "void my_ep_fork::internode_ll::combine<false, 7168>(void*, void*)"  # renamed outer namespace
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.library}:{r.pattern}")
def test_each_rule_claims_its_example(rule):
    assert rule.example and rule.source, "every rule cites an example kernel name and where it comes from"
    assert rule.regex.search(rule.example)
    claimed, collective = classify_kernels([rule.example])
    # The first rule to match is this one or another of the same library (the NCCL catch-all).
    assert RULES[claimed[0]].library == rule.library
    if rule.collective:
        assert collective[0] == rule.collective


@pytest.mark.parametrize("name, collective", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all_reduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", "all_gather"),
    ("ncclSymkDevKernel_ReduceScatter_LL_sum_f8e4m3", "reduce_scatter"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "send_recv"),
    ("ncclDevKernel_Generic_1", ""),
    ("mscclKernel_Sum_half_Simple_false", ""),
    ("hcom_allReduce__428_0_1", "all_reduce"),
    ("hcom_alltoallv__503_0_1", "all_to_all"),
    ("void RcclKernelAllGather<float, HIP_vector_type<float, 4u> >(DeviceControl_t*, void const*, void*)", "all_gather"),
    (DEEPEP_DISPATCH, "all_to_all"),
    (FORK_COMBINE, "all_to_all"),
    ("void deep_ep::internode::notify_dispatch<false, 2>(int const*, int*)", "all_to_all"),
    ("void deep_ep::internode::cached_notify<2>(int, int)", "all_to_all"),
    ("void combineKernel<10u, true, false>(std::byte*)", "all_to_all"),
    ("void userbuffers_fp16_sum_inplace_gpu_rr_rs_oop<8>(int, int)", "reduce_scatter"),
    ("void fcollect_on_stream_kernel<float>(int, float*)", "all_gather"),
    ("void vllm::cross_device_reduce_2stage<half, 8>(vllm::RankData*)", "all_reduce"),
])
def test_collective_each_family_implies(name, collective):
    claimed, coll = classify_kernels([name])
    assert claimed[0] >= 0
    assert coll[0] == collective


@pytest.mark.parametrize("name", [
    GEMM, "ampere_sgemm_128x64_tn", "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x256>(Params)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>(...)",
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>>",
    "void cub::DeviceReduceByKeyKernel<cub::DispatchReduceByKey<long*, long*, int>::PtxReduceByKeyPolicy>(long*)",
    "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*)",  # local: counts tokens per rank
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", "void at::native::softmax_warp_forward<float>",
    "Memcpy DtoD (Device -> Device)", "void dispatchKernel(float*, int)",
])
def test_compute_kernels_are_not_comm(name):
    assert classify_kernels([name])[0][0] == -1


def test_user_rules_parse_and_come_first():
    rule = parse_user_rule("my_ep::token_dispatch=all_to_all")
    assert (rule.pattern, rule.collective, rule.library) == ("my_ep::token_dispatch", "all_to_all", "user")
    assert parse_user_rule("a(?=b)").pattern == "a(?=b)"  # an '=' inside a regex is regex
    rules = rule_set(("ncclDevKernel=broadcast",))
    assert classify_kernels(["ncclDevKernel_AllReduce_Sum_f32_RING_LL"], rules)[1][0] == "broadcast"
    with pytest.raises(OverlapscopeError, match="bad comm pattern"):
        parse_user_rule("deep_ep::(")
    with pytest.raises(OverlapscopeError, match="unknown collective 'all2all'"):
        parse_user_rule("x=all2all")


def test_suggested_pattern_is_escaped_base_name():
    assert kernel_base("void moe::token_dispatch_kernel<8, true>(int*, float)") == "moe::token_dispatch_kernel"
    assert suggested_pattern("void moe::token_dispatch_kernel<8, true>(int*, float)") == \
        "moe::token_dispatch_kernel=all_to_all"
    assert suggested_pattern("lamport_ar_fused(float*)") == "lamport_ar_fused"


def model_kernels(t: KinetoTrace, end_ns: int) -> None:
    """The compute stream 7 busy on [0, end_ns): a GEMM, then a layer norm and an add of 5 µs each."""
    t.kernel(GEMM, 0, end_ns - 10_000, launch_ns=0)
    t.kernel("void at::native::layer_norm_kernel<float>(float*)", end_ns - 10_000, end_ns - 5_000, launch_ns=10)
    t.kernel("void at::native::vectorized_elementwise_kernel<4, add>(float*)", end_ns - 5_000, end_ns, launch_ns=20)


def moe_step(t: KinetoTrace, dispatch: str, combine: str) -> None:
    """One step: compute [0, 100) µs on stream 7; dispatch [50, 150) and combine [200, 260) µs on stream 20."""
    t.step(1, 0, 300_000)
    model_kernels(t, 100_000)
    t.kernel(dispatch, 50_000, 150_000, stream=20, launch_ns=100)
    t.kernel(combine, 200_000, 260_000, stream=20, launch_ns=200)


def read_one(tmp_path, t: KinetoTrace, *patterns: str):
    path = t.write(tmp_path / "rank0.trace.json")
    return analyze(load_run(path, comm_patterns=patterns, cache=False))


def test_deepep_kernels_are_all_to_all_comm_on_their_stream(tmp_path):
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    moe_step(t, DEEPEP_DISPATCH, FORK_COMBINE)
    a = read_one(tmp_path, t)
    total = a.totals.iloc[0]
    # window [0, 260) µs; comm 160 µs of which [50, 100) overlaps the GEMM.
    assert (total.window_ns, total.comm_ns, total.overlapped_ns, total.exposed_comm_ns) == \
        (260_000, 160_000, 50_000, 110_000)
    assert a.by_collective[["collective", "comm_ns"]].values.tolist() == [["all_to_all", 160_000]]
    fam = a.comm_families.iloc[0]
    assert (fam["rule"].startswith("DeepEP"), fam["kernels"], fam["count"], fam["device_ns"]) == (True, 2, 2, 160_000)
    assert fam.device_pct == pytest.approx(100 * 160 / 260)
    assert a.comm_candidates.empty


def test_unclaimed_comm_looking_kernels_warn_with_share_and_pattern(tmp_path, caplog):
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    moe_step(t, "void moe::token_dispatch_kernel<8>(int*)", "void moe::token_combine_kernel<8>(int*)")
    with caplog.at_level(logging.WARNING):
        a = read_one(tmp_path, t)
    assert a.totals.iloc[0].comm_ns == 0
    cand = a.comm_candidates
    assert cand[["name", "device_ns", "comm_pattern"]].values.tolist() == [
        ["void moe::token_dispatch_kernel<8>(int*)", 100_000, "moe::token_dispatch_kernel=all_to_all"],
        ["void moe::token_combine_kernel<8>(int*)", 60_000, "moe::token_combine_kernel=all_to_all"]]
    assert cand["device_pct"].tolist() == pytest.approx([100 * 100 / 260, 100 * 60 / 260])
    warned = [r.getMessage() for r in caplog.records if "look like communication" in r.getMessage()]
    assert len(warned) == 1
    assert "61.5% of device time" in warned[0]
    assert "--comm-pattern moe::token_dispatch_kernel=all_to_all" in warned[0]
    # The pattern the warning prints counts them.
    fixed = read_one(tmp_path, t, *cand["comm_pattern"])
    assert (fixed.totals.iloc[0].comm_ns, fixed.totals.iloc[0].exposed_comm_ns) == (160_000, 110_000)
    assert fixed.by_collective["collective"].tolist() == ["all_to_all"]
    assert fixed.comm_families["rule"].tolist() == ["user: moe::token_dispatch_kernel", "user: moe::token_combine_kernel"]
    assert fixed.comm_candidates.empty


def test_long_kernels_alone_on_a_side_stream_are_candidates(tmp_path):
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 300_000)
    model_kernels(t, 200_000)
    t.kernel("void xfer_pipe_kernel(int*)", 20_000, 120_000, stream=30, launch_ns=10)
    t.kernel("void xfer_pipe_kernel(int*)", 130_000, 190_000, stream=30, launch_ns=20)
    a = read_one(tmp_path, t)
    cand = a.comm_candidates.iloc[0]
    assert (cand["name"], cand["count"], cand["device_ns"]) == ("void xfer_pipe_kernel(int*)", 2, 160_000)
    assert cand["why"] == "long kernels alone on stream:30, which runs no other kernel"


def test_launch_context_makes_copies_and_unnamed_kernels_comm(tmp_path):
    """A copy-engine all-gather (memcpy inside c10d::_allgather_base_) and an unnamed kernel inside
    record_param_comms are comm; the collective is the op's."""
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 100_000)
    t.kernel(GEMM, 0, 40_000, launch_ns=0)
    t.cpu_op("c10d::_allgather_base_", 100, 900)
    t.memcpy(10_000, 60_000, nbytes=1 << 20, launch_ns=200)   # in the op: comm, 50 µs, 30 overlapped
    t.memcpy(70_000, 80_000, nbytes=64, launch_ns=1_000)      # outside: an ordinary memcpy
    t.cpu_op("record_param_comms", 1_100, 1_900, **{"Collective name": "allreduce", "dtype": "Float",
                                                     "In msg nelems": 256, "Out msg nelems": 256})
    t.kernel("void custom_ar_fused<8>(float*)", 85_000, 95_000, stream=21, launch_ns=1_200)
    a = read_one(tmp_path, t)
    ev = load_run(tmp_path / "rank0.trace.json", cache=False).ranks[0].events
    comm = ev[ev["kind"] == "comm"].sort_values("start_ns")
    assert comm[["collective", "bytes"]].astype(str).values.tolist() == [["all_gather", str(1 << 20)],
                                                                        ["all_reduce", "1024"]]
    total = a.totals.iloc[0]
    assert (total.comm_ns, total.overlapped_ns, total.exposed_comm_ns, total.exposed_memcpy_ns) == \
        (60_000, 30_000, 30_000, 10_000)
    assert a.comm_families[["rule", "count", "device_ns"]].values.tolist() == [
        ["launch context (inside a communication op)", 2, 60_000]]


def test_sendrecv_in_all_to_all_is_all_to_all_and_in_all_reduce_a_counted_conflict(tmp_path):
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 100_000)
    sendrecv = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
    t.cpu_op("nccl:all_to_all", 100, 500)
    t.kernel(sendrecv, 10_000, 20_000, stream=20, launch_ns=200)
    t.cpu_op("nccl:all_reduce", 600, 900)
    t.kernel(sendrecv, 30_000, 40_000, stream=20, launch_ns=700)
    t.kernel(sendrecv, 50_000, 60_000, stream=20, launch_ns=1_000)  # no op: the kernel's name
    a = read_one(tmp_path, t)
    assert sorted(a.by_collective["collective"]) == ["all_reduce", "all_to_all", "send_recv"]
    assert a.collective_conflicts.values.tolist() == [["all_reduce", "send_recv", sendrecv, 1]]
    assert any("1 comm kernel(s) ran inside an op that names another collective" in d for d in a.diagnoses)


def test_config_files_add_rules(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    moe_step(t, "void moe::token_dispatch_kernel<8>(int*)", "void moe::token_combine_kernel<8>(int*)")
    t.write(run / "rank0.trace.json")
    (run / "overlapscope.toml").write_text('comm_patterns = ["moe::token_dispatch_kernel=all_to_all"]\n')
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.overlapscope]\ncomm_patterns = ["token_combine=all_to_all"]\n')
    monkeypatch.chdir(project / "sub")
    assert config_comm_patterns(run) == ("moe::token_dispatch_kernel=all_to_all", "token_combine=all_to_all")
    doc = orjson.loads(CliRunner().invoke(main, ["analyze", str(run), "--format", "json", "--no-cache"]).stdout)
    assert doc["ranks"][0]["total"]["comm_ns"] == 160_000
    assert [f["rule"] for f in doc["comm_classification"]] == ["user: moe::token_dispatch_kernel", "user: token_combine"]
    assert doc["unclassified_comm_candidates"] == []
    (run / "overlapscope.toml").write_text('comm_patterns = ["x=all2all"]\n')
    bad = CliRunner().invoke(main, ["analyze", str(run)])
    assert bad.exit_code == 2 and "overlapscope.toml" in bad.output and "unknown collective" in bad.output


def test_json_lists_candidates_and_cli_pattern_counts_them(tmp_path):
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    moe_step(t, "void moe::token_dispatch_kernel<8>(int*)", DEEPEP_DISPATCH)
    path = t.write(tmp_path / "rank0.trace.json")
    doc = orjson.loads(CliRunner().invoke(main, ["analyze", str(path), "--format", "json"]).stdout)
    assert [(c["name"], c["device_ns"], c["comm_pattern"]) for c in doc["unclassified_comm_candidates"]] == [
        ("void moe::token_dispatch_kernel<8>(int*)", 100_000, "moe::token_dispatch_kernel=all_to_all")]
    doc = orjson.loads(CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--comm-pattern",
                                                 "moe::token_dispatch_kernel=all_to_all"]).stdout)
    assert doc["ranks"][0]["total"]["comm_ns"] == 160_000 and doc["unclassified_comm_candidates"] == []


def test_comm_on_a_compute_stream_is_diagnosed_only_when_it_did_not_overlap(tmp_path):
    """Stream 20 runs a 1 µs kernel beside an all-reduce; stream 7's GEMM overlaps 96% of it (no
    diagnosis). A second rank's all-reduce on stream 7 itself overlaps nothing (diagnosed)."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 200_000)
    t.kernel(GEMM, 0, 96_000, launch_ns=0)
    t.kernel("void tiny_scale_kernel(float*)", 100_000, 101_000, stream=20, launch_ns=10)
    t.kernel(nccl, 0, 100_000, stream=20, launch_ns=20)
    a = read_one(tmp_path, t)
    assert a.totals.iloc[0].overlapped_ns == 96_000
    assert not [d for d in a.diagnoses if "cannot overlap" in d]
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 200_000)
    t.kernel(GEMM, 0, 50_000, launch_ns=0)
    t.kernel(nccl, 50_000, 150_000, launch_ns=20)
    a = read_one(tmp_path, t)
    assert [d for d in a.diagnoses if "cannot overlap" in d] == [
        "rank 0: 1 collective kernel(s), 0.100 ms, run on stream:7, which also runs compute: "
        "they cannot overlap anything there"]


def test_all_to_all_size_from_the_nccl_op_input_dims_gives_busbw(tmp_path):
    """No record_param_comms: S is the nccl:all_to_all op's input, 1024 x 256 float = 1 MiB; the
    2-rank collective's transfer is 40 µs (rank 1 arrives 10 µs late)."""
    run = tmp_path / "a2a"
    run.mkdir()
    for rank, late in ((0, 0), (1, 10_000)):
        t = KinetoTrace(rank=rank, world_size=2, base_ns=BASE)
        t.step(1, 0, 100_000)
        t.kernel(GEMM, 0, 5_000, launch_ns=0)
        t.cpu_op("nccl:all_to_all", 100 + late, 900 + late, **{"Input Dims": [[1024, 256]], "Input type": ["float"]})
        t.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 10_000 + late, 60_000,
                 stream=20, launch_ns=200 + late)
        t.write(run / f"rank{rank}.trace.json")
    a = analyze(load_run(run, cache=False))
    coll = a.collectives
    assert coll["collective"].tolist() == ["all_to_all", "all_to_all"]
    assert coll["bytes"].tolist() == [1 << 20, 1 << 20]
    assert coll["transfer_ns"].tolist() == [40_000, 40_000]
    assert coll["instance_busbw_gbps"].iloc[0] == pytest.approx((1 << 20) / 40_000 * 0.5)


@pytest.mark.parametrize("input_type, element", [("float", 4), ("c10::BFloat16", 2), ("c10::Half", 2),
                                                 ("long int", 8), ("unsigned char", 1)])
def test_op_input_size_reads_the_type_names_torch_prints(tmp_path, input_type, element):
    """`Input type` holds the C++ type torch prints (real traces: "c10::Half", "long int", "unsigned
    char"), not the ScalarType name of record_param_comms' dtype: a bf16 all-to-all has a size too."""
    t = KinetoTrace(rank=0, world_size=1, base_ns=BASE)
    t.step(1, 0, 100_000)
    t.cpu_op("nccl:all_to_all", 100, 900, **{"Input Dims": [[1024, 256]], "Input type": [input_type]})
    t.kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 10_000, 60_000, stream=20, launch_ns=200)
    ev = load_run(t.write(tmp_path / "rank0.trace.json"), cache=False).ranks[0].events
    comm = ev[ev["kind"] == "comm"]
    assert comm[["collective", "bytes"]].astype(str).values.tolist() == [["all_to_all", str(1024 * 256 * element)]]


def test_classification_is_remembered_per_rule_set():
    """The per-name cache of classify_kernels is keyed by the rule set: a user pattern still wins."""
    from overlapscope.ingest.comm_rules import RULES, rule_set

    names = ["my_fused_allreduce_kernel_v9", "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)"]
    first = classify_kernels(names)
    assert classify_kernels(names)[0].tolist() == first[0].tolist()
    assert first[0][0] == -1 and first[0][1] >= 0 and first[1][1] == "all_gather"
    user = classify_kernels(names, rule_set(("my_fused_allreduce",)))
    assert user[0][0] == 0 and user[1][0] == "all_reduce"
    assert user[0][1] == first[0][1] + 1 and classify_kernels(names, RULES)[0][0] == -1


def test_families_on_codes_are_pandas_groupbys_ties_and_missing_included():
    """_families (codes, for a rank's few comm rows) gives what the groupby by rule, then by name, gives
    (_families_pandas), the example among equal device times included; a missing name or rule and
    more than SMALL_ROWS rows go to the groupby itself."""
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 60))
        names = np.array([f"k{int(i)}" for i in rng.integers(0, 25, n)], dtype=object)
        by = np.array([("nccl", "rccl", "pattern x", "b")[int(i)] for i in rng.integers(0, 4, n)], dtype=object)
        dur = rng.integers(0, 4, n).astype(np.int64) * 1000  # many equal sums: the example's tie order
        assert comm_summary._families(names, dur, by) == comm_summary._families_pandas(names, dur, by)
    names = np.array(["a", None, "b", "a"], dtype=object)
    by = np.array(["nccl", "nccl", None, "rccl"], dtype=object)
    dur = np.array([5, 7, 11, 13], dtype=np.int64)
    assert comm_summary._families(names, dur, by) == comm_summary._families_pandas(names, dur, by) == [
        {"rule": "nccl", "kernels": 1, "example": "a", "count": 2, "device_ns": 12},
        {"rule": "rccl", "kernels": 1, "example": "a", "count": 1, "device_ns": 13}]


@pytest.mark.parametrize("values", [["s:7", "s:20", "s:7", "a"], ["é", "e", "Z", "z", "e"], ["x"] * 3000, []])
def test_unique_str_small_path_is_the_pandas_path(values, monkeypatch):
    """_unique_str of a few str (a dict) gives what its pd.factorize path gives, and both are
    np.unique(values, return_inverse=True)."""
    array = np.array(values, dtype=object).reshape(-1)
    small = comm_summary._unique_str(array)
    monkeypatch.setattr(comm_summary, "SMALL_ROWS", -1)
    large = comm_summary._unique_str(array)
    want, want_inverse = np.unique(array, return_inverse=True)
    for uniq, inverse in (small, large):
        assert uniq.dtype == object and uniq.tolist() == want.tolist()
        assert inverse.tolist() == want_inverse.reshape(-1).tolist()
