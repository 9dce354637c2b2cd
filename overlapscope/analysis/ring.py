"""Ring-attention (context parallel) steps: exposed p2p per ring step and the compute that hid it.

The reference run (instrumented_models/cp.py) issues each ring step's K/V transfer under
`ring:L<layer>:step<k>` (its backward under `...:bwd`) and computes the step's attention under
`ring:L<layer>:step<k>:attn`. Per rank, step window and ring step (DESIGN.md "Ring steps"), with
M_k the union of the comm launched under the step's label and A_k the union of the compute launched
under its attention label: comm_ns = |M_k|, exposed_comm_ns = |M_k \\ C|, hidden_ns = |M_k ∩ C| (any
compute), attn_ns = |A_k|, hidden_by_attn_ns = |M_k ∩ C ∩ A_k| (the step's own attention hid it).
A_k is the work launched under the label, not the label's CPU span: on a GPU the kernels run after
their launch (the span is microseconds of launching), on CPU the two coincide.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.codes import isin
from ..core.frames import column_values, empty_frame
from .breakdown import launch_scopes
from .overlap import lane_sets, window_set

RING_LABEL = re.compile(r"^ring:L(\d+):step(\d+)(:bwd)?$")
ATTN_SUFFIX = ":attn"
PART_COLUMNS = ("step", "key", "attn_ns", "hidden_by_attn_ns")
RING_COLUMNS = ("rank", "step", "layer", "ring_step", "pass", "count", "comm_ns", "exposed_comm_ns", "hidden_ns",
                "attn_ns", "hidden_by_attn_ns")


def _per_window(s: iv.Intervals, inside: iv.Intervals, win_starts: np.ndarray) -> np.ndarray:
    """|s ∩ W_i| for each window i (s merged)."""
    cut = iv.cut_at(iv.intersect(s, inside), win_starts)
    out = np.zeros(win_starts.size, dtype=np.int64)
    np.add.at(out, np.searchsorted(win_starts, cut.starts, side="right") - 1, cut.ends - cut.starts)
    return out


def ring_attention_part(events: pd.DataFrame, windows: pd.DataFrame, scopes: np.ndarray, *,
                        sets: dict[str, iv.Intervals] | None = None) -> pd.DataFrame:
    """One rank's PART_COLUMNS: per step window and forward ring-step label with comm under it, the
    step's attention time and the part of its comm that this attention hid. scopes: the launch
    scope of each comm row (breakdown.launch_scopes); the compute rows' scopes are found here, and
    only on a rank with ring labels."""
    comm = isin(column_values(events, "kind"), ("comm",))
    keys = np.unique(np.asarray(scopes, dtype=object)[comm].astype(str))
    keys = [k for k in keys if (m := RING_LABEL.match(k)) and not m.group(3)]
    if not keys or windows.empty:
        return empty_frame(PART_COLUMNS, {"key": object})
    compute = (sets or lane_sets(events))["compute"]
    inside = iv.merge(*window_set(windows))
    win_starts = column_values(windows, "start_ns", np.int64)
    start, end = column_values(events, "start_ns", np.int64), column_values(events, "end_ns", np.int64)
    is_compute = isin(column_values(events, "kind"), ("compute",))
    compute_scope = launch_scopes(events, is_compute)
    scope_of = np.asarray(scopes, dtype=object)
    frames = []
    for key in keys:  # one per layer and ring step: a handful
        m_k = iv.merge(start[comm & (scope_of == key)], end[comm & (scope_of == key)])
        attn_rows = is_compute & (compute_scope == key + ATTN_SUFFIX)
        a_k = iv.merge(start[attn_rows], end[attn_rows])
        frames.append(pd.DataFrame({
            "step": column_values(windows, "step", np.int64), "key": key,
            "attn_ns": _per_window(a_k, inside, win_starts),
            "hidden_by_attn_ns": _per_window(iv.intersect(iv.intersect(m_k, compute), a_k), inside, win_starts)}))
    return pd.concat(frames, ignore_index=True)[list(PART_COLUMNS)]


def ring_steps(by_key_steps: pd.DataFrame, parts: pd.DataFrame) -> pd.DataFrame:
    """RING_COLUMNS from the by-scope breakdown per step and every rank's `ring_attention_part`
    (with a rank column)."""
    empty = empty_frame(RING_COLUMNS, {"pass": object})
    if by_key_steps.empty:
        return empty
    scoped = by_key_steps[by_key_steps["section"] == "by_scope"]
    parsed = scoped["key"].astype(str).str.extract(RING_LABEL)
    hit = parsed[0].notna().to_numpy()
    if not hit.any():
        return empty
    sub, parsed = scoped[hit], parsed[hit]
    out = pd.DataFrame({
        "rank": column_values(sub, "rank", np.int64), "step": column_values(sub, "step", np.int64),
        "key": sub["key"].astype(str).to_numpy(object),
        "layer": parsed[0].astype(np.int64).to_numpy(), "ring_step": parsed[1].astype(np.int64).to_numpy(),
        "pass": np.where(parsed[2].isna().to_numpy(), "forward", "backward").astype(object),
        "count": column_values(sub, "count", np.int64), "comm_ns": column_values(sub, "comm_ns", np.int64),
        "exposed_comm_ns": column_values(sub, "exposed_comm_ns", np.int64)})
    out["hidden_ns"] = out["comm_ns"] - out["exposed_comm_ns"]
    if len(parts):
        out = out.merge(parts.astype({"rank": np.int64, "step": np.int64}), on=["rank", "step", "key"], how="left")
    else:
        out = out.assign(attn_ns=np.nan, hidden_by_attn_ns=np.nan)
    out[["attn_ns", "hidden_by_attn_ns"]] = out[["attn_ns", "hidden_by_attn_ns"]].fillna(0).astype(np.int64)
    return out.sort_values(["rank", "step", "pass", "layer", "ring_step"], ascending=[True, True, False, True, True],
                           kind="stable").reset_index(drop=True)[list(RING_COLUMNS)]


def ring_summary(ring: pd.DataFrame) -> pd.DataFrame:
    """Per (ring_step, pass) over ranks, steps and layers: comm_ns, exposed_comm_ns, hidden_ns, attn_ns,
    hidden_by_attn_ns."""
    cols = ["ring_step", "pass", "count", "comm_ns", "exposed_comm_ns", "hidden_ns", "attn_ns", "hidden_by_attn_ns"]
    if ring.empty:
        return pd.DataFrame(columns=cols)
    out = ring.groupby(["ring_step", "pass"], as_index=False, sort=False)[cols[2:]].sum()
    return out.sort_values(["pass", "ring_step"], ascending=[False, True], kind="stable").reset_index(drop=True)[cols]
