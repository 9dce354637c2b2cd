"""Checks on the rows of an nsys export the reader uses, before any number is computed from them.

One aggregate query per device table counts, in SQLite's C, the rows the reader cannot use:
those are dropped with a warning that counts them by reason and says how much device time they
held, or refused with one line naming the table, the row and the value (README "Bad input").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TraceError
from . import nsys_schema as S
from .kineto_checks import MAX_DURATION_NS, MAX_NS, MAX_SPAN_NS, Drops


NVTX = "NVTX_EVENTS"

REQUIRED_COLUMNS = ("start", "end", "streamId", "deviceId")
"""Columns every device table must have for its rows to be placed on a stream of a GPU."""
KEY_COLUMNS = ("streamId", "deviceId", "globalPid")
"""Columns a row is dropped for when NULL: without them it belongs to no stream or process."""


def check_export(conn: Any, schema: S.Schema, device_tables: tuple[str, ...], source: Path) -> Drops:
    """All checks of one export; returns the rows the reader will leave out."""
    if schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row and row[0] is not None and (type(row[0]) is not int or not 0 <= row[0] < MAX_NS - MAX_SPAN_NS):
            raise TraceError(f"TARGET_INFO_SESSION_START_TIME.utcEpochNs is {row[0]!r}, expected an integer of "
                             "ns since the epoch", source)
    if schema.has(NVTX, "start", "end"):
        bad = conn.execute(f"SELECT rowid, start, end FROM {NVTX} WHERE start < 0 OR start > {MAX_SPAN_NS} "
                           f"OR end > {MAX_SPAN_NS} OR typeof(start) NOT IN ('integer', 'null') "
                           f"OR typeof(end) NOT IN ('integer', 'null') LIMIT 1").fetchone()
        if bad:
            raise TraceError(f"{NVTX} row {bad[0]}: start {bad[1]!r}, end {bad[2]!r}, expected ns since the "
                             "session start (0 to one day)", source)
    return check_device_tables(conn, schema, device_tables, source)


def check_device_tables(conn: Any, schema: S.Schema, tables: tuple[str, ...], source: Path) -> Drops:
    """Refuse device tables without their needed columns and rows whose times are impossible;
    count the rows the reader skips (NULL times or keys, end before start)."""
    drops = Drops()
    for table in tables:
        cols = schema.columns.get(table)
        if cols is None:
            continue
        missing = [c for c in REQUIRED_COLUMNS if c not in cols]
        if missing:
            raise TraceError(f"{table} has no column {', '.join(missing)} (needs {', '.join(REQUIRED_COLUMNS)})",
                             source)
        present_keys = [c for c in KEY_COLUMNS if c in cols]
        null_key = " OR ".join(f"{c} IS NULL" for c in present_keys)
        held = "CASE WHEN start IS NOT NULL AND end >= start THEN end - start ELSE 0 END"
        bad_time = (f"start IS NOT NULL AND end IS NOT NULL AND (start < 0 OR end > {MAX_SPAN_NS} "
                    f"OR end - start > {MAX_DURATION_NS} OR typeof(start) != 'integer' OR typeof(end) != 'integer')")
        row = conn.execute(
            f"SELECT SUM(start IS NULL OR end IS NULL), SUM(end < start), "
            f"SUM(CASE WHEN {null_key} THEN 1 ELSE 0 END), SUM(CASE WHEN {null_key} THEN {held} ELSE 0 END), "
            f"SUM({bad_time}) FROM {table}").fetchone()
        null_time, backwards, null_keys, null_keys_ns, out_of_range = (int(v or 0) for v in row)
        if out_of_range:
            rowid, start, end = conn.execute(f"SELECT rowid, start, end FROM {table} WHERE {bad_time} LIMIT 1"
                                             ).fetchone()
            field, value = ("start", start) if type(start) is not int or not 0 <= start <= MAX_SPAN_NS \
                else ("end", end)
            raise TraceError(f"{table} row {rowid}: {field} is {value!r}, expected ns since the session start "
                             f"(0 to one day, and end - start shorter than a week)", source)
        drops.add(f"{table} rows with a NULL start or end", null_time, 0)
        drops.add(f"{table} rows with end before start", backwards, 0)
        drops.add(f"{table} rows with a NULL {'/'.join(present_keys)}", null_keys, null_keys_ns)
    return drops


def check_string_ids(ids: Any, found: dict[int, str], table: str, column: str, source: Path) -> None:
    """Every name id of a table's rows resolves in StringIds: an unnamed kernel cannot be classified."""
    missing = [int(i) for i in ids if int(i) not in found]
    if missing:
        raise TraceError(f"{table}.{column} id {missing[0]} is not in StringIds"
                         + (f" ({len(missing)} ids are not)" if len(missing) > 1 else ""), source)
