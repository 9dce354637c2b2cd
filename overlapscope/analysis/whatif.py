"""What would hiding it buy (DESIGN.md "What-if"): the step time if a collective were fully hidden.

Hiding a set of comm nodes sets their transfer (a matched collective member) or duration (comm matched on
no other rank) to 0 and solves the graph again, everything else kept: every other duration, every lag,
and the rendezvous - a hidden collective still cannot complete before its last rank arrives, so hiding
it never hides a straggler. saved_ns = the step's span - the span with the set hidden, per step; it is
0 for a collective that compute covers on every rank, and its exposed time for one that is the only
thing between two compute kernels. Keys: each collective instance, and each collective type, process
group, launching scope, pass (forward/backward, from the annotation around the launch) and their
pairs "<collective> of <scope>" and "<collective> in <pass>". One forward pass per key; instances are
hidden one per step at a time (steps share no edges), so their count of passes is the most collectives
in one step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .critical_path import Solved, step_spans
from .longest_path import forward

WHATIF_COLUMNS = ("key_type", "key", "steps", "collectives", "saved_ns", "saved_per_step_ns", "saved_pct",
                  "saved_no_sync_ns")
KEY_TYPES = ("collective", "group", "scope", "pass", "collective_scope", "collective_pass")


def comm_keys(nodes: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per key type, one label per node ('' for non-comm nodes and unknown keys)."""
    comm = (nodes["cls"] == "comm").to_numpy()
    coll = nodes["collective"].to_numpy(object).astype(str)
    scope = nodes["scope"].to_numpy(object).astype(str)
    pass_ = nodes["pass"].to_numpy(object).astype(str)
    both = lambda a, sep, b: np.where((a != "") & (b != ""), np.char.add(np.char.add(a, sep), b), "")  # noqa: E731
    keys = {"collective": coll, "group": nodes["group"].to_numpy(object).astype(str), "scope": scope,
            "pass": pass_, "collective_scope": both(coll, " of ", scope), "collective_pass": both(coll, " in ", pass_)}
    return {k: np.where(comm, v, "").astype(object) for k, v in keys.items()}


def _hidden(solved: Solved, mask: np.ndarray, *, no_sync: bool = False) -> pd.Series:
    """Step spans with the masked comm nodes' time removed; no_sync: their rendezvous too (each member
    ends when it arrives, as a collective running fully in the background would)."""
    g = solved.graph
    matched = g.inst >= 0
    dur = np.where(mask & ~matched, 0, g.dur)
    transfer = np.where(mask & matched, 0, g.transfer)
    if no_sync:
        g = g._replace(inst=np.where(mask, -1, g.inst))
    _, y = forward(g, dur=dur, transfer=transfer)
    return step_spans(solved, y)


def whatif_by_key(solved: Solved) -> pd.DataFrame:
    """WHATIF_COLUMNS, most saved first: each key hidden on every rank and step at once."""
    nodes = solved.nodes
    base = step_spans(solved)
    total = float(base.sum())
    rows = []
    for key_type, labels in comm_keys(nodes).items():
        for key in sorted(set(labels.tolist()) - {""}):
            mask = labels == key
            saved = base - _hidden(solved, mask)
            no_sync = base - _hidden(solved, mask, no_sync=True)
            n_coll = _count_collectives(nodes, mask, solved.graph.inst)
            rows.append((key_type, key, int((saved.index.isin(nodes.loc[mask, "step"].unique())).sum()), n_coll,
                         int(saved.sum()), float(saved.sum()) / max(len(base), 1),
                         100.0 * float(saved.sum()) / total if total > 0 else np.nan, int(no_sync.sum())))
    out = pd.DataFrame(rows, columns=WHATIF_COLUMNS)
    return out.sort_values(["saved_ns", "key_type", "key"], ascending=[False, True, True],
                           kind="stable").reset_index(drop=True)


def _count_collectives(nodes: pd.DataFrame, mask: np.ndarray, inst: np.ndarray) -> int:
    matched = mask & (inst >= 0)
    return int(np.unique(inst[matched]).size + (mask & (inst < 0)).sum())


def whatif_by_instance(solved: Solved) -> pd.DataFrame:
    """instance (the graph's), step, saved_ns: each matched collective hidden alone."""
    nodes, inst = solved.nodes, solved.graph.inst
    sel = np.flatnonzero(inst >= 0)
    if sel.size == 0:
        return pd.DataFrame({"instance": pd.Series(dtype=np.int64), "step": pd.Series(dtype=np.int64),
                             "saved_ns": pd.Series(dtype=np.int64)})
    first = pd.DataFrame({"inst": inst[sel], "step": nodes["step"].to_numpy()[sel],
                          "x": nodes["x"].to_numpy()[sel]}).groupby("inst").agg(step=("step", "min"), x=("x", "min"))
    # the k-th collective of every step is hidden in the same pass
    first["ordinal"] = first.sort_values(["step", "x"]).groupby("step").cumcount()
    base = step_spans(solved)
    out = []
    for _, batch in first.groupby("ordinal"):
        mask = np.isin(inst, batch.index.to_numpy())
        saved = base - _hidden(solved, mask)
        out.append(pd.DataFrame({"instance": batch.index.to_numpy(np.int64), "step": batch["step"].to_numpy(np.int64),
                                 "saved_ns": saved.reindex(batch["step"]).to_numpy(np.int64)}))
    return pd.concat(out, ignore_index=True).sort_values("instance").reset_index(drop=True)
