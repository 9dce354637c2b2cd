"""Query results of an nsys export as Arrow columns, without a Python tuple per row.

Python's sqlite3 module builds a tuple and a Python int or str per value; on a large export that
conversion, not SQLite, is most of the reader's time (benchmarks/README.md "nsys reader"). The
ADBC SQLite driver (`adbc-driver-sqlite`, in the optional [fast] extra; wheels, no compiler) runs
the same SQL in its own SQLite and hands back Arrow arrays, which NumPy takes without a copy.

`fetch_arrow` returns None whenever it cannot give exactly what `nsys_schema.fetch` would: the
driver is not installed, the connection is not to a file, the driver refuses the query (it infers
a column's type from its first rows and stops at a value of another type), or an integer column
holds a NULL (the sqlite3 path refuses those; it then does, with its own error). The caller then
takes the sqlite3 path, which stays the reference: tests/test_nsys_arrow.py checks both give the
same event tables on every real export.
"""
from __future__ import annotations

import importlib.util
import sqlite3
from typing import Sequence
from urllib.parse import quote

import numpy as np

ENABLED = importlib.util.find_spec("adbc_driver_sqlite") is not None
"""False to force the sqlite3 path (tests compare the two). The driver and pyarrow are imported on
first use: importing the readers loads neither (DESIGN.md "Start-up and optional extras")."""


def _database_file(conn: sqlite3.Connection) -> str | None:
    rows = conn.execute("PRAGMA database_list").fetchall()
    main = next((r[2] for r in rows if r[1] == "main"), "")
    return main or None  # "" for an in-memory or temporary database


def fetch_arrow(conn: sqlite3.Connection, sql: str, columns: Sequence[str], dtypes: dict[str, str],
                params: Sequence[object] = ()) -> dict[str, np.ndarray] | None:
    """`sql`'s columns as arrays, read through ADBC from the file `conn` has open; None when the
    sqlite3 path must decide (see the module docstring)."""
    if not ENABLED:
        return None
    path = _database_file(conn)
    if path is None:
        return None
    import adbc_driver_sqlite.dbapi as adbc
    import pyarrow as pa
    from adbc_driver_manager import Error as AdbcError

    try:
        # Read-only like the sqlite3 connection (nsys_schema.connect_readonly): the export is never written.
        with adbc.connect(uri=f"file:{quote(path)}?mode=ro") as adbc_conn, adbc_conn.cursor() as cur:
            cur.execute(sql, list(params) or None)
            table = cur.fetch_arrow_table()
    except (AdbcError, OSError):
        return None
    if table.num_columns != len(columns):
        return None
    out: dict[str, np.ndarray] = {}
    for name, column in zip(columns, table.columns):
        if dtypes.get(name) == "object":
            out[name] = np.array(column.to_pylist(), dtype=object) if len(column) else np.array([], dtype=object)
            continue
        if column.null_count or not (column.type.equals(pa.int64()) or len(column) == 0):
            return None
        out[name] = column.to_numpy().astype(np.int64, copy=False) if len(column) else np.array([], dtype=np.int64)
    return out

