from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SHARED_TRACES = SHARED / "traces"


@pytest.fixture
def shared_traces() -> Path:
    if not SHARED_TRACES.is_dir():
        pytest.skip("../shared/traces is not beside this checkout (only the project's own clone has it)")
    return SHARED_TRACES


@pytest.fixture(autouse=True, scope="session")
def _cache_in_tmp(tmp_path_factory):
    """Tests never leave Parquet caches in the user's cache dir (or beside ../shared's traces)."""
    import os

    old = os.environ.get("OVERLAPSCOPE_CACHE_DIR")
    os.environ["OVERLAPSCOPE_CACHE_DIR"] = str(tmp_path_factory.mktemp("overlapscope-cache"))
    yield
    if old is None:
        os.environ.pop("OVERLAPSCOPE_CACHE_DIR", None)
    else:
        os.environ["OVERLAPSCOPE_CACHE_DIR"] = old
