"""Baseline files for the CI gate: what one run measured, per rank and step, as schema-tagged JSON.

Columnar JSON (`{"rank": [...], "step": [...], "exposed_comm_ns": [...]}`) keeps a 512-rank,
100-step baseline small, reads back into a DataFrame in one call, and holds nothing executable.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from overlapscope.analysis.result import Analysis
from overlapscope.errors import OverlapscopeError
from overlapscope.io_atomic import write_bytes

SCHEMA = "overlapscope.baseline/1"
STEP_COLUMNS = (
    "window_ns", "compute_ns", "comm_ns", "overlapped_ns", "exposed_comm_ns", "exposed_memcpy_ns",
    "idle_ns", "overlap_pct", "exposed_comm_pct", "critical_comm_ns",
)
BREAKDOWNS: dict[str, str] = {"by_collective": "collective", "by_group": "group", "by_scope": "scope"}
BREAKDOWN_VALUES = ("count", "comm_ns", "exposed_comm_ns")
# Run identity fields whose difference makes a comparison suspect (warned about, not refused):
# in the run dict analyze() returns, and in the run manifest `overlapscope profile` writes.
IDENTITY_KEYS = ("device", "device_name", "backend")
MANIFEST_KEYS = ("layout", "model", "config", "torch_version", "nccl_version", "cuda_version", "mode")


def build_baseline(analysis: Analysis) -> dict[str, Any]:
    """Everything a later `compare()` needs from one analyzed run, JSON-ready."""
    steps = analysis.steps
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run": _json_safe(analysis.run),
        "steps": _columns(steps, ["rank", "step"], STEP_COLUMNS),
    }
    per_step = analysis.by_key_steps
    for section, key in BREAKDOWNS.items():
        frame = getattr(analysis, section)
        if per_step is not None and not per_step.empty:
            # per-step samples make each key decidable on few ranks (8 ranks x 6 steps, not 8 totals)
            frame = per_step[per_step["section"] == section].rename(columns={"key": key})
        if frame is None or frame.empty or key not in frame.columns:
            doc[section] = {}
            continue
        index = ["rank", "step", key] if "step" in frame.columns else ["rank", key]
        doc[section] = _columns(frame, index, BREAKDOWN_VALUES)
    return doc


def save_baseline(doc: dict[str, Any], path: str | Path) -> None:
    """Write atomically (io_atomic) so a killed job never leaves half a baseline."""
    write_bytes(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n")


def load_baseline(path: str | Path) -> dict[str, Any]:
    try:
        doc = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise OverlapscopeError("baseline file not found", path) from None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OverlapscopeError(f"not a readable JSON baseline ({exc.__class__.__name__})", path) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        found = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise OverlapscopeError(f"not an overlapscope baseline (schema {found!r}, expected {SCHEMA!r})", path)
    steps = doc.get("steps")
    if not isinstance(steps, dict) or not {"rank", "step"} <= steps.keys():
        raise OverlapscopeError("baseline has no per-step samples (steps.rank/steps.step missing)", path)
    lengths = {len(v) for v in steps.values() if isinstance(v, list)}
    if len(lengths) != 1 or len(steps) != sum(isinstance(v, list) for v in steps.values()):
        raise OverlapscopeError("baseline steps columns are not lists of one length", path)
    return doc


def check_compatible(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Raise OverlapscopeError when the runs cannot be compared; return warnings when they differ."""
    cur_run, base_run = current.get("run", {}), baseline.get("run", {})
    where = cur_run.get("path")
    for doc, who, path in ((current, "run", where), (baseline, "baseline", base_run.get("path"))):
        steps = step_frame(doc)
        if steps.empty:
            raise OverlapscopeError(f"{who} has no steps: nothing was measured to compare", path)
        if (steps["step"] < 0).all():
            raise OverlapscopeError(f"{who} has no steps (no ProfilerStep#N or 'step N' ranges): the gate compares "
                                    "per-step samples, profile several steps", path)
    cur_ws, base_ws = cur_run.get("world_size"), base_run.get("world_size")
    if cur_ws and base_ws and int(cur_ws) != int(base_ws):
        raise OverlapscopeError(f"world size {cur_ws}, but the baseline has {base_ws}: different runs", where)
    cur_ranks = set(step_frame(current)["rank"].tolist())
    base_ranks = set(step_frame(baseline)["rank"].tolist())
    if base_ranks - cur_ranks:
        raise OverlapscopeError(f"ranks {_ranks(base_ranks - cur_ranks)} missing (the baseline has ranks "
                                f"{_ranks(base_ranks)})", where)
    if cur_ranks - base_ranks:
        raise OverlapscopeError(f"ranks {_ranks(cur_ranks - base_ranks)} are not in the baseline (it has ranks "
                                f"{_ranks(base_ranks)})", where)
    return identity_differences(base_run, cur_run)


def identity_differences(base_run: dict[str, Any], cur_run: dict[str, Any]) -> list[str]:
    """One line per identity field both runs record with different values (dicts: per sub-key)."""
    pairs = [(k, base_run.get(k), cur_run.get(k)) for k in IDENTITY_KEYS]
    base_m, cur_m = base_run.get("manifest") or {}, cur_run.get("manifest") or {}
    pairs += [(k, base_m.get(k), cur_m.get(k)) for k in MANIFEST_KEYS]
    out = []
    for key, old, new in pairs:
        if isinstance(old, dict) and isinstance(new, dict):
            pairs_sub = [(f"{key}.{k}", old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys(), key=str)]
        else:
            pairs_sub = [(key, old, new)]
        out += [f"{name} differs: baseline {a!r}, this run {b!r}" for name, a, b in pairs_sub
                if a is not None and b is not None and a != b]
    return out


def step_frame(doc: dict[str, Any]) -> pd.DataFrame:
    return _frame(doc.get("steps") or {})


def step_series(doc: dict[str, Any], column: str) -> pd.Series:
    """One step column indexed by (rank, step); undefined values stay NaN (the tests skip them)."""
    steps = step_frame(doc)
    index = pd.MultiIndex.from_arrays([steps["rank"].to_numpy(np.int64), steps["step"].to_numpy(np.int64)],
                                      names=["rank", "step"])
    values = steps[column].to_numpy(np.float64) if column in steps.columns else np.full(len(steps), np.nan)
    return pd.Series(values, index=index, name=column)


def key_matrices(docs: list[dict[str, Any]], section: str, column: str) -> list[pd.DataFrame]:
    """Per-key samples of one breakdown column for each doc: one row per sample, one column per key.

    All matrices share the union of keys. When every doc breaks the section down per step, a
    sample is one (rank, step), and a key absent from a step counts 0 there (a collective that
    appears only in the new run is a regression candidate). Otherwise a sample is one rank's total
    divided by its number of steps.
    """
    key = BREAKDOWNS[section]
    frames = [_frame(doc.get(section) or {}) for doc in docs]
    keys = sorted(set().union(*(set(f[key].astype(str)) for f in frames if key in f.columns)))
    per_step = all("step" in f.columns for f in frames if not f.empty)
    units = ["rank", "step"] if per_step else ["rank"]
    out = []
    for doc, frame in zip(docs, frames):
        steps = step_frame(doc)
        index = pd.MultiIndex.from_frame(steps[units].drop_duplicates()) if per_step else \
            pd.Index(sorted(steps["rank"].unique()), name="rank")
        if frame.empty or column not in frame.columns:
            out.append(pd.DataFrame(0.0, index=index, columns=keys))
            continue
        values = frame.assign(**{key: frame[key].astype(str), column: frame[column].to_numpy(np.float64)})
        matrix = values.pivot_table(index=units, columns=key, values=column, aggfunc="sum")
        matrix = matrix.reindex(index=index, columns=keys).fillna(0.0)
        if not per_step:
            counts = steps.groupby("rank")["step"].nunique().reindex(index).to_numpy(np.float64)
            matrix = matrix.div(np.maximum(counts, 1.0), axis=0)
        out.append(matrix)
    return out


def combine(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """One baseline from several runs of one configuration: their samples, tagged with a `run` index.

    Several runs let the gate measure how far unchanged runs stray from each other on this machine
    (run-to-run noise that per-step samples of one run cannot show) and allow for it.
    """
    if len(docs) == 1:
        return docs[0]
    first = docs[0]["run"]
    for doc in docs[1:]:
        run = doc["run"]
        if run.get("world_size") != first.get("world_size"):
            raise OverlapscopeError(f"world size {run.get('world_size')}, but the first run has "
                                    f"{first.get('world_size')}: one baseline needs runs of one configuration",
                                    run.get("path"))
        if set(step_frame(doc)["rank"]) != set(step_frame(docs[0])["rank"]):
            raise OverlapscopeError("its ranks differ from the first run's: one baseline needs runs of one "
                                    "configuration", run.get("path"))
    out: dict[str, Any] = {"schema": SCHEMA, "run": first, "runs": [d["run"] for d in docs]}
    for section in ("steps", *BREAKDOWNS):
        columns: dict[str, list] = {}
        parts = [d.get(section) or {} for d in docs]
        names = list(dict.fromkeys(name for p in parts for name in p))
        if not names:
            out[section] = {}
            continue
        for i, part in enumerate(parts):
            n = len(next(iter(part.values()))) if part else 0
            columns.setdefault("run", []).extend([i] * n)
            for name in names:
                columns.setdefault(name, []).extend(part.get(name, [None] * n))
        out[section] = columns
    return out


def split_runs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The single-run docs a baseline holds (itself when it was made from one run)."""
    steps = doc.get("steps") or {}
    if "run" not in steps:
        return [doc]
    runs = doc.get("runs") or []
    out = []
    for i in sorted(set(steps["run"])):
        part: dict[str, Any] = {"schema": SCHEMA, "run": runs[i] if i < len(runs) else doc.get("run", {})}
        for section in ("steps", *BREAKDOWNS):
            cols = doc.get(section) or {}
            if "run" not in cols:
                part[section] = {}
                continue
            keep = [j for j, r in enumerate(cols["run"]) if r == i]
            part[section] = {k: [v[j] for j in keep] for k, v in cols.items() if k != "run"}
        out.append(part)
    return out


def _frame(columns: dict[str, list]) -> pd.DataFrame:
    if not columns:
        return pd.DataFrame({"rank": pd.Series([], dtype=np.int64), "step": pd.Series([], dtype=np.int64)})
    frame = pd.DataFrame({k: v for k, v in columns.items()})
    for col in frame.columns:
        if col in ("rank", "step", "count", "run"):
            frame[col] = frame[col].astype(np.int64)
        elif col.endswith(("_ns", "_pct")):
            frame[col] = np.asarray(frame[col].tolist(), dtype=np.float64)  # JSON null -> NaN
    return frame


def _columns(frame: pd.DataFrame, index: list[str], values: tuple[str, ...]) -> dict[str, list]:
    out: dict[str, list] = {}
    for col in index + [c for c in values if c in frame.columns]:
        if col not in frame.columns:
            raise OverlapscopeError(f"analysis frame lacks column {col!r}")
        series = frame[col]
        if pd.api.types.is_integer_dtype(series.dtype):
            out[col] = [int(v) for v in series.to_numpy(np.int64)]  # exact: no float round trip
        elif col in ("rank", "step", "count") or col.endswith("_ns"):
            arr = series.to_numpy(np.float64)
            out[col] = [int(round(v)) if math.isfinite(v) else None for v in arr]
        elif col.endswith("_pct"):
            out[col] = [float(v) if math.isfinite(v) else None for v in series.to_numpy(np.float64)]
        else:
            out[col] = series.astype(str).tolist()
    return out


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in (sorted(value, key=str) if isinstance(value, (set, frozenset)) else value)]
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _ranks(ranks: set[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
