"""Kineto events as columns: the typed decode's schema, the Columns both decodes produce, and the
builder of the typed ones.

The typed decode (kineto_parse) decodes into msgspec structs that name the few fields the reader
needs; `_TypedBuilder` turns each decoded piece's structs into columns before the next piece is
decoded (kineto_chunks): factorized cat / name / tid, ts and dur as arrays, and args only for
the events the reader reads (`ArgsWanted`), as an `ArgsTable`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Union

import msgspec
import numpy as np

from ..core.coded import Coded

UNSET = msgspec.UNSET

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


class _Top(msgspec.Struct):
    """The top-level fields of one piece of a cut document (UNSET: not in this piece)."""

    traceEvents: list[_AnyEvent] = []  # type: ignore[valid-type]
    distributedInfo: Any = UNSET
    baseTimeNanoseconds: Any = UNSET
    deviceProperties: Any = UNSET


_DECODER = msgspec.json.Decoder(_Doc)
_TOP_DECODER = msgspec.json.Decoder(_Top)
_EVENTS_DECODER = msgspec.json.Decoder(list[_AnyEvent])  # type: ignore[valid-type]
TOP_FIELDS = ("distributedInfo", "baseTimeNanoseconds", "deviceProperties")
_CAT, _NAME, _TID = operator.attrgetter("cat"), operator.attrgetter("name"), operator.attrgetter("tid")


@dataclass(frozen=True)
class ArgsWanted:
    """Which events' args the reader reads: the typed decode keeps args for these events only (the
    args of the other events, most CPU ops of a trace, are never looked at)."""

    cats: frozenset[str]
    """Categories whose events' args are read (device work and the calls that launch it)."""
    name: Callable[[str], bool]
    """Names whose events' args are read, whatever their category (comm ops)."""


EVERY_EVENT = ArgsWanted(cats=frozenset(), name=lambda name: True)

COMMON_ARGS = ("stream", "correlation", "bytes")
"""Args read on most wanted events: one column each; the others are kept per event, when present."""
_ABSENT = -(1 << 63)
"""An absent arg in an integer column of COMMON_ARGS (a piece holding this value keeps objects)."""
_RARE = operator.attrgetter(*(a for a in ARG_KEYS.values() if a not in COMMON_ARGS))
_NO_RARE = _RARE(_Args())
_COMMON = tuple(operator.attrgetter(a) for a in COMMON_ARGS)


class ArgsTable:
    """The typed decode's args of the wanted events: COMMON_ARGS as columns, every other present
    key as a dict for the events that have one."""

    def __init__(self, rows: np.ndarray, common: dict[str, np.ndarray], rare: dict[int, dict[str, Any]]) -> None:
        self.rows = rows
        """Event positions of the wanted events, ascending."""
        self.common = common
        """COMMON_ARGS column per key, one value per wanted event: int64 (_ABSENT: absent) or
        object (UNSET: absent)."""
        self.rare = rare
        """Event position -> args_dict of the wanted events with a key beyond COMMON_ARGS."""

    def _positions(self, idx: Any) -> np.ndarray:
        idx = np.asarray(idx, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.rows, idx), max(self.rows.size - 1, 0))
        assert self.rows.size or not idx.size, "args of events the reader did not declare (ArgsWanted)"
        assert not idx.size or (self.rows[pos] == idx).all(), \
            "args of events the reader did not declare (ArgsWanted)"
        return pos

    def get(self, idx: Any, key: str, default: Any) -> list[Any]:
        pos = self._positions(idx)
        attr = ARG_KEYS[key]
        if attr not in self.common:
            rare = self.rare
            return [rare[i].get(key, default) if i in rare else default for i in np.asarray(idx).tolist()]
        column = self.common[attr][pos]
        absent = column == (_ABSENT if column.dtype != object else UNSET)
        out = column.tolist()
        if absent.any():
            for j in np.flatnonzero(absent).tolist():
                out[j] = default
        return out

    def as_dict(self, i: int) -> dict[str, Any]:
        if i in self.rare:
            return self.rare[i]
        pos = int(self._positions([i])[0])
        out = {}
        for key in COMMON_ARGS:
            column = self.common[key]
            if column.dtype == object:
                if column[pos] is not UNSET:
                    out[key] = column[pos]
            elif column[pos] != _ABSENT:
                out[key] = int(column[pos])
        return out

    def take(self, keep: np.ndarray) -> "ArgsTable":
        """The args of the kept events, renumbered."""
        renumber = np.cumsum(keep) - 1
        sel = keep[self.rows]
        return ArgsTable(renumber[self.rows[sel]], {k: v[sel] for k, v in self.common.items()},
                         {int(renumber[i]): a for i, a in self.rare.items() if keep[i]})


@dataclass
class Columns:
    """The complete ("X") events of one trace as parallel per-event columns (categories and names
    factorized), plus the top-level fields."""

    cat: Coded
    name: Coded
    tid: Coded
    """str(tid) of each event: the reader uses a thread id only through its text (lane names)."""
    ts: list[Any] | np.ndarray
    dur: list[Any] | np.ndarray
    """A list of the decoded numbers, or (decoded in pieces) their int64 or float64 array when
    every value is of that one type."""
    args: list[Any] | ArgsTable
    """The generic path: per event a dict or None. The typed path: an ArgsTable."""
    top: dict[str, Any]
    """distributedInfo, baseTimeNanoseconds, deviceProperties (None when absent)."""
    typed: bool = False
    """True when args is an ArgsTable (the typed decode)."""

    def arg(self, idx: Any, key: str, default: Any) -> list[Any]:
        """args[key] of the events at idx (`(args or {}).get(key, default)`)."""
        if self.typed:
            return self.args.get(idx, key, default)
        out = []
        for i in idx:
            a = self.args[i]
            out.append(default if a is None else a.get(key, default))
        return out

    def args_dict(self, i: int) -> dict[str, Any]:
        """The event's args as a dict holding (at least) every present key of ARG_KEYS."""
        if self.typed:
            return self.args.as_dict(i)
        return self.args[i] or {}


def _args_dict(a: _Args) -> dict[str, Any]:
    return {key: msgspec.json.decode(v) if attr in RAW_ARGS else v
            for key, attr in ARG_KEYS.items() if (v := getattr(a, attr)) is not UNSET}


def _pure(values: list[Any]) -> np.ndarray | None:
    """values as an int64 array when all are int, float64 when all are float, else None."""
    kinds = set(map(type, values))
    if kinds == {float}:
        return np.array(values, dtype=np.float64)
    if kinds == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            return None
    return None


def _common_column(values: list[Any]) -> np.ndarray:
    """One COMMON_ARGS column of a piece: int64 with _ABSENT when every value is an int or absent."""
    column = np.array(values, dtype=object)
    absent = column == UNSET
    if set(map(type, values)) <= {int, msgspec.UnsetType} and _ABSENT not in values:
        column[absent] = _ABSENT
        try:
            return column.astype(np.int64)
        except OverflowError:
            column[absent] = UNSET
    return column


class _TypedBuilder:
    """Columns of the typed decode, built from the decoded events one piece at a time."""

    def __init__(self, wanted: ArgsWanted, arrays: bool) -> None:
        self.wanted = wanted
        self.arrays = arrays
        """Keep ts and dur as arrays (refusing mixed types: the caller decodes whole), else lists."""
        self.index: dict[str, dict[Any, int]] = {"cat": {}, "name": {}, "tid": {}}
        self.codes: dict[str, list[np.ndarray]] = {"cat": [], "name": [], "tid": []}
        self.times: dict[str, list[Any]] = {"ts": [], "dur": []}
        self.by_code = {"cat": np.zeros(0, bool), "name": np.zeros(0, bool)}
        self.rows: list[np.ndarray] = []
        self.common: dict[str, list[np.ndarray]] = {k: [] for k in COMMON_ARGS}
        self.rare: dict[int, dict[str, Any]] = {}
        self.size = 0

    def add(self, events: list[Any]) -> bool:
        """Add a piece's events; False when they need the whole document (or the generic path)."""
        xs = [e for e in events if e.__class__ is _Event]
        if not xs:
            return True
        ts, dur = [e.ts for e in xs], [e.dur for e in xs]
        if UNSET in ts or UNSET in dur:
            return False  # the generic path raises the reference error for an event without ts or dur
        for field_name, values in (("ts", ts), ("dur", dur)):
            chunks = self.times[field_name]
            if not self.arrays:
                chunks.extend(values)
                continue
            arr = _pure(values)
            if arr is None or (chunks and arr.dtype != chunks[0].dtype):
                return False
            chunks.append(arr)
        codes = {}
        for field_name, get in (("cat", _CAT), ("name", _NAME), ("tid", _TID)):
            index = self.index[field_name]
            codes[field_name] = np.array([index.setdefault(v, len(index)) for v in map(get, xs)], dtype=np.int64)
            self.codes[field_name].append(codes[field_name])
        by_name = self._decided("name", lambda n: self.wanted.name(n))
        wanted = self._decided("cat", lambda c: c in self.wanted.cats)[codes["cat"]] | by_name[codes["name"]]
        picked = np.flatnonzero(wanted)
        args = [xs[i].args or _NO_ARGS for i in picked.tolist()]
        self.rows.append(picked + self.size)
        for key, get in zip(COMMON_ARGS, _COMMON):
            self.common[key].append(_common_column(list(map(get, args))))
        for i, a in zip(picked.tolist(), args):
            if _RARE(a) != _NO_RARE or (a is not _NO_ARGS and by_name[codes["name"][i]]):
                self.rare[self.size + i] = _args_dict(a)
        self.size += len(xs)
        return True

    def _decided(self, field_name: str, func: Callable[[str], bool]) -> np.ndarray:
        """func of every distinct value of the field seen so far (decided once each)."""
        done = self.by_code[field_name]
        uniques = self.index[field_name]
        if done.size < len(uniques):
            new = list(uniques)[done.size:]
            done = self.by_code[field_name] = np.append(done, [bool(func(u)) for u in new])
        return done

    def columns(self, top: dict[str, Any]) -> Columns:
        def coded(field_name: str) -> Coded:
            index = self.index[field_name]
            uniques = np.empty(len(index), dtype=object)
            uniques[:] = list(index)
            parts = self.codes[field_name]
            return Coded(np.concatenate(parts) if parts else np.zeros(0, np.int64), uniques)

        def times(field_name: str) -> Any:
            chunks = self.times[field_name]
            return np.concatenate(chunks) if self.arrays and chunks else list(chunks)

        def common(key: str) -> np.ndarray:
            parts = self.common[key]
            if not parts:
                return np.zeros(0, np.int64)
            if any(p.dtype == object for p in parts):  # back to UNSET for absent in every part
                parts = [p if p.dtype == object else _objects(p) for p in parts]
            return np.concatenate(parts)

        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, np.int64)
        return Columns(cat=coded("cat"), name=coded("name"), tid=coded("tid").relabel(str), ts=times("ts"),
                       dur=times("dur"), args=ArgsTable(rows, {k: common(k) for k in COMMON_ARGS}, self.rare),
                       top=top, typed=True)


_NO_ARGS = _Args()


def _objects(column: np.ndarray) -> np.ndarray:
    out = column.astype(object)
    out[column == _ABSENT] = UNSET
    return out
