"""Where the project's real traces live (tests/data/real, committed), for tests that read them.

They are part of the checkout, so the suite needs nothing beside it. Tests mark what they read with
`@pytest.mark.needs_data(path, ...)` (and `@pytest.mark.needs_browser` for Chromium); conftest.py
decides, in one place, what a missing one means: missing committed data always fails.
"""
from __future__ import annotations

from pathlib import Path

REAL_TRACES = Path(__file__).resolve().parent / "data" / "real"
