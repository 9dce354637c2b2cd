"""What the comm classification decided for one rank, for the report: families and candidates.

- families: per rule that made device work communication, its kernels, count and device time;
- candidates: kernels counted as compute that look like communication - a communication word in
  the name (comm_rules.CANDIDATE_TOKENS), or long kernels alone on a side stream that runs nothing
  else - with their device time and the `--comm-pattern` that would count them.
Device time is the summed duration of the rank's kernels, memcpys and memsets.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .classify import collective_of
from .comm_rules import CANDIDATE_TOKENS, token_collective

_EP_WORDS = re.compile(r"dispatch|combine|notify|a2a|all_?to_?all", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class CandidateConfig:
    lone_stream_min_median_ns: int = 50_000
    """A side stream's kernels are candidates when their median duration is at least this..."""
    lone_stream_max_names: int = 2
    """...and the stream runs at most this many distinct kernel names (and none of them is comm)."""

    def __post_init__(self) -> None:
        if self.lone_stream_min_median_ns < 0 or self.lone_stream_max_names < 1:
            raise ValueError("lone_stream_min_median_ns must be >= 0 and lone_stream_max_names >= 1")


def kernel_base(name: str) -> str:
    """The kernel's qualified name without return type, template arguments or parameters."""
    base = name.split("(", 1)[0] if not name.startswith("(") else name
    base = re.sub(r"^void\s+", "", base.strip())
    depth, out = 0, []
    for ch in base:  # drop <...> template arguments, nested ones included
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or name


def suggested_pattern(name: str) -> str:
    """The `--comm-pattern` value that counts this kernel: its escaped base name, with the collective
    the name suggests (dispatch/combine of expert parallelism are all-to-alls)."""
    coll = collective_of(name) or token_collective(name) or ("all_to_all" if _EP_WORDS.search(name) else "")
    pattern = re.escape(kernel_base(name))
    return f"{pattern}={coll}" if coll else pattern


def summarize(names: np.ndarray, kinds: np.ndarray, lanes: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray,
              comm_by: np.ndarray, config: CandidateConfig = CandidateConfig()) -> dict[str, Any]:
    """The rank's `comm_classification` meta: device_ns, families, candidates (JSON-ready)."""
    kinds = np.asarray(kinds, dtype=object)
    dur = np.maximum(np.asarray(end_ns, np.int64) - np.asarray(start_ns, np.int64), 0)
    work = np.isin(kinds, ("comm", "compute", "memcpy", "memset"))
    device_ns = int(dur[work].sum())
    frame = pd.DataFrame({"name": np.asarray(names, dtype=object), "kind": kinds, "lane": np.asarray(lanes, dtype=object),
                          "dur": dur, "by": np.asarray(comm_by, dtype=object)})[work]
    comm = frame[frame["kind"] == "comm"]
    families = []
    for by, sub in comm.groupby("by", sort=True):
        per_name = sub.groupby("name")["dur"].sum().sort_values(ascending=False)
        families.append({"rule": str(by), "kernels": int(per_name.size), "example": str(per_name.index[0]),
                         "count": int(len(sub)), "device_ns": int(sub["dur"].sum())})
    families.sort(key=lambda f: -f["device_ns"])
    return {"device_ns": device_ns, "families": families, "candidates": _candidates(frame, config)}


def _candidates(frame: pd.DataFrame, config: CandidateConfig) -> list[dict[str, Any]]:
    compute = frame[frame["kind"] == "compute"]
    if compute.empty:
        return []
    per_name = compute.groupby("name").agg(count=("dur", "size"), device_ns=("dur", "sum"))
    why = pd.Series("", index=per_name.index, dtype=object)
    by_word = np.array([bool(CANDIDATE_TOKENS.search(kernel_base(str(n)))) for n in per_name.index], dtype=bool)
    why[by_word] = "communication word in the name"
    for lane, names in _lone_stream_names(frame, config).items():
        for n in names:
            if why.get(n, "x") == "":
                why[n] = f"long kernels alone on {lane}, which runs no other kernel"
    picked = per_name[why != ""]
    out = [{"name": str(n), "count": int(r["count"]), "device_ns": int(r["device_ns"]), "why": str(why[n]),
            "comm_pattern": suggested_pattern(str(n))} for n, r in picked.iterrows()]
    return sorted(out, key=lambda c: (-c["device_ns"], c["name"]))


def _lone_stream_names(frame: pd.DataFrame, config: CandidateConfig) -> dict[str, list[str]]:
    """Side streams (not the compute stream) that run only a few distinct long kernels,
    none of them comm: what a communication library on its own stream looks like."""
    kernels = frame[frame["kind"].isin(("compute", "comm")) & frame["lane"].astype(str).str.startswith("stream:")]
    if kernels.empty:
        return {}
    per_lane = kernels.groupby("lane").agg(total=("dur", "sum"), names=("name", "nunique"),
                                           median=("dur", "median"), comm=("kind", lambda k: (k == "comm").any()))
    # The compute stream runs the model's many kernels: most distinct names, then most time.
    main = per_lane.sort_values(["names", "total"], ascending=False, kind="stable").index[0]
    lone = per_lane[(per_lane.index != main) & (per_lane["names"] <= config.lone_stream_max_names)
                    & (per_lane["names"] < per_lane.loc[main, "names"])
                    & (per_lane["median"] >= config.lone_stream_min_median_ns) & ~per_lane["comm"].astype(bool)]
    return {str(lane): sorted(kernels.loc[kernels["lane"] == lane, "name"].astype(str).unique()) for lane in lone.index}
