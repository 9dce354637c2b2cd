"""Where the project's real traces live (../shared beside the checkout), for tests that read them.

Tests mark what they need with `@pytest.mark.needs_shared(path, ...)` or `@pytest.mark.needs_browser`;
conftest.py decides, in one place, what a missing one means.
"""
from __future__ import annotations

from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SHARED_TRACES = SHARED / "traces"
