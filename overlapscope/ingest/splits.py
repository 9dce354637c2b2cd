"""Per-peer bytes of an all-to-all, from what the trace says about its splits.

An all-to-all(-v) sends `in_split[j]` rows of its input to group member j and receives
`out_split[j]` rows from it; a row is the tensor's trailing dimensions (elements per row x dtype
size). The event table keeps the result as text, bytes per group member in group order joined by
commas ("" unknown), in `send_split_bytes` / `recv_split_bytes`. Two sources:

- NCCL (and every backend that records `record_param_comms`): `In split size` / `Out split size`
  (a list as text, "[]" for an even split), `In msg nelems` / `Out msg nelems` and `dtype` - the
  keys of torch's ParamCommsUtils (torch/csrc/distributed/c10d/ParamCommsUtils.hpp, written by
  ProcessGroupNCCL::alltoall_base as collective "all_to_allv"). libkineto truncates long lists
  (kTruncatLength = 30 in libkineto's output_json.cpp): a truncated list gives "".
- gloo, which records no `record_param_comms`: the enqueuing `c10d::alltoall_base_` op's shapes
  (traces recorded with record_shapes): `Concrete Inputs` [output, input, group, output_split_sizes,
  input_split_sizes, asyncOp, timeout] (the op schema in torch/csrc/distributed/c10d/Ops.cpp),
  `Input Dims` and `Input type` of the output and input tensors.
"""
from __future__ import annotations

import math
from typing import Any, Mapping


def parse_split(text: Any) -> list[int] | None:
    """'[26, 230]' -> [26, 230]; '[]' -> []; None when absent, truncated or not a list of ints."""
    if isinstance(text, list):
        return [int(v) for v in text] if all(isinstance(v, int) for v in text) else None
    if not isinstance(text, str):
        return None
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")) or "..." in body:
        return None
    body = body[1:-1].strip()
    if not body:
        return []
    try:
        return [int(v) for v in body.split(",")]
    except ValueError:
        return None


def peer_bytes(split: list[int] | None, nelems: Any, elem_bytes: int | None, group_size: Any) -> str:
    """Bytes per peer as text: the split's rows x (nelems / rows) elements x elem_bytes; an empty
    split is even over group_size. "" when anything needed is missing or inconsistent."""
    if split is None or elem_bytes is None or not isinstance(nelems, int) or nelems < 0:
        return ""
    if not split:
        if not isinstance(group_size, int) or group_size <= 0 or nelems % group_size:
            return ""
        return ",".join([str(nelems // group_size * elem_bytes)] * group_size)
    rows = sum(split)
    if rows <= 0:
        return ",".join("0" for _ in split) if nelems == 0 else ""
    if nelems % rows:
        return ""
    per_row = nelems // rows * elem_bytes
    return ",".join(str(v * per_row) for v in split)


def from_param_comms(args: dict[str, Any], dtype_bytes: Mapping[str, int]) -> tuple[str, str]:
    """(send, recv) bytes per peer from record_param_comms args (or a kernel carrying them);
    dtype_bytes: lower-case dtype name -> bytes per element."""
    size = dtype_bytes.get(str(args.get("dtype", "")).lower())
    group = args.get("Group size")
    return (peer_bytes(parse_split(args.get("In split size")), args.get("In msg nelems"), size, group),
            peer_bytes(parse_split(args.get("Out split size")), args.get("Out msg nelems"), size, group))


def from_alltoall_base(args: dict[str, Any], dtype_bytes: Mapping[str, int]) -> tuple[str, str]:
    """(send, recv) bytes per peer from a `c10d::alltoall_base_` op's recorded inputs."""
    concrete, dims, types = args.get("Concrete Inputs"), args.get("Input Dims"), args.get("Input type")
    if not (isinstance(concrete, list) and isinstance(dims, list) and isinstance(types, list)) \
            or len(concrete) < 5 or len(dims) < 2 or len(types) < 2:
        return "", ""
    out = []
    for tensor, split_at in ((1, 4), (0, 3)):  # send: the input tensor and input splits; recv: output
        shape = dims[tensor]
        if not isinstance(shape, list) or not shape or not all(isinstance(v, int) for v in shape):
            out.append("")
            continue
        split = parse_split(concrete[split_at])
        # an empty split is even, but over how many members the op does not say: unknown
        out.append(peer_bytes(split or None, math.prod(shape), dtype_bytes.get(str(types[tensor]).lower()), None))
    return out[0], out[1]
