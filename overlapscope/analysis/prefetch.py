"""FSDP prefetch gaps (DESIGN.md "Prefetch gap"): is each unit's all-gather done before its compute needs it?

Per unit (the fqn in `FSDP::all_gather (fqn)`), pass and step. The unit's all-gather is the comm
launched inside its latest `FSDP::all_gather (fqn)` range before it is used (on a GPU the NCCL kernel,
tied to the range through its launch; on CPU the gloo transfer, tied to the main-thread c10d op that
enqueued it). Its first compute is the all-gather copy-out: the first compute launched inside
`FSDP::all_gather_copy_out (fqn)` within `FSDP::pre_forward|pre_backward (fqn)` (or, without a
copy-out label, the first compute launched in that range after the all-gather was issued).
prev_end = the latest end of a non-empty compute interval ending at or before the copy-out start, but
not before the window start; prefetch_gap_ns = |[prev_end, all-gather end) \\ C|: time the compute lane
sat idle waiting for this all-gather. lead_ns = copy-out start - all-gather start.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.codes import codes_names, isin, shared_codes
from ..core.frames import column_values, empty_frame
from ..core.roles import FSDP_ROLES, fsdp_label
from .overlap import lane_sets

PREFETCH_COLUMNS = ("rank", "step", "unit", "pass", "prefetch_gap_ns", "lead_ns",
                    "all_gather_start_ns", "all_gather_end_ns", "first_compute_ns", "prev_end_ns", "prefetched")


@dataclass(frozen=True, kw_only=True)
class PrefetchConfig:
    min_gap_ns: int = 10_000
    """A pass whose late all-gathers average less than this gets no diagnosis (scheduling noise)."""


def _labels(events: pd.DataFrame, lane: np.ndarray) -> pd.DataFrame:
    """FSDP ranges (the rows whose `role` is an FSDP unit phase): label (the role: fsdp_all_gather,
    fsdp_copy_out, fsdp_pre_forward, fsdp_pre_backward), unit, lane (the code of `lane`, one code per
    thread), start, end. Units are parsed once per distinct name."""
    sel = np.flatnonzero(isin(column_values(events, "role"), FSDP_ROLES))
    codes, names = codes_names(column_values(events, "name"))
    unit_u = np.array([fsdp_label(n if isinstance(n, str) else "nan")[1] for n in names], dtype=object)
    role_codes, roles = codes_names(column_values(events, "role"))
    return pd.DataFrame({
        "label": roles[role_codes[sel]],
        "unit": unit_u[codes[sel]],
        "lane": lane[sel],
        "start_ns": column_values(events, "start_ns", np.int64)[sel],
        "end_ns": column_values(events, "end_ns", np.int64)[sel],
    })


def _latest_before(keys: np.ndarray, times: np.ndarray, q_keys: np.ndarray, q_times: np.ndarray,
                   side: str = "left") -> np.ndarray:
    """Per query, the index of the latest item with the same key and time < q_time (side="left") or
    <= q_time (side="right"); -1 if none. Loops over distinct keys only."""
    out = np.full(q_times.shape, -1, dtype=np.int64)
    for k in np.intersect1d(np.unique(keys), np.unique(q_keys)):
        items = np.flatnonzero(keys == k)
        items = items[np.argsort(times[items], kind="stable")]
        qs = np.flatnonzero(q_keys == k)
        j = np.searchsorted(times[items], q_times[qs], side=side) - 1
        ok = j >= 0
        out[qs[ok]] = items[j[ok]]
    return out


def prefetch_gaps(events: pd.DataFrame, windows: pd.DataFrame, *,
                  sets: dict[str, iv.Intervals] | None = None) -> pd.DataFrame:
    """One row per (unit, pass, use) of one rank: PREFETCH_COLUMNS. sets: `lane_sets(events)` when known."""
    if not isin(column_values(events, "role"), FSDP_ROLES).any():
        return _empty()  # no FSDP ranges (most ranks of most runs): skip the joins' set-up
    # Threads as codes shared by lane and launch_lane: the joins below compare them only.
    lane, launch_lane = shared_codes(column_values(events, "lane"), column_values(events, "launch_lane"))
    labels = _labels(events, lane)
    rank = int(events["rank"].iloc[0]) if len(events) else -1
    ag = labels[labels["label"] == "fsdp_all_gather"].reset_index(drop=True)
    use = labels[labels["label"].isin(["fsdp_pre_forward", "fsdp_pre_backward"])].reset_index(drop=True)
    if ag.empty or use.empty:
        return _empty()
    start = column_values(events, "start_ns", np.int64)
    end = column_values(events, "end_ns", np.int64)
    launch = column_values(events, "launch_ns", np.int64)

    # The comm launched inside each all-gather range (innermost among those ranges).
    comm = np.flatnonzero(isin(column_values(events, "kind"), ("comm",)))
    owner = iv.innermost_containing(ag["lane"].to_numpy(), column_values(ag, "start_ns"), column_values(ag, "end_ns"),
                                    launch_lane[comm], launch[comm])
    hit = owner >= 0
    per_ag = pd.DataFrame({"ag": owner[hit], "s": start[comm][hit], "e": end[comm][hit]}).groupby("ag").agg(
        ag_start=("s", "min"), ag_end=("e", "max"))
    ag = ag.join(per_ag, how="inner")

    # The all-gather a use consumes: the unit's latest all-gather range that began before the use ended.
    chosen = _latest_before(ag["unit"].to_numpy(), column_values(ag, "start_ns"),
                            use["unit"].to_numpy(), column_values(use, "end_ns"))
    use, chosen = use[chosen >= 0].reset_index(drop=True), chosen[chosen >= 0]
    a = ag.iloc[chosen].reset_index(drop=True)

    # Where the copy-out compute is searched: the copy-out range inside the use, else after the issue.
    co = labels[labels["label"] == "fsdp_copy_out"].reset_index(drop=True)
    c_idx = _latest_before(co["unit"].to_numpy(), column_values(co, "start_ns"),
                           use["unit"].to_numpy(), column_values(use, "end_ns"))
    has_co = c_idx >= 0
    has_co[has_co] = column_values(co, "start_ns")[c_idx[has_co]] >= column_values(use, "start_ns")[has_co]
    lo = np.maximum(column_values(use, "start_ns"), np.where(a["start_ns"] >= use["start_ns"], a["end_ns"], 0))
    hi = column_values(use, "end_ns").copy()
    lo[has_co] = column_values(co, "start_ns")[c_idx[has_co]]
    hi[has_co] = column_values(co, "end_ns")[c_idx[has_co]]

    compute = np.flatnonzero(isin(column_values(events, "kind"), ("compute",)) & (end > start))
    first = _latest_before(launch_lane[compute], -launch[compute], use["lane"].to_numpy(), -lo, side="right")
    # _latest_before on negated times finds the earliest launch >= lo.
    ok = first >= 0
    ok[ok] = launch[compute[first[ok]]] < hi[ok]
    use, a, first = use[ok].reset_index(drop=True), a[ok].reset_index(drop=True), compute[first[ok]]
    first_ns = start[first]

    c_set = (sets or lane_sets(events))["compute"]
    ends_sorted = np.sort(end[compute])
    k = np.searchsorted(ends_sorted, first_ns, side="right") - 1
    w_start = column_values(windows, "start_ns", np.int64)
    w_idx = np.clip(np.searchsorted(w_start, first_ns, side="right") - 1, 0, None)
    prev_end = np.maximum(np.where(k >= 0, ends_sorted[np.maximum(k, 0)], w_start[w_idx]), w_start[w_idx])
    ag_end = a["ag_end"].to_numpy(np.int64)
    late = ag_end > prev_end
    gap_end = np.where(late, ag_end, prev_end)
    gap = (gap_end - prev_end) - iv.overlap_lengths(prev_end, gap_end, c_set)
    out = pd.DataFrame({
        "rank": np.full(len(use), rank, dtype=np.int64),
        "step": column_values(windows, "step", np.int64)[w_idx] if len(windows) else
        column_values(events, "step")[first],
        "unit": use["unit"].to_numpy(object),
        "pass": np.where(use["label"].to_numpy() == "fsdp_pre_forward", "forward", "backward").astype(object),
        "prefetch_gap_ns": gap.astype(np.int64),
        "lead_ns": (first_ns - a["ag_start"].to_numpy(np.int64)).astype(np.int64),
        "all_gather_start_ns": a["ag_start"].to_numpy(np.int64),
        "all_gather_end_ns": ag_end,
        "first_compute_ns": first_ns,
        "prev_end_ns": prev_end,
        # Issued before the unit's own pre-forward/pre-backward began: by a prefetch (FSDP's
        # forward/backward prefetch or an explicit unshard), not on demand when the unit ran.
        "prefetched": column_values(a, "start_ns", np.int64) < column_values(use, "start_ns", np.int64),
    })
    return out.sort_values("first_compute_ns", kind="stable").reset_index(drop=True)


def _empty() -> pd.DataFrame:
    return empty_frame(PREFETCH_COLUMNS, {"unit": object, "pass": object, "prefetched": bool})


def worst_units(prefetch: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """Units by mean prefetch gap over ranks and steps: unit, pass, count, mean/max gap, mean lead."""
    if prefetch.empty:
        return pd.DataFrame(columns=["unit", "pass", "count", "mean_gap_ns", "max_gap_ns", "mean_lead_ns"])
    out = prefetch.groupby(["unit", "pass"], as_index=False).agg(
        count=("prefetch_gap_ns", "size"), mean_gap_ns=("prefetch_gap_ns", "mean"),
        max_gap_ns=("prefetch_gap_ns", "max"), mean_lead_ns=("lead_ns", "mean"))
    return out.sort_values(["mean_gap_ns", "unit"], ascending=[False, True], kind="stable").head(top).reset_index(drop=True)


def compress_units(units: list[str]) -> str:
    """["layers.3", "layers.4", "layers.5", "norm"] -> "layers.3-5, norm"."""
    numbered: dict[str, list[int]] = {}
    plain: list[str] = []
    for u in units:
        m = re.match(r"^(.*?)(\d+)$", u)
        if m:
            numbered.setdefault(m.group(1), []).append(int(m.group(2)))
        else:
            plain.append(u)
    parts = []
    for prefix, nums in numbered.items():
        nums = sorted(set(nums))
        breaks = np.flatnonzero(np.diff(nums) != 1)
        runs = np.split(np.array(nums), breaks + 1)
        parts += [f"{prefix}{r[0]}" if r.size == 1 else f"{prefix}{r[0]}-{r[-1]}" for r in runs]
    return ", ".join(parts + sorted(set(plain)))


# Where each pass's prefetch is turned on (torch.distributed.fsdp.FSDPModule; the reference runs' flag).
PREFETCH_KNOBS = {
    "forward": "FSDP2 `module.set_modules_to_forward_prefetch([next modules])`, or `unshard(async_op=True)` "
               "ahead of use; the reference runs: `--prefetch N`",
    "backward": "FSDP2 `module.set_modules_to_backward_prefetch([previous modules])`; "
                "the reference runs: `--prefetch N`",
}


# What keeps the unit that opens a pass unsharded, so that it has nothing to gather (FSDP2 FSDPModule).
OPENER_KNOBS = {
    "forward": "FSDP2 `module.set_reshard_after_backward(False)` keeps it unsharded into the next step",
    "backward": "FSDP2 `fully_shard(module, reshard_after_forward=False)` keeps it unsharded from forward to "
                "backward",
}


def _opens_pass(prefetch: pd.DataFrame) -> pd.Series:
    """Per row: its all-gather is the first of its pass on its rank and step, so no unit of that pass runs
    before it to prefetch it (the root module's forward all-gather, say)."""
    if prefetch.empty or "all_gather_start_ns" not in prefetch:
        return pd.Series(False, index=prefetch.index)
    first = prefetch.groupby(["rank", "step", "pass"])["all_gather_start_ns"].transform("min")
    return prefetch["all_gather_start_ns"] == first


def diagnose(prefetch: pd.DataFrame, config: PrefetchConfig = PrefetchConfig()) -> list[str]:
    """One line per pass and cause whose all-gathers arrive late on average: not prefetched, and the
    first all-gather of the pass (nothing earlier in the pass can prefetch it: keep the module unsharded
    instead); not prefetched otherwise (issued on demand in the unit's own pre-hook: prefetch is off,
    and the knob that turns it on); or prefetched but still late (issued too close to its use)."""
    notes = []
    opens = _opens_pass(prefetch)
    for pass_ in ("forward", "backward"):
        sel = (prefetch["pass"] == pass_) & (prefetch["prefetch_gap_ns"] > 0)
        rows = prefetch[sel]
        if rows.empty or rows["prefetch_gap_ns"].mean() < config.min_gap_ns:
            continue
        prefetched = rows["prefetched"].astype(bool) if "prefetched" in rows else pd.Series(True, index=rows.index)
        first = opens[sel]
        # a unit opens the pass when every late all-gather of it that was not prefetched came first
        on_demand = rows[~prefetched]
        opener_units = set(on_demand.loc[first[~prefetched]].groupby("unit").size().index) - set(
            on_demand.loc[~first[~prefetched], "unit"])
        is_opener = on_demand["unit"].isin(opener_units)
        for cause, part in (("opens", on_demand[is_opener]), ("on demand", on_demand[~is_opener]),
                            ("late", rows[prefetched])):
            per_unit = part.groupby("unit")["prefetch_gap_ns"].mean()
            units = [u for u in per_unit.index if per_unit[u] >= config.min_gap_ns]
            if not units:
                continue
            late = part[part["unit"].isin(units)]["prefetch_gap_ns"].mean() / 1e6
            what = f"{pass_} all-gathers of {_unit_label(units)}"
            if cause == "late":
                notes.append(f"{what} are prefetched but arrive {late:.3g} ms late on average: prefetch is not "
                             "issued early enough (prefetch more modules ahead)")
            elif cause == "opens":
                notes.append(f"{what} open the {pass_} pass (the first all-gather of each step's {pass_}) and "
                             f"arrive {late:.3g} ms late on average: no earlier unit can prefetch them "
                             f"({OPENER_KNOBS[pass_]})")
            else:
                notes.append(f"{what} are not prefetched (issued on demand when the unit runs) and arrive "
                             f"{late:.3g} ms late on average: {pass_} prefetch is off for them "
                             f"(turn it on with {PREFETCH_KNOBS[pass_]})")
    return notes


def _unit_label(units: list[str]) -> str:
    label = compress_units(units)
    if all(re.fullmatch(r"\d+(-\d+)?", p) for p in label.split(", ")):
        label = f"unit{'s' if len(units) > 1 else ''} {label}"
    return label
