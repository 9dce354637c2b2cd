"""Checks on every field the Kineto reader uses, before any number is computed from it.

Each check looks at a whole column at once (the set of Python types present, then NumPy range
tests); the per-event search for the offending value runs only when a check fails. A failure is a
`TraceError` naming the file, the event (its position among the trace's complete events, its cat
and name), the field and the value. What is refused and what is dropped is listed in the README
("Bad input") and DESIGN.md ("Bad input").
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import TraceError
from ..core.coded import Coded
from .kineto_parse import UNSET, Columns

log = logging.getLogger(__name__)

MAX_NS = 1 << 62
"""Every start and end in ns stays below this (the year 2116 since the epoch), so sums of a few
of them never overflow int64."""
MAX_DURATION_NS = 7 * 24 * 3600 * 10**9
"""No event of a profiler trace lasts a week: a longer `dur` is a corrupt value."""
MAX_SPAN_NS = 24 * 3600 * 10**9
"""No profiler trace spans a day: an event that far from the trace's median start is corrupt."""
MAX_ID = 1 << 62
"""Correlation ids, streams and sequence numbers: non-negative integers below this."""
MAX_NELEMS = 1 << 50
"""Message sizes in elements: more is no tensor a GPU holds (and would overflow bytes)."""
MAX_WORLD_SIZE = 1 << 18
"""Ranks in one job: 262,144 is more than any job so far; a larger value is corrupt, and would
make overlapscope allocate per-rank structures of that size."""

_NUMBER_TYPES = frozenset({int, float})


@dataclass
class Drops:
    """Events the reader left out, by reason, with the device time they held."""

    count: dict[str, int] = field(default_factory=dict)
    device_ns: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str, count: int, device_ns: int) -> None:
        if count:
            self.count[reason] = self.count.get(reason, 0) + count
            self.device_ns[reason] = self.device_ns.get(reason, 0) + device_ns

    def summary(self) -> str:
        """'dropped 3 events: 2 exact duplicates (holding 0.006 ms of device time); 1 ...'."""
        parts = [f"{n} {reason}" + (f" (holding {self.device_ns[reason] / 1e6:.3f} ms of device time)"
                                    if self.device_ns[reason] else "") for reason, n in self.count.items()]
        return f"dropped {sum(self.count.values())} events: {'; '.join(parts)}"

    def warn(self, path: Path) -> None:
        if self.count:
            log.warning("%s: %s", path, self.summary())

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {reason: {"events": n, "device_ns": self.device_ns[reason]} for reason, n in self.count.items()}


class EventChecks:
    """Column checks for one trace's complete ("X") events; errors name the event and the field."""

    def __init__(self, path: Path, cols: Columns) -> None:
        self.path = path
        self.cat = cols.cat
        self.name = cols.name
        self.numbers_typed = cols.typed
        """The typed decode admits only int and float for ts and dur: only their ranges need checking."""

    def fail(self, index: int, field_name: str, value: Any, expected: str) -> None:
        cat = self.cat.uniques[self.cat.codes[index]] if index < self.cat.codes.size else "?"
        name = self.name.uniques[self.name.codes[index]] if index < self.name.codes.size else "?"
        if isinstance(value, np.generic):  # from a column decoded in pieces: the number it was
            value = value.item()
        shown = "missing" if value is UNSET else _short(value)
        raise TraceError(f"X event #{index} (cat {cat!r}, name {name!r}): {field_name} is {shown}, "
                         f"expected {expected}", self.path)

    def times_ns(self, ts: Sequence[Any], dur: Sequence[Any], base_ns: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact int64 start (ts + base) and duration in ns; refuses any value that is not a finite
        number in range. A negative duration is returned as is (the caller drops the event)."""
        start = self._us_column(ts, "ts", np.arange(len(ts))) + base_ns
        bad = (start < 0) | (start >= MAX_NS - MAX_DURATION_NS)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self.fail(i, "ts", ts[i], f"a time in µs after the epoch (with baseTimeNanoseconds {base_ns})")
        duration = self._us_column(dur, "dur", np.arange(len(dur)))
        long = duration > MAX_DURATION_NS
        if long.any():
            i = int(np.flatnonzero(long)[0])
            self.fail(i, "dur", dur[i], "a duration in µs shorter than a week")
        if start.size:
            middle = int(np.partition(start, start.size // 2)[start.size // 2])
            far = np.abs(start - middle) > MAX_SPAN_NS
            if far.any():
                i = int(np.flatnonzero(far)[0])
                self.fail(i, "ts", ts[i], f"a time within a day of the trace's other events "
                                          f"(it is {abs(int(start[i]) - middle) / 3.6e12:.1f} h away)")
        return start, duration

    def _us_column(self, values: Sequence[Any], field_name: str, rows: np.ndarray) -> np.ndarray:
        """Kineto µs (int, or float with ns in three decimals) to exact int64 ns, refusing
        bool, str, null, missing, non-finite and out-of-range values."""
        if not self.numbers_typed:
            self.types(values, _NUMBER_TYPES, field_name, rows, "a number of µs")
        limit_us = MAX_NS // 1000
        try:
            arr = np.asarray(values)
        except OverflowError:
            arr = np.asarray(values, dtype=object)
        if arr.dtype == object:  # ints beyond int64: find the first out of range
            i = next(i for i, v in enumerate(values) if abs(v) >= limit_us)
            self.fail(int(rows[i]), field_name, values[i], f"a number of µs below {limit_us}")
        if arr.size == 0:
            return np.empty(0, np.int64)
        bad = (arr >= limit_us) | (arr <= -limit_us)  # not abs(): abs(int64 min) is negative
        if arr.dtype.kind == "f":
            bad |= ~np.isfinite(arr)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self.fail(int(rows[i]), field_name, values[i], f"a finite number of µs below {limit_us}")
        return us_to_ns(arr)

    def types(self, values: Sequence[Any], allowed: frozenset[type], field_name: str, rows: Sequence[int],
              expected: str) -> None:
        """Every value's exact type is one of `allowed` (bool is not an int here)."""
        present = set(map(type, values))
        if present <= allowed:
            return
        i = next(i for i, v in enumerate(values) if type(v) not in allowed)
        self.fail(int(rows[i]), field_name, values[i], expected)

    def ids(self, values: Sequence[Any], rows: Sequence[int], field_name: str, *, missing: int = -1,
            limit: int = MAX_ID) -> np.ndarray:
        """An integer id column (`missing` where the arg is absent): non-negative ints below limit."""
        self.types(values, frozenset({int}), field_name, rows, "an integer")
        try:
            arr = np.asarray(values, dtype=np.int64)
        except OverflowError:
            arr = None
        if arr is None or ((arr < 0) & (arr != missing)).any() or (arr >= limit).any():
            i = next(i for i, v in enumerate(values) if not (v == missing or 0 <= v < limit))
            self.fail(int(rows[i]), field_name, values[i], f"an integer from 0 to {limit - 1}")
        return arr

    def comm_args(self, args: Sequence[dict[str, Any]], rows: Sequence[int]) -> None:
        """The args a comm kernel's sizes, group and sequence number come from (its own or its
        record_param_comms op's), one column per key."""
        for key, types in _COMM_ARG_TEXT.items():
            self.optional([a.get(key) for a in args], rows, f"args[{key!r}]", types, "text")
        for key, limit in _COMM_ARG_IDS.items():
            self.ids([a.get(key, -1) for a in args], rows, f"args[{key!r}]", limit=limit)

    def optional(self, values: Sequence[Any], rows: Sequence[int], field_name: str, allowed: frozenset[type],
                 expected: str) -> None:
        """A field that may be absent (None) or of one of the allowed types."""
        self.types(values, allowed | {type(None)}, field_name, rows, expected)


def later_copies(keys: Sequence[np.ndarray], *, every: bool = False) -> np.ndarray:
    """True for each row equal in every key to an earlier row (the copies to drop, not the first);
    with `every`, for every row of a group of equal rows. keys[0] is the most distinct key."""
    n = keys[0].size
    out = np.zeros(n, dtype=bool)
    if n < 2:
        return out
    # Sort by the first key and a wrapping hash of the others (two sort keys, not one per column),
    # then compare every key of neighbours: equal rows are neighbours, and only equal rows match.
    mix = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in keys[1:]:
            mix = mix * np.uint64(0x9E3779B97F4A7C15) + k.astype(np.uint64)
    order = np.lexsort((mix, keys[0]))
    same = np.ones(n - 1, dtype=bool)
    for k in keys:
        ks = k[order]
        same &= ks[1:] == ks[:-1]
    if same.any():
        # Within a run of equal rows keep the first in file order: lexsort is stable, so it leads.
        out[order[1:][same]] = True
        if every:
            out[order[:-1][same]] = True
    return out


def us_to_ns(arr: np.ndarray) -> np.ndarray:
    """Checked µs (int or float array) to exact int64 ns.

    Multiplying epoch µs by 1000 in float64 loses up to 256 ns; split off the integer µs first.
    """
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64) * 1000
    arr = arr.astype(np.float64)
    whole = np.floor(arr)
    return whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000.0).astype(np.int64)


def checked_top(top: dict[str, Any], path: Path) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """(distributedInfo, baseTimeNanoseconds, deviceProperties), each checked for type and range."""
    info = top.get("distributedInfo")
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise TraceError(f"distributedInfo is {_short(info)}, expected an object", path)
    for key, low, high in (("rank", 0, MAX_WORLD_SIZE - 1), ("world_size", 1, MAX_WORLD_SIZE)):
        value = info.get(key)
        if value is not None and (type(value) is not int or not low <= value <= high):
            raise TraceError(f"distributedInfo.{key} is {_short(value)}, expected an integer from {low} to {high}",
                             path)
    rank, size = info.get("rank"), info.get("world_size")
    if rank is not None and size is not None and rank >= size:
        # Inconsistent, but each number alone is usable: the run's checks see the ranks it has.
        log.warning("%s: distributedInfo.rank %d is not below its world_size %d", path, rank, size)
    base = top.get("baseTimeNanoseconds")
    if base is None:
        base = 0
    if type(base) is not int or not 0 <= base < MAX_NS:
        raise TraceError(f"baseTimeNanoseconds is {_short(base)}, expected an integer of ns since the epoch", path)
    props = top.get("deviceProperties")
    if props is None:
        props = []
    if not isinstance(props, list) or not all(isinstance(p, dict) for p in props):
        raise TraceError(f"deviceProperties is {_short(props)}, expected a list of objects", path)
    return info, base, props


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# args keys the reader uses, on which events, and what they must be.
_TEXT = frozenset({str})
_COMM_ARG_TEXT = {"Collective name": _TEXT, "dtype": _TEXT, "Process Group Name": frozenset({str, int})}
_COMM_ARG_IDS = {"In msg nelems": MAX_NELEMS, "Out msg nelems": MAX_NELEMS, "Seq": MAX_ID, "seq": MAX_ID}


def checked_events(cols: Columns, path: Path, base_ns: int, device_cats: Any, launch_cats: Any
                   ) -> tuple[Columns, np.ndarray, np.ndarray, Drops, EventChecks]:
    """(columns, start_ns, dur_ns, drops, checks) of the trace's usable events: times and args
    checked, the checks for the fields the reader reads later (ids, sizes) ready.

    Refused (TraceError): a ts or dur that is not a finite number in range, args that are not an
    object, an id or size arg that is not a non-negative integer in range, a text arg that is not
    text. Dropped with a warning: events with a negative dur, and exact copies of a device event,
    a launch or a gloo transfer (same cat, name, thread or stream, ts, dur and correlation id).
    """
    checks = EventChecks(path, cols)
    if not cols.typed:  # the typed decode only yields args objects
        checks.optional(cols.args, np.arange(len(cols.args)), "args", frozenset({dict}), "an object")
    start, dur = checks.times_ns(cols.ts, cols.dur, base_ns)

    drops = Drops()
    negative = dur < 0
    drops.add("with a negative dur", int(negative.sum()), 0)
    on_device = cols.cat.isin(device_cats)
    gloo = cols.name.map(lambda n: n.startswith("gloo:"), bool)
    rows = np.flatnonzero((on_device | cols.cat.isin(launch_cats) | gloo) & ~negative)
    keys = [a[rows] for a in (start, cols.cat.codes, cols.name.codes, cols.tid.codes, dur)]
    # Equal in everything but the correlation id is rare: only those rows need their args read.
    maybe = np.flatnonzero(later_copies(keys, every=True))
    copy = np.zeros(start.size, dtype=bool)
    if maybe.size:
        rows = rows[maybe]
        correlation = checks.ids(cols.arg(rows, "correlation", -1), rows, "args.correlation")
        copy[rows] = later_copies([k[maybe] for k in keys] + [correlation])
    drops.add("exact duplicates", int(copy.sum()), int(dur[copy & on_device].sum()))
    keep = ~(negative | copy)
    if keep.all():
        return cols, start, dur, drops, checks
    cols = kept_rows(cols, keep)
    return cols, start[keep], dur[keep], drops, EventChecks(path, cols)


def kept_rows(cols: Columns, keep: np.ndarray) -> Columns:
    """The columns of the kept events only."""
    idx = np.flatnonzero(keep).tolist()
    def pick(values: Any) -> Any:
        return values[keep] if isinstance(values, np.ndarray) else [values[i] for i in idx]
    return Columns(cat=Coded(cols.cat.codes[keep], cols.cat.uniques), name=Coded(cols.name.codes[keep], cols.name.uniques),
                   tid=Coded(cols.tid.codes[keep], cols.tid.uniques), ts=pick(cols.ts), dur=pick(cols.dur),
                   args=cols.args.take(keep) if cols.typed else pick(cols.args), top=cols.top, typed=cols.typed)
