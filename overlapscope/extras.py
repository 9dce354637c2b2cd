"""Optional dependencies: a command that needs an extra says which one, in one line (exit 2).

Checked with `importlib.util.find_spec` before anything imports them, so a missing extra is named
instead of surfacing as an ImportError deep inside the command.
"""
from __future__ import annotations

import importlib.util

from .errors import OverlapscopeError

EXTRAS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "dash": ("dash", "plotly"),
}
"""pyproject.toml's optional-dependencies, by the modules each one brings."""


def require(extra: str, what: str) -> None:
    """Raise OverlapscopeError naming `pip install 'overlapscope[extra]'` when a module of `extra` is absent."""
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise OverlapscopeError(f"{what} needs {' and '.join(missing)}, which is not installed: "
                                f"pip install 'overlapscope[{extra}]'")
