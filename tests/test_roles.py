"""The event table's `role` column (core/roles.py): assigned once by the readers, the same from Kineto
and nsys NVTX, and what the analyzers select by."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
from overlapscope.analysis.breakdown import launch_scopes
from overlapscope.core.roles import DEFAULT_STEP_PATTERN, ROLES, annotation_roles, fsdp_label, microbatch_label, role_of
from overlapscope.core.table import make_table
from overlapscope.ingest.kineto import read_kineto
from overlapscope.ingest.nsys import read_nsys
from tests.kineto_builder import KinetoTrace
from tests.nsys_builder import Export, Kernel, Range

# name -> role; each is an annotation in both formats.
NAMED = {
    "ProfilerStep#3": "step",
    "step 4": "step",
    "nccl:all_reduce": "comm_op",
    "c10d::allreduce_": "comm_op",
    "gloo:all_reduce": "comm_wrapper",
    "record_param_comms": "comm_wrapper",
    "_c10d_functional::all_gather_into_tensor": "comm_wrapper",
    "FSDP::all_gather (layers.0)": "fsdp_all_gather",
    "FSDP::all_gather_copy_out (layers.0)": "fsdp_copy_out",
    "FSDP::pre_forward (layers.0) [pg=1]": "fsdp_pre_forward",
    "FSDP::pre_backward": "fsdp_pre_backward",
    "Forward 2": "microbatch",
    "PP:1B3": "microbatch",
    "layers.0.attention": "scope",
    "moe:L0:mb1:dispatch": "scope",
}


def _roles(events: pd.DataFrame) -> dict[str, str]:
    ann = events[events["kind"] == "annotation"]
    return dict(zip(ann["name"].astype(str), ann["role"].astype(str)))


def test_role_rules():
    step_rx = re.compile(DEFAULT_STEP_PATTERN, re.IGNORECASE)
    for name, role in NAMED.items():
        assert role_of(name, "annotation", False, step_rx) == role, name
    assert role_of("aten::mm", "cpu_op", False, None) == ""          # a CPU op is no scope
    assert role_of("c10d::allreduce_", "cpu_op", False, None) == "comm_op"
    assert role_of("ncclAllReduce", "annotation", True, None) == "comm_wrapper"  # NCCL's NVTX range
    assert role_of("void gemm()", "compute", False, None) == ""
    assert role_of("step 4", "annotation", False, None) == "scope"   # not a step without the pattern
    assert role_of("ProfilerStep#4", "annotation", False, None) == "step"  # torch's, whatever the pattern
    assert fsdp_label("FSDP::pre_forward (layers.0) [pg=1]") == ("fsdp_pre_forward", "layers.0")
    assert fsdp_label("FSDP::pre_backward") == ("fsdp_pre_backward", "(root)")
    assert microbatch_label("PP:1B3") == (1, "B", 3) and microbatch_label("Forward 2") == (-1, "F", 2)


def test_kineto_and_nsys_assign_the_same_roles(tmp_path):
    names = list(NAMED)
    trace = KinetoTrace()
    ranges = []
    for i, name in enumerate(names):
        start = 1_000_000 + i * 10_000
        trace.annotation(name, start, start + 5_000)
        ranges.append(Range(10, name, start, start + 5_000))
    trace.kernel("void gemm()", 2_000_000, 2_100_000)
    kineto = read_kineto(trace.write(tmp_path / "rank0.json"))
    export = Export(processes={10: "python3"}, kernels=[Kernel(10, 0, 7, "void gemm()", 2_000_000, 2_100_000,
                                                              launch=1_999_000)], ranges=ranges)
    (nsys,) = read_nsys(export.write(tmp_path / "rank0.sqlite"))
    assert _roles(kineto.events) == _roles(nsys.events) == NAMED
    for events in (kineto.events, nsys.events):
        assert set(events["role"].cat.categories) == set(ROLES)
        assert (events.loc[events["kind"] != "annotation", "role"] == "").all()  # the kernels


def test_step_role_follows_the_readers_step_pattern(tmp_path):
    trace = KinetoTrace()
    trace.annotation("train_step_7", 0, 1_000_000)
    trace.annotation("ProfilerStep#1", 0, 1_000_000)
    trace.kernel("void gemm()", 100_000, 200_000)
    path = trace.write(tmp_path / "rank0.json")
    assert _roles(read_kineto(path).events)["train_step_7"] == "scope"
    roles = _roles(read_kineto(path, step_pattern=r"train_step_\d+").events)
    assert roles == {"train_step_7": "step", "ProfilerStep#1": "step"}


def test_launch_scopes_read_the_role_column_not_the_name():
    # The same name under two roles: only the scope-role row is a launch scope. A row's role is what
    # the reader decided, so a name is never re-parsed by the analyzer.
    events = make_table(0, lane=["thread:1", "thread:1", "stream:7"], kind=["annotation", "annotation", "comm"],
                        name=["layers.0", "ProfilerStep#1", "ncclKernel"], start_ns=[0, 0, 100],
                        end_ns=[50, 1_000, 200], launch_ns=[0, 0, 60], launch_lane=["thread:1", "thread:1", "thread:1"],
                        collective=["", "", "all_reduce"])
    assert launch_scopes(events, np.array([False, False, True])).tolist() == ["", "", ""]  # launched at 60 > 50
    events.loc[1, "role"] = "scope"
    assert launch_scopes(events, np.array([False, False, True]))[2] == "ProfilerStep#1"


def test_categorical_columns_with_missing_values_decide_each_row_by_its_own_name_and_kind():
    kinds = ["annotation", "annotation", "annotation", "cpu_op", "annotation", None]
    names = ["ProfilerStep#3", None, "FSDP::pre_forward (layers.0)", "aten::mm", "ncclAllReduce", "ProfilerStep#1"]
    colls = ["", "", None, "", "all_reduce", ""]
    want = ["step", "scope", "fsdp_pre_forward", "", "comm_wrapper", ""]  # a row of no kind has no role
    as_objects = annotation_roles(np.array(kinds, object), np.array(names, object), np.array(colls, object), None)
    as_categoricals = annotation_roles(pd.Categorical(kinds), pd.Categorical(names), pd.Categorical(colls), None)
    assert list(as_objects) == want and list(as_categoricals) == want
