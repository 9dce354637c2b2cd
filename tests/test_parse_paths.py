"""The typed (msgspec) decode and the generic (orjson dicts) decode give identical event tables."""
from __future__ import annotations

import gzip
import importlib.util
import json
import zlib
from pathlib import Path

import orjson
import pandas as pd
import pytest

from data_paths import REAL_TRACES
from kineto_builder import KinetoTrace
from overlapscope.errors import TraceError
from overlapscope.ingest import kineto_chunks, kineto_parse
from overlapscope.ingest.kineto import read_kineto
from overlapscope.ingest.kineto_parse import _typed_columns, read_bytes

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def both_paths(path):
    """(typed result, generic result); asserts the file really took the typed path."""
    assert _typed_columns(read_bytes(path)) is not None, "expected the typed decode to accept this file"
    raw = path.read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return read_kineto(path), read_kineto(path, doc=doc)


def assert_same(a, b):
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert (a.rank, a.device, a.rank_from, a.world_size, a.meta) == (b.rank, b.device, b.rank_from, b.world_size,
                                                                     b.meta)


def gpu_trace_with_comm_args() -> KinetoTrace:
    t = KinetoTrace(rank=1, base_ns=1_711_964_646_000_000_000)
    t.step(7, 0, 100_000)
    t.kernel("void gemm()", 10_000, 40_000)
    # args on the kernel itself (newer Kineto)...
    t.kernel(NCCL, 30_000, 55_000, stream=20, **{"Collective name": "allreduce", "dtype": "Float",
                                                   "In msg nelems": 1024, "Out msg nelems": 1024,
                                                   "Process Group Name": "0", "Seq": 3})
    # ...or on the record_param_comms op around the launch (older Kineto).
    t.cpu_op("record_param_comms", 55_000, 70_000, **{"Collective name": "_allgather_base", "dtype": "BFloat16",
                                                       "In msg nelems": 8, "Out msg nelems": 16,
                                                       "Process Group Name": "pg1", "seq": 9})
    t.kernel("ncclDevKernel_Generic", 60_000, 80_000, stream=21, launch_ns=60_000)
    t.memcpy(85_000, 90_000)
    t.sync(90_000, 95_000)
    return t


def gloo_cpu_trace() -> KinetoTrace:
    t = KinetoTrace(rank=0, base_ns=0)
    t.step(1, 0, 100_000)
    t.cpu_op("aten::mm", 1_000, 20_000)
    t.cpu_op("c10d::allreduce_", 20_000, 22_000)
    t.annotation("gloo:all_reduce", 23_000, 40_000, tid=200)
    t.cpu_op("aten::add", 25_000, 45_000)
    t.cpu_op("wrapper", 50_000, 70_000)
    t.cpu_op("c10d::wait", 55_000, 60_000)
    return t


@pytest.mark.parametrize("make", [gpu_trace_with_comm_args, gloo_cpu_trace])
@pytest.mark.parametrize("name", ["rank.json", "rank.json.gz"])
def test_hand_built_traces_read_the_same_on_both_paths(tmp_path, make, name):
    typed, generic = both_paths(make().write(tmp_path / name))
    assert_same(typed, generic)


def test_comm_args_are_read_from_kernel_and_enclosing_record_param_comms(tmp_path):
    typed, _ = both_paths(gpu_trace_with_comm_args().write(tmp_path / "r.json"))
    comm = typed.events[typed.events["kind"] == "comm"].set_index("name")
    assert comm.loc[NCCL, ["collective", "bytes", "group", "seq"]].tolist() == ["all_reduce", 4096, "0", 3]
    assert comm.loc["ncclDevKernel_Generic", ["collective", "bytes", "group", "seq"]].tolist() == \
        ["all_gather", 32, "pg1", 9]
    assert typed.steps.to_dict("list") == {"step": [7], "start_ns": [1_711_964_646_000_000_000],
                                           "end_ns": [1_711_964_646_000_100_000]}


def test_unusual_file_falls_back_to_the_generic_path(tmp_path):
    t = gpu_trace_with_comm_args()
    t.events.append({"ph": "X", "cat": "cpu_op", "name": 5, "pid": 1, "tid": 100, "ts": 1.0, "dur": 2.0})
    t.events.append({"ph": "i", "name": "marker", "args": ["not", "a", "dict"]})
    path = t.write(tmp_path / "odd.json")
    assert _typed_columns(read_bytes(path)) is None
    trace = read_kineto(path)
    assert "5" in set(trace.events["name"].astype(str))


@pytest.mark.needs_data(REAL_TRACES)
@pytest.mark.parametrize("path", sorted(REAL_TRACES.glob("kineto-gpu/*/*.json.gz")), ids=lambda p: p.name)
def test_real_traces_read_the_same_on_both_paths(path):
    assert_same(*both_paths(path))


REFERENCE_RUNS = Path(__file__).resolve().parents[1] / "traces"


@pytest.mark.parametrize("path", sorted(REFERENCE_RUNS.glob("*/*.json.gz")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reference_runs_read_the_same_on_both_paths(path):
    """traces/: the committed reference runs (GPU-less CPU/gloo jobs), every rank of each."""
    assert_same(*both_paths(path))


# ---- gzip inflate -----------------------------------------------------------------------------
INFLATERS = [zlib] + ([pytest.importorskip("isal.isal_zlib")] if importlib.util.find_spec("isal") else [])


@pytest.fixture(params=INFLATERS, ids=lambda m: m.__name__)
def inflater(request, monkeypatch):
    """Run the test with zlib and, when installed, ISA-L as the inflater."""
    monkeypatch.setattr(kineto_parse, "_inflate", request.param)
    return request.param


def test_gunzip_equals_gzip_decompress_over_members_and_padding(inflater):
    a, b = gzip.compress(b'{"traceEvents": [' * 50), gzip.compress(b"]}")
    for data in (a, a + b, a + b"\x00\x00\x00" + b, a + b + b"\x00"):
        assert kineto_parse.gunzip(data) == gzip.decompress(data)


@pytest.mark.parametrize("damage", ["cut in the trailer", "cut in the data", "trailing garbage", "bad crc"])
def test_damaged_gzip_is_a_one_line_error(tmp_path, inflater, damage):
    good = gzip.compress(orjson.dumps(gpu_trace_with_comm_args().document()))
    bad = {"cut in the trailer": good[:-3], "cut in the data": good[: len(good) // 2],
           "trailing garbage": good + b"xx", "bad crc": good[:-8] + bytes(8)}[damage]
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(bad)
    with pytest.raises(TraceError, match="truncated or corrupt gzip"):
        read_bytes(path)
    with pytest.raises(Exception):
        gzip.decompress(bad)  # the reference rejects it too


# ---- what the typed decode accepts --------------------------------------------------------------
def test_every_phase_but_x_is_skipped_on_the_typed_path(tmp_path):
    t = gpu_trace_with_comm_args()
    # Flow arrows, instants, counters and metadata with fields of any shape: the reader never
    # looks inside them, so they must not send the file down the slow path.
    t.events += [{"ph": "s", "id": 1, "pid": 1, "tid": 100, "ts": 5.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
                 {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 6.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
                 {"ph": "i", "name": "marker", "args": ["not", "a", "dict"], "s": "t"},
                 {"ph": "C", "name": 3, "args": {"x": [1, 2]}},
                 {"ph": "M", "name": "thread_name", "args": {"name": "main"}}]
    assert_same(*both_paths(t.write(tmp_path / "r.json")))


@pytest.mark.parametrize("odd", [{"ph": "Q", "name": "not a Chrome trace phase"}, {"name": "no phase at all"}])
def test_an_event_of_unknown_phase_takes_the_generic_path(tmp_path, odd):
    t = gpu_trace_with_comm_args()
    t.events.append(odd)
    path = t.write(tmp_path / "r.json")
    assert _typed_columns(read_bytes(path)) is None
    reference = gpu_trace_with_comm_args().write(tmp_path / "ref.json")
    pd.testing.assert_frame_equal(read_kineto(path).events, read_kineto(reference).events, check_exact=True)


def test_lanes_of_odd_thread_and_stream_values_are_formatted_event_by_event(tmp_path):
    """Values that compare equal but print differently (1, True, 1.0) keep lanes of their own."""
    t = gpu_trace_with_comm_args()
    for i, tid in enumerate([1, True, 1.0, "1", None, [1]]):
        t.cpu_op(f"op{i}", 1_000 * i, 1_000 * i + 500, tid=tid)
    for i, stream in enumerate([1, "1"]):
        t.kernel(f"k{i}", 1_000 * i, 1_000 * i + 500, stream=stream)
    trace = read_kineto(tmp_path / "x.json", doc=t.document())
    ev = trace.events.astype({"lane": object, "name": object}).set_index("name")
    assert [ev.loc[f"op{i}", "lane"] for i in range(6)] == \
        ["thread:1", "thread:True", "thread:1.0", "thread:1", "thread:None", "thread:[1]"]
    assert [ev.loc[f"k{i}", "lane"] for i in range(2)] == ["stream:1", "stream:1"]


# ---- the typed decode in pieces (kineto_chunks) ---------------------------------------------------
@pytest.fixture
def small_pieces(monkeypatch):
    """Cut every document into pieces of ~2 KB of events, so that small traces decode in many."""
    monkeypatch.setattr(kineto_chunks, "PIECE_BYTES", 2_000)


def test_pieces_are_cut_between_events(tmp_path, small_pieces):
    t = gpu_trace_with_comm_args()
    for i in range(200):
        t.cpu_op(f"op {i}", 1_000 * i, 1_000 * i + 500)
    raw = read_bytes(t.write(tmp_path / "r.json"))
    cuts = kineto_chunks.cut(raw)
    assert cuts is not None and len(cuts.pieces) >= 5
    for start, end in cuts.pieces:
        assert raw[start:start + 1] == b"{" and raw[end - 1:end] == b"}"
    assert _typed_columns(bytearray(raw)) is not None


@pytest.mark.needs_data(REAL_TRACES)
@pytest.mark.parametrize("path", sorted(REAL_TRACES.glob("kineto-gpu/*/*.json.gz"))[:3], ids=lambda p: p.name)
def test_real_traces_decoded_in_pieces_read_the_same(path, small_pieces):
    assert len(kineto_chunks.cut(read_bytes(path)).pieces) > 10
    assert_same(*both_paths(path))


def test_reference_runs_decoded_in_pieces_read_the_same(small_pieces):
    for path in sorted(REFERENCE_RUNS.glob("*/*.json.gz"))[::4]:
        assert_same(*both_paths(path))


def test_a_cut_inside_a_string_falls_back_to_the_whole_document(tmp_path, small_pieces):
    trap = 'op }, {"ph": "X"'  # a name holding the separator: a cut there leaves a string open
    t = gpu_trace_with_comm_args()
    for i in range(300):
        t.cpu_op(trap, 1_000 * i, 1_000 * i + 500)
    path = t.write(tmp_path / "r.json")
    raw = read_bytes(path)
    assert any(raw[end - 4:end] == b"op }" for _, end in kineto_chunks.cut(raw).pieces)
    assert kineto_parse._piecewise_columns(raw, kineto_parse.EVERY_EVENT) is None
    typed, generic = both_paths(path)
    assert_same(typed, generic)
    assert (typed.events["name"] == trap).sum() == 300


def test_nested_args_objects_and_keys_after_the_array_read_the_same(tmp_path, small_pieces):
    t = gpu_trace_with_comm_args()
    for i in range(300):
        t.cpu_op(f"op {i}", 1_000 * i, 1_000 * i + 500, nested=[{"a": i}, {"b": [{"c": 1}, {"d": 2}]}])
    doc = t.document()
    # top-level fields after traceEvents (a key there overrides one before it, as in a whole decode)
    doc = {"schemaVersion": 1, "traceEvents": doc.pop("traceEvents"), **doc}
    path = tmp_path / "after.json"
    path.write_bytes(orjson.dumps(doc))
    assert list(orjson.loads(path.read_bytes()))[1] == "traceEvents"
    assert_same(*both_paths(path))


@pytest.mark.parametrize("odd", ["mixed ts", "big int dur", "no dur"])
def test_odd_numbers_in_one_piece_give_the_whole_decode_s_answer(tmp_path, small_pieces, odd):
    t = gpu_trace_with_comm_args()
    for i in range(300):
        t.cpu_op(f"op {i}", 1_000 * i, 1_000 * i + 500)
    events = [e for e in t.events if e.get("ph") == "X"]
    e = events[250]
    if odd == "mixed ts":
        e["ts"] = int(e["ts"])
    elif odd == "big int dur":
        e["dur"] = 1 << 70
    else:
        del e["dur"]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(t.document()))  # orjson refuses an int beyond 64 bits
    whole = pytest.MonkeyPatch.context()
    with whole as m:
        m.setattr(kineto_chunks, "PIECE_BYTES", 1 << 40)  # one piece: the whole-document decode
        try:
            expected = read_kineto(path)
        except TraceError as exc:
            expected = str(exc)
    try:
        got = read_kineto(path)
    except TraceError as exc:
        got = str(exc)
    if isinstance(expected, str):
        assert got == expected
    else:
        assert_same(got, expected)


def test_a_second_trace_events_key_takes_the_whole_document_s_answer(tmp_path, small_pieces):
    """JSON's last key wins: a second traceEvents array after the first replaces it."""
    t = gpu_trace_with_comm_args()
    for i in range(300):
        t.cpu_op(f"op {i}", 1_000 * i, 1_000 * i + 500)
    doc = t.document()
    second = gpu_trace_with_comm_args().document()["traceEvents"]
    text = orjson.dumps(doc)[:-1] + b', "traceEvents": ' + orjson.dumps(second) + b"}"
    path = tmp_path / "twice.json"
    path.write_bytes(text)
    assert kineto_parse._piecewise_columns(read_bytes(path), kineto_parse.EVERY_EVENT) is None
    reference = gpu_trace_with_comm_args().write(tmp_path / "once.json")
    pd.testing.assert_frame_equal(read_kineto(path).events, read_kineto(reference).events, check_exact=True)
