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
