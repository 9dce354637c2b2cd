"""Kineto JSON to per-event columns, decoding only the fields the reader uses.

The fast path decodes into msgspec structs that name the few fields the reader needs (ph, cat,
name, tid, ts, dur and a handful of args keys); msgspec skips every other key without building it,
which is 4-6x faster than a full parse into dicts and holds a fraction of the memory. Anything the
typed schema does not describe (a non-string name, a list where args should be, malformed JSON...)
falls back to the generic path - orjson into dicts - whose columns and error messages are the
reference: both paths give identical columns for every file the typed one accepts.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import itertools
import operator
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator, Union

import msgspec
import numpy as np
import orjson

from ..errors import TraceError
from ..core.coded import Coded
from ..core.progress import bytes_read

try:  # ISA-L inflates gzip about twice as fast as zlib (the optional [fast] extra)
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - depends on what is installed
    _inflate = zlib

UNSET = msgspec.UNSET
GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK = 1 << 20
"""Bytes of a trace file read (and inflated) at a time: each is one progress report."""

# JSON args key -> struct attribute, for the args the reader looks at.
ARG_KEYS = {
    "stream": "stream", "correlation": "correlation", "Collective name": "collective_name",
    "dtype": "dtype", "In msg nelems": "in_nelems", "Out msg nelems": "out_nelems",
    "Process Group Name": "pg_name", "Seq": "seq_upper", "seq": "seq", "bytes": "bytes",
    "In split size": "in_split", "Out split size": "out_split", "Group size": "group_size",
    "Concrete Inputs": "concrete_inputs", "Input Dims": "input_dims", "Input type": "input_type",
    "wait_on_stream": "wait_on_stream", "wait_on_cuda_event_record_corr_id": "wait_record_corr",
}
# Recorded on every op of a record_shapes trace but read for a few (c10d::alltoall_base_): kept as
# raw JSON, decoded on use (args_dict), so the typed decode does not build them for every op.
RAW_ARGS = frozenset({"concrete_inputs", "input_dims", "input_type"})


class _Args(msgspec.Struct, gc=False):
    """The args keys the reader uses; UNSET = absent (presence matters: `"Collective name" in args`)."""

    stream: Any = UNSET
    correlation: Any = UNSET
    collective_name: Any = msgspec.field(default=UNSET, name="Collective name")
    dtype: Any = UNSET
    in_nelems: Any = msgspec.field(default=UNSET, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=UNSET, name="Out msg nelems")
    pg_name: Any = msgspec.field(default=UNSET, name="Process Group Name")
    seq_upper: Any = msgspec.field(default=UNSET, name="Seq")
    seq: Any = UNSET
    bytes: Any = UNSET
    in_split: Any = msgspec.field(default=UNSET, name="In split size")
    out_split: Any = msgspec.field(default=UNSET, name="Out split size")
    group_size: Any = msgspec.field(default=UNSET, name="Group size")
    concrete_inputs: msgspec.Raw = msgspec.field(default=UNSET, name="Concrete Inputs")
    input_dims: msgspec.Raw = msgspec.field(default=UNSET, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=UNSET, name="Input type")
    # cuda_sync "Stream Wait Event" (libkineto CuptiActivity.cpp, eventSyncInfo): the stream waited on
    # and the correlation id of the cudaEventRecord whose event it waits for
    wait_on_stream: Any = UNSET
    wait_record_corr: Any = msgspec.field(default=UNSET, name="wait_on_cuda_event_record_corr_id")


# gc=False: these structs hold no containers of their own, so they can never be in a cycle;
# untracked, 200k of them cost the collector nothing (3x faster decode).
class _Event(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """A complete ("X") event: the only phase the reader uses."""

    # Typed narrowly on purpose: a value of another type sends the file down the generic path,
    # which handles it exactly as the reference reader does.
    cat: str = ""
    name: str = ""
    tid: int | str | None = None
    # int | float only (msgspec refuses true/false, text and null here): the generic path then names the
    # culprit, and the typed columns need no per-value type check (kineto_checks).
    ts: Union[int, float, msgspec.UnsetType] = UNSET
    dur: Union[int, float, msgspec.UnsetType] = UNSET
    args: _Args | None = None


# Every other phase of the Chrome trace event format decodes to a struct without fields: msgspec
# skips its keys (a third of a GPU trace's events are flow arrows, s/f) instead of building strings
# and numbers nobody reads. A phase outside this list, or an event without one, is not an error
# here: the file takes the generic path, which ignores every event that is not "X".
_OTHER_PHASES = ("B", "E", "i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "N", "O",
                 "D", "M", "V", "v", "R", "c", "(", ")")
_Other = tuple(msgspec.defstruct(f"_Phase{ord(ph)}", [], tag_field="ph", tag=ph, gc=False)
               for ph in _OTHER_PHASES)
_AnyEvent = Union[(_Event, *_Other)]


class _Doc(msgspec.Struct):
    traceEvents: list[_AnyEvent]  # type: ignore[valid-type]
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None


_DECODER = msgspec.json.Decoder(_Doc)
_CAT, _NAME, _TID = operator.attrgetter("cat"), operator.attrgetter("name"), operator.attrgetter("tid")


@dataclass
class Columns:
    """The complete ("X") events of one trace as parallel per-event lists (categories and names
    factorized), plus the top-level fields."""

    cat: Coded
    name: Coded
    tid: Coded
    """str(tid) of each event: the reader uses a thread id only through its text (lane names)."""
    ts: list[Any]
    dur: list[Any]
    args: list[Any]
    """Per event: an `_Args` struct (typed path), a dict (generic path) or None."""
    top: dict[str, Any]
    """distributedInfo, baseTimeNanoseconds, deviceProperties (None when absent)."""
    typed: bool = False
    """True when args holds only `_Args` structs and None (the typed decode)."""

    def arg(self, idx: np.ndarray, key: str, default: Any) -> list[Any]:
        """args[key] of the events at idx (`(args or {}).get(key, default)`)."""
        attr = ARG_KEYS[key]
        args = self.args
        if self.typed:
            # Typed path: every args is an _Args struct or None; one comprehension, then UNSET -> default.
            out = [getattr(args[i], attr, default) for i in idx]
            return [default if v is UNSET else v for v in out] if UNSET in out else out
        out = []
        for i in idx:
            a = self.args[i]
            if a is None:
                out.append(default)
            elif isinstance(a, dict):
                out.append(a.get(key, default))
            else:
                v = getattr(a, attr)
                out.append(default if v is UNSET else v)
        return out

    def args_dict(self, i: int) -> dict[str, Any]:
        """The event's args as a dict holding (at least) every present key of ARG_KEYS."""
        a = self.args[i]
        if a is None:
            return {}
        if isinstance(a, dict):
            return a
        return {key: msgspec.json.decode(v) if attr in RAW_ARGS else v
                for key, attr in ARG_KEYS.items() if (v := getattr(a, attr)) is not UNSET}


@contextlib.contextmanager
def no_gc():
    """Pause the cyclic garbage collector while building per-event objects.

    A read allocates millions of acyclic objects; every 700 allocations the collector would walk
    all tracked ones, which costs more than the parse itself. Restores the previous state.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when gzip; one-line errors for empty or truncated files.

    Read and inflated READ_CHUNK bytes of the file at a time, each reported (core/progress.py), so
    a progress bar moves while one large file is read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(READ_CHUNK)
            bytes_read(len(head))
            if not head:
                raise TraceError("empty file", path)
            chunks = itertools.chain([head], _chunks(fh))
            if head[:2] != GZIP_MAGIC:
                return b"".join(chunks)
            try:
                raw = gunzip_chunks(chunks)
            except (EOFError, _inflate.error, gzip.BadGzipFile) as exc:
                raise TraceError(f"truncated or corrupt gzip ({exc})", path) from None
    except OSError as exc:
        raise TraceError(f"cannot read: {exc.strerror or exc}", path) from None
    if not raw:
        raise TraceError("empty file (gzip of nothing)", path)
    return raw


def _chunks(fh: BinaryIO) -> Iterator[bytes]:
    while chunk := fh.read(READ_CHUNK):
        bytes_read(len(chunk))
        yield chunk


def gunzip(data: bytes) -> bytes:
    """`gzip.decompress(data)`: every member, CRC and length checked, zero padding between members
    skipped; but in one pass (the inflater checks the trailer; gzip.decompress inflates raw deflate
    and then runs crc32 over the output again) and with ISA-L when it is installed."""
    return gunzip_chunks([data])


def gunzip_chunks(chunks: Iterable[bytes]) -> bytes:
    """`gunzip` of the concatenation of `chunks`, inflated as they come (a member, its zero
    padding or the next member's magic may straddle chunks)."""
    out: list[bytes] = []
    inflater = _inflate.decompressobj(31)  # 31: a gzip wrapper around deflate, trailer checked
    data = b""
    chunks = iter(chunks)
    while True:
        if not data:
            data = next(chunks, b"")
            if not data:
                break
        if inflater is None:  # between members: zero padding, then the next member's magic
            data = data.lstrip(b"\x00")
            if len(data) == 1:
                data += next(chunks, b"")
            if not data:
                continue
            if data[:2] != GZIP_MAGIC:
                raise gzip.BadGzipFile(f"not a gzip member after the first one ({data[:2]!r})")
            inflater = _inflate.decompressobj(31)
        out.append(inflater.decompress(data))
        data = b""
        if inflater.eof:
            data, inflater = inflater.unused_data, None
    if inflater is not None:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")
    return out[0] if len(out) == 1 else b"".join(out)


def load_document(path: Path, raw: bytes | None = None) -> dict[str, Any]:
    """The whole trace as dicts (the generic path)."""
    raw = read_bytes(path) if raw is None else raw
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        what = "truncated JSON" if "unexpected end" in str(exc).lower() or "eof" in str(exc).lower() else "malformed JSON"
        raise TraceError(f"{what} ({exc})", path) from None
    if isinstance(doc, list) and any(isinstance(e, dict) and "ph" in e for e in doc):
        # The Chrome trace "JSON array" form: the earliest libkineto (output_json.cpp, 2020-21) wrote
        # its events as a bare array, with no top-level fields.
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError("not a Kineto trace (no traceEvents list)", path)
    return doc


def read_columns(path: Path) -> Columns:
    """Columns of a trace file: the typed decode, or the generic one when the file is unusual."""
    raw = read_bytes(path)
    cols = _typed_columns(raw)
    if cols is None:
        cols = columns_of_document(load_document(path, raw))
    return cols


def _typed_columns(raw: bytes) -> Columns | None:
    try:
        doc = _DECODER.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None  # malformed, too deep, or outside the typed schema: the generic path decides
    xs = [e for e in doc.traceEvents if e.__class__ is _Event]
    ts = [e.ts for e in xs]
    dur = [e.dur for e in xs]
    if UNSET in ts or UNSET in dur:
        return None  # the generic path raises the reference error for an event without ts or dur
    return Columns(
        cat=Coded.of(map(_CAT, xs)), name=Coded.of(map(_NAME, xs)),
        # int, str and None only (the schema's tid): no two of them compare equal yet print apart.
        tid=Coded.of(map(_TID, xs)).relabel(str), ts=ts,
        dur=dur, args=[e.args for e in xs],
        top={"distributedInfo": doc.distributedInfo, "baseTimeNanoseconds": doc.baseTimeNanoseconds,
             "deviceProperties": doc.deviceProperties}, typed=True)


def columns_of_document(doc: dict[str, Any]) -> Columns:
    """Columns of an already-parsed trace (the reference semantics of every field)."""
    xs = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    return Columns(
        # A category that is not a string matches no known one: "" says the same and stays hashable.
        cat=Coded.of([c if isinstance(c := e.get("cat", ""), str) else "" for e in xs]),
        name=Coded.of([str(e.get("name", "")) for e in xs]),
        tid=Coded.of([str(e.get("tid")) for e in xs]), ts=[e["ts"] if "ts" in e else UNSET for e in xs],
        dur=[e.get("dur", UNSET) for e in xs], args=[e.get("args") or None for e in xs],
        top={k: doc.get(k) for k in ("distributedInfo", "baseTimeNanoseconds", "deviceProperties")})
