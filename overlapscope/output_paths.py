"""Output paths never touch inputs: checked before a command writes anything.

An output that is an input file, lies inside a run directory (the next read would take it for a
rank's trace, or it would replace one), or would replace a trace overlapscope did not write, is
refused with one line naming the option. Standard library only (the CLI imports it at once).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from .errors import OverlapscopeError

_TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".nsys-rep")


def check_output(output: str | Path | None, option: str, inputs: Iterable[str | Path]) -> None:
    """Raise OverlapscopeError when writing `output` (given as `option`) could touch an input."""
    if output is None or str(output) == "-":
        return
    out = Path(output)
    target = out.resolve()
    if out.is_dir():
        raise OverlapscopeError(f"{option} {output} is a directory; give a file name")
    for given in inputs:
        src = Path(given)
        if not src.exists():
            continue
        if src.is_dir():
            folder = src.resolve()
            if target == folder or folder in target.parents:
                raise OverlapscopeError(f"{option} {output} is inside the run directory {given}: it would be read "
                                        "as a trace next time, or replace one; write it elsewhere")
        elif target == src.resolve() or (out.exists() and os.path.samefile(out, src)):
            raise OverlapscopeError(f"{option} {output} is the input {given}: it would be overwritten; write it "
                                    "elsewhere")
    if out.is_file() and out.name.lower().endswith(_TRACE_SUFFIXES):
        from .ingest.own_outputs import written_by_overlapscope

        if written_by_overlapscope(out) is None:
            raise OverlapscopeError(f"{option} {output} exists and is not a file overlapscope wrote (a trace?); "
                                    "it is never replaced: write elsewhere")


def check_outputs(outputs: dict[str, str | Path | None], inputs: Iterable[str | Path]) -> None:
    """check_output for each (option, path), and no two options naming one file."""
    inputs = list(inputs)
    seen: dict[Path, str] = {}
    for option, output in outputs.items():
        check_output(output, option, inputs)
        if output is not None:
            key = Path(output).resolve()
            if key in seen:
                raise OverlapscopeError(f"{seen[key]} and {option} name the same file {output}")
            seen[key] = option
