"""Where the project's real traces live (tests/data/real, committed), for tests that read them.

They used to be read from ../shared beside the checkout; they are in the project now so the suite
passes on a clone with nothing beside it. Tests still mark what they need with
`@pytest.mark.needs_shared(path, ...)` or `@pytest.mark.needs_browser`; conftest.py decides, in one
place, what a missing one means.
"""
from __future__ import annotations

from pathlib import Path

REAL_TRACES = Path(__file__).resolve().parent / "data" / "real"
