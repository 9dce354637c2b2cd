"""Low-level access to Nsight Systems exports: files, read-only connection, schema, enums, strings, metadata.

Everything here is format plumbing shared by the nsys reader: it opens a user's file without ever
being able to write to it, turns every SQLite failure into a one-line `TraceError`, and reads
columns into NumPy without a Python loop per row.
"""
from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import quote

import numpy as np
import pandas as pd

from overlapscope.errors import TraceError
from overlapscope.ingest.nsys_arrow import fetch_arrow

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_S = 1.0
"""How long to wait for another process's lock (nsys still writing the export) before giving up."""
FETCH_CHUNK_ROWS = 100_000
_MAX_SQL_VARS = 30_000  # below SQLite's default limit of 32766 host parameters

# Fallbacks when a (very old or stripped) export lacks its ENUM tables; values of schema 3.x.
_ENUM_FALLBACK: dict[str, dict[str, int]] = {
    "ENUM_NSYS_EVENT_TYPE": {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxDomainCreate": 75},
}


@contextlib.contextmanager
def sql_errors(path: Path) -> Iterator[None]:
    """Turn any SQLite failure inside the block into a one-line TraceError naming the file."""
    try:
        yield
    except sqlite3.Error as exc:
        raise TraceError(_describe(exc), path) from exc


def _describe(exc: sqlite3.Error) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__  # schema errors quote SQL
    low = text.lower()
    if "locked" in low or "busy" in low:
        return "database is locked by another process (is nsys still writing it?); retry when it is done"
    if "not a database" in low or "malformed" in low or "disk image" in low or "short read" in low:
        return f"damaged or truncated SQLite file ({text}); export the report again"
    if "unable to open" in low or "readonly" in low or "permission" in low:
        return f"cannot open for reading ({text})"
    return f"SQLite error: {text}"


def connect_readonly(path: Path) -> sqlite3.Connection:
    """Open `path` read-only after checking it is a whole SQLite file."""
    if not path.exists():
        raise TraceError("no such file", path)
    if not path.is_file():
        raise TraceError("not a regular file", path)
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise TraceError(f"cannot read ({exc.strerror})", path) from exc
    if not header:
        raise TraceError("empty file; export the report with `nsys export --type sqlite`", path)
    if len(header) < 100 or header[:16] != SQLITE_MAGIC:
        raise TraceError("not an SQLite file; export the report with `nsys export --type sqlite`", path)
    _check_not_truncated(path, header)
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    with sql_errors(path):
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # surfaces locks and damage now
    return conn


def _check_not_truncated(path: Path, header: bytes) -> None:
    # The in-header page count is valid when the change counter equals version-valid-for
    # (SQLite file format, offsets 24 and 92). A file shorter than that was cut off.
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    if page_count and header[24:28] == header[92:96]:
        expected = page_count * page_size
        actual = path.stat().st_size
        if actual < expected:
            raise TraceError(f"truncated SQLite file ({actual} of {expected} bytes); copy or export it again", path)


@dataclass(frozen=True)
class Schema:
    """Tables of one export and their columns: nsys creates tables lazily and columns vary by version."""

    columns: dict[str, frozenset[str]]

    def has(self, table: str, *columns: str) -> bool:
        cols = self.columns.get(table)
        return cols is not None and all(c in cols for c in columns)

    def pick(self, table: str, *candidates: str) -> str | None:
        """First of `candidates` that the table has (column names moved between nsys versions)."""
        cols = self.columns.get(table, frozenset())
        return next((c for c in candidates if c in cols), None)


def read_schema(conn: sqlite3.Connection) -> Schema:
    names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    columns = {n: frozenset(r[1] for r in conn.execute(f'PRAGMA table_info("{n}")')) for n in names}
    return Schema(columns)


def enum_ids(conn: sqlite3.Connection, schema: Schema, table: str) -> dict[str, int]:
    """Symbol name -> id of one ENUM_* table, falling back to known schema-3.x values when absent."""
    if schema.has(table, "id", "name"):
        return {str(name): int(i) for i, name in conn.execute(f"SELECT id, name FROM {table}") if name}
    fallback = _ENUM_FALLBACK.get(table, {})
    if fallback:
        log.warning("export has no %s table; assuming nsys schema 3.x values", table)
    return dict(fallback)


def enum_labels(conn: sqlite3.Connection, schema: Schema, table: str) -> dict[int, tuple[str, str]]:
    """id -> (name, label) of one ENUM_* table (empty when the table is absent)."""
    if not schema.has(table, "id", "name", "label"):
        return {}
    rows = conn.execute(f"SELECT id, name, label FROM {table}")
    return {int(i): (str(n or ""), str(lab or "")) for i, n, lab in rows}


def fetch(conn: sqlite3.Connection, sql: str, columns: Sequence[str], dtypes: dict[str, str],
          params: Sequence[object] = ()) -> dict[str, np.ndarray]:
    """Run `sql` and return its columns as arrays; NULLs in integer columns must be COALESCEd in SQL.

    Through ADBC when it is installed (nsys_arrow: Arrow columns, no Python object per value);
    else rows arrive in chunks so that only one chunk is ever held as Python tuples; zip(*rows)
    transposes a chunk in C and each column converts in one NumPy call.
    """
    arrow = fetch_arrow(conn, sql, columns, dtypes, params)
    if arrow is not None:
        return arrow
    kinds = [object if dtypes.get(col) == "object" else np.int64 for col in columns]
    parts: list[list[np.ndarray]] = [[] for _ in columns]
    cursor = conn.execute(sql, params)
    while rows := cursor.fetchmany(FETCH_CHUNK_ROWS):
        for i, values in enumerate(zip(*rows)):
            parts[i].append(np.array(values, dtype=kinds[i]))
    return {col: np.concatenate(p) if p else np.array([], dtype=k) for col, p, k in zip(columns, parts, kinds)}


def codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, uniques) by hashing, not sorting: uniques in order of first appearance."""
    c, u = pd.factorize(np.asarray(values), sort=False)
    return c, np.asarray(u)


def strings(conn: sqlite3.Connection, schema: Schema, ids: np.ndarray) -> dict[int, str]:
    """StringIds values of the given ids (ids absent from the table map to nothing)."""
    wanted = np.unique(np.asarray(ids, dtype=np.int64))
    found: dict[int, str] = {}
    if wanted.size == 0 or not schema.has("StringIds", "id", "value"):
        return found
    for lo in range(0, wanted.size, _MAX_SQL_VARS):
        chunk = wanted[lo:lo + _MAX_SQL_VARS].tolist()
        marks = ",".join("?" * len(chunk))
        found.update((int(i), str(v)) for i, v in conn.execute(
            f"SELECT id, value FROM StringIds WHERE id IN ({marks})", chunk))
    return found


def report_files(path: Path) -> list[Path]:
    """The exports a path names: itself, or a directory's `.sqlite` files (and `.nsys-rep` without one)."""
    if not path.exists():
        raise TraceError("no such file or directory", path)
    if path.is_file():
        return [path]
    sqlite = sorted(p for p in path.iterdir() if p.suffix == ".sqlite" and p.is_file())
    stems = {p.stem for p in sqlite}
    reps = sorted(p for p in path.iterdir() if p.suffix == ".nsys-rep" and p.stem not in stems)
    if not sqlite and not reps:
        raise TraceError("no .sqlite or .nsys-rep files in this directory", path)
    return sorted(sqlite + reps)


def export_sqlite(report: Path, out_dir: Path) -> Path:
    """Run `nsys export --type sqlite` on a `.nsys-rep` into `out_dir`; the report is only read."""
    how = f"export it with `nsys export --type sqlite -o {report.with_suffix('.sqlite').name} {report}`"
    nsys = shutil.which("nsys")
    if nsys is None:
        raise TraceError(f"is an Nsight Systems report and `nsys` is not on PATH; {how} and analyze the .sqlite",
                         report)
    out = out_dir / (report.stem + ".sqlite")
    cmd = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TraceError(f"`nsys export` failed ({exc}); {how}", report) from exc
    if done.returncode != 0 or not out.exists():
        lines = (done.stderr or done.stdout or "").strip().splitlines()
        raise TraceError(f"`nsys export` failed ({lines[-1] if lines else f'exit {done.returncode}'})", report)
    return out


def export_info(conn: Any, schema: Schema) -> dict[str, Any]:
    info: dict[str, Any] = {"offset_ns": 0, "clock": "session", "hostname": ""}
    if schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
        if row and row[0] is not None:
            info.update(offset_ns=int(row[0]), clock="session+utcEpochNs")
    if info["clock"] == "session":
        log.warning("export has no TARGET_INFO_SESSION_START_TIME: times stay session-relative")
    if schema.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        row = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1").fetchone()
        info["hostname"] = str(row[0]) if row and row[0] else ""
    if schema.has("META_DATA_EXPORT", "name", "value"):
        meta = dict(conn.execute("SELECT name, value FROM META_DATA_EXPORT WHERE name IN "
                                 "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION')").fetchall())
        info["nsys_version"] = meta.get("EXPORT_PRODUCT_VERSION", "")
        info["schema_version"] = meta.get("EXPORT_SCHEMA_VERSION", "")
    if schema.has("TARGET_INFO_GPU", "id", "name"):
        info["gpus"] = {int(i): str(n) for i, n in conn.execute("SELECT id, name FROM TARGET_INFO_GPU")}
    return info


def thread_names(conn: Any, schema: Schema, keys: np.ndarray) -> dict[int, str]:
    if not schema.has("ThreadNames", "nameId", "globalTid"):
        return {}
    wanted = ",".join(str(int(k)) for k in keys)
    rows = conn.execute(f"SELECT globalTid, nameId FROM ThreadNames WHERE globalTid >> 24 IN ({wanted})").fetchall()
    names = strings(conn, schema, np.array([r[1] for r in rows], dtype=np.int64))
    return {int(g): names.get(int(n), "") for g, n in rows}


def process_names(conn: Any, schema: Schema) -> dict[int, str]:
    if not schema.has("PROCESSES", "globalPid", "name"):
        return {}
    return {int(g) >> 24: str(n or "") for g, n in conn.execute("SELECT globalPid, name FROM PROCESSES")
            if g is not None}
