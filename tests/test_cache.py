"""The Parquet cache: a hit gives the very table a parse gives; nothing stale or broken is ever used."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat

import pandas as pd
import pytest
from click.testing import CliRunner

from kineto_builder import KinetoTrace
from overlapscope.cli import main
from overlapscope.ingest import ReadOptions
from overlapscope.pipeline import cache as cache_mod
from overlapscope.pipeline.cache import LOCAL_DIR, CacheConfig, cached_read, read_cached
from overlapscope.ingest.kineto import read_kineto

OPTIONS = {"step_pattern": "x", "comm_patterns": []}


def trace(n_steps: int = 2, gemm_ns: int = 30_000) -> KinetoTrace:
    t = KinetoTrace(rank=3, world_size=4, base_ns=1_711_964_646_000_000_000)
    for s in range(n_steps):
        o = s * 100_000
        t.step(s, o, o + 100_000)
        t.kernel("void gemm()", o + 10_000, o + 10_000 + gemm_ns)
        t.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", o + 30_000, o + 55_000, stream=20)
    return t


def same(a, b):
    pd.testing.assert_frame_equal(a.events, b.events, check_exact=True)
    pd.testing.assert_frame_equal(a.steps, b.steps, check_exact=True)
    assert (a.rank, a.device, a.rank_from, a.world_size, a.meta, a.source) == \
        (b.rank, b.device, b.rank_from, b.world_size, b.meta, b.source)


class CountingReader:
    def __init__(self):
        self.calls = 0

    def __call__(self, path):
        self.calls += 1
        return read_kineto(path)


@pytest.fixture
def cfg(tmp_path):
    # beside_trace=True: these tests are about the folder beside the trace, which the suite's
    # $OVERLAPSCOPE_CACHE_DIR (conftest) would otherwise turn off.
    return CacheConfig(min_bytes=0, user_dir=tmp_path / "user-cache", beside_trace=True)


def entries(directory):
    return sorted(p.name for p in directory.glob("*.parquet")) if directory.is_dir() else []


def test_second_read_is_a_hit_with_the_identical_table(tmp_path, cfg):
    path = trace().write(tmp_path / "rank3.json.gz")
    reader = CountingReader()
    cold = cached_read(path, reader, OPTIONS, cfg)
    warm = cached_read(path, reader, OPTIONS, cfg)
    assert reader.calls == 1
    same(cold, warm)
    same(warm, read_kineto(path))
    assert len(entries(tmp_path / LOCAL_DIR)) == 1 and entries(cfg.user_dir) == []


def test_changed_content_same_size_is_a_miss(tmp_path, cfg):
    path = trace(gemm_ns=30_000).write(tmp_path / "rank3.json")
    reader = CountingReader()
    first = cached_read(path, reader, OPTIONS, cfg)
    size, mtime = path.stat().st_size, path.stat().st_mtime_ns
    trace(gemm_ns=40_000).write(path)  # same length, other numbers
    os.utime(path, ns=(mtime, mtime))    # even the same mtime
    assert path.stat().st_size == size
    second = cached_read(path, reader, OPTIONS, cfg)
    assert reader.calls == 2
    assert not first.events["end_ns"].equals(second.events["end_ns"])
    same(second, read_kineto(path))
    assert len(entries(tmp_path / LOCAL_DIR)) == 1  # the stale entry was replaced


def test_reader_options_and_file_name_are_part_of_the_key(tmp_path, cfg):
    path = trace().write(tmp_path / "rank3.json")
    reader = CountingReader()
    cached_read(path, reader, OPTIONS, cfg)
    cached_read(path, reader, {**OPTIONS, "comm_patterns": ["gemm"]}, cfg)
    copy = tmp_path / "rank5.json"
    shutil.copy(path, copy)
    cached_read(copy, reader, OPTIONS, cfg)
    assert reader.calls == 3


def test_corrupt_or_foreign_entry_is_ignored_and_replaced(tmp_path, cfg):
    path = trace().write(tmp_path / "rank3.json")
    reader = CountingReader()
    good = cached_read(path, reader, OPTIONS, cfg)
    [entry] = (tmp_path / LOCAL_DIR).glob("*.parquet")
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])  # half-written
    same(cached_read(path, reader, OPTIONS, cfg), good)
    assert reader.calls == 2
    # A complete, valid entry of another trace under this trace's name: its key does not match.
    other = trace(n_steps=3).write(tmp_path / "other.json")
    cached_read(other, CountingReader(), OPTIONS, cfg)
    [other_entry] = (tmp_path / LOCAL_DIR).glob("other.json.*.parquet")
    shutil.copy(other_entry, entry)
    same(cached_read(path, reader, OPTIONS, cfg), good)
    assert reader.calls == 3
    # Leftover temp files of an interrupted write are never read.
    (tmp_path / LOCAL_DIR / f".{entry.name}.123.tmp").write_bytes(b"garbage")
    same(cached_read(path, reader, OPTIONS, cfg), good)
    assert reader.calls == 3


def test_read_only_directory_uses_the_user_cache_and_never_writes_beside_the_trace(tmp_path, cfg):
    runs = tmp_path / "runs"
    runs.mkdir()
    path = trace().write(runs / "rank3.json.gz")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    runs.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        reader = CountingReader()
        cold = cached_read(path, reader, OPTIONS, cfg)
        warm = cached_read(path, reader, OPTIONS, cfg)
        assert reader.calls == 1
        same(cold, warm)
        assert sorted(p.name for p in runs.iterdir()) == ["rank3.json.gz"]
        assert len(entries(cfg.user_dir)) == 1
    finally:
        runs.chmod(stat.S_IRWXU)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_small_traces_and_disabled_cache_are_not_cached(tmp_path):
    path = trace().write(tmp_path / "rank3.json")
    reader = CountingReader()
    cached_read(path, reader, OPTIONS, CacheConfig(user_dir=tmp_path / "u"))  # under the default 1 MiB
    cached_read(path, reader, OPTIONS, CacheConfig(enabled=False, min_bytes=0, user_dir=tmp_path / "u"))
    assert reader.calls == 2 and not (tmp_path / LOCAL_DIR).exists() and not (tmp_path / "u").exists()


def test_read_cached_caches_kineto_through_the_registry(tmp_path, cfg):
    path = trace().write(tmp_path / "rank3.json")
    [cold] = read_cached([path], ReadOptions(), cfg)
    [warm] = read_cached([path], ReadOptions(), cfg)
    same(cold, warm)
    assert len(entries(tmp_path / LOCAL_DIR)) == 1


def big_run(directory, ranks=2):
    """Traces over the default 1 MiB threshold, so the CLI's default cache takes them."""
    directory.mkdir()
    for r in range(ranks):
        t = trace(n_steps=2500)
        t.rank = r
        t.write(directory / f"rank{r}.json")
        assert (directory / f"rank{r}.json").stat().st_size > 1 << 20
    return directory


def test_cli_numbers_identical_with_and_without_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("OVERLAPSCOPE_CACHE_DIR")  # the default: beside the trace
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    run = big_run(tmp_path / "run")
    outputs = []
    for extra in (["--no-cache"], [], [], ["--no-cache"]):  # uncached, cold, warm, uncached
        result = CliRunner().invoke(main, ["analyze", str(run), "--format", "json", *extra])
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
        if not extra:
            assert len(entries(run / LOCAL_DIR)) == 2
    assert outputs[0] == outputs[1] == outputs[2] == outputs[3]
    import orjson

    totals = [r["total"] for r in orjson.loads(outputs[0])["ranks"]]
    # Per step: AllReduce [30, 55) µs minus gemm [10, 40) µs = 15 µs exposed, 2,500 steps per rank.
    assert [t["exposed_comm_ns"] for t in totals] == [2500 * 15_000] * 2


def test_entry_metadata_is_json_not_pickle(tmp_path, cfg):
    import pyarrow.parquet as pq

    path = trace().write(tmp_path / "rank3.json")
    cached_read(path, CountingReader(), OPTIONS, cfg)
    [entry] = (tmp_path / LOCAL_DIR).glob("*.parquet")
    meta = pq.read_schema(entry).metadata
    assert set(meta) == {b"pandas", cache_mod.META_KEY}
    for value in meta.values():
        assert value.lstrip()[:1] == b"{"  # JSON objects only
