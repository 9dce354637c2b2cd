"""A team's comm rules, written once: `comm_patterns` in `overlapscope.toml` beside the run, or in
`[tool.overlapscope]` of the nearest `pyproject.toml` (from the working directory up).

    [tool.overlapscope]                 # or, in overlapscope.toml, at the top level
    comm_patterns = ["my_ep::token_dispatch=all_to_all", "fused_ar_kernel=all_reduce"]

Each entry is what `--comm-pattern` takes (REGEX[=collective]); command-line patterns come first.
"""
from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from ..errors import OverlapscopeError
from .comm_rules import parse_user_rule

CONFIG_NAME = "overlapscope.toml"


def config_files(run_path: Path, cwd: Path | None = None) -> list[Path]:
    """The config files that apply to a run, in order: overlapscope.toml beside it, then pyproject.toml."""
    run_path = Path(run_path)
    found = []
    beside = (run_path if run_path.is_dir() else run_path.parent) / CONFIG_NAME
    if beside.is_file():
        found.append(beside)
    here = (cwd or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / "pyproject.toml").is_file():
            found.append(directory / "pyproject.toml")
            break
    return found


def _section(path: Path) -> dict[str, Any]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise OverlapscopeError(f"unreadable config ({exc})", path) from None
    tool = doc.get("tool", {}).get("overlapscope") if isinstance(doc.get("tool"), dict) else None
    if isinstance(tool, dict):
        return tool
    return doc if path.name == CONFIG_NAME else {}


def config_comm_patterns(run_path: Path, cwd: Path | None = None) -> tuple[str, ...]:
    """Every `comm_patterns` entry of the run's config files, each checked (errors name the file)."""
    out: list[str] = []
    for path in config_files(run_path, cwd):
        patterns = _section(path).get("comm_patterns", [])
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise OverlapscopeError("comm_patterns must be a list of strings (REGEX or REGEX=collective)", path)
        for p in patterns:
            parse_user_rule(p, source=str(path))
        out.extend(patterns)
    return tuple(out)


def with_config(patterns: tuple[str, ...], run_path: Path) -> tuple[str, ...]:
    """Command-line patterns (checked), then the config files' ones."""
    for p in patterns:
        parse_user_rule(p)
    return tuple(patterns) + config_comm_patterns(run_path)
