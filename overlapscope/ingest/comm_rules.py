"""What counts as communication, as data: one rule per library's kernel family (DESIGN.md "What counts as what").

Each rule names its library, the regex (searched, any case, in the kernel name), the collective the
kernel performs ('' = read it from the name's collective token, else from the launching op), an
example kernel name and where that name comes from. Rules are tried in order; the first match wins.
User rules (`--comm-pattern REGEX[=collective]`, config file) go before these.

Rules anchor on what a library's kernel is called, never on an outer namespace a fork may rename
(DeepEP forks rename `deep_ep::`; the inner `intranode::` / `internode::` / `internode_ll::` stay).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import OverlapscopeError
from ..core.roles import is_comm_call
from ..core.table import COLLECTIVES

# Words that say "communication" in a kernel name that no rule claimed (the candidates warning).
CANDIDATE_TOKENS = re.compile(
    r"dispatch|combine|notify|internode|intranode|a2a|all_?to_?all|all_?reduce|all_?gather|"
    r"reduce_?scatter|send_?recv|p2p|ipc|nvshmem|lamport|barrier|multimem|symm_?mem|rdma",
    re.IGNORECASE)


is_comm_op = is_comm_call  # the reader's launch context and the role column share one list


@dataclass(frozen=True, kw_only=True)
class CommRule:
    """One kernel-name rule."""

    library: str
    """Who launches these kernels (NCCL, DeepEP, ...; `user` for --comm-pattern / config rules)."""
    pattern: str
    """Regex searched (any case) in the kernel name."""
    collective: str = ""
    """The collective these kernels perform; '' = from the name's collective token or the launching op."""
    example: str = ""
    """A kernel name the rule must match (tested)."""
    source: str = ""
    """Where the example comes from: the library's public source file, or a public trace."""
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise OverlapscopeError(f"unknown collective {self.collective!r} in comm rule "
                                    f"(one of {', '.join(c for c in COLLECTIVES if c)})", self.source or self.pattern)
        try:
            object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))
        except re.error as exc:
            raise OverlapscopeError(f"bad comm pattern {self.pattern!r} ({exc})", self.source or "--comm-pattern") from None

    @property
    def label(self) -> str:
        return f"{self.library}: {self.pattern}"


_NCCL = "https://github.com/NVIDIA/nccl"
_TE_UB = "https://github.com/NVIDIA/TransformerEngine transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu"
_SYMM = "https://github.com/pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu"
RULES: tuple[CommRule, ...] = (
    # NCCL of every generation: ncclKernel_* (<= 2.18), ncclDevKernel_* (2.19+), symmetric kernels.
    CommRule(library="NCCL", pattern=r"ncclSymk?DevKernel_", example="ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f32",
             source=f"{_NCCL} src/device/symmetric/ (generated ncclSymkDevKernel_* entry points, NCCL 2.27+)"),
    CommRule(library="NCCL", pattern=r"nccl\w*Kernel", example="ncclDevKernel_AllReduce_Sum_f32_RING_LL",
             source=f"{_NCCL} src/device/generate.py (ncclDevKernel_<Coll>_<Op>_<type>_<algo>_<proto>)"),
    CommRule(library="NCCL", pattern=r"nccl", example="ncclAllReduceRingLLKernel_sum_f32",
             source=f"{_NCCL} (any other nccl-named kernel: NCCL 2.3-era names put the collective first)"),
    CommRule(library="MSCCL", pattern=r"mscclKernel_", example="mscclKernel_Sum_half_Simple_false",
             source="https://github.com/ROCm/rccl src/include/msccl/msccl_kernel.h (MSCCL_KERNEL_ENTRY_NAME)"),
    # RCCL since its NCCL port keeps NCCL's names (ncclDevKernel_Generic_1 on ROCm traces: the NCCL
    # rules); the first RCCL releases named their own kernels Rccl*.
    CommRule(library="RCCL", pattern=r"rccl",
             example="void RcclKernelAllGather<float, HIP_vector_type<float, 4u> >(DeviceControl_t*, void const*, void*, "
                     "int, int, unsigned int, unsigned int)",
             source="https://github.com/ROCm/rccl src/rcclAllGatherRuntime.h (hipLaunchKernelGGL RcclKernelAllGather, "
                    "2017-2018 releases)"),
    CommRule(library="HCCL", pattern=r"hccl|^hcom_", example="hcom_allReduce__428_0_1",
             source="Ascend msprof communication op table (opName example hcom_allReduce__428_0_1)"),
    CommRule(library="MSCCL++", pattern=r"mscclpp::executionKernel",
             example="void mscclpp::executionKernel<__half, mscclpp::LL16Packet, true>(int, __half*)",
             source="https://github.com/microsoft/mscclpp src/executor/execution_kernel.cu"),
    CommRule(library="MSCCL++", pattern=r"(?:^|[\s:])(?:allreduce|allgather)\d+<", example="void allreduce7<__half>(__half*)",
             source="https://github.com/microsoft/mscclpp apps/nccl/src/allreduce.hpp (allreduce7, allreduce8, ...)"),
    CommRule(library="torch symmetric memory", pattern=r"multimem_(?:one_shot_)?all_?reduce",
             collective="all_reduce", example="void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 8>(float*)",
             source=_SYMM),
    CommRule(library="torch symmetric memory", pattern=r"multimem_all_?gather", collective="all_gather",
             example="void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*)",
             source=_SYMM),
    CommRule(library="torch symmetric memory", pattern=r"multimem_", example="multimem_one_shot_reduce_kernel",
             source=_SYMM),
    # one-/two-shot all-reduces: torch symmetric memory (CUDA and Triton), TensorRT-LLM custom
    # all-reduce (oneShotAllReduceKernel), FlashInfer/TRT-LLM MNNVL twoshot_allreduce_kernel.
    CommRule(library="one-/two-shot all-reduce", pattern=r"(?:one|two)_?shot_?all_?reduce", collective="all_reduce",
             example="two_shot_all_reduce_kernel",
             source="https://github.com/pytorch/pytorch torch/distributed/_symmetric_memory/_triton_ops (two_shot_all_reduce_kernel); "
                    "https://github.com/NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu"),
    CommRule(library="vLLM/SGLang custom all-reduce", pattern=r"cross_device_reduce", collective="all_reduce",
             example="void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)",
             source="https://github.com/vllm-project/vllm csrc/custom_all_reduce.cuh (sgl-kernel and aiter keep the name)"),
    CommRule(library="FlashInfer/TensorRT-LLM all-reduce fusion", pattern=r"allreduce_fusion_kernel|lamport",
             collective="all_reduce",
             example="void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport"
                     "<(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false, false>()",
             source="https://github.com/flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce_fusion.cuh"),
    CommRule(library="AMD quickreduce", pattern=r"quickreduce::|allreduce_prototype_(?:one|two)shot",
             collective="all_reduce",
             example="quickreduce::allreduce_prototype_twoshot<AllReduceTwoshot<__half, CodecQ4<__half,4>, true>, __half>",
             source="https://github.com/vllm-project/vllm csrc/quickreduce/quick_reduce_impl.cuh"),
    CommRule(library="Transformer Engine userbuffers", pattern=r"userbuffers\w*_ag\b",
             collective="all_gather",
             example="void userbuffers_fp16_sum_inplace_gpu_rw_ag<2>(int, int, int, int, int, int, int, void**, int, unsigned long)",
             source=_TE_UB),
    CommRule(library="Transformer Engine userbuffers", pattern=r"userbuffers\w*_rs", collective="reduce_scatter",
             example="void userbuffers_fp16_sum_inplace_gpu_rr_rs<4>(int, int, int, int, int, int, int, void**, int, unsigned long)",
             source=_TE_UB),
    CommRule(library="Transformer Engine userbuffers", pattern=r"userbuffers_\w*(?:push|pull)send", collective="send",
             example="kuserbuffers_pushsend",
             source=_TE_UB),
    CommRule(library="Transformer Engine userbuffers", pattern=r"userbuffers_\w*(?:push|pull)recv", collective="recv",
             example="kuserbuffers_pullrecv",
             source=_TE_UB),
    CommRule(library="Transformer Engine userbuffers", pattern=r"userbuffers", example="userbuffers_fp16_sum_inplace_gpu_rw",
             source=_TE_UB),
    # DeepEP normal (intranode, internode) and low-latency (internode_ll) kernels; csrc/kernels/api.cuh.
    CommRule(library="DeepEP", pattern=r"\b(?:intranode|internode(?:_ll)?)::"
                                       r"(?:notify_dispatch|cached_notify_dispatch|cached_notify_combine|cached_notify|"
                                       r"dispatch|combine)\b",
             collective="all_to_all", example="void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)",
             source="https://github.com/deepseek-ai/DeepEP csrc/kernels/api.cuh, intranode.cu, internode.cu, internode_ll.cu"),
    CommRule(library="DeepEP", pattern=r"\b(?:intranode|internode)::barrier\b", collective="barrier",
             example="void deep_ep::intranode::barrier<8>(int**, int)",
             source="https://github.com/deepseek-ai/DeepEP csrc/kernels/api.cuh"),
    CommRule(library="pplx-kernels", pattern=r"\b(?:dispatch|combine)Kernel<\d+u?, (?:true|false), (?:true|false)",
             collective="all_to_all", example="void dispatchKernel<10u, true, true>(int*, unsigned long)",
             source="https://github.com/perplexityai/pplx-kernels csrc/all_to_all/internode_dispatch.cu, internode_combine.cu"),
    CommRule(library="mori", pattern=r"\bEp(?:Dispatch|Combine)\w*Kernel", collective="all_to_all",
             example="void mori::moe::EpDispatchIntraNodeKernel<__hip_bfloat16>(mori::moe::EpDispatchCombineArgs<__hip_bfloat16>)",
             source="https://github.com/ROCm/mori src/ops/dispatch_combine/intranode.hpp"),
    CommRule(library="NVSHMEM", pattern=r"(?:barrier|sync)_on_stream_kernel|nvshmemi?x?_barrier", collective="barrier",
             example="barrier_on_stream_kernel_threadgroup",
             source="https://github.com/NVIDIA/nvshmem src/include/non_abi/device/coll/ (barrier_on_stream_kernel)"),
    CommRule(library="NVSHMEM", pattern=r"rdxn_on_stream_kernel|reduce_on_stream_kernel", collective="all_reduce",
             example="void rdxn_on_stream_kernel<float, (rdxn_ops)4>(int, float*, float const*, unsigned long)",
             source="https://github.com/NVIDIA/nvshmem src/device/coll/reduce.cu (nvshmemi_call_rdxn_on_stream_kernel)"),
    CommRule(library="NVSHMEM", pattern=r"(?:fcollect|alltoall|broadcast|bcast)_on_stream_kernel",
             example="void alltoall_on_stream_kernel<float>(int, float*, float const*, unsigned long)",
             source="https://github.com/NVIDIA/nvshmem src/device/coll/ (alltoall, fcollect, broadcast on stream)"),
)

# NVSHMEM's fcollect is its all-gather; the name's token does not say so.
_TOKEN_COLLECTIVES = {"fcollect": "all_gather"}


def parse_user_rule(text: str, source: str = "--comm-pattern") -> CommRule:
    """`REGEX` or `REGEX=collective` (the part after the last '=' names a collective, or it is regex)."""
    pattern, collective = text, ""
    head, sep, tail = text.rpartition("=")
    tail = tail.strip()
    if sep and tail in COLLECTIVES and tail:
        pattern, collective = head, tail
    elif sep and re.fullmatch(r"[A-Za-z_]\w*", tail):
        raise OverlapscopeError(f"unknown collective {tail!r} in comm pattern {text!r} "
                                f"(one of {', '.join(c for c in COLLECTIVES if c)})", source)
    if not pattern:
        raise OverlapscopeError(f"empty comm pattern {text!r}", source)
    return CommRule(library="user", pattern=pattern, collective=collective, example="", source=source)


def rule_set(user_patterns: tuple[str, ...] = ()) -> tuple[CommRule, ...]:
    """User rules first (they may override a library rule), then the library table."""
    return tuple(parse_user_rule(p) for p in user_patterns if p) + RULES


def token_collective(name: str) -> str:
    low = name.lower()
    for token, collective in _TOKEN_COLLECTIVES.items():
        if token in low:
            return collective
    return ""
