"""Annotation roles: what a CPU range (annotation or CPU op) is for, decided once by the readers.

The event table's `role` column (DESIGN.md "The event table") says it, so no analyzer re-derives it
from name prefixes. Roles, first rule that holds wins:

  comm_op           the range of the collective torch performed (`nccl:*`, `c10d::*`): names the op
                    when the kernel does not (matching's launching op)
  comm_wrapper      any other communication call (gloo:*, record_param_comms, _c10d_functional::*, ...;
                    ingest.comm_rules) and NCCL's own API ranges (ncclGroup*, a range with a collective)
  step              a step range: the reader's step pattern, and torch's ProfilerStep#N always
  fsdp_all_gather   FSDP2's `FSDP::all_gather (fqn)`; the unit is `fsdp_label(name)`
  fsdp_copy_out     `FSDP::all_gather_copy_out (fqn)`
  fsdp_pre_forward  `FSDP::pre_forward (fqn)`
  fsdp_pre_backward `FSDP::pre_backward (fqn)`
  microbatch        a pipeline micro-batch: `Forward i` / `Backward i`, `PP:<stage><F|B|I|W><mb>`
                    (`microbatch_label(name)` parses it)
  scope             any other annotation: a model part (record_function / NVTX range of a layer)
  ""                device events, and CPU ops with none of the roles above

The parsers of the labels' arguments (FSDP unit, micro-batch stage/action/index) live here too, so
a label's syntax is written once.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from .codes import categorical_dtype, category_strings

DEFAULT_STEP_PATTERN = r"ProfilerStep#\d+|step\s*\d+"
"""Names of step ranges unless --step-pattern says otherwise (ingest.steps)."""
ROLES = ("", "comm_op", "comm_wrapper", "step", "fsdp_all_gather", "fsdp_copy_out", "fsdp_pre_forward",
         "fsdp_pre_backward", "microbatch", "scope")
_ROLE_CODE = {role: code for code, role in enumerate(ROLES)}
FSDP_ROLES = ("fsdp_all_gather", "fsdp_copy_out", "fsdp_pre_forward", "fsdp_pre_backward")
# A launch's scope is the innermost annotation around it with one of these roles (breakdown.launch_scopes).
SCOPE_ROLES = ("scope", "microbatch") + FSDP_ROLES
CPU_KINDS = ("annotation", "cpu_op")

# Launching ranges that name the operation torch performed (not the model part that asked for it):
# ProcessGroupNCCL's `nccl:<op>` record_function and the dispatcher's `c10d::<op>_`.
COMM_OP_PREFIXES = ("nccl:", "c10d::")
# CPU ops and annotations that are communication calls: device work launched inside one is
# communication whatever its kernel's name (copy-engine all-gathers are memcpys).
COMM_CALL_PREFIXES = COMM_OP_PREFIXES + ("record_param_comms", "_c10d_functional::", "c10d_functional::",
                                         "symm_mem::", "gloo:")
# NCCL's own NVTX domain: ncclGroupStart/End bracket several collectives.
_NCCL_API_PREFIXES = ("ncclGroup",)
PROFILER_STEP_PREFIX = "ProfilerStep#"
# torch's FSDPParamGroup._with_fqn: "FSDP::<label>", then " (<fqn>)" unless the root module, then
# " [pg=<n>]" when a module has several parameter groups (2-D meshes).
_FSDP = re.compile(r"^FSDP::(all_gather|all_gather_copy_out|pre_forward|pre_backward)(?: \((.*)\))?(?: \[pg=\d+\])?$")
_FSDP_ROLE = {"all_gather": "fsdp_all_gather", "all_gather_copy_out": "fsdp_copy_out",
              "pre_forward": "fsdp_pre_forward", "pre_backward": "fsdp_pre_backward"}
ROOT_UNIT = "(root)"
# Micro-batch labels: `Forward i` / `Backward i` (GPipe and the reference runs), and torch's
# multi-stage schedules' `PP:<stage><action><mb>` (torch.distributed.pipelining).
_SIMPLE = re.compile(r"^(Forward|Backward) (\d+)$")
_PP = re.compile(r"^PP:(\d+)([FBIW])(\d+)$")


def is_comm_call(name: str) -> bool:
    """A CPU op or annotation that is a communication call (comm_op or comm_wrapper by name)."""
    return name.startswith(COMM_CALL_PREFIXES)


def fsdp_label(name: str) -> tuple[str, str]:
    """(role, unit) of an FSDP2 range (unit ROOT_UNIT for the root module); ("", "") for other names."""
    m = _FSDP.match(name)
    return (_FSDP_ROLE[m.group(1)], m.group(2) or ROOT_UNIT) if m else ("", "")


def microbatch_label(name: str) -> tuple[int, str, int] | None:
    """(stage or -1, action F/B/I/W, micro-batch) of a micro-batch label; None for other names."""
    if (m := _SIMPLE.match(name)):
        return (-1, "F" if m.group(1) == "Forward" else "B", int(m.group(2)))
    if (m := _PP.match(name)):
        return (int(m.group(1)), m.group(2), int(m.group(3)))
    return None


def role_of(name: str, kind: str, has_collective: bool, step_rx: re.Pattern[str] | None) -> str:
    """The role of one row (module docstring); step_rx: the reader's step pattern, fullmatch."""
    if kind not in CPU_KINDS:
        return ""
    if name.startswith(COMM_OP_PREFIXES):
        return "comm_op"
    if is_comm_call(name) or name.startswith(_NCCL_API_PREFIXES) or has_collective:
        return "comm_wrapper"
    if name.startswith(PROFILER_STEP_PREFIX) or (step_rx is not None and step_rx.fullmatch(name)):
        return "step"
    if (fsdp := fsdp_label(name)[0]):
        return fsdp
    if microbatch_label(name) is not None:
        return "microbatch"
    return "scope" if kind == "annotation" else ""


def _codes(values: Any, missing: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes >= 0 into the distinct values as strings; a missing value (None, NaN, a categorical's -1)
    is code 0, the string `missing`."""
    if isinstance(values, pd.Categorical):
        codes, uniq = values.codes, category_strings(values.categories)
    else:
        codes, uniq = pd.factorize(np.asarray(values, dtype=object))
    return codes.astype(np.int64) + 1, np.asarray([missing] + [str(u) for u in uniq], dtype=object)


def annotation_roles(kind: Any, name: Any, collective: Any, step_rx: re.Pattern[str] | None) -> pd.Categorical:
    """The `role` column for rows given as kind, name and collective columns (arrays or categoricals);
    each distinct (name, kind, has-collective) is decided once."""
    kind_codes, kinds = _codes(kind, "")
    name_codes, names = _codes(name, "nan")
    coll_codes, colls = _codes(collective, "")  # no collective named: the row is no collective
    has_coll = (colls != "")[coll_codes] if coll_codes.size else np.zeros(0, bool)
    n_kinds = kinds.size
    combo = (name_codes * n_kinds + kind_codes) * 2 + has_coll
    uniq, inverse = np.unique(combo, return_inverse=True)
    decided = np.array([role_of(str(names[c // 2 // n_kinds]), str(kinds[c // 2 % n_kinds]), bool(c % 2), step_rx)
                        for c in uniq.tolist()], dtype=object)
    role_codes = np.array([_ROLE_CODE[role] for role in decided.tolist()], dtype=np.int64)
    # one shared dtype (a dtype built per call costs ~0.2 ms a rank); role_of answers a member of ROLES
    return pd.Categorical.from_codes(role_codes[inverse.reshape(-1)] if uniq.size else np.zeros(0, np.int64),
                                     dtype=categorical_dtype(list(ROLES)), validate=False)
