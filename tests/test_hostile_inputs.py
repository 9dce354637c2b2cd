"""The hostile-input corpus (tests/hostile.py): every case's outcome pinned exactly.

Refused inputs: exit 2, stdout empty, stderr exactly `overlapscope: error: <file>: <problem>`.
Recoverable ones: exit 0, the warning that counts what was dropped or resolved, and the exact numbers.
"""
from __future__ import annotations

import logging

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
    "dur_negative": (H.set_event(5, "dur", -3.0), "dropped 1 events: 1 with a negative dur", ONE_NCCL_LESS, [1, 2]),
    "nccl_kernel_twice": (H.duplicate_events(4, 5), "dropped 2 events: 2 exact duplicates (holding 0.003 ms of "
                          "device time)", BASE_TOTAL, [1, 2]),
    "every_event_twice": (H.duplicate_events(*range(10)), "dropped 8 events: 8 exact duplicates (holding 0.012 ms "
                          "of device time)", BASE_TOTAL, [1, 2]),
    "step_enclosing_the_others": (H.add_step(9, -500, 20_500), "1 step range encloses other step ranges (step 9); "
                                  "the innermost ranges are the steps", BASE_TOTAL, [1, 2]),
    "step_number_repeated": (H.add_step(1, 30_000, 40_000), "step number 1 appears on separate ranges (two "
                             "profiling sessions?); steps are numbered 0-2 by their order in time instead",
                             BASE_TOTAL, [0, 1]),
    "steps_overlapping": (H.add_step(3, 15_000, 25_000), "1 step range overlaps the next step; each ends where "
                          "the next starts", BASE_TOTAL, [1, 2]),
}


def analyze(path, *extra):
    return CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--no-cache", *extra])


def assert_refused(result, path, problem):
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.splitlines() == [f"overlapscope: error: {path}: {problem}"]


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
    assert [r.getMessage() for r in caplog.records] == [f"{path}: {warning}"]
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
