"""2-D reference run: FSDP2 over the data-parallel dimension, DTensor TP inside each block.

    torchrun --standalone --nproc-per-node 4 -m instrumented_models.fsdp2_tp --dp 2 --tp 2

The mesh is (dp, tp); TP groups are the inner (consecutive) ranks. Each block is TP-parallelized
as in `tp.py`, then `fully_shard`ed over dp, so a step has per-block dp all-gathers and
reduce-scatters plus tp all-reduces; `--prefetch` is as in `fsdp2.py`. Ranks of one TP group see
the same data; the dp replicas see different data.
"""
from __future__ import annotations

import argparse

from torch.distributed.device_mesh import init_device_mesh

from .common import batch, build, optimizer, parser, set_layout, setup, standard_iteration, teardown, train
from .fsdp2 import configure_prefetch, prefetch_arg, shard
from .tp import tensor_parallel


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--dp", type=int, default=2, help="data-parallel (FSDP) size")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel size")
    p.add_argument("--prefetch", default="1", help="none | default | N blocks ahead (async unshard)")
    p.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args()
    ctx = setup()
    if args.dp * args.tp != ctx.world_size:
        raise SystemExit(f"--dp {args.dp} x --tp {args.tp} must equal the world size {ctx.world_size}")
    mesh = init_device_mesh(ctx.device.type, (args.dp, args.tp), mesh_dim_names=("dp", "tp"))
    model = build(args, ctx)
    tensor_parallel(model, mesh["tp"])
    blocks = shard(model, args.reshard_after_forward, mesh=mesh["dp"])
    configure_prefetch(blocks, prefetch_arg(args.prefetch))
    set_layout(parallel="fsdp2_tp", dp=args.dp, tp=args.tp, prefetch=args.prefetch,
               reshard_after_forward=args.reshard_after_forward,
               dim=args.dim, layers=args.layers, heads=args.heads, batch=args.batch, seq=args.seq)
    x, y = batch(args, ctx, data_rank=mesh["dp"].get_local_rank())
    train(args, ctx, standard_iteration(model, optimizer(model.parameters(), args), x, y), report=ctx.rank == 0)


if __name__ == "__main__":
    main()
    teardown()  # once main's model and optimizer, the process group's last users, are gone
