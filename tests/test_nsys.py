"""Nsight Systems reader: real exports (facts and reference numbers), synthetic exports with exact answers."""
from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_builder import CREATE_STATEMENTS, Copy, Export, Kernel, Range, Sync  # noqa: E402

import overlapscope  # noqa: E402
from overlapscope.errors import OverlapscopeError  # noqa: E402
from overlapscope.ingest.nsys import read_nsys  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
NSYS_DIR = SHARED / "traces" / "nsys"
MFU = NSYS_DIR / "mfu_2gpu_before.sqlite"
MOCK = NSYS_DIR / "mock.sqlite"
needs_real = pytest.mark.skipif(not MFU.is_file() or not MOCK.is_file(), reason="../shared/traces/nsys not present")


def sql(path: Path, query: str, *params: object) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def mfu():
    return read_nsys(MFU) if MFU.is_file() else None


# --------------------------------------------------------------------------- real exports: facts
@needs_real
def test_mfu_ranks_by_device(mfu):
    assert [(t.rank, t.meta["pid"], t.meta["device"], t.rank_from) for t in mfu] == \
        [(0, 144, 0, "device"), (1, 145, 1, "device")]
    assert all(t.device == "gpu" and t.world_size == 2 and t.source == str(MFU) for t in mfu)
    assert all(t.meta["hostname"] == "modal" and t.meta["process_name"] == "python3" for t in mfu)
    assert all(t.steps.empty for t in mfu)  # no ProfilerStep ranges: one window per rank


@needs_real
def test_mfu_kernel_counts_per_device(mfu):
    kernels = {t.meta["device"]: int(t.events["kind"].isin(["compute", "comm"]).sum()) for t in mfu}
    assert kernels == {0: 1993, 1: 2017}
    assert kernels == dict(sql(MFU, "SELECT deviceId, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1"))
    assert sum(kernels.values()) == 4010


@needs_real
def test_mfu_sendrecv_kernels_are_comm_on_the_compute_stream(mfu):
    total = 0
    for t in mfu:
        ev = t.events
        comm = ev[ev["kind"] == "comm"]
        assert comm["name"].astype(str).str.startswith("ncclDevKernel_SendRecv").all()
        assert set(comm["collective"].astype(str)) == {"send_recv"}
        compute_lanes = set(ev.loc[ev["kind"] == "compute", "lane"].astype(str))
        assert set(comm["lane"].astype(str)) == compute_lanes == {f"stream:{7 if t.rank == 0 else 15}"}
        total += len(comm)
    assert total == 66


@needs_real
def test_mfu_nvtx_ranges(mfu):
    ann = [t.events[t.events["kind"] == "annotation"] for t in mfu]
    assert [len(a) for a in ann] == [9443, 9675]
    assert sum(len(a) for a in ann) == sql(MFU, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59")[0][0] == 19118
    names = np.concatenate([a["name"].astype(str).to_numpy() for a in ann])
    fsdp = sql(MFU, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'FSDP::%'")[0][0]
    assert fsdp == 68 and np.char.startswith(names.astype(str), "FSDP::").sum() == fsdp
    # emit_nvtx's ", op_id = N" suffix is cut: the op name is what Kineto calls it.
    assert "FSDP::pre_forward (blocks.9._checkpoint_wrapped_module)" in set(names)
    assert (names == "record_param_comms").sum() == \
        sql(MFU, "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'record_param_comms%'")[0][0] > 0
    assert not any(", op_id = " in n for n in set(names))
    # NCCL-domain ranges (registered strings, domain-create rows cut by windowing) found by name.
    nccl = {n: int((names == n).sum()) for n in ("ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd")}
    assert nccl == {"ncclSend": 132, "ncclRecv": 132, "ncclGroupStart": 66, "ncclGroupEnd": 66}
    for a in ann:
        sends = a[a["name"] == "ncclSend"]
        assert set(sends["collective"].astype(str)) == {"send"}
        assert set(sends["lane"].astype(str)) <= set(a["lane"].astype(str))
        user = a[a["name"].astype(str).str.startswith("FSDP::")]
        assert set(user["collective"].astype(str)) == {""}


@needs_real
def test_mfu_launches_joined_on_correlation_and_pid(mfu):
    expected = sql(MFU, """
        SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
        ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)""")[0][0]
    got = 0
    for t in mfu:
        k = t.events[t.events["kind"].isin(["compute", "comm"])]
        known = k["launch_ns"].to_numpy() >= 0
        got += int(known.sum())
        assert (k["launch_ns"].to_numpy()[known] <= k["start_ns"].to_numpy()[known]).all()
        lanes = set(k["launch_lane"].astype(str)[known])
        assert lanes <= {f"thread:{tid}" for tid in (144, 245, 145, 242)}
        assert set(k["launch_lane"].astype(str)[~known]) <= {""}
    assert got == expected == 3986


@needs_real
def test_mfu_common_clock_is_session_start_plus_relative(mfu):
    (epoch,), = sql(MFU, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    (first,), = sql(MFU, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0")
    ev = mfu[0].events
    assert ev.loc[ev["kind"].isin(["compute", "comm"]), "start_ns"].min() == first + epoch
    assert mfu[0].meta["session_start_utc_ns"] == epoch


# --------------------------------------------------------------------------- real exports: numbers
REFERENCE_US = {  # ../shared/traces/README.md, whole report, one window per rank
    "mfu_2gpu_before.sqlite": {0: (299_848.812, 253_690.832, 17_172.652, 0.0, 17_172.652, 2_954.303, 26_031.025),
                               1: (298_661.551, 256_095.624, 8_229.100, 0.0, 8_229.100, 2_951.192, 31_385.635)},
    "mock.sqlite": {0: (22_453.059, 4.129, 0.0, 0.0, 0.0, 1.632, 22_447.298)},
}
COLUMNS = ("window_ns", "compute_ns", "comm_ns", "overlapped_ns", "exposed_comm_ns", "exposed_memcpy_ns", "idle_ns")


@needs_real
@pytest.mark.parametrize("name", sorted(REFERENCE_US))
def test_reference_numbers(name):
    analysis = overlapscope.analyze(overlapscope.load_run(NSYS_DIR / name), no_steps=True)
    for rank, expected in REFERENCE_US[name].items():
        row = analysis.totals.set_index("rank").loc[rank]
        got = tuple(float(row[c]) / 1e3 for c in COLUMNS)
        assert got == pytest.approx(expected, abs=1.0)


UNION_SQL = """
WITH iv AS ({select}),
o AS (SELECT s, e, MAX(e) OVER (ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev FROM iv),
g AS (SELECT s, e, SUM(CASE WHEN prev IS NULL OR s > prev THEN 1 ELSE 0 END)
                   OVER (ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island FROM o)
SELECT COALESCE(SUM(hi - lo), 0) FROM (SELECT MIN(s) AS lo, MAX(e) AS hi FROM g GROUP BY island)
"""


def _union_ns(path: Path, pid: int, kernel_filter: str, copies: bool) -> int:
    """|union| of one process's intervals, computed in SQL alone (gaps-and-islands), independent of overlapscope."""
    arms = [f"""SELECT k.start AS s, k.end AS e FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n
                ON n.id = k.demangledName WHERE ((k.globalPid >> 24) & 16777215) = {pid} AND ({kernel_filter})"""]
    if copies:
        arms += [f"SELECT start, end FROM {t} WHERE ((globalPid >> 24) & 16777215) = {pid}"
                 for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")]
    return sql(path, UNION_SQL.format(select=" UNION ALL ".join(arms)))[0][0]


@needs_real
def test_exposed_comm_equals_direct_sql(mfu):
    # Whole-report window: W = [first, last] device event; every interval lies inside it.
    analysis = overlapscope.analyze(overlapscope.load_run(MFU), no_steps=True).totals.set_index("rank")
    for t in mfu:
        pid = t.meta["pid"]
        compute = _union_ns(MFU, pid, "n.value NOT LIKE '%nccl%'", copies=False)
        comm = _union_ns(MFU, pid, "n.value LIKE '%nccl%'", copies=False)
        both = _union_ns(MFU, pid, "1", copies=False)
        everything = _union_ns(MFU, pid, "1", copies=True)
        (lo, hi), = sql(MFU, f"""SELECT min(s), max(e) FROM (
            SELECT start AS s, end AS e, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
            SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
            SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) WHERE ((globalPid >> 24) & 16777215) = {pid}""")
        row = analysis.loc[t.rank]
        assert row["compute_ns"] == compute
        assert row["comm_ns"] == comm
        assert row["exposed_comm_ns"] == both - compute  # |M \ C| = |M u C| - |C|
        assert row["exposed_memcpy_ns"] == everything - both
        assert row["window_ns"] == hi - lo
        assert row["idle_ns"] == (hi - lo) - everything


@needs_real
def test_mock_one_gpu_two_kernels():
    (t,) = read_nsys(MOCK)
    ev = t.events
    assert (t.rank, t.rank_from, t.meta["pid"], t.meta["device"]) == (0, "device", 91186, 0)
    assert t.meta["gpu_name"] == "NVIDIA GeForce RTX 3080"
    assert ev["kind"].astype(str).value_counts().to_dict() == {"compute": 2, "memcpy": 1, "sync": 1}
    assert set(ev.loc[ev["kind"] == "memcpy", "name"].astype(str)) == {"Memcpy DtoH (Device -> Pinned)"}
    assert set(ev.loc[ev["kind"] == "sync", "name"].astype(str)) == {"Stream Wait Event"}
    assert ev.loc[ev["kind"] == "memcpy", "bytes"].tolist() == [4]


@needs_real
def test_builder_statements_match_the_real_exports():
    real = dict(sql(MFU, "SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    real["TARGET_INFO_GPU"] = sql(MOCK, "SELECT sql FROM sqlite_master WHERE name = 'TARGET_INFO_GPU'")[0][0]
    for table, statement in CREATE_STATEMENTS.items():
        assert statement == real[table], table


@needs_real
def test_real_file_is_left_untouched(tmp_path):
    before = hashlib.sha256(MFU.read_bytes()).hexdigest()
    read_nsys(MFU)
    assert hashlib.sha256(MFU.read_bytes()).hexdigest() == before
    assert not list(NSYS_DIR.glob("*-journal")) and not list(NSYS_DIR.glob("*-wal"))
