"""The hostile-input corpus (tests/hostile.py): every case's outcome pinned exactly.

Refused inputs: exit 2, stdout empty, stderr exactly `overlapscope: error: <file>: <problem>`.
Recoverable ones: exit 0, the warning that counts what was dropped or resolved, and the exact numbers.
"""
from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

import hostile as H
from overlapscope.cli import main

NCCL_EVENT = f"X event #5 (cat 'kernel', name '{H.NCCL}')"
LIMIT_US = "4611686018427387"

KINETO_REFUSED = {
    "ts_true": (H.set_event(5, "ts", True), f"{NCCL_EVENT}: ts is True, expected a number of µs"),
    "ts_str": (H.set_event(5, "ts", "1e3"), f"{NCCL_EVENT}: ts is '1e3', expected a number of µs"),
    "ts_null": (H.set_event(5, "ts", None), f"{NCCL_EVENT}: ts is None, expected a number of µs"),
    "ts_missing": (H.set_event(5, "ts", H._DELETE), f"{NCCL_EVENT}: ts is missing, expected a number of µs"),
    "ts_2_70": (H.set_event(5, "ts", 2**70),
                f"{NCCL_EVENT}: ts is 1180591620717411303424, expected a number of µs below {LIMIT_US}"),
    "ts_minus_2_63": (H.set_event(5, "ts", -2**63),
                      f"{NCCL_EVENT}: ts is -9223372036854775808, expected a finite number of µs below {LIMIT_US}"),
    "ts_far_from_the_rest": (H.set_event(5, "ts", 2e12), f"{NCCL_EVENT}: ts is 2000000000000.0, expected a time "
                             "within a day of the trace's other events (it is 555.6 h away)"),
    "ts_nan": (H.set_event(5, "ts", float("nan")),
               "malformed JSON (unexpected character, expected a JSON value: line 1 column 864 (char 863))"),
    "dur_missing": (H.set_event(5, "dur", H._DELETE), f"{NCCL_EVENT}: dur is missing, expected a number of µs"),
    "dur_null": (H.set_event(5, "dur", None), f"{NCCL_EVENT}: dur is None, expected a number of µs"),
    "dur_true": (H.set_event(5, "dur", True), f"{NCCL_EVENT}: dur is True, expected a number of µs"),
    "dur_2_62": (H.set_event(5, "dur", 2**62),
                 f"{NCCL_EVENT}: dur is 4611686018427387904, expected a finite number of µs below {LIMIT_US}"),
    "dur_1e17": (H.set_event(5, "dur", 1e17), f"{NCCL_EVENT}: dur is 1e+17, expected a finite number of µs below "
                 f"{LIMIT_US}"),
    "dur_2_64_plus_5": (H.set_event(5, "dur", 2**64 + 5),
                        f"{NCCL_EVENT}: dur is 18446744073709551621, expected a number of µs below {LIMIT_US}"),
    "dur_a_month": (H.set_event(5, "dur", 30 * 86400e6),
                    f"{NCCL_EVENT}: dur is 2592000000000.0, expected a duration in µs shorter than a week"),
    "correlation_text": (H.set_arg(5, "correlation", "12x"),
                         f"{NCCL_EVENT}: args.correlation is '12x', expected an integer"),
    "correlation_negative": (H.set_arg(5, "correlation", -7),
                             f"{NCCL_EVENT}: args.correlation is -7, expected an integer from 0 to 4611686018427387903"),
    "correlation_float": (H.set_arg(5, "correlation", 1.5),
                          f"{NCCL_EVENT}: args.correlation is 1.5, expected an integer"),
    "stream_bool": (H.set_arg(5, "stream", True), f"{NCCL_EVENT}: args.stream is True, expected a stream id"),
    "nelems_2_70": (H.set_arg(5, "In msg nelems", 2**70), f"{NCCL_EVENT}: args['In msg nelems'] is "
                    "1180591620717411303424, expected an integer from 0 to 1125899906842623"),
    "nelems_text": (H.set_arg(5, "In msg nelems", "1024"),
                    f"{NCCL_EVENT}: args['In msg nelems'] is '1024', expected an integer"),
    "seq_bool": (H.set_arg(5, "Seq", True), f"{NCCL_EVENT}: args['Seq'] is True, expected an integer"),
    "dtype_number": (H.set_arg(5, "dtype", 4), f"{NCCL_EVENT}: args['dtype'] is 4, expected text"),
    "args_a_list": (H.set_event(5, "args", [1, 2]), f"{NCCL_EVENT}: args is [1, 2], expected an object"),
    "args_100k_deep": (H.deep_args, "malformed JSON (depth limit exceeded: line 1 column 1605 (char 1604))"),
    "rank_2_40": (H.set_top(("distributedInfo", "rank"), 2**40),
                  "distributedInfo.rank is 1099511627776, expected an integer from 0 to 262143"),
    "rank_text": (H.set_top(("distributedInfo", "rank"), "0"),
                  "distributedInfo.rank is '0', expected an integer from 0 to 262143"),
    "world_size_1e9": (H.set_top(("distributedInfo", "world_size"), 10**9),
                       "distributedInfo.world_size is 1000000000, expected an integer from 1 to 262144"),
    "base_time_abc": (H.set_top(("baseTimeNanoseconds",), "abc"),
                      "baseTimeNanoseconds is 'abc', expected an integer of ns since the epoch"),
    "base_time_float": (H.set_top(("baseTimeNanoseconds",), 1.5e18),
                        "baseTimeNanoseconds is 1.5e+18, expected an integer of ns since the epoch"),
    "device_properties_of_ints": (H.set_top(("deviceProperties",), [1]),
                                  "deviceProperties is [1], expected a list of objects"),
    "distributed_info_a_list": (H.set_top(("distributedInfo",), [0]), "distributedInfo is [0], expected an object"),
}

BASE_TOTAL = {"window_ns": 15_000, "compute_ns": 6_000, "comm_ns": 6_000, "exposed_comm_ns": 4_000,
              "idle_ns": 5_000}
ONE_NCCL_LESS = {**BASE_TOTAL, "comm_ns": 3_000, "exposed_comm_ns": 2_000, "idle_ns": 7_000}

# name -> (mutation, warning (exact, after "<file>: "), totals, step numbers)
KINETO_RECOVERED = {
    "rank_beyond_world_size": (H.set_top(("distributedInfo", "rank"), 3), "distributedInfo.rank 3 is not below "
                               "its world_size 1", BASE_TOTAL, [1, 2]),
    "step_without_launches": (H.add_step(3, 30_000, 40_000), "step 3 launched no device work (no kernel, memcpy or "
                              "memset launched inside the range); left out", BASE_TOTAL, [1, 2]),
    "dur_negative": (H.set_event(5, "dur", -3.0), "dropped 1 events: 1 with a negative dur", ONE_NCCL_LESS, [1, 2]),
    "nccl_kernel_twice": (H.duplicate_events(4, 5), "dropped 2 events: 2 exact duplicates (holding 0.003 ms of "
                          "device time)", BASE_TOTAL, [1, 2]),
    "every_event_twice": (H.duplicate_events(*range(10)), "dropped 8 events: 8 exact duplicates (holding 0.012 ms "
                          "of device time)", BASE_TOTAL, [1, 2]),
    "step_enclosing_the_others": (H.add_step(9, -500, 20_500), "1 step range encloses other step ranges (step 9); "
                                  "the innermost ranges are the steps", BASE_TOTAL, [1, 2]),
    "step_number_repeated": (H.add_step(1, 30_000, 40_000), ("step number 1 appears on separate ranges (two "
                             "profiling sessions?); steps are numbered 0-2 by their order in time instead",
                             "step 2 launched no device work (no kernel, memcpy or memset launched inside the "
                             "range); left out"), BASE_TOTAL, [0, 1]),
    "steps_overlapping": (H.add_step(3, 15_000, 25_000), ("1 step range overlaps the next step; each ends where "
                          "the next starts", "step 3 launched no device work (no kernel, memcpy or memset launched "
                          "inside the range); left out"), BASE_TOTAL, [1, 2]),
}


def analyze(path, *extra):
    return CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--no-cache", *extra])


def assert_refused(result, path, problem):
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"overlapscope: error: {path}: {problem}"]


def test_a_rank_number_in_the_file_name_beyond_any_job_is_refused(tmp_path):
    def no_rank(doc):
        del doc["distributedInfo"]
    path = H.write_kineto(tmp_path / "trace_rank1099511627776.json", no_rank)
    assert_refused(analyze(path), path, "the rank in the file name (rank1099511627776) is not below 262144")


@pytest.mark.parametrize("name", sorted(KINETO_REFUSED))
def test_kineto_refused(tmp_path, name):
    mutate, problem = KINETO_REFUSED[name]
    path = H.write_kineto(tmp_path / f"{name}.json", mutate)
    assert_refused(analyze(path), path, problem)


def totals(result):
    doc = orjson.loads(result.stdout)
    (rank,) = doc["ranks"]
    total = {k: rank["total"][k] for k in BASE_TOTAL}
    return total, [s["step"] for s in rank["steps"]]


def test_kineto_base_numbers(tmp_path):
    result = analyze(H.write_kineto(tmp_path / "base.json"))
    assert result.exit_code == 0 and totals(result) == (BASE_TOTAL, [1, 2])


@pytest.mark.parametrize("name", sorted(KINETO_RECOVERED))
def test_kineto_recovered_with_a_counted_warning(tmp_path, caplog, name):
    mutate, warning, total, steps = KINETO_RECOVERED[name]
    path = H.write_kineto(tmp_path / f"{name}.json", mutate)
    with caplog.at_level(logging.WARNING):
        result = analyze(path)
    assert result.exit_code == 0, result.output
    warnings = (warning,) if isinstance(warning, str) else warning
    assert [r.getMessage() for r in caplog.records] == [f"{path}: {w}" for w in warnings]
    assert totals(result) == (total, steps)


K, ROW = H.KERNEL, H.NCCL_ROW
RANGE = "expected ns since the session start (0 to one day, and end - start shorter than a week)"
NSYS_REFUSED = {
    "kernel_name_not_in_string_ids": ([f"DELETE FROM StringIds WHERE id = (SELECT demangledName FROM {K} "
                                       f"WHERE rowid = {ROW})"], f"{K}.demangledName id 4 is not in StringIds"),
    "start_int64_min": ([f"UPDATE {K} SET start = -9223372036854775808 WHERE rowid = {ROW}"],
                        f"{K} row 3: start is -9223372036854775808, {RANGE}"),
    "start_text": ([f"UPDATE {K} SET start = 'abc' WHERE rowid = {ROW}"], f"{K} row 3: start is 'abc', {RANGE}"),
    "end_2_62": ([f"UPDATE {K} SET end = 4611686018427387904 WHERE rowid = {ROW}"],
                 f"{K} row 3: end is 4611686018427387904, {RANGE}"),
    "no_stream_column": ([f"ALTER TABLE {K} DROP COLUMN streamId"],
                         f"{K} has no column streamId (needs start, end, streamId, deviceId)"),
    "session_start_abc": (["UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 'abc'"],
                          "TARGET_INFO_SESSION_START_TIME.utcEpochNs is 'abc', expected an integer of ns since the epoch"),
    "nvtx_start_negative": (["UPDATE NVTX_EVENTS SET start = -5 WHERE rowid = 1"],
                            "NVTX_EVENTS row 1: start -5, end 10000, expected ns since the session start (0 to one day)"),
    "every_kernel_without_process": ([*H.UNCONSTRAINED, f"UPDATE {K} SET globalPid = NULL"],
                                     "no GPU activity (no kernels, memcpy or memset rows; dropped 4 events: 4 "
                                     f"{K} rows with a NULL streamId/deviceId/globalPid (holding 0.012 ms of device time))"),
}

NULL_KEY = f"dropped 1 events: 1 {K} rows with a NULL streamId/deviceId/globalPid (holding 0.003 ms of device time)"
NSYS_RECOVERED = {
    "nccl_end_before_start": ([f"UPDATE {K} SET end = start - 1 WHERE rowid = {ROW}"],
                              f"dropped 1 events: 1 {K} rows with end before start"),
    "nccl_without_process": ([*H.UNCONSTRAINED, f"UPDATE {K} SET globalPid = NULL WHERE rowid = {ROW}"], NULL_KEY),
    "nccl_without_device": ([*H.UNCONSTRAINED, f"UPDATE {K} SET deviceId = NULL WHERE rowid = {ROW}"], NULL_KEY),
    "nccl_without_stream": ([*H.UNCONSTRAINED, f"UPDATE {K} SET streamId = NULL WHERE rowid = {ROW}"], NULL_KEY),
    "nccl_without_start": ([*H.UNCONSTRAINED, f"UPDATE {K} SET start = NULL WHERE rowid = {ROW}"],
                           f"dropped 1 events: 1 {K} rows with a NULL start or end"),
}


@pytest.mark.parametrize("name", sorted(NSYS_REFUSED))
def test_nsys_refused(tmp_path, name):
    sql, problem = NSYS_REFUSED[name]
    path = H.write_nsys(tmp_path / f"{name}.sqlite", *sql)
    assert_refused(analyze(path), path, problem)


def test_nsys_base_numbers(tmp_path):
    result = analyze(H.write_nsys(tmp_path / "base.sqlite"))
    assert result.exit_code == 0 and totals(result) == (BASE_TOTAL, [1, 2])


@pytest.mark.parametrize("name", sorted(NSYS_RECOVERED))
def test_nsys_recovered_with_a_counted_warning_and_no_phantom_rank(tmp_path, caplog, name):
    sql, warning = NSYS_RECOVERED[name]
    path = H.write_nsys(tmp_path / f"{name}.sqlite", *sql)
    with caplog.at_level(logging.WARNING):
        result = analyze(path)
    assert result.exit_code == 0, result.output
    assert [r.getMessage() for r in caplog.records] == [f"{path}: {warning}"]
    assert totals(result) == (ONE_NCCL_LESS, [1, 2])  # one rank (the real one), one all-reduce fewer


def test_a_byte_flipped_in_the_sqlite_schema_is_one_line(tmp_path):
    path = H.base_nsys().write(tmp_path / "flipped.sqlite")
    raw = bytearray(path.read_bytes())
    at = raw.find(b"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    raw[at + 7] = ord("X")  # CREATE XABLE
    path.write_bytes(bytes(raw))
    assert_refused(analyze(path), path, "damaged or truncated SQLite file (malformed database schema "
                   f"({K}) - near \"XABLE\": syntax error); export the report again")


def test_a_bad_step_pattern_is_one_line(tmp_path):
    result = analyze(H.write_kineto(tmp_path / "base.json"), "--step-pattern", "(")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "overlapscope: error: --step-pattern '(' is not a regular expression (missing ), unterminated subpattern "
        "at position 0)"]


# ---- output paths ----

@pytest.fixture
def run(tmp_path):
    """A one-rank run directory (the base Kineto trace) and a place outside it for outputs."""
    d = tmp_path / "run"
    d.mkdir()
    H.write_kineto(d / "rank0.json")
    (tmp_path / "out").mkdir()
    return d


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def error_line(result):
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    return line.removeprefix("overlapscope: error: ")


INSIDE = "is inside the run directory {run}: it would be read as a trace next time, or replace one; write it elsewhere"


@pytest.mark.parametrize("command", [
    ("analyze", "{run}", "-o", "{run}/rank1.json"),
    ("analyze", "{run}", "--format", "json", "-o", "{run}/report.json"),
    ("export", "{run}", "--perfetto", "{run}/rank0.json"),
    ("baseline", "{run}", "-o", "{run}/baseline.json"),
])
def test_an_output_inside_the_run_directory_is_refused_before_anything_is_written(run, command):
    before = sorted(p.name for p in run.iterdir())
    args = [a.format(run=run) for a in command]
    option, out = args[-2], args[-1]
    assert error_line(cli(*args)) == f"{option} {out} " + INSIDE.format(run=run)
    assert sorted(p.name for p in run.iterdir()) == before
    assert (run / "rank0.json").read_bytes() == H.write_kineto(run.parent / "copy.json").read_bytes()


def test_an_output_that_is_the_input_trace_is_refused(run):
    trace = run / "rank0.json"
    assert error_line(cli("analyze", trace, "-o", trace)) == \
        f"-o {trace} is the input {trace}: it would be overwritten; write it elsewhere"


def test_an_existing_trace_elsewhere_is_never_replaced(run, tmp_path):
    other = H.write_kineto(tmp_path / "out" / "someone_elses.json")
    assert error_line(cli("export", run, "--perfetto", other)) == (
        f"--perfetto {other} exists and is not a file overlapscope wrote (a trace?); it is never replaced: "
        "write elsewhere")


@pytest.fixture
def baseline(run, tmp_path):
    path = tmp_path / "out" / "baseline.json"
    assert cli("baseline", run, "-o", path).exit_code == 0
    return path


def test_check_refuses_a_report_over_its_baseline_and_two_reports_in_one_file(run, baseline, tmp_path):
    assert error_line(cli("check", run, "--baseline", baseline, "--junit", baseline)) == \
        f"--junit {baseline} is the input {baseline}: it would be overwritten; write it elsewhere"
    same = tmp_path / "out" / "r.xml"
    assert error_line(cli("check", run, "--baseline", baseline, "--junit", same, "--summary", same)) == \
        f"--junit and --summary name the same file {same}"
    assert not same.exists()


def test_write_failures_are_exit_2_never_1(run, baseline, tmp_path):
    blocked = tmp_path / "out" / "a_file"
    blocked.write_text("")
    target = blocked / "junit.xml"  # a file where a folder should be
    assert error_line(cli("check", run, "--baseline", baseline, "--junit", target)) == \
        f"{target}: cannot write: {blocked} is not a directory"
    assert error_line(cli("analyze", run, "-o", target)) == f"{target}: cannot write: {blocked} is not a directory"
    assert error_line(cli("profile", "--out", blocked / "x", "--", "python", "-c", "pass")) == \
        f"{blocked / 'x'}: cannot create the output directory: Not a directory"


def test_outputs_get_the_users_umask(run, baseline, tmp_path):
    import os

    old = os.umask(0o022)
    try:
        out = tmp_path / "out"
        assert cli("analyze", run, "-o", out / "a.txt").exit_code == 0
        assert cli("check", run, "--baseline", baseline, "--junit", out / "j.xml", "--summary", out / "s.md"
                   ).exit_code == 0
        assert cli("export", run, "--perfetto", out / "p.json").exit_code == 0
        for name in ("a.txt", "j.xml", "s.md", "p.json", "baseline.json"):
            assert (out / name).stat().st_mode & 0o777 == 0o644, name
    finally:
        os.umask(old)


def test_reports_baselines_and_exports_in_a_run_directory_are_skipped_by_content(run, baseline, tmp_path, caplog):
    out = tmp_path / "out"
    assert cli("analyze", run, "--format", "json", "-o", out / "report.json").exit_code == 0
    assert cli("export", run, "--perfetto", out / "trace.json").exit_code == 0
    for name, new in (("report.json", "r.json"), ("trace.json", "rank7.json"), ("baseline.json", "b.json")):
        (out / name).rename(run / new)  # names that look like traces: the content says otherwise
    with caplog.at_level(logging.WARNING):
        result = analyze(run)
    assert result.exit_code == 0, result.output
    assert sorted(r.getMessage() for r in caplog.records) == [
        f"{run / 'b.json'}: skipped, an overlapscope baseline (not a trace)",
        f"{run / 'r.json'}: skipped, an overlapscope report (not a trace)",
        f"{run / 'rank7.json'}: skipped, an overlapscope perfetto (not a trace)"]
    assert totals(result) == (BASE_TOTAL, [1, 2])
    assert error_line(analyze(run / "r.json")) == f"{run / 'r.json'}: is an overlapscope report, not a trace"


def test_a_fifo_or_an_unlistable_directory_as_run_is_one_line(tmp_path, monkeypatch):
    import os
    from pathlib import Path

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert error_line(analyze(fifo)) == \
        f"{fifo}: not a regular file or directory (a FIFO or device?); give a trace or a run directory"
    locked = tmp_path / "locked"
    locked.mkdir()

    def denied(self):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(Path, "iterdir", denied)  # chmod 000 does not stop root, who runs CI here
    assert error_line(analyze(locked)) == f"{locked}: cannot list the directory: Permission denied"


# ---- cache ----

def _read_through_cache(path, cfg, calls):
    from overlapscope.ingest.kineto import read_kineto
    from overlapscope.pipeline.cache import cached_read

    def reader(p):
        calls.append(p)
        return read_kineto(p)
    return cached_read(path, reader, {}, cfg)


@pytest.fixture
def cached(tmp_path):
    from overlapscope.pipeline.cache import LOCAL_DIR, CacheConfig

    path = H.write_kineto(tmp_path / "rank0.json")
    cfg = CacheConfig(min_bytes=0, user_dir=tmp_path / "user", beside_trace=True)
    _read_through_cache(path, cfg, [])
    (entry,) = (tmp_path / LOCAL_DIR).glob("*.parquet")
    return path, cfg, entry


def _same_trace(a, b):
    import pandas as pd

    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert (a.rank, a.meta, a.device, a.world_size) == (b.rank, b.meta, b.device, b.world_size)


def test_a_truncated_cache_entry_is_discarded_rewritten_and_reported(cached, caplog):
    from overlapscope.ingest.kineto import read_kineto

    path, cfg, entry = cached
    entry.write_bytes(entry.read_bytes()[:-100])
    calls = []
    with caplog.at_level(logging.WARNING):
        trace = _read_through_cache(path, cfg, calls)
    assert calls == [path]  # read again from the trace
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(f"{path}: cache entry {entry} is damaged (") and \
        message.endswith("); discarded, the trace is read again and the entry rewritten")
    _same_trace(trace, read_kineto(path))
    calls.clear()
    _same_trace(_read_through_cache(path, cfg, calls), trace)
    assert calls == []  # the rewritten entry is whole again


def test_a_flipped_bit_in_a_cache_entry_is_never_served(cached, caplog):
    """40 flipped bits at seeded places: each is either harmless (the same table) or found (a warning,
    a fresh read, the entry rewritten); never a different table."""
    import random

    from overlapscope.ingest.kineto import read_kineto

    path, cfg, entry = cached
    fresh, good = read_kineto(path), entry.read_bytes()
    rng = random.Random(13)
    found = 0
    for _ in range(40):
        raw = bytearray(good)
        raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        entry.write_bytes(bytes(raw))
        caplog.clear()
        calls = []
        with caplog.at_level(logging.WARNING):
            trace = _read_through_cache(path, cfg, calls)
        _same_trace(trace, fresh)
        warned = any("is damaged" in r.getMessage() for r in caplog.records)
        assert warned == bool(calls)
        found += warned
        entry.write_bytes(good)
    assert found >= 10  # 19 here: the rest fell on bytes no reader uses (the key, and so the bytes, move with the version)


# ---- dashboard ----

@pytest.fixture(scope="module")
def dashboard_app(tmp_path_factory):
    pytest.importorskip("dash")
    from overlapscope.dashboard import create_app

    path = H.write_kineto(tmp_path_factory.mktemp("dash") / "rank0.json")
    return create_app([str(path)], host="10.1.2.3", allow_hosts=("box.lan",))


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8050", "127.0.0.1.evil.example", "10.1.2.4:8050",
                                  "box.lan.evil.example", ""])
@pytest.mark.parametrize("url", ["/", "/_dash-layout", "/_dash-dependencies", "/assets/plotly-cartesian.min.js"])
def test_dashboard_refuses_requests_for_another_host(dashboard_app, host, url):
    response = dashboard_app.server.test_client().get(url, headers={"Host": host})
    assert response.status_code == 403
    assert b"rank0" not in response.data and b"nccl" not in response.data.lower()


@pytest.mark.parametrize("host", ["localhost:8050", "127.0.0.1:8050", "[::1]:8050", "10.1.2.3:8050", "box.lan",
                                  "BOX.LAN:80"])
def test_dashboard_answers_its_own_names(dashboard_app, host):
    response = dashboard_app.server.test_client().get("/_dash-layout", headers={"Host": host})
    assert response.status_code == 200 and b"rank0" in response.data


# ---- manifest ----

def _manifest_run(tmp_path, manifest):
    import json

    d = tmp_path / "run"
    d.mkdir()
    H.write_kineto(d / "rank0.json")
    (d / "manifest.json").write_text(json.dumps(manifest) if not isinstance(manifest, str) else manifest)
    return d


MANIFEST_REFUSED = {
    "world_size_1e9": ({"world_size": 10**9}, "world_size is 1000000000, expected an integer from 1 to 262144"),
    "world_size_text": ({"world_size": "8"}, "world_size is '8', expected an integer from 1 to 262144"),
    "world_size_true": ({"world_size": True}, "world_size is True, expected an integer from 1 to 262144"),
    "rank_beyond_world": ({"world_size": 2, "ranks": {"5": {}}}, "ranks key is '5', expected a rank from 0 to 1"),
    "missing_rank_2_40": ({"missing_ranks": [2**40]},
                          "missing_ranks[0] is 1099511627776, expected a rank from 0 to 262143"),
    "complete_text": ({"ranks": {"0": {"complete": "no"}}}, "ranks['0'].complete is 'no', expected true or false"),
    "steps_negative": ({"steps": -1}, "steps is -1, expected a non-negative integer"),
    "not_an_object": ([1, 2], "the manifest is [1, 2], expected a JSON object"),
}


@pytest.mark.parametrize("name", sorted(MANIFEST_REFUSED))
def test_manifest_refused(tmp_path, name):
    manifest, problem = MANIFEST_REFUSED[name]
    run = _manifest_run(tmp_path, manifest)
    assert error_line(analyze(run)) == f"{run / 'manifest.json'}: {problem}"


# ---- a rank that stopped mid-capture ----

def _stopped_run(tmp_path, *, cpu: bool = False):
    """Two ranks, three steps; rank 1 raised in step 3 (its manifest entry says complete: false)."""
    import json

    from kineto_builder import KinetoTrace

    d = tmp_path / "run"
    d.mkdir()
    for rank in (0, 1):
        t = KinetoTrace(rank=rank, world_size=2, base_ns=H.BASE_NS)
        for n in (1, 2, 3):
            o = (n - 1) * 10_000
            t.step(n, o, o + 10_000)
            if rank == 1 and n == 3:
                (t.cpu_op if cpu else t.kernel)("void gemm()", o + 2_000, o + 3_000)  # cut short
                continue
            if cpu:
                t.cpu_op("aten::mm", o + 2_000, o + 5_000)
                t.annotation("gloo:all_reduce", o + 4_000, o + 7_000, tid=7)
            else:
                t.kernel("void gemm()", o + 2_000, o + 5_000)
                t.kernel(H.NCCL, o + 4_000, o + 7_000, **H.COMM_ARGS)
        t.write(d / f"rank{rank}.json")
    (d / "manifest.json").write_text(json.dumps({"world_size": 2, "ranks": {
        "0": {"complete": True, "steps_recorded": 3}, "1": {"complete": False, "steps_recorded": 2}}}))
    return d


@pytest.mark.parametrize("cpu", [False, True], ids=["gpu", "cpu"])
def test_a_rank_that_stopped_mid_capture_is_analyzed_for_its_whole_steps(tmp_path, caplog, cpu):
    run = _stopped_run(tmp_path, cpu=cpu)
    with caplog.at_level(logging.WARNING):
        result = analyze(run)
    assert result.exit_code == 0, result.output
    assert [r.getMessage() for r in caplog.records] == [
        f"{run / 'rank1.json'}: rank 1 stopped before its capture ended (run manifest: complete false): step 3 was "
        "cut short; analyzing steps 1, 2"]
    doc = orjson.loads(result.stdout)
    assert [[s["step"] for s in r["steps"]] for r in doc["ranks"]] == [[1, 2, 3], [1, 2]]
    assert doc["run"]["incomplete_ranks"] == {"1": {"analyzed_steps": [1, 2], "cut_short_step": 3,
                                                    "empty_steps": [], "missing_steps": [3]}}
    for r in doc["ranks"]:
        for s in r["steps"]:
            assert s["compute_ns"] + s["exposed_comm_ns"] + s["exposed_memcpy_ns"] + s["idle_ns"] == s["window_ns"]


@pytest.mark.parametrize("bad, line", [
    ("empty.json", "empty.json: empty file"),
    ("truncated.json", "truncated.json: truncated JSON (unexpected end of data: line 1 column 516 (char 515))"),
])
def test_dashboard_command_refuses_a_run_it_cannot_read(bad, line, tmp_path):
    """The CLI exits 2 with the reader's line instead of serving a page that could only show it (the Python
    API's create_app still shows a failed run's error on the page, beside a run that loaded)."""
    bad_path = Path(__file__).resolve().parent / "data" / "bad" / bad
    result = CliRunner().invoke(main, ["dashboard", str(Path(__file__).resolve().parents[1] / "traces" / "ddp"), str(bad_path), "--port", "1"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == f"overlapscope: error: {bad_path.parent}/{line}"


def test_step_resolution_on_arrays_keeps_every_rule():
    """resolved_steps on NumPy: merge overlapping copies, renumber repeats, drop enclosing, cut overlaps."""
    import numpy as np
    import pandas as pd

    from overlapscope.ingest.steps import _cummax_by_group, resolved_steps

    assert _cummax_by_group(np.array([0, 0, 0, 1, 1, 2]), np.array([5, 3, 7, 2, 9, -4])).tolist() == [5, 5, 7, 2, 9, -4]
    frame = lambda rows: pd.DataFrame({"step": np.array([r[0] for r in rows], np.int32),  # noqa: E731
                                       "start_ns": np.array([r[1] for r in rows], np.int64),
                                       "end_ns": np.array([r[2] for r in rows], np.int64)})
    # step 1 twice overlapping (one step, widest), step 2 overlapping step 1's end (cut)
    out = resolved_steps(frame([(2, 25, 40), (1, 0, 20), (1, 5, 30)]))
    assert out.to_dict("list") == {"step": [1, 2], "start_ns": [0, 25], "end_ns": [25, 40]}
    # one number on disjoint ranges: renumbered by time; an enclosing range dropped
    out = resolved_steps(frame([(3, 50, 60), (3, 0, 10), (9, 0, 100), (4, 20, 30)]))
    assert out.to_dict("list") == {"step": [1, 2, 3], "start_ns": [0, 20, 50], "end_ns": [10, 30, 60]}
    assert out["step"].dtype == np.int32 and resolved_steps(frame([])).empty
