"""DDP reference run: gradient buckets all-reduce while backward still computes.

    torchrun --standalone --nproc-per-node 2 -m instrumented_models.ddp [--bucket-cap-mb MB]

Knob: `--bucket-cap-mb`. Smaller buckets start all-reducing earlier in backward (more overlap,
more collectives); one bucket bigger than the model all-reduces only after backward (none).
"""
from __future__ import annotations

from torch.nn.parallel import DistributedDataParallel as DDP

from .common import batch, build, optimizer, parser, set_layout, setup, standard_iteration, teardown, train


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--bucket-cap-mb", type=float, default=0.25,
                   help="DDP gradient bucket size in MB (torch's default is 25)")
    args = p.parse_args()
    ctx = setup()
    model = build(args, ctx)
    ddp = DDP(model, bucket_cap_mb=args.bucket_cap_mb,
              device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    set_layout(parallel="ddp", dp=ctx.world_size, bucket_cap_mb=args.bucket_cap_mb,
               dim=args.dim, layers=args.layers, batch=args.batch, seq=args.seq)
    x, y = batch(args, ctx, data_rank=ctx.rank)
    train(args, ctx, standard_iteration(ddp, optimizer(ddp.parameters(), args), x, y), report=ctx.rank == 0)


if __name__ == "__main__":
    main()
    teardown()  # once main's model and optimizer, the process group's last users, are gone
