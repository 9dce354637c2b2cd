"""Tensor-parallel reference run (DTensor `parallelize_module`, Megatron-style blocks).

    torchrun --standalone --nproc-per-node 2 -m instrumented_models.tp

In every block q/k/v and the MLP's first linear are column-parallel and the attention output and the
MLP's second linear row-parallel, so each block does two all-reduces in forward and two in backward.
Each sits between dependent matmuls: nothing can hide it, and the run shows TP comm as exposed.
All TP ranks see the same data (one data-parallel replica).
"""
from __future__ import annotations

import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from .common import batch, build, optimizer, parser, set_layout, setup, standard_iteration, teardown, train

BLOCK_PLAN = {
    "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
    "attn.wo": RowwiseParallel(), "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(),
}


def tensor_parallel(model: nn.Module, mesh: DeviceMesh) -> None:
    heads_per_rank, rest = divmod(next(iter(model.layers.values())).attn.wq.out_features // next(
        iter(model.layers.values())).attn.head_dim, mesh.size())
    if rest or heads_per_rank == 0:
        raise SystemExit(f"--heads must be a multiple of the tensor-parallel size {mesh.size()}")
    for block in model.layers.values():
        parallelize_module(block, mesh, BLOCK_PLAN)


def main() -> None:
    args = parser(__doc__).parse_args()
    ctx = setup()
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,), mesh_dim_names=("tp",))
    model = build(args, ctx)
    tensor_parallel(model, mesh)
    set_layout(parallel="tp", tp=ctx.world_size, dim=args.dim, layers=args.layers, heads=args.heads,
               batch=args.batch, seq=args.seq)
    x, y = batch(args, ctx, data_rank=0)
    train(args, ctx, standard_iteration(model, optimizer(model.parameters(), args), x, y), report=ctx.rank == 0)


if __name__ == "__main__":
    main()
    teardown()  # once main's model and optimizer, the process group's last users, are gone
