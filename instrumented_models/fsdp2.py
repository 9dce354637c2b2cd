"""FSDP2 reference run (`fully_shard` per block, then the root).

    torchrun --standalone --nproc-per-node 2 -m instrumented_models.fsdp2 [--prefetch none|default|N]
        [--reshard-after-forward | --no-reshard-after-forward]

Knobs:
- `--prefetch none`: every block all-gathers its parameters in its own pre-forward / pre-backward,
  with nothing to overlap: the all-gather is fully exposed. (FSDP2 reads an empty backward-prefetch
  list as "use the implicit default", so each block names itself, an already-unsharded no-op.)
- `--prefetch default`: torch's defaults (implicit backward prefetch of one block). On CUDA the
  all-gathers run on their own stream and overlap; on CPU gloo all-gathers block the caller.
- `--prefetch N`: block i's pre-forward issues `unshard(async_op=True)` for blocks i+1..i+N, and the
  gradient of block i's output (the start of its backward) does the same for blocks i-1..i-N, so the
  all-gathers run on gloo's worker thread (or NCCL's stream) while block i computes, on CPU too.
- `--reshard-after-forward` (default on): free the gathered parameters after forward, so backward
  all-gathers them again; `--no-reshard-after-forward` keeps them (no backward all-gathers).
"""
from __future__ import annotations

import argparse
from functools import partial

import torch
import torch.nn as nn
from torch.distributed.fsdp import FSDPModule, fully_shard

from .common import batch, build, optimizer, parser, set_layout, setup, standard_iteration, teardown, train


def prefetch_arg(value: str) -> int:
    """none -> 0, default -> -1, N -> N (blocks ahead)."""
    if value == "none":
        return 0
    if value == "default":
        return -1
    n = int(value)
    if n < 1:
        raise ValueError("--prefetch N needs N >= 1 (or none/default)")
    return n


def shard(model: nn.Module, reshard_after_forward: bool, mesh: object = None) -> list[FSDPModule]:
    blocks = []
    for block in model.layers.values():
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
        blocks.append(block)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return blocks


def configure_prefetch(blocks: list[FSDPModule], prefetch: int) -> None:
    if prefetch == -1:
        return
    for block in blocks:
        block.set_modules_to_forward_prefetch([])
        # a non-empty list turns FSDP2's implicit (blocking on CPU) backward prefetch off;
        # the block itself is already unsharded when its pre-backward runs, so this prefetch is a no-op
        block.set_modules_to_backward_prefetch([block])
    if prefetch == 0:
        return
    for i, block in enumerate(blocks):
        ahead = blocks[i + 1:i + 1 + prefetch]
        behind = blocks[max(0, i - prefetch):i][::-1]
        block.register_forward_pre_hook(partial(_unshard_async, ahead))
        block.register_forward_hook(partial(_prefetch_in_backward, behind))


def _unshard_async(targets: list[FSDPModule], *unused: object) -> None:
    for target in targets:
        target.unshard(async_op=True)  # FSDP waits for it in the target's pre-forward/pre-backward


def _prefetch_in_backward(targets: list[FSDPModule], module: nn.Module, inputs: object,
                          output: torch.Tensor) -> None:
    if targets and torch.is_grad_enabled() and output.requires_grad:
        output.register_hook(lambda grad: _unshard_async(targets))


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--prefetch", default="1", help="none | default | N blocks ahead (async unshard)")
    p.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args()
    prefetch = prefetch_arg(args.prefetch)
    ctx = setup()
    model = build(args, ctx)
    blocks = shard(model, args.reshard_after_forward)
    configure_prefetch(blocks, prefetch)
    set_layout(parallel="fsdp2", dp=ctx.world_size, prefetch=args.prefetch,
               reshard_after_forward=args.reshard_after_forward,
               dim=args.dim, layers=args.layers, batch=args.batch, seq=args.seq)
    x, y = batch(args, ctx, data_rank=ctx.rank)
    train(args, ctx, standard_iteration(model, optimizer(model.parameters(), args), x, y), report=ctx.rank == 0)


if __name__ == "__main__":
    main()
    teardown()  # once main's model and optimizer, the process group's last users, are gone
