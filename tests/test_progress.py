"""The progress bar counts bytes of the trace files read: it moves inside one large file (gzip or
not), on the pool too, and ends at the files' total whether or not a job read them (a cache hit)."""
from __future__ import annotations

import gzip
import os
import random
from pathlib import Path

import pytest

from overlapscope.core.progress import listening
from overlapscope.ingest import kineto_parse
from overlapscope.ingest.kineto_parse import gunzip_chunks, read_bytes
from overlapscope.pipeline import pool

CHUNK = 4096


def json_text(n_events: int, seed: int) -> bytes:
    """A Kineto-shaped document that gzip cannot squeeze to nothing (random names and times)."""
    rng = random.Random(seed)
    events = ",".join(f'{{"ph":"X","cat":"kernel","name":"k{rng.getrandbits(40):x}","ts":{rng.random() * 1e6:.3f},"dur":1}}'
                      for _ in range(n_events))
    return f'{{"traceEvents":[{events}]}}'.encode()


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(kineto_parse, "READ_CHUNK", CHUNK)


@pytest.mark.parametrize("name", ["rank0.json", "rank0.json.gz"])
def test_read_bytes_reports_every_chunk_as_it_reads(tmp_path, small_chunks, name):
    text = json_text(3000, 1)
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    reports: list[int] = []
    with listening(reports.append):
        assert read_bytes(path) == text
    assert sum(reports) == path.stat().st_size
    assert len(reports) == -(-path.stat().st_size // CHUNK) > 3


def test_streamed_gunzip_equals_gzip_decompress_whatever_the_chunk_boundaries():
    """Member ends, zero padding and the next member's magic straddling chunks."""
    a, b = gzip.compress(b'{"traceEvents": [' * 50), gzip.compress(b"]}")
    for data in (a, a + b, a + b"\x00\x00\x00" + b, a + b + b"\x00", a + b"\x00" * 5 + b + b"\x00" * 3):
        for size in (1, 2, 3, 7, len(a) - 1, len(a), len(a) + 1, len(data)):
            chunks = [data[i:i + size] for i in range(0, len(data), size)]
            assert gunzip_chunks(chunks) == gzip.decompress(data), (len(data), size)


@pytest.mark.parametrize("damage", ["cut", "trailing garbage", "one trailing byte"])
def test_streamed_gunzip_rejects_what_gzip_rejects(damage):
    good = gzip.compress(b'{"traceEvents": []}' * 20)
    bad = {"cut": good[:-3], "trailing garbage": good + b"xx", "one trailing byte": good + b"\x00\x00x"}[damage]
    with pytest.raises(Exception):
        gzip.decompress(bad)
    for size in (1, 5, len(bad)):
        with pytest.raises((EOFError, gzip.BadGzipFile)):
            gunzip_chunks([bad[i:i + size] for i in range(0, len(bad), size)])


class Recorded(pool.Progress):
    """Progress that keeps every value it showed."""

    seen: list[tuple[int, int]] = []

    def tick(self, advance: int = 0) -> None:
        super().tick(advance)
        Recorded.seen.append((self.done, self.total))


@pytest.fixture
def recorded(monkeypatch):
    Recorded.seen = []
    monkeypatch.setattr(pool, "Progress", Recorded)
    return Recorded.seen


def read_length(path: Path) -> int:
    return len(read_bytes(path))


def no_read(path: Path) -> str:
    return path.name  # a cache hit: the job reads none of the file's bytes


def test_one_large_file_advances_while_it_is_read(tmp_path, small_chunks, recorded):
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json_text(5000, 2)))
    size = path.stat().st_size
    assert pool.map_files(read_length, [path]) == [len(json_text(5000, 2))]
    done = [d for d, _ in recorded]
    assert {t for _, t in recorded} == {size}
    assert len({d for d in done if 0 < d < size}) > 3, "the bar must move before the file is read"
    assert done == sorted(done) and done[-1] == size


def test_a_large_file_shows_its_bar_in_bytes(tmp_path, small_chunks, monkeypatch):
    """On a terminal, past PROGRESS_AFTER_S: a rich bar whose count is the bytes read so far."""
    monkeypatch.setattr(pool, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    path = tmp_path / "rank0.json"
    path.write_bytes(json_text(2000, 3))
    shown: list[float] = []

    def read_and_look(p: Path) -> int:
        with listening(lambda n: (progress.tick(n), shown.append(progress._bar.tasks[0].completed))):
            return len(read_bytes(p))

    with pool.Progress(path.stat().st_size, "reading", unit="bytes") as progress:
        read_and_look(path)
    assert shown == sorted(shown) and shown[-1] == path.stat().st_size and shown[0] < shown[-1]


@pytest.mark.parametrize("func", [read_length, no_read], ids=["read", "cached"])
def test_the_pool_counts_bytes_and_ends_at_the_total(tmp_path, small_chunks, recorded, func):
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"rank{i}.json.gz")
        paths[-1].write_bytes(gzip.compress(json_text(1000 * (i + 1), i)))
    total = sum(p.stat().st_size for p in paths)
    pool.map_files(func, paths, workers=2)
    assert recorded[-1] == (total, total)  # every byte once: read ones reported, cached ones at the end
    assert all(d <= total for d, _ in recorded)


def test_unreadable_size_counts_nothing(tmp_path):
    assert pool.file_bytes([tmp_path / "missing.json", tmp_path / "also"]) == 0
    (tmp_path / "a.json").write_bytes(b"{}")
    assert pool.file_bytes(tmp_path / "a.json") == 2 == os.path.getsize(tmp_path / "a.json")
