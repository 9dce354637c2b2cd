"""core/frames: empty results built once and copied, with the dtypes the analyzers' full results have."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from kineto_builder import KinetoTrace
from overlapscope.analysis.all_to_all import all_to_all_rows
from overlapscope.analysis.matching import comm_rows
from overlapscope.core.frames import _joined_blocks, built_once, empty_frame, stacked_frames
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


def _same_as_concat(frames: list[pd.DataFrame], *, block_by_block: bool) -> pd.DataFrame:
    assert (_joined_blocks(frames) is not None) == block_by_block  # which of the two paths it takes
    want, got = pd.concat(frames, ignore_index=True), stacked_frames(frames)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got.dtypes) == list(want.dtypes) and got.columns.equals(want.columns)
    assert got.index.equals(want.index)
    return got


def _rank_frame(rank: int, rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(rank)
    return pd.DataFrame({
        "step": np.arange(rows, dtype=np.int32), "name": pd.array([f"r{rank}k{i}" for i in range(rows)], dtype="str"),
        "ns": rng.integers(0, 1 << 40, rows), "pct": rng.random(rows), "who": pd.Series(["x"] * rows, dtype=object),
        "ok": rng.random(rows) > 0.5, "cat": pd.Categorical(["a", "b"] * (rows // 2) + ["a"] * (rows % 2), ["a", "b"]),
        "when": pd.to_datetime(rng.integers(0, 1 << 40, rows), utc=True).as_unit("ns"), "n": pd.array(range(rows), dtype="Int64")})


def test_stacked_frames_is_pd_concat():
    """Frames of one schema (blocks of every kind: NumPy numbers, object, str, bool, categorical,
    tz-aware datetimes, nullable ints; some empty) join block by block; the result is pd.concat's."""
    frames = [_rank_frame(rank, rows) for rank, rows in enumerate([3, 0, 5, 1, 0, 7])]
    got = _same_as_concat(frames, block_by_block=True)
    assert len(got) == 16 and got["name"].tolist()[:3] == ["r0k0", "r0k1", "r0k2"]
    _same_as_concat([f.iloc[:0] for f in frames], block_by_block=True)  # every frame empty
    _same_as_concat(frames[:1], block_by_block=True)


def test_stacked_frames_falls_back_where_frames_differ():
    """Frames pd.concat must align: other column orders, missing columns, other dtypes, other
    categories, another block layout (an unconsolidated frame), duplicate names, no columns."""
    a, b = _rank_frame(0, 4), _rank_frame(1, 3)
    _same_as_concat([a, b[list(reversed(b.columns))]], block_by_block=False)
    _same_as_concat([a, b.drop(columns="pct")], block_by_block=False)
    _same_as_concat([a, b.astype({"ns": np.float64})], block_by_block=False)
    _same_as_concat([a, b.assign(cat=pd.Categorical(["c", "c", "c"]))], block_by_block=False)
    unconsolidated = b.copy()
    unconsolidated["extra"] = 1  # a block of its own, where a new frame holds it in the int64 block
    _same_as_concat([pd.DataFrame({**dict(a.items()), "extra": 2}), unconsolidated], block_by_block=False)
    dup = pd.DataFrame([[1, 2]], columns=["x", "x"])
    _same_as_concat([dup, dup], block_by_block=False)
    _same_as_concat([pd.DataFrame(index=range(2)), pd.DataFrame(index=range(3))], block_by_block=False)


def test_stacked_text_columns_are_one_arrow_chunk():
    """A str column joined from many frames comes back as one Arrow chunk (pd.concat keeps one per
    frame, and each take then walks them all), with the same dtype and values."""
    frames = [_rank_frame(rank, 3) for rank in range(40)]
    got = _same_as_concat(frames, block_by_block=True)
    assert got["name"].array.__arrow_array__().num_chunks == 1
    assert pd.concat(frames, ignore_index=True)["name"].array.__arrow_array__().num_chunks == 40


def test_only_arrow_backed_columns_are_rejoined():
    """An Arrow-typed int column is rejoined too; NumPy-backed text (python storage) and categories
    keep pd.concat's arrays (converting them to Arrow and back would copy every value)."""
    import pyarrow as pa
    frames = [pd.DataFrame({"n": pd.array([r, r + 1], dtype=pd.ArrowDtype(pa.int64())),
                            "py": pd.array([f"a{r}", None], dtype=pd.StringDtype("python")),
                            "cat": pd.Categorical(["x", "y"], ["x", "y"])}) for r in range(30)]
    got = _same_as_concat(frames, block_by_block=True)
    assert got["n"].array.__arrow_array__().num_chunks == 1
    assert isinstance(got["py"].dtype, pd.StringDtype) and got["py"].dtype.storage == "python"


def test_a_pandas_without_those_internals_gets_pd_concat(monkeypatch):
    """No pandas.api.internals.create_dataframe_from_blocks (older pandas), or blocks that do not
    look as expected (another version's internals): pd.concat's result, no error."""
    import pandas.api.internals as internals
    import overlapscope.core.frames as frames_module
    frames = [_rank_frame(rank, 2) for rank in range(5)]
    want = pd.concat(frames, ignore_index=True)
    monkeypatch.delattr(internals, "create_dataframe_from_blocks")
    pd.testing.assert_frame_equal(stacked_frames(frames), want, check_exact=True)
    monkeypatch.undo()

    def other_internals(_frames):
        raise AttributeError("'BlockManager' object has no attribute 'blocks'")
    monkeypatch.setattr(frames_module, "_joined_blocks", other_internals)
    pd.testing.assert_frame_equal(stacked_frames(frames), want, check_exact=True)


def test_an_arrow_round_trip_of_another_dtype_keeps_the_chunked_column(monkeypatch):
    """Should dtype.__from_arrow__ ever give another dtype or array type, the joined column is kept
    as _concat_same_type made it (many chunks): the frame's dtypes stay pd.concat's."""
    monkeypatch.setattr(pd.StringDtype, "__from_arrow__",
                        lambda self, array: pd.array(array.to_pylist(), dtype=object))
    frames = [_rank_frame(rank, 3) for rank in range(8)]
    got = _same_as_concat(frames, block_by_block=True)
    assert got["name"].array.__arrow_array__().num_chunks == 8


def test_column_labels_compare_as_index_equals_does():
    """Labels compared by their Arrow arrays where both Indexes are Arrow-backed text of one dtype;
    any other pair by Index.equals, which ignores the dtype: object labels equal to str labels still
    join block by block, as pd.concat aligns them; other labels do not."""
    frames = [_rank_frame(rank, 2) for rank in range(4)]
    assert all(f.columns.dtype == "str" for f in frames)
    _same_as_concat(frames, block_by_block=True)
    as_object = frames[1].copy()
    as_object.columns = pd.Index(list(as_object.columns), dtype=object)
    _same_as_concat([frames[0], as_object, frames[2]], block_by_block=True)
    renamed = frames[1].rename(columns={"pct": "share"})
    _same_as_concat([frames[0], renamed], block_by_block=False)
