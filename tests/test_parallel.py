"""Per-rank map + cross-rank reduce: the same Analysis (and the same errors) as the serial path."""
from __future__ import annotations

import dataclasses
import gzip
import logging
from pathlib import Path

import orjson
import pandas as pd
import pytest
from click.testing import CliRunner

import overlapscope
from kineto_builder import KinetoTrace
from overlapscope.pipeline.run import analyze_run
from overlapscope.cli import main
from overlapscope.errors import OverlapscopeError
from overlapscope.pipeline import pool as parallel

BAD = Path(__file__).parent / "data" / "bad"


def rank_trace(rank: int | None, shift_ns: int) -> KinetoTrace:
    """Two steps; rank-dependent AllReduce timing so every rank has its own numbers."""
    t = KinetoTrace(rank=rank, world_size=3, base_ns=1_711_964_646_000_000_000)
    for s in range(2):
        o = s * 100_000
        t.step(s, o, o + 100_000)
        t.annotation("forward", o + 500, o + 9_000)
        t.kernel("void gemm()", o + 10_000, o + 40_000, launch_ns=o + 1_000)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", o + 30_000 + shift_ns, o + 55_000 + shift_ns,
                 stream=20, launch_ns=o + 2_000, **{"Process Group Name": "0", "dtype": "Float",
                                                    "In msg nelems": 256, "Collective name": "allreduce"})
        t.memcpy(o + 60_000, o + 70_000, launch_ns=o + 3_000)
    return t


@pytest.fixture
def run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    # Files in an order unlike rank order, one rank numbered by file order.
    rank_trace(2, 4_000).write(d / "a.json.gz")
    rank_trace(0, 0).write(d / "b.json")
    rank_trace(None, 9_000).write(d / "c.json")
    return d


def assert_same_analysis(a, b):
    """Every field of the Analysis, frames to the bit."""
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, pd.DataFrame):
            pd.testing.assert_frame_equal(x, y, check_exact=True, obj=field.name)
        else:
            assert x == y, field.name


def serial(path):
    return overlapscope.analyze(overlapscope.load_run(path, pool_workers=1, cache=False))


def test_known_answer_and_serial_equals_process_pool(run_dir):
    ref = serial(run_dir)
    assert ref.totals["rank"].tolist() == [0, 1, 2]
    # compute [10,40) µs, AllReduce [30+shift, 55+shift): exposed = 15 + shift µs per step, 2 steps.
    assert ref.totals["exposed_comm_ns"].tolist() == [2 * 15_000, 2 * 24_000, 2 * 19_000]
    assert ref.run["rank_from"] == {"0": "distributedInfo", "1": "order", "2": "distributedInfo"}
    # The per-rank map saw rank 1 as -1 (unnumbered); the reduce must place its comm under rank 1.
    assert ref.collectives["rank"].value_counts().sort_index().to_dict() == {0: 2, 1: 2, 2: 2}
    assert_same_analysis(ref, analyze_run(run_dir, pool_workers=2, cache=False))
    assert_same_analysis(ref, analyze_run(run_dir, pool_workers=1, cache=False))
    assert_same_analysis(ref, overlapscope.analyze(overlapscope.load_run(run_dir, pool_workers=2, cache=False)))


@pytest.fixture(scope="module")
def dask_client():
    import distributed

    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None, silence_logs=logging.ERROR)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def test_dask_local_cluster_gives_the_serial_analysis(run_dir, dask_client):
    assert_same_analysis(serial(run_dir), analyze_run(run_dir, dask_client=dask_client, cache=False))


def test_cli_scheduler_option_matches_the_default(run_dir, dask_client):
    outs = []
    for extra in ([], ["--scheduler", dask_client.scheduler.address]):
        result = CliRunner().invoke(main, ["analyze", str(run_dir), "--format", "json", "--no-cache", *extra])
        assert result.exit_code == 0, result.output
        outs.append(result.stdout)
    assert outs[0] == outs[1]
    assert [r["rank"] for r in orjson.loads(outs[0])["ranks"]] == [0, 1, 2]


def test_workers_and_scheduler_together_is_a_one_line_error(run_dir):
    result = CliRunner().invoke(main, ["analyze", str(run_dir), "--workers", "2", "--scheduler", "tcp://x:1"])
    assert result.exit_code == 2 and "not both" in result.stderr and result.stdout == ""


def _error_of(func):
    with pytest.raises(OverlapscopeError) as info:
        func()
    return str(info.value)


@pytest.mark.parametrize("bad", ["malformed.json", "empty_step.json"])
def test_errors_are_the_serial_ones(tmp_path, bad, dask_client):
    """A read error (first bad file in order) and an analysis error surface as in a serial run."""
    d = tmp_path / "run"
    d.mkdir()
    rank_trace(0, 0).write(d / "a.json")
    (d / "b.json").write_bytes((BAD / bad).read_bytes())
    rank_trace(3, 0).write(d / "c.json")
    (d / "d.json").write_bytes(b"{")
    expected = _error_of(lambda: serial(d))
    assert _error_of(lambda: analyze_run(d, pool_workers=2, cache=False)) == expected
    assert _error_of(lambda: analyze_run(d, dask_client=dask_client, cache=False)) == expected
    assert "b.json" in expected or "d.json" in expected


def _warn_and_measure(path: Path, extra: int) -> int:
    logging.getLogger("overlapscope.test").warning("worker saw %s", path.name)
    return len(path.read_bytes()) + extra


def test_pool_returns_in_order_and_replays_worker_warnings(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    files = []
    for name, size in (("c", 3), ("a", 1), ("b", 2)):
        files.append(tmp_path / name)
        files[-1].write_bytes(b"x" * size)
    assert parallel.map_files(_warn_and_measure, files, 10, workers=2) == [13, 11, 12]
    assert [r.getMessage() for r in caplog.records if r.name == "overlapscope.test"] == \
        ["worker saw c", "worker saw a", "worker saw b"]


def test_pool_size_is_bounded_by_files_cores_and_memory(tmp_path, monkeypatch):
    files = []
    for i in range(8):
        f = tmp_path / f"r{i}.json.gz"
        f.write_bytes(gzip.compress(b" " * (10 << 20)))  # 10 MiB of JSON each
        files.append(f)
    assert parallel.json_bytes(files[0]) == 10 << 20
    monkeypatch.setattr(parallel, "cpu_count", lambda: 4)
    monkeypatch.setattr(parallel, "available_memory", lambda: None)
    assert parallel.pool_size(files) == 4
    assert parallel.pool_size(files[:2]) == 2
    assert parallel.pool_size(files, workers=3) == 3
    per_worker = parallel.BASE_WORKER_BYTES + parallel.BYTES_PER_JSON_BYTE * (10 << 20)
    monkeypatch.setattr(parallel, "available_memory", lambda: 2 * per_worker + 1)
    assert parallel.pool_size(files) == 2
    monkeypatch.setattr(parallel, "available_memory", lambda: 1)
    assert parallel.pool_size(files) == 1


def test_jobs_keep_the_serial_reading_order_and_read_nsys_together(tmp_path):
    from overlapscope.ingest import plan_jobs

    a, b, c, d = (tmp_path / n for n in ("a.json", "b.sqlite", "c.json.gz", "d.sqlite"))
    # Serially: the Kineto reader gets a and c (each on its own), the nsys reader b and d in one call.
    assert plan_jobs([a, b, c, d]) == [[a], [c], [b, d]]


def test_nsys_export_same_analysis_on_the_pool(real_traces):
    path = real_traces / "nsys" / "mfu_2gpu_before.sqlite"
    assert_same_analysis(serial(path), analyze_run(path, pool_workers=2, cache=False))


def test_many_small_files_go_to_the_pool_in_batches_in_order(tmp_path, caplog, monkeypatch):
    """PARALLEL_MIN_FILES files, however small, are read on the pool, a batch a task, in file order."""
    caplog.set_level(logging.WARNING)
    files = []
    for i in range(parallel.PARALLEL_MIN_FILES):
        files.append(tmp_path / f"r{i:03d}")
        files[-1].write_bytes(b"x" * (i % 5))
    assert parallel.should_parallelize(files) and not parallel.should_parallelize(files[:-1])
    submitted: list[range] = []
    real_batches = parallel.batches
    monkeypatch.setattr(parallel, "batches", lambda sizes, n: submitted.extend(real_batches(sizes, n)) or submitted)
    assert parallel.map_files(_warn_and_measure, files, 1, workers=2) == [i % 5 + 1 for i in range(len(files))]
    assert [r.getMessage() for r in caplog.records if r.name == "overlapscope.test"] == \
        [f"worker saw {f.name}" for f in files]
    assert [i for group in submitted for i in group] == list(range(len(files)))
    assert 1 < len(submitted) < len(files)


def test_batches_split_by_count_and_by_bytes(monkeypatch):
    monkeypatch.setattr(parallel, "BATCHES_PER_WORKER", 2)
    assert parallel.batches([1] * 10, 2) == [range(0, 3), range(3, 6), range(6, 9), range(9, 10)]
    assert parallel.batches([], 2) == []
    big = parallel.BATCH_MAX_BYTES
    # A batch closes before the file that would take it past BATCH_MAX_BYTES; a large file is one alone.
    assert parallel.batches([1, big, 1, 1], 1) == [range(0, 1), range(1, 2), range(2, 4)]


def _warn_same(path: Path) -> str:
    logging.getLogger("overlapscope.test").warning("%s: step 2 launched no device work", path)
    return path.name


@pytest.mark.parametrize("workers", [1, 2])  # read in-process, and on the pool
def test_a_warning_repeated_over_files_is_counted_not_repeated(tmp_path, caplog, workers):
    caplog.set_level(logging.WARNING)
    files = [tmp_path / f"r{i}" for i in range(10)]
    for f in files:
        f.write_bytes(b"x")
    # a second root handler beside caplog's: each record is counted once, not once per handler
    log_file = tmp_path / "stderr.txt"
    handler = logging.StreamHandler(open(log_file, "w"))
    logging.getLogger().addHandler(handler)
    try:
        assert parallel.map_files(_warn_same, files, workers=workers) == [f.name for f in files]
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    want = [f"{f}: step 2 launched no device work" for f in files[:parallel.REPEATS_SHOWN]] + [
        f"step 2 launched no device work [the same in {10 - parallel.REPEATS_SHOWN:,} more files, the last {files[-1]}]"]
    assert [r.getMessage() for r in caplog.records if r.name == "overlapscope.test"] == want
    assert log_file.read_text().splitlines() == want
    assert not any(h.filters for h in logging.getLogger().handlers)  # the fold is gone afterwards


def test_a_worker_warning_is_printed_once_by_the_parent(tmp_path):
    """A forked worker inherits the root logger's handlers; its warnings reach them only by replay."""
    log_file = tmp_path / "stderr.txt"
    handler = logging.StreamHandler(open(log_file, "w"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        files = [tmp_path / f"r{i}" for i in range(2)]
        for f in files:
            f.write_bytes(b"x")
        parallel.map_files(_warn_same, files, workers=2)
    finally:
        root.removeHandler(handler)
        handler.close()
    assert log_file.read_text().splitlines() == [f"{f}: step 2 launched no device work" for f in files]


def test_the_collector_is_left_as_it_was_after_the_pool_and_the_reduce(run_dir):
    """The pool and the reduce freeze the heap and may pause the collector: both undone after, so a
    program that analyses many runs neither leaks frozen objects nor runs without a collector."""
    import gc

    before = gc.get_freeze_count()
    analyze_run(run_dir, cache=False, pool_workers=2)
    assert gc.isenabled() and gc.get_freeze_count() == before
    gc.disable()
    try:
        analyze_run(run_dir, cache=False, pool_workers=2)
        assert not gc.isenabled() and gc.get_freeze_count() == before  # a caller's paused collector stays paused
    finally:
        gc.enable()
