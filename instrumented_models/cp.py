"""Context-parallel reference run: ring attention over sequence chunks.

    torchrun --standalone --nproc-per-node 2 -m instrumented_models.cp [--overlap on|off]

Every rank holds 1/n of each sequence (n ranks). Attention needs every key/value: the K/V blocks go
around a ring. At ring step k each rank attends its queries to the block it holds (its own at step
0, the one from k ranks back after that), while it sends that block to the next rank and receives
the next block from the previous one with async p2p (`batch_isend_irecv`); the partial results
merge by log-sum-exp. n ranks take n steps, n-1 of them with a transfer. Attention is
bidirectional (no causal mask), so every step computes the same amount.

Knob `--overlap on`: the transfer runs while the current block's attention computes (the wait comes
after it). `off`: each step waits for the next block before computing on the current one, so the
p2p is exposed.

Labels, per block L and ring step k: `ring:L<L>:step<k>` around the step (the p2p is issued inside
it), `ring:L<L>:step<k>:attn` around its attention compute; the backward of each transfer (the
reverse shift of the gradient, synchronous) runs under `ring:L<L>:step<k>:bwd`.
"""
from __future__ import annotations

import argparse
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn

from .common import (Block, Transformer, batch, label, optimizer, parser, set_layout, setup, standard_iteration,
                     teardown, train)


def _exchange(send: torch.Tensor, recv: torch.Tensor, to: int, frm: int) -> list:
    ops = [dist.P2POp(dist.isend, send, to), dist.P2POp(dist.irecv, recv, frm)]
    return dist.batch_isend_irecv(ops)


def _wait(handles: list) -> None:
    """Wait for (and forget) the transfers in flight: a second wait on a finished gloo work blocks."""
    while handles:
        handles.pop(0).wait()


class _RingShift(torch.autograd.Function):
    """Send a block to the next rank and receive one from the previous, asynchronously (the caller
    waits on the handles); backward shifts the gradient the other way, synchronously."""

    @staticmethod
    def forward(ctx: Any, block: torch.Tensor, tag: str, handles: list) -> torch.Tensor:
        rank, world = dist.get_rank(), dist.get_world_size()
        out = torch.empty_like(block)
        handles += _exchange(block.contiguous(), out, (rank + 1) % world, (rank - 1) % world)
        ctx.tag = tag
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        rank, world = dist.get_rank(), dist.get_world_size()
        back = torch.empty_like(grad)
        with label(f"{ctx.tag}:bwd"):
            for work in _exchange(grad.contiguous(), back, (rank - 1) % world, (rank + 1) % world):
                work.wait()
        return back, None, None


def attend(q: torch.Tensor, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of q against one K/V block: (output, log-sum-exp of the scores)."""
    k, v = kv[0], kv[1]
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    return torch.exp(scores - lse) @ v, lse


class RingAttention(nn.Module):
    def __init__(self, args: argparse.Namespace, index: int) -> None:
        super().__init__()
        self.index, self.heads, self.overlap = index, args.heads, args.overlap == "on"
        self.wqkv = nn.Linear(args.dim, 3 * args.dim, bias=False)
        self.wo = nn.Linear(args.dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.wqkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        block = torch.stack([k, v])
        world = dist.get_world_size()
        out = lse = None
        for step in range(world):
            tag = f"ring:L{self.index}:step{step}"
            handles: list = []
            with label(tag):
                nxt = _RingShift.apply(block, tag, handles) if step + 1 < world else None
                if not self.overlap:
                    _wait(handles)
                with label(f"{tag}:attn"):
                    o, l = attend(q, block)
                    if out is None:
                        out, lse = o, l
                    else:  # merge the partial softmaxes
                        new = torch.logaddexp(lse, l)
                        out = out * torch.exp(lse - new) + o * torch.exp(l - new)
                        lse = new
                _wait(handles)
            block = nxt
        return self.wo(out.transpose(1, 2).reshape(b, s, d))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--overlap", choices=("on", "off"), default="on")
    p.set_defaults(layers=2, dim=128, seq=256, batch=4)
    args = p.parse_args()
    ctx = setup()
    if args.seq % ctx.world_size or args.dim % args.heads:
        raise SystemExit(f"--seq must be a multiple of the {ctx.world_size} ranks and --dim of --heads")
    chunk = args.seq // ctx.world_size
    torch.manual_seed(args.seed)  # identical weights on every rank: one replica, sequence-sharded
    model = Transformer(args, make_block=lambda i: Block(args.dim, args.heads, i, attn=RingAttention(args, i)),
                        pos_offset=ctx.rank * chunk).to(ctx.device)
    set_layout(parallel="cp", cp=ctx.world_size, overlap=args.overlap, dim=args.dim, layers=args.layers,
               heads=args.heads, batch=args.batch, seq=args.seq)
    x, y = batch(args, ctx, data_rank=0)  # the same sequences everywhere: this rank keeps its chunk
    mine = slice(ctx.rank * chunk, (ctx.rank + 1) * chunk)
    # each replica's gradient covers its chunk's loss: the average over the ranks is the whole loss's
    train(args, ctx, standard_iteration(model, optimizer(model.parameters(), args), x[:, mine], y[:, mine],
                                        replicated=list(model.parameters())), report=ctx.rank == 0)


if __name__ == "__main__":
    main()
    teardown()
