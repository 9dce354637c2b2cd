"""What every reference run shares: flags, process-group set-up, a tiny transformer, the training loop.

The model is a pre-norm decoder (attention + MLP per block) learning a fixed affine token sequence
(x[t+1] = (5 x[t] + 3) mod vocab), so the loss visibly falls within a few steps. Every block's forward
runs inside `label("layerN")` and every iteration inside `train_step` > `forward` / `backward` /
`optimizer` labels, so Kineto and Nsight show the same structure.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from overlapscope.capture import capture, label, set_layout


@dataclass(frozen=True)
class Context:
    rank: int
    world_size: int
    device: torch.device
    backend: str


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dim", type=int, default=128, help="model width")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks")
    p.add_argument("--heads", type=int, default=4, help="attention heads")
    p.add_argument("--seq", type=int, default=64, help="sequence length")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--iters", type=int, default=10, help="optimizer steps")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--capture-out", default=None,
                   help="profile with overlapscope.capture() from inside the script (steps 3, skip-first 1)")
    return p


def setup() -> Context:
    """NCCL on CUDA, gloo on CPU: the only device-dependent choice in the reference runs."""
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    return Context(dist.get_rank(), dist.get_world_size(), device, backend)


def teardown() -> None:
    """Destroy the process group while Python still runs, after everything that used it is freed.

    Left to interpreter shutdown (a DDP reducer or FSDP state still holding the group), gloo's
    teardown sometimes aborts the process ("terminate called without an active exception") after
    a profiled run; so: collect the model's reference cycles, let every rank finish, then destroy.
    """
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # under tensor parallelism q/k/v hold this rank's heads only: infer the count from the width
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, 4 * dim, bias=False)
        self.w2 = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    """Pre-norm attention + feed-forward; `attn` / `mlp` replace the default parts (ring attention, MoE)."""

    def __init__(self, dim: int, heads: int, index: int, attn: nn.Module | None = None,
                 mlp: nn.Module | None = None) -> None:
        super().__init__()
        self.index = index
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attn or Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = mlp or MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with label(f"layer{self.index}"):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """Embedding, blocks, head; `first`/`last` select a pipeline stage's share (both True: the whole model).
    make_block(i) builds block i (default: the attention + MLP Block); inputs start at sequence position
    `pos_offset` (a context-parallel rank's chunk)."""

    def __init__(self, args: argparse.Namespace, block_ids: list[int] | None = None,
                 first: bool = True, last: bool = True,
                 make_block: Callable[[int], nn.Module] | None = None, pos_offset: int = 0) -> None:
        super().__init__()
        ids = list(range(args.layers)) if block_ids is None else block_ids
        make_block = make_block or (lambda i: Block(args.dim, args.heads, i))
        self.pos_offset = pos_offset
        self.tok = nn.Embedding(args.vocab, args.dim) if first else None
        self.pos = nn.Parameter(torch.randn(args.seq, args.dim) * 0.02) if first else None
        self.layers = nn.ModuleDict({str(i): make_block(i) for i in ids})
        self.norm = nn.LayerNorm(args.dim) if last else None
        self.head = nn.Linear(args.dim, args.vocab, bias=False) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok is not None:
            x = self.tok(x) + self.pos[self.pos_offset: self.pos_offset + x.shape[1]]
        for block in self.layers.values():
            x = block(x)
        if self.head is not None:
            x = self.head(self.norm(x))
        return x


def build(args: argparse.Namespace, ctx: Context, **kwargs: object) -> Transformer:
    torch.manual_seed(args.seed)  # identical initial weights on every rank
    return Transformer(args, **kwargs).to(ctx.device)


def batch(args: argparse.Namespace, ctx: Context, data_rank: int, size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch per data-parallel rank: affine token sequences, inputs and next-token targets."""
    g = torch.Generator().manual_seed(1000 + data_rank)
    n = size or args.batch
    start = torch.randint(0, args.vocab, (n, 1), generator=g)
    seq = [start]
    for _ in range(args.seq):
        seq.append((5 * seq[-1] + 3) % args.vocab)
    tokens = torch.cat(seq, dim=1)
    return tokens[:, :-1].to(ctx.device), tokens[:, 1:].to(ctx.device)


def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def optimizer(params: Iterable[nn.Parameter], args: argparse.Namespace) -> torch.optim.Optimizer:
    """Fused AdamW: one op per parameter group instead of ~20 per parameter keeps the traces small.
    DTensor and plain parameters go in separate groups: one fused call cannot mix them."""
    params = list(params)
    groups = [[p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)]]
    return torch.optim.AdamW([{"params": g} for g in groups if g], lr=args.lr, fused=True)


def standard_iteration(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor,
                       y: torch.Tensor, replicated: list[nn.Parameter] | None = None) -> Callable[[int], float]:
    """forward, backward, optimizer: the iteration of DDP, FSDP2, TP and FSDP2+TP. `replicated`:
    parameters every rank holds a copy of while computing on its own data (MoE's dense weights, a
    context-parallel replica); their gradients are averaged in one all-reduce before the optimizer."""
    def run(i: int) -> float:
        opt.zero_grad(set_to_none=True)
        with label("forward"):
            loss = loss_fn(model(x), y)
        with label("backward"):
            loss.backward()
        if replicated:
            average_gradients(replicated)
        with label("optimizer"):
            opt.step()
        return float(loss.detach().full_tensor() if hasattr(loss, "full_tensor") else loss.detach())
    return run


def average_gradients(params: list[nn.Parameter]) -> None:
    """Average the gradients of replicated parameters over the ranks: one flat all-reduce."""
    with label("grad_all_reduce"):
        grads = [p.grad for p in params if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat /= dist.get_world_size()
        for g, part in zip(grads, flat.split([g.numel() for g in grads])):
            g.copy_(part.view_as(g))


def train(args: argparse.Namespace, ctx: Context, iteration: Callable[[int], float | None],
          report: bool) -> None:
    """Run `args.iters` iterations; `report` ranks print the loss each step and first/last at the end."""
    cap = capture(args.capture_out, steps=3, skip_first=1) if args.capture_out else nullcontext()
    losses: list[float] = []
    with cap as c:
        for i in range(args.iters):
            t0 = time.perf_counter()
            with label("train_step"):
                loss = iteration(i)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            step_ms = (time.perf_counter() - t0) * 1e3
            if c is not None:
                c.step()
            if report and loss is not None and math.isfinite(loss):
                losses.append(loss)
                print(f"rank {ctx.rank} iter {i} loss {loss:.4f} step_ms {step_ms:.1f}", flush=True)
    if report and losses:
        print(f"rank {ctx.rank} loss first {losses[0]:.4f} last {losses[-1]:.4f}", flush=True)


__all__ = ["Context", "parser", "setup", "teardown", "build", "batch", "loss_fn", "optimizer",
           "standard_iteration", "average_gradients", "train", "set_layout", "label"]
