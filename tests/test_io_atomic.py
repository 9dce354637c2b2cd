"""io_atomic: the one atomic writer. Whole file or none, the user's umask, one-line errors."""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from overlapscope.errors import OverlapscopeError
from overlapscope.io_atomic import atomic_path, umask, write_bytes, write_text

PACKAGE = Path(__file__).resolve().parent.parent / "overlapscope"


@pytest.fixture
def mask():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def test_mode_follows_the_umask_not_mkstemp(tmp_path, mask):
    assert umask() == mask
    write_text(tmp_path / "a.txt", "x")
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640
    assert (tmp_path / "a.txt").read_text() == "x"


def test_replaces_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "b.bin"  # the folder is made
    write_bytes(target, b"old")
    write_bytes(target, b"new")
    assert target.read_bytes() == b"new" and os.listdir(target.parent) == ["b.bin"]


def test_a_failing_writer_keeps_the_old_file(tmp_path):
    target = tmp_path / "c.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["c.json"]


def test_an_unwritable_place_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(OverlapscopeError, match=r"file/y\.txt: cannot write: ") as info:
        write_text(tmp_path / "file" / "y.txt", "z")  # its folder is a file
    assert "\n" not in str(info.value)


def test_no_writer_bypasses_it():
    """Every rename-into-place in the package is io_atomic's."""
    pattern = re.compile(r"os\.replace\(|mkstemp\(|os\.rename\(")
    users = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if pattern.search(p.read_text())]
    assert users == ["io_atomic.py"]
