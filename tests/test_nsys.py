"""Nsight Systems reader: real exports (facts and reference numbers), synthetic exports with exact answers."""
from __future__ import annotations

import hashlib
import os
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace
from nsys_builder import (
    CREATE_STATEMENTS,
    SESSION_START_UTC_NS,
    Copy,
    Export,
    Kernel,
    Range,
    Sync,
    small_run,
    write_bad_corpus,
)

import overlapscope
from overlapscope.cli import main
from overlapscope.errors import OverlapscopeError
from overlapscope.ingest.nsys import read_nsys
from data_paths import REAL_TRACES

NSYS_DIR = REAL_TRACES / "nsys"
MFU = NSYS_DIR / "mfu_2gpu_before.sqlite"
MOCK = NSYS_DIR / "mock.sqlite"
needs_real = pytest.mark.needs_data(MFU, MOCK)


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
    assert [(t.rank, t.meta.extra["pid"], t.meta.extra["device"], t.rank_from) for t in mfu] == \
        [(0, 144, 0, "device"), (1, 145, 1, "device")]
    assert all(t.device == "gpu" and t.world_size == 2 and t.source == str(MFU) for t in mfu)
    assert all(t.meta.host == "modal" and t.meta.extra["process_name"] == "python3" for t in mfu)
    assert all(t.steps.empty for t in mfu)  # no ProfilerStep ranges: one window per rank


@needs_real
def test_mfu_kernel_counts_per_device(mfu):
    kernels = {t.meta.extra["device"]: int(t.events["kind"].isin(["compute", "comm"]).sum()) for t in mfu}
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
        # 32 of the 33 SendRecv kernels ran inside nccl:all_to_all (c10d::alltoall_base_): the
        # collective the user called; the one outside any op keeps its kernel's name.
        assert comm["collective"].astype(str).value_counts().to_dict() == {"all_to_all": 32, "send_recv": 1}
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
    assert (mfu[0].meta.clock, mfu[0].meta.clock_base_ns) == ("unix", epoch)


# --------------------------------------------------------------------------- real exports: numbers
REFERENCE_US = {  # tests/data/real/README.md, whole report, one window per rank
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
        pid = t.meta.extra["pid"]
        compute = _union_ns(MFU, pid, "n.value NOT LIKE '%nccl%'", copies=False)
        comm = _union_ns(MFU, pid, "n.value LIKE '%nccl%'", copies=False)
        both = _union_ns(MFU, pid, "1", copies=False)
        everything = _union_ns(MFU, pid, "1", copies=True)
        (lo, hi), = sql(MFU, f"""SELECT min(s), max(e) FROM (
            SELECT start AS s, end AS e, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
            SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
            SELECT start, end, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET)
            WHERE ((globalPid >> 24) & 16777215) = {pid}""")
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
    assert (t.rank, t.rank_from, t.meta.extra["pid"], t.meta.extra["device"]) == (0, "device", 91186, 0)
    assert t.meta.device_name == "NVIDIA GeForce RTX 3080"
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


# --------------------------------------------------------------------------- synthetic exports
S0 = SESSION_START_UTC_NS
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
GENERIC = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def two_rank_report() -> Export:
    """pid 200 on device 1 and pid 300 on device 0 (so device order differs from pid order); pid 400
    has NVTX but no GPU work. Both GPU processes reuse correlation ids 101, 102, ..."""
    e = Export(processes={200: "python3", 300: "python3", 400: "python3"}, domains={5: "NCCL"},
               gpus={0: "NVIDIA H100", 1: "NVIDIA H100"})
    e.ranges += [
        Range(200, "ProfilerStep#1", 0, 10_000), Range(200, "ProfilerStep#2", 10_000, 20_000, registered=True),
        Range(200, "FSDP::all_gather (layers.0), op_id = 7", 800, 1_000),
        Range(200, "epoch", 0, 20_000, tid=201, start_end=True),
        # NCCL domain 5 (known from its create row), payloads as JSON.
        Range(200, "ncclAllReduce", 850, 950, domain=5, registered=True,
              json='{"NCCL communicator ID": 48879, "Message size [bytes]": 4096, "Reduction operation": "sum"}'),
        Range(200, "ncclGroupStart", 10_600, 10_610, domain=5),
        Range(200, "ncclSend", 10_620, 10_630, domain=5,
              json='{"NCCL communicator ID": 7, "Message size [bytes]": 100}'),
        Range(200, "ncclRecv", 10_640, 10_650, domain=5,
              json='{"NCCL communicator ID": 7, "Message size [bytes]": 200}'),
        Range(200, "ncclGroupEnd", 10_790, 10_900, domain=5),
        Range(300, "ProfilerStep#1", 0, 10_000),
        Range(400, "ProfilerStep#1", 0, 10_000),
    ]
    e.kernels += [
        Kernel(200, 1, 7, "void gemm<1>(float*)", 1_000, 5_000, launch=500),
        Kernel(200, 1, 20, GENERIC, 4_000, 8_000, launch=900),  # collective only from the NCCL range
        Kernel(200, 1, 7, "void gemm<1>(float*)", 11_000, 12_000, launch=10_500),
        Kernel(200, 1, 20, SENDRECV, 11_500, 14_000, launch=10_800),
        Kernel(200, 1, 7, "void late<2>()", 15_000, 16_000),  # launch cut off by windowing
        Kernel(300, 0, 7, "void gemm<1>(float*)", 2_000, 3_000, launch=300),
    ]
    e.copies += [Copy(200, 1, 7, 12_500, 13_000, nbytes=64, copy_kind=2, src_kind=2, dst_kind=1, launch=10_850),
                 Copy(200, 1, 7, 14_000, 14_500, nbytes=32, memset=True, launch=10_860)]
    e.syncs += [Sync(200, 1, 7, 13_000, 13_500), Sync(400, 0, 7, 0, 100)]
    return e


@pytest.fixture
def report(tmp_path):
    return two_rank_report().write(tmp_path / "job.sqlite")


def by_name(events: pd.DataFrame) -> pd.DataFrame:
    return events.assign(name=events["name"].astype(str)).set_index("name")


def test_ranks_by_device_and_gpu_processes_only(report):
    traces = read_nsys(report)
    assert [(t.rank, t.meta.extra["pid"], t.meta.extra["device"], t.rank_from, t.world_size) for t in traces] == \
        [(0, 300, 0, "device", 2), (1, 200, 1, "device", 2)]
    assert traces[1].meta.device_name == "NVIDIA H100" and traces[1].meta.host == "node0"
    assert traces[1].meta.extra["launches_unmatched"] == 1
    assert traces[1].meta.extra["threads"] == {"200": "python3", "201": ""}


def test_kinds_names_lanes_and_common_clock(report):
    ev = read_nsys(report)[1].events
    dev = ev[ev["kind"] != "annotation"].sort_values("start_ns")
    assert list(zip(dev["kind"].astype(str), dev["name"].astype(str), dev["lane"].astype(str),
                    dev["start_ns"] - S0, dev["end_ns"] - S0)) == [
        ("compute", "void gemm<1>(float*)", "stream:7", 1_000, 5_000),
        ("comm", GENERIC, "stream:20", 4_000, 8_000),
        ("compute", "void gemm<1>(float*)", "stream:7", 11_000, 12_000),
        ("comm", SENDRECV, "stream:20", 11_500, 14_000),
        ("memcpy", "Memcpy DtoH (Device -> Pinned)", "stream:7", 12_500, 13_000),
        ("sync", "Stream Sync", "stream:7", 13_000, 13_500),
        ("memset", "Memset (Device)", "stream:7", 14_000, 14_500),
        ("compute", "void late<2>()", "stream:7", 15_000, 16_000),
    ]
    assert dev["bytes"].tolist() == [-1, 4096, -1, 300, 64, -1, 32, -1]


def test_launch_joined_on_correlation_and_pid(report):
    low, high = read_nsys(report)
    # Both processes have correlation id 101; each kernel must get its own process's launch.
    k0 = low.events[low.events["kind"] == "compute"]
    assert (k0["correlation"].tolist(), (k0["launch_ns"] - S0).tolist()) == ([101], [300])
    dev = high.events[high.events["kind"] != "annotation"].sort_values("start_ns")
    launch = dev["launch_ns"].to_numpy()
    assert [x - S0 if x >= 0 else -1 for x in launch] == [500, 900, 10_500, 10_800, 10_850, 13_000, 10_860, -1]
    assert dev["launch_lane"].astype(str).tolist() == ["thread:200"] * 7 + [""]


def test_steps_from_nvtx_and_launch(report):
    low, high = read_nsys(report)
    assert high.steps.assign(start_ns=high.steps.start_ns - S0, end_ns=high.steps.end_ns - S0).to_dict("list") == \
        {"step": [1, 2], "start_ns": [0, 10_000], "end_ns": [10_000, 20_000]}
    dev = high.events[high.events["kind"] != "annotation"].sort_values("start_ns")
    assert dev["step"].tolist() == [1, 1, 2, 2, 2, 2, 2, -1]
    assert low.steps["step"].tolist() == [1]
    assert read_nsys(report, no_steps=True)[1].steps.empty
    assert (read_nsys(report, no_steps=True)[1].events["step"] == -1).all()


def test_custom_step_pattern(tmp_path):
    e = small_run()
    e.ranges += [Range(10, "iteration 4", 0, 1_800), Range(10, "iteration 5", 1_800, 3_000)]
    path = e.write(tmp_path / "r.sqlite")
    assert read_nsys(path)[0].steps.empty  # default pattern: ProfilerStep#N or "step N"
    t = read_nsys(path, step_pattern=r"iteration \d+")[0]
    assert t.steps["step"].tolist() == [4, 5]
    assert t.events.loc[t.events["kind"] == "compute", "step"].tolist() == [4]


def test_nvtx_registered_strings_start_end_and_emit_nvtx_names(report):
    ann = read_nsys(report)[1].events.query("kind == 'annotation'")
    names = by_name(ann)
    assert names.loc["ProfilerStep#2", "lane"] == "thread:200"  # registered: text NULL, name via textId
    assert names.loc["epoch", "lane"] == "thread:201"  # start/end range on another thread
    assert names.loc["epoch", "end_ns"] - S0 == 20_000
    assert "FSDP::all_gather (layers.0)" in names.index  # ", op_id = 7" cut
    assert len(ann) == 9


def test_nccl_ranges_and_what_they_give_comm_kernels(report):
    ev = read_nsys(report)[1].events
    ann = by_name(ev[ev["kind"] == "annotation"])
    assert ann.loc["ncclAllReduce", ["collective", "bytes", "group"]].tolist() == ["all_reduce", 4096, "nccl:48879"]
    assert ann.loc["ncclSend", ["collective", "bytes"]].tolist() == ["send", 100]
    assert ann.loc["ProfilerStep#1", "collective"] == ""
    comm = by_name(ev[ev["kind"] == "comm"])
    # A kernel whose name says no collective takes its launching NCCL range's.
    assert comm.loc[GENERIC, ["collective", "bytes", "group"]].tolist() == ["all_reduce", 4096, "nccl:48879"]
    # Grouped send + recv: the kernel is launched in ncclGroupEnd; bytes of the group's calls summed.
    assert comm.loc[SENDRECV, ["collective", "bytes", "group"]].tolist() == ["send_recv", 300, "nccl:7"]


def test_nccl_ranges_recognised_by_name_without_domain_rows(tmp_path):
    e = two_rank_report()
    e.domains = {}
    ev = read_nsys(e.write(tmp_path / "r.sqlite"))[1].events
    assert by_name(ev[ev["kind"] == "comm"]).loc[GENERIC, "collective"] == "all_reduce"


def test_row_order_does_not_matter(tmp_path):
    def table(seed: int) -> pd.DataFrame:
        e = two_rank_report()
        e.seed = seed
        ev = read_nsys(e.write(tmp_path / f"s{seed}.sqlite"))[1].events.drop(columns="correlation")
        ev = ev.astype({c: str for c in ev.columns if isinstance(ev[c].dtype, pd.CategoricalDtype)})
        return ev.sort_values(["start_ns", "lane", "name", "end_ns"]).reset_index(drop=True)

    pd.testing.assert_frame_equal(table(1), table(2))


def test_comm_patterns_and_default_rule(tmp_path):
    e = small_run()
    e.kernels += [Kernel(10, 0, 9, "multimem_all_reduce_kernel<float>", 2_000, 2_500, launch=600),
                  Kernel(10, 0, 9, "my_custom_allreduce", 2_500, 2_600, launch=700)]
    path = e.write(tmp_path / "r.sqlite")
    kinds = by_name(read_nsys(path)[0].events)["kind"].astype(str).to_dict()
    assert (kinds["multimem_all_reduce_kernel<float>"], kinds["my_custom_allreduce"]) == ("comm", "compute")
    kinds = by_name(read_nsys(path, comm_patterns=["custom_allreduce"])[0].events)["kind"].astype(str).to_dict()
    assert kinds["my_custom_allreduce"] == "comm"


def test_missing_optional_tables(tmp_path):
    e = two_rank_report()
    e.omit = {"NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_SESSION_START_TIME", "PROCESSES",
              "ThreadNames", "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_GPU", "META_DATA_EXPORT",
              "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
              "ENUM_NSYS_EVENT_TYPE", "ENUM_CUPTI_SYNC_TYPE", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND"}
    low, high = read_nsys(e.write(tmp_path / "r.sqlite"))
    assert (low.rank_from, high.meta.clock, high.meta.host) == ("device", "session", None)
    ev = high.events.sort_values("start_ns")
    assert ev["kind"].astype(str).tolist() == ["compute", "comm", "compute", "comm", "memcpy", "compute"]
    assert ev["start_ns"].tolist() == [1_000, 4_000, 11_000, 11_500, 12_500, 15_000]  # session-relative
    assert (ev["launch_ns"] == -1).all() and high.steps.empty
    assert ev.loc[ev["kind"] == "memcpy", "name"].tolist() == ["Memcpy Unknown"]


def test_missing_optional_columns(tmp_path):
    path = two_rank_report().write(tmp_path / "r.sqlite")
    conn = sqlite3.connect(path)
    for table, column in (("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
                          ("CUPTI_ACTIVITY_KIND_KERNEL", "greenContextId"), ("NVTX_EVENTS", "jsonText"),
                          ("NVTX_EVENTS", "domainId"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "srcKind")):
        conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    conn.commit()
    conn.close()
    ev = read_nsys(path)[1].events
    comm = by_name(ev[ev["kind"] == "comm"])  # names fall back to shortName
    assert comm.loc["ncclDevKernel_SendRecv", ["collective", "bytes"]].tolist() == ["send_recv", -1]
    assert comm.loc["ncclDevKernel_Generic", "collective"] == "all_reduce"  # NCCL range found by name
    assert ev.loc[ev["kind"] == "memcpy", "name"].tolist() == ["Memcpy DtoH"]


def one_process(pid: int, device: int, start: int, session: int = S0) -> Export:
    return Export(processes={pid: "python3"}, session_start_utc_ns=session,
                  kernels=[Kernel(pid, device, 7, "void gemm<1>(float*)", start, start + 1_000, launch=start - 100)])


def test_directory_of_per_rank_reports_by_file_name(tmp_path):
    one_process(11, 0, 1_000).write(tmp_path / "trainer_rank3.sqlite")
    one_process(12, 0, 1_000).write(tmp_path / "trainer_rank1.sqlite")
    traces = read_nsys(tmp_path)
    assert [(t.rank, t.rank_from, t.meta.extra["pid"], Path(t.source).name) for t in traces] == \
        [(1, "filename", 12, "trainer_rank1.sqlite"), (3, "filename", 11, "trainer_rank3.sqlite")]
    assert {t.world_size for t in traces} == {4}


def test_several_reports_share_one_clock(tmp_path):
    one_process(11, 1, 5_000, session=S0).write(tmp_path / "a.sqlite")
    one_process(12, 0, 1_000, session=S0 + 2_000_000).write(tmp_path / "b.sqlite")
    traces = read_nsys(tmp_path)
    assert [(t.rank, t.rank_from, t.meta.extra["pid"]) for t in traces] == [(0, "device", 12), (1, "device", 11)]
    assert [t.rank for t in read_nsys([tmp_path / "b.sqlite", tmp_path / "a.sqlite"])] == [0, 1]
    starts = [int(t.events["start_ns"].min()) for t in traces]
    assert starts == [S0 + 2_001_000, S0 + 5_000]


def test_same_device_falls_back_to_process_order(tmp_path):
    e = one_process(30, 0, 1_000)
    e.processes[20] = "python3"
    e.kernels.append(Kernel(20, 0, 7, "void gemm<1>(float*)", 2_000, 3_000, launch=1_500))
    traces = read_nsys(e.write(tmp_path / "r.sqlite"))
    assert [(t.rank, t.rank_from, t.meta.extra["pid"]) for t in traces] == [(0, "process", 20), (1, "process", 30)]


# --------------------------------------------------------------------------- bad input
BAD = Path(__file__).parent / "data" / "nsys_bad"
BAD_CASES = {
    "not_sqlite.sqlite": "not an SQLite file",
    "empty.sqlite": "empty file",
    "no_kernel_table.sqlite": "no CUPTI_ACTIVITY_KIND_KERNEL table",
    "no_gpu_activity.sqlite": "no GPU activity",
    "truncated.sqlite": "truncated SQLite file",
    "damaged.sqlite": "damaged or truncated SQLite file",
}


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_corpus_one_line_error(name):
    with pytest.raises(OverlapscopeError) as err:
        read_nsys(BAD / name)
    message = str(err.value)
    assert BAD_CASES[name] in message and str(BAD / name) in message and "\n" not in message


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_corpus_exit_2_through_the_cli(name):
    result = CliRunner().invoke(main, ["analyze", str(BAD / name), "--format", "json"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and BAD_CASES[name] in lines[0] and result.stdout == ""


def test_bad_corpus_is_what_the_builder_writes(tmp_path):
    write_bad_corpus(tmp_path)
    for name in BAD_CASES:
        with pytest.raises(OverlapscopeError) as fresh:
            read_nsys(tmp_path / name)
        assert BAD_CASES[name] in str(fresh.value)


def test_locked_file(tmp_path):
    path = small_run().write(tmp_path / "busy.sqlite")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(OverlapscopeError, match="locked by another process"):
            read_nsys(path)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert len(read_nsys(path)) == 1  # and readable once the lock is gone


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path):
    path = small_run().write(tmp_path / "secret.sqlite")
    path.chmod(0)
    try:
        with pytest.raises(OverlapscopeError, match="cannot read"):
            read_nsys(path)
    finally:
        path.chmod(0o600)


def test_read_only_file_in_read_only_directory_is_read_and_left_alone(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = small_run().write(folder / "r.sqlite")
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    path.chmod(stat.S_IRUSR | stat.S_IRGRP)
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        assert len(read_nsys(path)) == 1
        assert (path.read_bytes(), path.stat().st_mtime_ns) == before
        assert sorted(p.name for p in folder.iterdir()) == ["r.sqlite"]  # no journal, no WAL left behind
    finally:
        folder.chmod(0o700)


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(OverlapscopeError, match="no such file"):
        read_nsys(tmp_path / "nope.sqlite")
    with pytest.raises(OverlapscopeError, match="no .sqlite or .nsys-rep files"):
        read_nsys(tmp_path)


# --------------------------------------------------------------------------- .nsys-rep
def test_nsys_rep_without_nsys_says_how_to_export(tmp_path, monkeypatch):
    rep = tmp_path / "job.nsys-rep"
    rep.write_bytes(b"report")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(OverlapscopeError) as err:
        read_nsys(rep)
    assert "nsys export --type sqlite -o job.sqlite" in str(err.value) and "\n" not in str(err.value)
    result = CliRunner().invoke(main, ["analyze", str(rep)])
    assert result.exit_code == 2 and "nsys export --type sqlite" in result.stderr


def fake_nsys(bin_dir: Path, body: str) -> None:
    """An `nsys` stand-in for machines without Nsight Systems: it only answers `export`."""
    bin_dir.mkdir()
    script = bin_dir / "nsys"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)


def test_nsys_rep_is_exported_to_a_temporary_file(tmp_path, monkeypatch):
    exported = small_run().write(tmp_path / "made_by_nsys.sqlite")
    rep = tmp_path / "job.nsys-rep"
    rep.write_bytes(b"report")
    # Copy the prepared export to the path given after --output, as `nsys export` writes it.
    fake_nsys(tmp_path / "bin", f'while [ "$1" != "--output" ]; do shift; done; cp "{exported}" "$2"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    (t,) = read_nsys(rep)
    assert t.source == str(rep) and len(t.events) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "job.nsys-rep", "made_by_nsys.sqlite"]


def test_nsys_rep_export_failure_is_one_line(tmp_path, monkeypatch):
    rep = tmp_path / "job.nsys-rep"
    rep.write_bytes(b"report")
    fake_nsys(tmp_path / "bin", 'echo "Importer error: file is corrupt" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    with pytest.raises(OverlapscopeError, match="Importer error: file is corrupt"):
        read_nsys(rep)


# --------------------------------------------------------------------------- through load_run / the CLI
def test_analyze_cli_on_one_report_and_a_directory(tmp_path):
    report = two_rank_report().write(tmp_path / "job.sqlite")
    result = CliRunner().invoke(main, ["analyze", str(report), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert '"rank":1' in result.stdout.replace(" ", "")
    per_rank = tmp_path / "per_rank"
    per_rank.mkdir()
    one_process(11, 0, 1_000).write(per_rank / "rank0.sqlite")
    one_process(12, 0, 1_000).write(per_rank / "rank1.sqlite")
    run = overlapscope.load_run(per_rank)
    assert [(t.rank, t.rank_from) for t in run.ranks] == [(0, "filename"), (1, "filename")]
    result = CliRunner().invoke(main, ["analyze", str(per_rank), "--format", "json"])
    assert result.exit_code == 0, result.stderr


# --------------------------------------------------------------------------- the Kineto twin
MAIN = 100  # the launching thread in both formats (Kineto tid, nsys tid of each rank's process)


def twin_spec(rank: int) -> dict[str, list[tuple]]:
    """One rank of a 2-step run, relative ns. Step 1: compute on stream 7 overlaps an AllReduce on
    stream 20, a memcpy hides under the comm; step 2: an AllGather on the compute stream, an exposed
    memcpy, a sync. Rank 1 is shifted and its AllReduce lasts longer."""
    d, extra = 500 * rank, 3_000 * rank
    return {
        "steps": [(1, 0 + d, 50_000 + d), (2, 50_000 + d, 100_000 + d)],
        "annotations": [("layer0", 1_000 + d, 30_000 + d), ("layer1", 51_000 + d, 80_000 + d)],
        "kernels": [  # name, stream, start, end, launch
            ("void gemm<1>(float*)", 7, 10_000 + d, 30_000 + d, 2_000 + d),
            (ALLREDUCE, 20, 20_000 + d, 40_000 + d + extra, 3_000 + d),
            ("void gemm<1>(float*)", 7, 60_000 + d, 70_000 + d, 52_000 + d),
            (ALLGATHER, 7, 70_000 + d, 75_000 + d, 53_000 + d),
            ("void relu<3>(float*)", 7, 76_000 + d, 77_000 + d, 53_500 + d),
        ],
        "memcpy": [(7, 35_000 + d, 38_000 + d, 4_000 + d), (7, 80_000 + d, 82_000 + d, 54_000 + d)],
        "sync": [(7, 82_000 + d, 83_000 + d)],
    }


def twin_as_kineto(rank: int) -> KinetoTrace:
    spec = twin_spec(rank)
    t = KinetoTrace(rank=rank, world_size=2, base_ns=S0)
    for n, s, e in spec["steps"]:
        t.step(n, s, e)
    for name, s, e in spec["annotations"]:
        t.annotation(name, s, e)
    for name, stream, s, e, launch in spec["kernels"]:
        t.kernel(name, s, e, stream=stream, launch_ns=launch)
    for stream, s, e, launch in spec["memcpy"]:
        t.memcpy(s, e, stream=stream, launch_ns=launch)
    for stream, s, e in spec["sync"]:
        t.sync(s, e, stream=stream, launch_tid=1000 + rank)  # as the nsys builder: the process's main thread
    return t


def twin_as_nsys() -> Export:
    """Both ranks in one report, as `nsys profile torchrun ...` writes it: rank r is pid 1000 + r on device r."""
    e = Export(processes={1000: "python3", 1001: "python3"})
    for rank in (0, 1):
        spec, pid = twin_spec(rank), 1000 + rank
        e.ranges += [Range(pid, f"ProfilerStep#{n}", s, end, tid=MAIN) for n, s, end in spec["steps"]]
        e.ranges += [Range(pid, name, s, end, tid=MAIN) for name, s, end in spec["annotations"]]
        e.kernels += [Kernel(pid, rank, stream, name, s, end, launch=launch, tid=MAIN)
                      for name, stream, s, end, launch in spec["kernels"]]
        e.copies += [Copy(pid, rank, stream, s, end, copy_kind=8, src_kind=2, dst_kind=2, launch=launch, tid=MAIN)
                     for stream, s, end, launch in spec["memcpy"]]
        e.syncs += [Sync(pid, rank, stream, s, end) for stream, s, end in spec["sync"]]
    return e


def comparable(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.drop(columns=[c for c in ("source",) if c in frame.columns])
    return frame.astype({c: str for c in frame.columns if isinstance(frame[c].dtype, pd.CategoricalDtype)}
                        ).reset_index(drop=True)


@pytest.mark.parametrize("no_steps", [False, True])
def test_kineto_twin_gives_identical_analysis(tmp_path, no_steps):
    kdir = tmp_path / "kineto"
    kdir.mkdir()
    for rank in (0, 1):
        twin_as_kineto(rank).write(kdir / f"rank{rank}.trace.json")
    kineto = overlapscope.analyze(overlapscope.load_run(kdir), no_steps=no_steps)
    nsys = overlapscope.analyze(overlapscope.load_run(twin_as_nsys().write(tmp_path / "twin.sqlite")),
                                no_steps=no_steps)
    for section in ("steps", "totals", "by_collective", "by_group", "by_scope"):
        pd.testing.assert_frame_equal(comparable(getattr(nsys, section)), comparable(getattr(kineto, section)),
                                      obj=section)
    totals = nsys.totals.set_index("rank")
    assert totals.loc[0, "exposed_comm_ns"] > 0 and totals.loc[1, "exposed_comm_ns"] > totals.loc[0, "exposed_comm_ns"]


def test_kineto_twin_gives_identical_device_events(tmp_path):
    kineto = overlapscope.load_run(twin_as_kineto(0).write(tmp_path / "rank0.trace.json")).ranks[0].events
    nsys = read_nsys(twin_as_nsys().write(tmp_path / "twin.sqlite"))[0].events
    cols = ["lane", "kind", "name", "start_ns", "end_ns", "collective", "bytes", "group", "step", "launch_ns",
            "launch_lane"]

    def device(ev: pd.DataFrame) -> pd.DataFrame:
        ev = comparable(ev[~ev["kind"].isin(["annotation", "cpu_op"])][cols])
        return ev.sort_values(["start_ns", "lane"]).reset_index(drop=True)

    n, k = device(nsys), device(kineto)
    assert n.loc[n["kind"] == "memcpy", "bytes"].tolist() == [1024, 1024]
    assert n.loc[n["kind"] == "sync", ["step", "launch_ns", "launch_lane"]].values.tolist() == \
        [[2, S0 + 82_000, "thread:1000"]]
    pd.testing.assert_frame_equal(n, k)


def test_load_run_reads_a_directory_of_unnamed_exports_together(tmp_path):
    import overlapscope

    one_process(11, 1, 5_000).write(tmp_path / "a.sqlite")
    one_process(12, 0, 1_000).write(tmp_path / "b.sqlite")
    (tmp_path / "b.nsys-rep").write_bytes(b"report beside its export: the export is read")
    run = overlapscope.load_run(tmp_path)
    assert [(t.rank, t.rank_from, t.meta.extra["pid"]) for t in run.ranks] == [(0, "device", 12), (1, "device", 11)]


def test_cuda_graph_replay_kernels_belong_to_the_launch_step_and_scope(tmp_path):
    """nsys twin of the Kineto graph test: one cudaGraphLaunch (correlation 77) replays three
    kernels, an NCCL all-reduce among them; all belong to step 2 and to the NVTX range around the launch."""
    e = Export(processes={500: "python3"}, gpus={0: "NVIDIA H100"})
    e.ranges += [Range(500, "ProfilerStep#1", 0, 100_000), Range(500, "ProfilerStep#2", 100_000, 200_000),
                 Range(500, "decoder | graph", 100_500, 102_000)]
    e.kernels += [Kernel(500, 0, 7, "void gemm()", 10_000, 40_000, launch=1_000, corr=10)]
    for i, (name, s, end, stream) in enumerate((("void gemm()", 150_000, 170_000, 7), ("void add()", 170_000, 175_000, 7),
                                                ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 165_000, 185_000, 20))):
        e.kernels.append(Kernel(500, 0, stream, name, s, end, corr=77, launch=101_000 if i == 0 else None,
                                api="cudaGraphLaunch"))
    a = overlapscope.analyze(overlapscope.load_run(e.write(tmp_path / "graph.sqlite"), cache=False))
    steps = a.steps.set_index("step")
    assert (steps.loc[2, "window_ns"], steps.loc[2, "compute_ns"], steps.loc[2, "comm_ns"],
            steps.loc[2, "exposed_comm_ns"]) == (35_000, 25_000, 20_000, 10_000)
    assert steps.loc[1, "comm_ns"] == 0
    assert a.by_scope[["scope", "comm_ns", "exposed_comm_ns"]].values.tolist() == [["decoder | graph", 20_000, 10_000]]


@pytest.mark.parametrize("reader", ["nsys", "kineto"])
def test_a_file_the_reader_may_not_open_is_one_line_naming_it_exit_2(tmp_path, monkeypatch, reader):
    """The permission error path, reached whoever runs the suite (test_unreadable_file cannot fail as
    root, which CI is): the open itself refuses, as it does for a file of mode 0 without root."""
    import overlapscope.ingest.kineto_parse as kineto_parse
    import overlapscope.ingest.nsys_schema as nsys_schema

    if reader == "nsys":
        path, module = small_run().write(tmp_path / "secret.sqlite"), nsys_schema
    else:
        trace = KinetoTrace(rank=0)
        trace.kernel("gemm", 10_000, 20_000)
        path, module = trace.write(tmp_path / "secret.json"), kineto_parse

    def refuse(file, *args, **kwargs):
        if Path(file) == path:
            raise PermissionError(13, "Permission denied", str(file))
        return open(file, *args, **kwargs)

    monkeypatch.setattr(module, "open", refuse, raising=False)
    out = CliRunner().invoke(main, ["analyze", str(path), "--no-cache"])
    assert out.exit_code == 2
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "cannot read" in lines[0] and "Permission denied" in lines[0]
    assert "Traceback" not in out.output
