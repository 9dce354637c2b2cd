"""Pipeline-parallel reference run (`torch.distributed.pipelining`).

    torchrun --standalone --nproc-per-node 2 -m instrumented_models.pp [--schedule gpipe|1f1b|interleaved]
        [--microbatches M]

Knobs: the schedule and the number of micro-batches. With p pipeline ranks and m micro-batches the
bubble (time a stage has no micro-batch to compute) is (p-1)/(m+p-1) of the step for GPipe and 1F1B
and (p-1)/(v*m+p-1) for interleaved 1F1B with v=2 stages per rank: more micro-batches, less bubble.
The defaults are wider than the other reference runs (dim 256, seq 128, 32 sequences) so that a
micro-batch's compute, not gloo's per-message latency on CPU, sets the step time and the measured
bubble can be held against the theory. Labels: GPipe emits `Forward i` / `Backward i`, interleaved 1F1B `PP:<stage><F|B><mb>`; 1F1B emits
none, so this script wraps its stage's forward/backward chunks in `PP:<stage>F<mb>` / `PP:<stage>B<mb>`.
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from .common import Context, batch, build, label, loss_fn, optimizer, parser, set_layout, setup, teardown, train

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved": ScheduleInterleaved1F1B}


def stage_indices(rank: int, ranks: int, virtual: int) -> list[int]:
    """Looped placement: stage s lives on rank s % ranks."""
    return [rank + k * ranks for k in range(virtual)]


def build_stage(args: argparse.Namespace, ctx: Context, index: int, n_stages: int) -> PipelineStage:
    per, rest = divmod(args.layers, n_stages)
    if per == 0 or rest:
        raise SystemExit(f"--layers {args.layers} must be a positive multiple of the {n_stages} pipeline stages")
    module = build(args, ctx, block_ids=list(range(index * per, (index + 1) * per)),
                   first=index == 0, last=index == n_stages - 1)
    return PipelineStage(module, index, n_stages, ctx.device)


def label_chunks(stage: PipelineStage) -> None:
    """Wrap a stage's per-micro-batch work in `PP:<stage>F<mb>` / `PP:<stage>B<mb>` labels."""
    def wrap(fn: Callable[..., Any], action: str) -> Callable[..., Any]:
        def run(chunk_id: int, *a: Any, **kw: Any) -> Any:
            with label(f"PP:{stage.stage_index}{action}{chunk_id}"):
                return fn(chunk_id, *a, **kw)
        return run
    stage.forward_one_chunk = wrap(stage.forward_one_chunk, "F")
    stage.backward_one_chunk = wrap(stage.backward_one_chunk, "B")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--schedule", choices=sorted(SCHEDULES), default="1f1b")
    p.add_argument("--microbatches", type=int, default=4)
    p.set_defaults(dim=256, seq=128, batch=32)
    args = p.parse_args()
    if args.batch % args.microbatches:
        raise SystemExit(f"--batch {args.batch} must be a multiple of --microbatches {args.microbatches}")
    ctx = setup()
    virtual = 2 if args.schedule == "interleaved" else 1
    n_stages = ctx.world_size * virtual
    stages = [build_stage(args, ctx, i, n_stages) for i in stage_indices(ctx.rank, ctx.world_size, virtual)]
    if args.schedule == "interleaved":
        schedule = ScheduleInterleaved1F1B(stages, n_microbatches=args.microbatches, loss_fn=loss_fn)
    else:
        if args.schedule == "1f1b":
            label_chunks(stages[0])
        schedule = SCHEDULES[args.schedule](stages[0], n_microbatches=args.microbatches, loss_fn=loss_fn)
    set_layout(parallel="pp", pp=ctx.world_size, stages=ctx.world_size, virtual_stages=virtual,
               schedule=args.schedule, microbatches=args.microbatches,
               dim=args.dim, layers=args.layers, batch=args.batch, seq=args.seq)
    opt = optimizer([q for s in stages for q in s.submod.parameters()], args)
    x, y = batch(args, ctx, data_rank=0)
    first = any(s.is_first for s in stages)
    last = any(s.is_last for s in stages)

    def iteration(i: int) -> float | None:
        opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        with label("pipeline"):  # forward and backward interleave: one label for both
            schedule.step(*([x] if first else []), target=y if last else None, losses=losses if last else None)
        with label("optimizer"):
            opt.step()
        return float(torch.stack(losses).mean()) if last else None

    train(args, ctx, iteration, report=last)


if __name__ == "__main__":
    main()
    teardown()  # once main's model and optimizer, the process group's last users, are gone
