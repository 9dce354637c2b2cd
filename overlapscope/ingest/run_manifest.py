"""The run manifest (`manifest.json`, written by `overlapscope profile`), checked field by field.

Only what analysis uses is checked, each for its type and range: world size (a huge one would make
overlapscope allocate per-rank structures of that size), ranks within it, per-rank completeness.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import orjson

from ..errors import OverlapscopeError
from .kineto_checks import MAX_WORLD_SIZE

if TYPE_CHECKING:
    from ..core.table import RankTrace

MANIFEST = "manifest.json"


def load_manifest(path: Path) -> dict[str, Any]:
    """The checked manifest of the run at `path` (a directory, or a trace beside one); {} when none."""
    manifest = (path if path.is_dir() else path.parent) / MANIFEST
    if not manifest.is_file():
        return {}
    try:
        data = orjson.loads(manifest.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OverlapscopeError(f"unreadable run manifest ({exc})", manifest) from None
    return checked_manifest(data, manifest)


def checked_manifest(data: Any, manifest: Path) -> dict[str, Any]:
    def bad(field: str, value: Any, expected: str) -> OverlapscopeError:
        shown = repr(value)
        return OverlapscopeError(f"{field} is {shown if len(shown) <= 60 else shown[:57] + '...'}, expected {expected}",
                                 manifest)

    if not isinstance(data, dict):
        raise bad("the manifest", data, "a JSON object")
    size = data.get("world_size")
    if size is not None and (type(size) is not int or not 1 <= size <= MAX_WORLD_SIZE):
        raise bad("world_size", size, f"an integer from 1 to {MAX_WORLD_SIZE}")
    limit = size if size is not None else MAX_WORLD_SIZE

    def rank_number(text: Any, field: str) -> int:
        number = int(text) if isinstance(text, str) and text.isdigit() else text
        if type(number) is not int or not 0 <= number < limit:
            raise bad(field, text, f"a rank from 0 to {limit - 1}")
        return number

    for key in ("steps", "skip_first"):
        value = data.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise bad(key, value, "a non-negative integer")
    missing = data.get("missing_ranks")
    if missing is not None:
        if not isinstance(missing, list):
            raise bad("missing_ranks", missing, "a list of ranks")
        for i, r in enumerate(missing):
            rank_number(r, f"missing_ranks[{i}]")
    for key in ("ranks", "traces", "devices"):
        value = data.get(key)
        if value is not None and not isinstance(value, dict):
            raise bad(key, value, "an object keyed by rank")
        for r in (value or {}):
            rank_number(r, f"{key} key")
    for r, info in (data.get("ranks") or {}).items():
        if info is not None and not isinstance(info, dict):
            raise bad(f"ranks[{r!r}]", info, "an object")
        info = info or {}
        if info.get("complete") is not None and type(info["complete"]) is not bool:
            raise bad(f"ranks[{r!r}].complete", info["complete"], "true or false")
        recorded = info.get("steps_recorded")
        if recorded is not None and (type(recorded) is not int or recorded < 0):
            raise bad(f"ranks[{r!r}].steps_recorded", recorded, "a non-negative integer")
    return data


def incomplete_ranks(manifest: dict[str, Any]) -> set[int]:
    """Ranks the manifest says stopped before recording every step (a crash, an early exit)."""
    return {int(r) for r, info in (manifest.get("ranks") or {}).items() if (info or {}).get("complete") is False}


def mark_incomplete(traces: Iterable[RankTrace], manifest: dict[str, Any]) -> None:
    """Flag (meta["incomplete"]) the ranks the manifest says stopped early: their steps are analyzed
    up to the one they stopped in (analysis/windows.py)."""
    stopped = incomplete_ranks(manifest)
    for t in traces:
        if t.rank in stopped:
            t.meta["incomplete"] = True
