"""What the comm classification decided for one rank, for the report: families and candidates.

- families: per rule that made device work communication, its kernels, count and device time;
- candidates: kernels counted as compute that look like communication - a communication word in
  the name (comm_rules.CANDIDATE_TOKENS), or long kernels alone on a side stream that runs nothing
  else - with their device time and the `--comm-pattern` that would count them.
Device time is the summed duration of the rank's kernels, memcpys and memsets.
"""
from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=1 << 16)  # a worker summarizes many ranks of one job: their names repeat
def has_candidate_word(name: str) -> bool:
    """Whether the kernel's base name holds a communication word (comm_rules.CANDIDATE_TOKENS): a
    character walk and a long regex, ~0.1 ms a name, paid once per distinct name in a process (a
    tiny rank's dozen names cost ~1.1 ms of its ~16 ms each time)."""
    return bool(CANDIDATE_TOKENS.search(kernel_base(name)))


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
    work = (kinds == "comm") | (kinds == "compute") | (kinds == "memcpy") | (kinds == "memset")
    device_ns = int(dur[work].sum())
    names, kinds, lanes, dur = (np.asarray(names, dtype=object)[work], kinds[work],
                                np.asarray(lanes, dtype=object)[work], dur[work])
    is_comm = kinds == "comm"
    families = []
    if is_comm.any():
        families = _families(names[is_comm], dur[is_comm], np.asarray(comm_by, dtype=object)[work][is_comm])
        families.sort(key=lambda f: -f["device_ns"])
    return {"device_ns": device_ns, "families": families,
            "candidates": _candidates(names, kinds, lanes, dur, config)}


def _families(names: np.ndarray, dur: np.ndarray, by: np.ndarray) -> list[dict[str, Any]]:
    """Per rule (ascending), its kernels, example (the name of most device time), count and device_ns:
    what pandas' groupby by rule, then by name, gives (_families_pandas). A few rows of text names and
    rules run on codes (a rank's pandas groupbys cost ~0.3 ms a rule); others, or a missing name or
    rule (which groupby drops), go to pandas."""
    if names.size > SMALL_ROWS or not all(type(v) is str for v in names.tolist() + by.tolist()):
        return _families_pandas(names, dur, by)
    by_u, by_c = _unique_str(by)
    name_u, name_c = _unique_str(names)
    width = max(name_u.size, 1)
    pairs, pair_c = np.unique(by_c.astype(np.int64) * width + name_c, return_inverse=True)
    pair_ns = _sums(pair_c.reshape(-1), pairs.size, dur)  # per (rule, name), rules then names ascending
    first = np.searchsorted(pairs // width, np.arange(by_u.size + 1))
    count, device_ns = np.bincount(by_c, minlength=by_u.size), _sums(by_c, by_u.size, dur)
    families = []
    for f in range(by_u.size):
        ns = pair_ns[first[f]:first[f + 1]]
        # Series.sort_values(ascending=False)'s order (pandas' nargsort), ties included
        top = np.arange(ns.size)[::-1][ns[::-1].argsort(kind="quicksort")][::-1][0]
        families.append({"rule": str(by_u[f]), "kernels": int(ns.size),
                         "example": str(name_u[pairs[first[f] + top] % width]),
                         "count": int(count[f]), "device_ns": int(device_ns[f])})
    return families


def _families_pandas(names: np.ndarray, dur: np.ndarray, by: np.ndarray) -> list[dict[str, Any]]:
    comm = pd.DataFrame({"name": names, "dur": dur, "by": by})
    families = []
    for rule, sub in comm.groupby("by", sort=True):
        per_name = sub.groupby("name")["dur"].sum().sort_values(ascending=False)
        families.append({"rule": str(rule), "kernels": int(per_name.size), "example": str(per_name.index[0]),
                         "count": int(len(sub)), "device_ns": int(sub["dur"].sum())})
    return families


SMALL_ROWS = 2048
"""_unique_str of at most this many strings runs in Python: pd.factorize and np.unique cost ~0.15 ms
a call whatever the size, and a tiny rank made four such calls (0.6 ms of its ~16)."""


def _unique_str(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(..., return_inverse=True) of the values' str(): sorted distinct strings (an object
    array) and each value's index into them. Hashes the values once (pd.factorize, no Python per
    event; a dict for a few strings) and converts and sorts only the distinct ones."""
    values = np.asarray(values, dtype=object)
    listed = values.tolist() if values.size <= SMALL_ROWS else None
    if listed is not None and all(type(v) is str for v in listed):
        first: dict[str, int] = {}
        codes = np.fromiter((first.setdefault(v, len(first)) for v in listed), np.intp, len(listed))
        uniq = sorted(first)  # str order, as np.unique sorts an object array of str
        at = {v: i for i, v in enumerate(uniq)}
        to_sorted = np.fromiter((at[v] for v in first), np.intp, len(first))
        return np.array(uniq, dtype=object).reshape(-1), to_sorted[codes]
    codes, distinct = pd.factorize(values, use_na_sentinel=False)
    as_str = np.array([v if isinstance(v, str) else str(v) for v in distinct.tolist()], dtype=object)
    uniq, to_sorted = np.unique(as_str, return_inverse=True)  # two values may print alike: merged here
    return uniq, to_sorted.reshape(-1)[codes]


def _sums(codes: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    np.add.at(out, codes, values)
    return out


def _candidates(names: np.ndarray, kinds: np.ndarray, lanes: np.ndarray, dur: np.ndarray,
                config: CandidateConfig) -> list[dict[str, Any]]:
    """Per distinct compute kernel name (NumPy on codes: this runs for every rank)."""
    compute = kinds == "compute"
    if not compute.any():
        return []
    # Object arrays, never .astype(str): a fixed-width copy of 34k kernel names thousands of characters
    # long is hundreds of MB.
    uniq, inverse = _unique_str(names[compute])
    count = np.bincount(inverse, minlength=uniq.size)
    device_ns = _sums(inverse, uniq.size, dur[compute])
    why = np.where([has_candidate_word(str(n)) for n in uniq],
                   "communication word in the name", "").astype(object)
    position = {str(n): i for i, n in enumerate(uniq)}
    for lane, lone in _lone_stream_names(names, kinds, lanes, dur, config).items():
        for n in lone:
            i = position.get(n)
            if i is not None and why[i] == "":
                why[i] = f"long kernels alone on {lane}, which runs no other kernel"
    out = [{"name": str(uniq[i]), "count": int(count[i]), "device_ns": int(device_ns[i]), "why": str(why[i]),
            "comm_pattern": suggested_pattern(str(uniq[i]))} for i in np.flatnonzero(why != "")]
    return sorted(out, key=lambda c: (-c["device_ns"], c["name"]))


def _lone_stream_names(names: np.ndarray, kinds: np.ndarray, lanes: np.ndarray, dur: np.ndarray,
                       config: CandidateConfig) -> dict[str, list[str]]:
    """Side streams (not the compute stream) that run only a few distinct long kernels,
    none of them comm: what a communication library on its own stream looks like."""
    lane_all, lane_all_c = _unique_str(lanes)
    on_stream = np.array([lane.startswith("stream:") for lane in lane_all], dtype=bool)
    sel = ((kinds == "compute") | (kinds == "comm")) & on_stream[lane_all_c.reshape(-1)]
    if not sel.any():
        return {}
    lane_u, lane_c = _unique_str(lanes[sel])
    name_u, name_c = _unique_str(names[sel])
    k_dur, k_comm = dur[sel], kinds[sel] == "comm"
    total = _sums(lane_c, lane_u.size, k_dur)
    distinct = np.unique(lane_c * name_u.size + name_c) // name_u.size
    n_names = np.bincount(distinct, minlength=lane_u.size)
    median = np.array([np.median(k_dur[lane_c == i]) for i in range(lane_u.size)])
    has_comm = np.bincount(lane_c, weights=k_comm, minlength=lane_u.size) > 0
    # The compute stream runs the model's many kernels: most distinct names, then most time (the
    # first such lane in lane order).
    main = int(np.lexsort((np.arange(lane_u.size), -total, -n_names))[0])
    lone = ((np.arange(lane_u.size) != main) & (n_names <= config.lone_stream_max_names) & (n_names < n_names[main])
            & (median >= config.lone_stream_min_median_ns) & ~has_comm)
    return {str(lane_u[i]): sorted(set(name_u[name_c[lane_c == i]].tolist())) for i in np.flatnonzero(lone)}
