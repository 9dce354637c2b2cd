"""Expert-parallel MoE reference run: tokens travel to their experts' rank and back by all-to-all.

    torchrun --standalone --nproc-per-node 2 -m instrumented_models.moe_ep [--routing uniform|skewed]
        [--overlap none|microbatch] [--experts-per-rank E] [--microbatches M]

Each block is attention (local to the rank) and a top-1 MoE feed-forward whose experts are spread
over the ranks, E per rank. Every micro-batch of every block: dispatch (an `all_to_all_single` with
uneven splits sends each token to the rank holding its expert), experts (each rank runs its experts
on the tokens it received), combine (the reverse all-to-all brings the outputs home).

Knobs:
- `--routing uniform`: every expert gets the same number of tokens (every rank receives as much as
  it sends). `skewed`: `--skew` of every rank's tokens go to the experts of `--hot-rank`, the rest
  spread evenly: the hot rank receives the most bytes, computes the most, and the others wait for it.
- `--overlap none`: dispatch, experts, combine one after the other per micro-batch. `microbatch`:
  the dispatch of micro-batch i+1 and the combine of micro-batch i are issued asynchronously while
  the experts compute micro-batch i, so the all-to-alls run behind expert compute.
Routing is a fixed function of token position (a learned gate scales each token's expert output),
so every rank knows every split without exchanging counts first.

Labels, per block L and micro-batch m: `moe:L<L>:mb<m>:dispatch`, `moe:L<L>:mb<m>:experts` and
`moe:L<L>:mb<m>:combine` in forward (each around the issue of its all-to-all, or the expert compute);
the backward all-to-alls (the adjoint of each: the reverse all-to-all, synchronous) run under
`moe:L<L>:mb<m>:dispatch:bwd` / `...:combine:bwd`.
"""
from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .common import (Block, Context, Transformer, batch, label, optimizer, parser, set_layout, setup,
                     standard_iteration, teardown, train)


def route(tokens: int, world: int, experts_per_rank: int, routing: str, skew: float, hot_rank: int) -> torch.Tensor:
    """The global expert of each token position (the same on every rank)."""
    n_experts = world * experts_per_rank
    expert = torch.arange(tokens) % n_experts
    if routing == "skewed":
        hot = int(round(skew * tokens))
        expert[:hot] = hot_rank * experts_per_rank + torch.arange(hot) % experts_per_rank
        expert[hot:] = torch.arange(tokens - hot) % n_experts
    return expert


class _AllToAll(torch.autograd.Function):
    """`all_to_all_single` issued asynchronously (the caller waits on the handle before reading the
    output); backward is the reverse all-to-all of the gradient, synchronous, under `<tag>:bwd`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_splits: list[int], in_splits: list[int], tag: str,
                handles: list) -> torch.Tensor:
        out = x.new_empty((sum(out_splits), x.shape[1]))
        handles.append(dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, async_op=True))
        ctx.splits, ctx.tag = (out_splits, in_splits), tag
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        out_splits, in_splits = ctx.splits
        with label(f"{ctx.tag}:bwd"):
            back = grad.new_empty((sum(in_splits), grad.shape[1]))
            dist.all_to_all_single(back, grad.contiguous(), in_splits, out_splits)
        return back, None, None, None, None


def all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], tag: str) -> tuple[torch.Tensor, Any]:
    """Issue the all-to-all inside label `tag`; returns (output, handle to wait on)."""
    handles: list = []
    with label(tag):
        out = _AllToAll.apply(x, out_splits, in_splits, tag, handles)
    return out, handles[0]


class MoE(nn.Module):
    """Top-1 MoE feed-forward over expert parallelism: this rank holds experts_per_rank experts."""

    def __init__(self, args: argparse.Namespace, ctx: Context, index: int) -> None:
        super().__init__()
        self.index, self.ctx, self.args = index, ctx, args
        e = args.experts_per_rank
        self.gate = nn.Linear(args.dim, ctx.world_size * e, bias=False)
        hidden = args.ffn_mult * args.dim
        self.w1 = nn.Parameter(torch.randn(e, args.dim, hidden) * args.dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(e, hidden, args.dim) * hidden ** -0.5)
        tokens = args.batch * args.seq // args.microbatches
        expert = route(tokens, ctx.world_size, e, args.routing, args.skew, args.hot_rank)
        # Sort tokens by expert: each rank's share is contiguous, grouped by its local expert.
        self.register_buffer("order", torch.argsort(expert, stable=True), persistent=False)
        self.register_buffer("expert", expert, persistent=False)
        per_expert = torch.bincount(expert, minlength=ctx.world_size * e).view(ctx.world_size, e)
        self.send_splits = per_expert.sum(1).tolist()  # tokens to each rank
        # every rank routes the same way: from each sender this rank receives its own experts' share
        self.recv_splits = [int(per_expert[ctx.rank].sum())] * ctx.world_size
        local = torch.arange(e).repeat_interleave(per_expert[ctx.rank]).repeat(ctx.world_size)
        # the received rows of each local expert, as indices fixed here: a boolean mask would make every
        # expert's indexing a device-to-host sync on CUDA (nonzero), stalling the launches behind it
        for j in range(e):
            self.register_buffer(f"rows{j}", torch.nonzero(local == j).squeeze(1), persistent=False)

    def experts(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        for j in range(self.args.experts_per_rank):
            rows = getattr(self, f"rows{j}")
            out[rows] = F.gelu(x[rows] @ self.w1[j]) @ self.w2[j]
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        mbs = x.reshape(-1, d).chunk(self.args.microbatches)
        tag = f"moe:L{self.index}:mb{{}}:{{}}"
        overlap = self.args.overlap == "microbatch"
        outs: list[torch.Tensor | None] = [None] * len(mbs)
        pending: list[tuple[int, torch.Tensor, Any, torch.Tensor]] = []  # combines in flight

        def dispatch(i: int) -> tuple[torch.Tensor, Any]:
            return all_to_all(mbs[i][self.order], self.recv_splits, self.send_splits, tag.format(i, "dispatch"))

        def finish(i: int, back: torch.Tensor, handle: Any, probs: torch.Tensor) -> None:
            handle.wait()
            y = torch.empty_like(back)
            y[self.order] = back
            outs[i] = y * probs

        nxt = dispatch(0)
        for i in range(len(mbs)):
            received, handle = nxt
            handle.wait()
            if overlap and i + 1 < len(mbs):
                nxt = dispatch(i + 1)  # in flight while this micro-batch's experts compute
            with label(tag.format(i, "experts")):
                y = self.experts(received)
                probs = F.softmax(self.gate(mbs[i]), dim=-1).gather(1, self.expert[:, None])
            back, h = all_to_all(y, self.send_splits, self.recv_splits, tag.format(i, "combine"))
            pending.append((i, back, h, probs))
            if not overlap:
                finish(*pending.pop())
                if i + 1 < len(mbs):
                    nxt = dispatch(i + 1)
            elif len(pending) > 1:
                finish(*pending.pop(0))  # the previous combine ran behind this micro-batch's experts
        for p in pending:
            finish(*p)
        return torch.cat(outs).view(b, s, d)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--routing", choices=("uniform", "skewed"), default="uniform")
    p.add_argument("--overlap", choices=("none", "microbatch"), default="none")
    p.add_argument("--experts-per-rank", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--ffn-mult", type=int, default=32, help="expert hidden width / --dim: expert compute per token")
    p.add_argument("--skew", type=float, default=0.8, help="skewed: share of tokens sent to the hot rank's experts")
    p.add_argument("--hot-rank", type=int, default=1, help="skewed: the rank whose experts get most tokens")
    # narrow tokens, wide experts: an all-to-all moves little while the experts compute a lot, so that on a
    # 2-core CPU machine the expert compute of one micro-batch can hide the transfers of its neighbours
    p.set_defaults(layers=2, dim=64, seq=64, batch=32)
    args = p.parse_args()
    if args.batch * args.seq % args.microbatches:
        raise SystemExit(f"--batch x --seq must be a multiple of --microbatches {args.microbatches}")
    if not 0 <= args.skew <= 1 or args.experts_per_rank < 1:
        raise SystemExit("--skew must be in [0, 1] and --experts-per-rank at least 1")
    ctx = setup()
    if not 0 <= args.hot_rank < ctx.world_size:
        raise SystemExit(f"--hot-rank {args.hot_rank} is not a rank of the world of {ctx.world_size}")
    # Every rank holds the same non-expert weights and sees its own data: the expert weights differ.
    torch.manual_seed(args.seed)
    model = Transformer(args, make_block=lambda i: Block(args.dim, args.heads, i, mlp=MoE(args, ctx, i))).to(ctx.device)
    with torch.no_grad():
        g = torch.Generator().manual_seed(args.seed + 1 + ctx.rank)
        for layer in model.layers.values():
            for w in (layer.mlp.w1, layer.mlp.w2):
                w.copy_(torch.randn(w.shape, generator=g) * w.shape[1] ** -0.5)
    set_layout(parallel="ep", ep=ctx.world_size, routing=args.routing, overlap=args.overlap,
               experts_per_rank=args.experts_per_rank, microbatches=args.microbatches, skew=args.skew,
               hot_rank=args.hot_rank, dim=args.dim, layers=args.layers, batch=args.batch, seq=args.seq)
    x, y = batch(args, ctx, data_rank=ctx.rank)
    # the dense weights are replicas trained on every rank's data (data parallel); experts are not
    experts = {id(w) for layer in model.layers.values() for w in (layer.mlp.w1, layer.mlp.w2)}
    dense = [w for w in model.parameters() if id(w) not in experts]
    train(args, ctx, standard_iteration(model, optimizer(model.parameters(), args), x, y, replicated=dense),
          report=ctx.rank == 0)


if __name__ == "__main__":
    main()
    teardown()
