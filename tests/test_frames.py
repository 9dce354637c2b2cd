"""core/frames: empty results built once and copied, with the dtypes the analyzers' full results have."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kineto_builder import KinetoTrace
from overlapscope.analysis.all_to_all import all_to_all_rows
from overlapscope.analysis.matching import comm_rows
from overlapscope.core.codes import codes_names, isin
from overlapscope.core.frames import (_joined_blocks, built_once, column_values, empty_frame, frame_of, schema_of,
                                      stacked_frames, with_shared_labels)
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


def test_blocks_placed_at_scattered_columns_join_block_by_block():
    """A block whose columns are no slice (int64 at 0, 2, 3 around a str column) is compared by its
    positions, and joins block by block; one whose blocks come in another order goes to pd.concat."""
    def frame(rank: int) -> pd.DataFrame:
        return pd.DataFrame({"a": np.arange(3) + rank, "s": pd.array(["x", "y", str(rank)], dtype="str"),
                             "b": np.arange(3) * rank, "c": np.full(3, rank)})
    blocks = frame(0)._mgr.blocks
    assert any(not isinstance(b.mgr_locs.indexer, slice) for b in blocks)
    _same_as_concat([frame(r) for r in range(5)], block_by_block=True)
    reordered = frame(2)
    reordered._mgr.blocks = reordered._mgr.blocks[::-1]  # the same columns, the str block first
    reordered._mgr._rebuild_blknos_and_blklocs()
    assert reordered["s"].tolist() == ["x", "y", "2"]
    _same_as_concat([frame(0), reordered, frame(1)], block_by_block=False)


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


def _coded(values: list, categories: list) -> pd.Categorical:
    return pd.Categorical(values, categories=pd.Index(categories, dtype=object))


def test_united_categories_join_each_ranks_codes():
    """union_categories: a text column coded per frame into that frame's own categories comes back
    categorical with the union of them (first-appearance order), every row's value and every missing
    value as pd.concat gives them (as object); the other columns are pd.concat's, exactly."""
    parts = [(["b", "a", None], ["b", "a"]), (["c", "c"], ["c"]), ([], []), (["a", "d"], ["d", "a"]),
             (["b"], ["b", "a"])]  # an empty frame, one without categories, one with the first's categories
    frames = [pd.DataFrame({"n": np.arange(len(v), dtype=np.int64) + 10 * k, "lane": _coded(v, c)})
              for k, (v, c) in enumerate(parts)]
    assert _joined_blocks(frames) is None and _joined_blocks(frames, union_categories=True) is not None
    got = stacked_frames(frames, union_categories=True)
    want = pd.concat(frames, ignore_index=True)
    assert want["lane"].dtype == object  # what pd.concat makes of categories that differ
    assert isinstance(got["lane"].dtype, pd.CategoricalDtype) and not got["lane"].dtype.ordered
    assert got["lane"].cat.categories.tolist() == ["b", "a", "c", "d"]
    assert got["lane"].cat.categories.dtype == object
    assert got["lane"].astype(object).tolist() == want["lane"].tolist()  # None stays missing
    pd.testing.assert_series_equal(got["n"], want["n"])
    assert got.index.equals(want.index) and got.columns.equals(want.columns)


def test_united_categories_read_a_shared_dtype_once():
    """Columns of one frame that share a dtype object (a rank graph's text) are united alike whether
    their categories are read per column or once per dtype (names_of), and read once with it."""
    from overlapscope.core.codes import text_categoricals
    from overlapscope.core.frames import united_categoricals
    ranks = [text_categoricals([np.array(a, dtype=object), np.array(b, dtype=object)])
             for a, b in ((["x", "y"], ["", "x"]), (["z"], ["z"]), ([], []))]
    assert all(lane.dtype is label.dtype for lane, label in ranks)
    names_of: dict = {}
    for column in (0, 1):
        parts = [rank[column] for rank in ranks]
        alone, shared = united_categoricals(parts), united_categoricals(parts, names_of)
        assert alone.tolist() == shared.tolist() == [v for p in parts for v in p.tolist()]
        assert alone.categories.tolist() == shared.categories.tolist() == ["x", "y", "", "z"]
    assert len(names_of) == len(ranks)  # one read per rank, not per column


def test_united_categories_where_the_frames_go_to_pd_concat():
    """Frames whose block layouts differ go to pd.concat; their categorical columns are then united
    all the same (by the frames' columns); an ordered categorical is never united (pd.concat's)."""
    a = pd.DataFrame({"n": [1, 2], "lane": _coded(["x", "y"], ["x", "y"]), "m": [5, 6]})
    b = pd.DataFrame({"n": [3], "lane": _coded(["z"], ["z"])})
    b["m"] = 7  # the same columns, "m" in a block of its own (in a's int64 block in a)
    assert len(a._mgr.blocks) != len(b._mgr.blocks)
    assert _joined_blocks([a, b], union_categories=True) is None
    got = stacked_frames([a, b], union_categories=True)
    assert got["lane"].tolist() == ["x", "y", "z"] and got["lane"].cat.categories.tolist() == ["x", "y", "z"]
    assert got["n"].tolist() == [1, 2, 3] and got["m"].tolist() == [5, 6, 7]
    ordered = [pd.DataFrame({"lane": pd.Categorical(v, categories=c, ordered=True)}) for v, c in ((["x"], ["x"]), (["y"], ["y"]))]
    pd.testing.assert_frame_equal(stacked_frames(ordered, union_categories=True), pd.concat(ordered, ignore_index=True))


def test_shared_labels_are_one_index_per_schema():
    """with_shared_labels: frames of equal labels (and label dtype) end up holding one Index object,
    the frames otherwise as they were; other labels, or the same labels as object, get their own.
    Pickled together they still share it, and stack as pd.concat does."""
    import pickle

    frames = [with_shared_labels(_rank_frame(rank, 2)) for rank in range(5)]
    assert len({id(f.columns) for f in frames}) == 1
    want = pd.concat([_rank_frame(rank, 2) for rank in range(5)], ignore_index=True)
    other = with_shared_labels(_rank_frame(9, 2).rename(columns={"pct": "share"}))
    as_object = _rank_frame(8, 2)
    as_object.columns = pd.Index(list(as_object.columns), dtype=object)
    as_object = with_shared_labels(as_object)
    assert other.columns is not frames[0].columns and as_object.columns is not frames[0].columns
    assert as_object.columns.dtype == object and list(other.columns)[3] == "share"
    back = pickle.loads(pickle.dumps(frames))
    assert len({id(f.columns) for f in back}) == 1
    pd.testing.assert_frame_equal(stacked_frames(back), want, check_exact=True)


def test_empty_results_are_one_shared_frame_checked_once():
    """shared_result: empty frames of one schema (labels, block dtypes and layout, index) become one
    frame object; a frame with rows, or an empty one of another schema or index name, stays its own.
    Frames repeated in a stack are checked once and joined as pd.concat joins them."""
    from overlapscope.core.frames import shared_result
    empties = [shared_result(_rank_frame(rank, 0)) for rank in range(4)]
    assert all(e is empties[0] for e in empties)
    full = shared_result(_rank_frame(7, 3))
    assert len(full) == 3 and full is not empties[0] and full.columns is empties[0].columns
    named = _rank_frame(8, 0)
    named.index.name = "step"
    other = _rank_frame(9, 0).astype({"ns": np.float64})
    assert shared_result(named) is not empties[0] and shared_result(other) is not empties[0]
    frames = [empties[0], full, empties[1], full, empties[2]]
    got = _same_as_concat(frames, block_by_block=True)
    assert len(got) == 6 and got["name"].tolist() == ["r7k0", "r7k1", "r7k2"] * 2


def test_frame_of_is_pd_dataframe():
    """frame_of(d) equals pd.DataFrame(d) exactly (values, dtypes, labels, index, block layout, known
    consolidated) for NumPy numbers, bools and categoricals, empty too; anything else is
    pd.DataFrame's own frame; the columns are copies, as pd.DataFrame makes them."""
    rng = np.random.default_rng(3)
    for rows in (0, 1, 7):
        data = {"step": np.arange(rows, dtype=np.int32), "start_ns": rng.integers(0, 1 << 62, rows),
                "pct": rng.random(rows), "ok": rng.random(rows) > 0.5, "end_ns": rng.integers(0, 9, rows),
                "type": pd.Categorical(rng.choice(["lane", "gate"], rows), ["gate", "lane"]), "u8": np.ones(rows, np.uint8)}
        got, want = frame_of(data), pd.DataFrame(data)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert got.columns.equals(want.columns) and got.columns.dtype == want.columns.dtype
        assert [(b.dtype, b.mgr_locs.as_array.tolist()) for b in got._mgr.blocks] == \
            [(b.dtype, b.mgr_locs.as_array.tolist()) for b in want._mgr.blocks]
        # consolidated as pandas' frames are (else pandas checks the blocks again on later operations)
        assert got._mgr.is_consolidated() and got._mgr._known_consolidated
        # one labels Index per schema, the one with_shared_labels gives (stacks compare it once)
        assert with_shared_labels(want).columns is got.columns is frame_of(data).columns
        if rows:
            data["start_ns"][0] = -1
            assert got["start_ns"].iloc[0] != -1
    others = [{"name": np.array(["a", "b"], dtype=object), "n": np.arange(2)},  # text: pandas infers str
              {"n": np.arange(2), "m": np.arange(3)}, {"when": np.array([1, 2], "datetime64[ns]")},
              {"n": [1, 2]}, {"n": 1}, {}, {1: np.arange(2)},
              {"m": np.ma.masked_array([1, 2], mask=[False, True])}]  # pandas reads the mask: NaN
    for data in others:
        try:
            want = pd.DataFrame(data)
        except ValueError:  # arrays of other lengths, a scalar without an index: pandas' own error
            with pytest.raises(ValueError):
                frame_of(data)
            continue
        pd.testing.assert_frame_equal(frame_of(data), want, check_exact=True)


def test_span_rows_are_the_first_and_last_rows_of_rank_start_and_end():
    """What a worker sends back of an analyzed rank's events: the earliest-starting and the
    latest-ending row (one row when they are the same), columns rank, start_ns, end_ns."""
    from overlapscope.core.table import make_table
    from overlapscope.pipeline.distributed import span_rows
    events = make_table(3, lane=["a", "b", "a"], kind=["compute", "comm", "compute"], name=["k", "c", "k"],
                        start_ns=[50, 10, 30], end_ns=[90, 20, 95])
    spans = span_rows(events)
    assert list(spans.columns) == ["rank", "start_ns", "end_ns"]
    assert spans.to_dict("list") == {"rank": [3, 3], "start_ns": [10, 30], "end_ns": [20, 95]}
    assert span_rows(events.iloc[[2]]).to_dict("list") == {"rank": [3], "start_ns": [30], "end_ns": [95]}
    empty = span_rows(events.iloc[:0])
    assert len(empty) == 0 and list(empty.dtypes) == list(events[["rank", "start_ns", "end_ns"]].dtypes)


def test_column_values_are_the_series_values_read_only():
    """column_values(frame, c) is frame[c]'s values: a NumPy column read-only (as to_numpy gives it),
    a categorical as its Categorical, dtype as to_numpy(dtype); a missing label raises KeyError."""
    frame = frame_of({"start_ns": np.arange(4, dtype=np.int64), "step": np.arange(4, dtype=np.int32),
                      "kind": pd.Categorical(["comm", "compute", "comm", None])})
    start = column_values(frame, "start_ns")
    assert isinstance(start, np.ndarray) and np.array_equal(start, frame["start_ns"].to_numpy())
    assert not start.flags.writeable and np.shares_memory(start, frame["start_ns"].to_numpy())
    with pytest.raises(ValueError):
        start[0] = 7
    assert frame["start_ns"].tolist() == [0, 1, 2, 3]
    widened = column_values(frame, "step", np.int64)
    assert widened.dtype == np.int64 and widened.tolist() == [0, 1, 2, 3]
    kind = column_values(frame, "kind")
    assert isinstance(kind, pd.Categorical) and kind.equals(frame["kind"].array)
    assert isin(kind, ("comm",)).tolist() == isin(frame["kind"], ("comm",)).tolist() == [True, False, True, False]
    assert codes_names(kind)[0].tolist() == codes_names(frame["kind"])[0].tolist()
    with pytest.raises(KeyError):
        column_values(frame, "end_ns")
    text = pd.DataFrame({"name": ["a", "b"]})
    assert list(column_values(text, "name")) == ["a", "b"]
    twice = pd.DataFrame([[1, 2]], columns=["start_ns", "start_ns"])
    with pytest.raises(ValueError, match="names 2 columns"):
        column_values(twice, "start_ns")


def test_schema_of_tells_labels_and_dtypes_apart():
    a = frame_of({"step": np.arange(2, dtype=np.int32), "comm_ns": np.arange(2, dtype=np.int64)})
    same = frame_of({"step": np.arange(5, dtype=np.int32), "comm_ns": np.arange(5, dtype=np.int64)})
    wider = frame_of({"step": np.arange(2, dtype=np.int64), "comm_ns": np.arange(2, dtype=np.int64)})
    renamed = frame_of({"step": np.arange(2, dtype=np.int32), "count": np.arange(2, dtype=np.int64)})
    assert schema_of(a) == schema_of(same) and hash(schema_of(a)) == hash(schema_of(same))
    assert len({schema_of(a), schema_of(wider), schema_of(renamed)}) == 3
