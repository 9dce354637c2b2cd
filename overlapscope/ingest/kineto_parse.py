"""Kineto JSON to per-event columns, decoding only the fields the reader uses.

The fast path decodes into msgspec structs that name the few fields the reader needs (ph, cat,
name, tid, ts, dur and a handful of args keys: kineto_columns); msgspec skips every other key
without building it, which is 4-6x faster than a full parse into dicts and holds a fraction of the
memory. A large document is decoded a few MiB of events at a time (kineto_chunks), each piece's
structs turned into columns before the next, and its text freed once decoded: the JSON text and
one Python object per event are never alive together. Anything the typed schema does not describe
(a non-string name, a list where args should be, malformed JSON...) falls back to the generic
path - orjson into dicts - whose columns and error messages are the reference: both paths give
identical columns for every file the typed one accepts.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import itertools
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import msgspec
import orjson

from ..errors import TraceError
from ..core.coded import Coded
from ..core.progress import bytes_read
from . import kineto_chunks
from .kineto_columns import (  # noqa: F401 - ARG_KEYS, RAW_ARGS, UNSET, Columns: imported from here by the reader
    ARG_KEYS, EVERY_EVENT, RAW_ARGS, TOP_FIELDS, UNSET, ArgsWanted, Columns, _DECODER, _EVENTS_DECODER, _TOP_DECODER,
    _TypedBuilder)

try:  # ISA-L inflates gzip about twice as fast as zlib (the optional [fast] extra)
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - depends on what is installed
    _inflate = zlib

GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK = 1 << 20
"""Bytes of a trace file read (and inflated) at a time: each is one progress report."""

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


def read_bytes(path: Path) -> bytearray:
    """The file's bytes, gunzipped when gzip; one-line errors for empty or truncated files.

    Read and inflated READ_CHUNK bytes of the file at a time, each reported (core/progress.py), so
    a progress bar moves while one large file is read. The text grows in one bytearray (resized
    in place), never held twice."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(READ_CHUNK)
            bytes_read(len(head))
            if not head:
                raise TraceError("empty file", path)
            chunks = itertools.chain([head], _chunks(fh))
            if head[:2] != GZIP_MAGIC:
                raw = bytearray()
                for chunk in chunks:
                    raw += chunk
                return raw
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


def gunzip(data: bytes) -> bytearray:
    """`gzip.decompress(data)`: every member, CRC and length checked, zero padding between members
    skipped; but in one pass (the inflater checks the trailer; gzip.decompress inflates raw deflate
    and then runs crc32 over the output again) and with ISA-L when it is installed."""
    return gunzip_chunks([data])


def gunzip_chunks(chunks: Iterable[bytes]) -> bytearray:
    """`gunzip` of the concatenation of `chunks`, inflated as they come (a member, its zero
    padding or the next member's magic may straddle chunks)."""
    out = bytearray()
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
        out += inflater.decompress(data)
        data = b""
        if inflater.eof:
            data, inflater = inflater.unused_data, None
    if inflater is not None:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")
    return out


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


def read_columns(path: Path, wanted: ArgsWanted = EVERY_EVENT) -> Columns:
    """Columns of a trace file: the typed decode, or the generic one when the file is unusual.
    The typed decode keeps the args of the `wanted` events only."""
    raw = read_bytes(path)
    cols = _typed_columns(raw, wanted)
    if cols is None:
        cols = columns_of_document(load_document(path, raw))
    return cols


def _typed_columns(raw: bytearray, wanted: ArgsWanted = EVERY_EVENT) -> Columns | None:
    """The typed decode: in pieces (kineto_chunks), else of the whole document; None when the
    file is outside the typed schema. Empties `raw` once its pieces are decoded."""
    cols = _piecewise_columns(raw, wanted)
    if cols is not None:
        del raw[:]  # the text is no longer needed: free it before the table is built
        return cols
    try:
        doc = _DECODER.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None  # malformed, too deep, or outside the typed schema: the generic path decides
    builder = _TypedBuilder(wanted, arrays=False)
    if not builder.add(doc.traceEvents):
        return None
    return builder.columns({k: getattr(doc, k) for k in TOP_FIELDS})


def _piecewise_columns(raw: bytearray, wanted: ArgsWanted) -> Columns | None:
    """The typed decode a few MiB of events at a time; None when a piece does not decode alone
    (a cut not between events, or content the whole-document decode must judge)."""
    cuts = kineto_chunks.cut(raw)
    if cuts is None:
        return None
    builder = _TypedBuilder(wanted, arrays=True)
    text = memoryview(raw)
    try:
        head = _TOP_DECODER.decode(cuts.head)
        for start, end in cuts.pieces:
            piece = bytearray(b"[")
            piece += text[start:end]
            piece += b"]"
            if not builder.add(_EVENTS_DECODER.decode(piece)):
                return None
        tail_text = bytearray(b'{"traceEvents": [')
        tail_text += text[cuts.tail:]
        tail = _TOP_DECODER.decode(tail_text)
    except (msgspec.MsgspecError, RecursionError):
        return None
    finally:
        text.release()
    if not builder.add(tail.traceEvents):
        return None
    # A key after the array overrides one before it, as in a decode of the whole document.
    top = {k: v if (v := getattr(tail, k)) is not UNSET else getattr(head, k) for k in TOP_FIELDS}
    return builder.columns({k: None if v is UNSET else v for k, v in top.items()})


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
