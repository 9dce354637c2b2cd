"""core/frames: empty results built once and copied, with the dtypes the analyzers' full results have."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kineto_builder import KinetoTrace
from overlapscope.analysis.all_to_all import all_to_all_rows
from overlapscope.analysis.matching import comm_rows
from overlapscope.core.frames import built_once, empty_frame
from overlapscope.ingest.kineto import read_kineto


def test_each_call_gets_its_own_copy():
    calls = []

    def build():
        calls.append(1)
        return pd.DataFrame({"a": np.empty(0, np.int64)})

    first = built_once("test_frames.copy", build)
    first["b"] = []  # a caller may add to its frame
    second = built_once("test_frames.copy", build)
    assert calls == [1] and list(second.columns) == ["a"] and second["a"].dtype == np.int64
    assert list(empty_frame(("x", "y"), {"y": object}).dtypes.astype(str)) == ["int64", "object"]


def test_no_comm_results_have_the_dtypes_of_a_result_with_comm(tmp_path):
    """comm_rows and all_to_all_rows of a rank without comm (the frames built once) against the same
    functions on a rank of the MoE example run (all-to-alls): the same columns, the numbers' dtypes."""
    t = KinetoTrace(rank=0)
    t.kernel("gemm", 10_000, 100_000)
    none = read_kineto(t.write(tmp_path / "quiet.json")).events
    some = read_kineto(Path(__file__).parent.parent / "traces" / "moe_ep" / "rank0.trace.json.gz").events
    for func in (comm_rows, lambda ev: all_to_all_rows(ev, np.full(len(ev), "", dtype=object))):
        empty, full = func(none), func(some)
        assert empty.empty and len(full) > 0 and list(empty.columns) == list(full.columns)
        for col in full.columns:
            # text columns: object when empty, as pandas builds an empty object array (str when it holds strings)
            want = object if pd.api.types.is_string_dtype(full[col].dtype) else full[col].dtype
            assert empty[col].dtype == want, col
