"""What would hiding it buy (DESIGN.md "What-if"): the step time if a collective were fully hidden.

Hiding a set of comm nodes sets their transfer (a matched collective member) or duration (comm matched on
no other rank) to 0 and solves the graph again, everything else kept: every other duration, every lag,
and the rendezvous - a hidden collective still cannot complete before its last rank arrives, so hiding
it never hides a straggler. saved_ns = the step's span - the span with the set hidden, per step; it is
0 for a collective that compute covers on every rank, and its exposed time for one that is the only
thing between two compute kernels. Keys: each collective instance, and each collective type, process
group, launching scope, pass (forward/backward, from the annotation around the launch) and their
pairs "<collective> of <scope>" and "<collective> in <pass>". Cost: one solve (longest_path.forward)
per key and variant, and one per batch of single collectives; keys and collectives with no critical
node are exact zeros without a solve, and the solves are capped (MAX_KEY_SOLVES, MAX_INSTANCE_BATCHES)
in the order of an upper bound of the saving, so a trace with thousands of scopes stays bounded: an
unsolved key keeps saved_ns NaN beside saved_bound_ns.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import pandas as pd

from ..core.codes import str_codes
from .critical_path import Solved, step_spans
from .longest_path import forward, forward_many

WHATIF_COLUMNS = ("key_type", "key", "steps", "collectives", "saved_ns", "saved_per_step_ns", "saved_pct",
                  "saved_no_sync_ns", "saved_bound_ns")
MAX_KEY_SOLVES = 64
"""Keys solved again at most per run (two solves each); the rest report only their bound."""
MAX_INSTANCE_BATCHES = 64
"""Solves for single collectives at most (each hides the k-th critical collective of every step)."""
KEY_TYPES = ("collective", "group", "scope", "pass", "collective_scope", "collective_pass")


def comm_keys(nodes: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per key type, one label per node ('' for non-comm nodes and unknown keys)."""
    comm, labels = _comm_codes(nodes)
    out = {}
    for k, (codes, names) in labels.items():
        full = np.full(len(nodes), "", dtype=object)
        full[comm] = names[codes]
        out[k] = full
    return out


def _comm_codes(nodes: pd.DataFrame) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """The comm nodes' positions and, per key type, (codes, names): each comm node's label is
    names[codes] ('' unknown), the names distinct. Computed on the comm nodes only, each distinct
    name converted once and the pair keys joined once per distinct pair, never a string per node
    (np.char.add over every node of a 1,024-rank graph cost 0.5 s, converting its text columns 0.2 s,
    and labelling every comm node to group them again ~0.1 s)."""
    comm = np.flatnonzero((nodes["cls"] == "comm").to_numpy())
    coll, group, scope, pass_ = (_distinct(*str_codes(nodes[c].iloc[comm]))
                                 for c in ("collective", "group", "scope", "pass"))
    return comm, {"collective": coll, "group": group, "scope": scope, "pass": pass_,
                  "collective_scope": _joined(coll, " of ", scope), "collective_pass": _joined(coll, " in ", pass_)}


def _distinct(codes: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same labels with equal names merged into one code (str_codes gives each missing row its
    own "nan"; two pairs can join to one text)."""
    remap, uniq = pd.factorize(names)
    return remap[codes], np.asarray(uniq, dtype=object)


def _joined(a: tuple[np.ndarray, np.ndarray], sep: str, b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """a + sep + b where both are non-empty, else '': once per distinct pair."""
    (codes_a, names_a), (codes_b, names_b) = a, b
    width = max(len(names_b), 1)
    pair_codes, pairs = pd.factorize(codes_a.astype(np.int64) * width + codes_b)
    joined = np.array([x + sep + y if x and y else "" for x, y in zip(names_a[pairs // width], names_b[pairs % width])],
                      dtype=object)
    return _distinct(pair_codes, joined)


def _hidden(solved: Solved, mask: np.ndarray, *, no_sync: bool = False) -> pd.Series:
    """Step spans with the masked comm nodes' time removed; no_sync: their rendezvous too (each member
    ends when it arrives, as a collective running fully in the background would)."""
    g = solved.graph
    matched = g.inst >= 0
    dur = np.where(mask & ~matched, 0, g.dur)
    transfer = np.where(mask & matched, 0, g.transfer)
    if no_sync:
        g = g._replace(inst=np.where(mask, -1, g.inst))
    # warm from the measured solution: only what lies downstream of the hidden nodes is solved again
    warm = (solved.nodes["x"].to_numpy(np.int64), solved.nodes["y"].to_numpy(np.int64), mask)
    _, y = forward(g, dur=dur, transfer=transfer, plan=solved.plan, warm=warm)
    return step_spans(solved, y)


def _hidden_many(solved: Solved, hidden: Iterable[np.ndarray]) -> Iterator[pd.Series]:
    """_hidden for each set of node positions in turn, the solves swept together
    (longest_path.forward_many, which gives each set's step spans from the layers it changed). A set without untied comm keeps the graph's durations (the same
    array: the sweep then reuses the measured chain prefix)."""
    g = solved.graph
    warm = (solved.nodes["x"].to_numpy(np.int64), solved.nodes["y"].to_numpy(np.int64))

    def variant(on: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        mask = np.zeros(g.base.size, dtype=bool)
        mask[on] = True
        tied, untied = on[g.inst[on] >= 0], on[g.inst[on] < 0]
        transfer = g.transfer.copy()
        transfer[tied] = 0
        if not untied.size:
            return g.dur, transfer, mask
        dur = g.dur.copy()
        dur[untied] = 0
        return dur, transfer, mask

    groups, nodes = solved.step_groups, solved.nodes
    steps = (np.searchsorted(groups.steps, nodes["step"].to_numpy()), groups.steps.size,
             nodes["wstart_ns"].to_numpy(np.int64))
    for best in forward_many(g, map(variant, hidden), plan=solved.plan, warm=warm, steps=steps):
        yield groups.series(best)


def saving_bound(solved: Solved, on: np.ndarray) -> int:
    """An upper bound of saved_ns (and of saved_no_sync_ns) for hiding the nodes at positions on: a path
    passes through at most one member of a collective (in at its arrival, out at one member's end), so
    a step can shrink by at most the sum over the hidden collectives of their largest member's
    transfer plus the hidden untied comm's durations (no_sync also frees the wait: the member's d)."""
    g, nodes = solved.graph, solved.nodes
    tied = on[g.inst[on] >= 0]
    per_inst = pd.Series(nodes["end_ns"].to_numpy()[tied] - nodes["start_ns"].to_numpy()[tied]).groupby(
        g.inst[tied]).max()
    return int(per_inst.sum()) + int(g.dur[on[g.inst[on] < 0]].sum())


def whatif_by_key(solved: Solved, node_slack: np.ndarray, max_solves: int | None = None) -> pd.DataFrame:
    """WHATIF_COLUMNS, most saved first: each key hidden on every rank and step at once. node_slack:
    critical_path.slack(solved). A key none of whose nodes is critical (slack 0) saves exactly 0 (no
    longest path runs through it) and is not solved again; the others are solved in the order of
    their bound (saving_bound), at most max_solves of them: the rest keep saved_ns NaN beside
    their bound (max_solves None: MAX_KEY_SOLVES)."""
    max_solves = MAX_KEY_SOLVES if max_solves is None else max_solves
    nodes, inst = solved.nodes, solved.graph.inst
    base = step_spans(solved)
    total = float(base.sum())
    n_steps = max(len(base), 1)
    critical = node_slack == 0
    step = nodes["step"].to_numpy()
    comm, labels = _comm_codes(nodes)
    keys = []  # (key type, key, the positions of its nodes, bound)
    for key_type, (codes, names) in labels.items():
        for code in sorted(range(len(names)), key=names.__getitem__):
            if names[code] != "":
                on = comm[codes == code]  # a key's nodes by one comparison of codes over the comm nodes
                keys.append((key_type, names[code], on, saving_bound(solved, on) if critical[on].any() else 0))
    solve_order = sorted((k for k in keys if k[3] > 0), key=lambda k: -k[3])[:max_solves]
    chosen = {(k[0], k[1]) for k in solve_order}
    rows, solved_masks = [], {}
    for key_type, key, on, bound in keys:
        if bound == 0:
            saved = no_sync = 0.0
        elif (key_type, key) in chosen:
            # keys of one set of nodes (a run's only group and its only collective type) share a solve
            if (fingerprint := on.tobytes()) not in solved_masks:
                mask = np.zeros(len(nodes), dtype=bool)
                mask[on] = True
                solved_masks[fingerprint] = (float((base - _hidden(solved, mask)).sum()),
                                             float((base - _hidden(solved, mask, no_sync=True)).sum()))
            saved, no_sync = solved_masks[fingerprint]
        else:
            saved = no_sync = np.nan
        rows.append((key_type, key, int(np.unique(step[on]).size), _count_collectives(inst[on]),
                     saved, saved / n_steps, 100.0 * saved / total if total > 0 else np.nan, no_sync, bound))
    out = pd.DataFrame(rows, columns=WHATIF_COLUMNS)
    return out.sort_values(["saved_ns", "saved_bound_ns", "key_type", "key"], ascending=[False, False, True, True],
                           kind="stable", na_position="last").reset_index(drop=True)


def _count_collectives(inst: np.ndarray) -> int:
    """Distinct matched instances plus untied comm nodes among nodes of these instance ids."""
    return int(np.unique(inst[inst >= 0]).size + (inst < 0).sum())


def whatif_by_instance(solved: Solved, node_slack: np.ndarray, max_passes: int | None = None) -> pd.DataFrame:
    """instance (the graph's), step, saved_ns: each matched collective hidden alone. Solved again only
    when one of its members is critical (else exactly 0), the k-th such collective of every step in
    one solve (steps share no edges), the largest transfers first, at most max_passes solves: the
    rest keep NaN (max_passes None: MAX_INSTANCE_BATCHES)."""
    max_passes = MAX_INSTANCE_BATCHES if max_passes is None else max_passes
    nodes, inst = solved.nodes, solved.graph.inst
    sel = np.flatnonzero(inst >= 0)
    if sel.size == 0:
        return pd.DataFrame({"instance": pd.Series(dtype=np.int64), "step": pd.Series(dtype=np.int64),
                             "saved_ns": pd.Series(dtype=np.float64)})
    per = pd.DataFrame({"inst": inst[sel], "step": nodes["step"].to_numpy()[sel],
                        "transfer": solved.graph.transfer[sel], "critical": node_slack[sel] == 0}).groupby("inst").agg(
        step=("step", "min"), transfer=("transfer", "max"), critical=("critical", "any"))
    todo = per[per["critical"]].sort_values(["transfer", "step"], ascending=[False, True], kind="stable")
    todo = todo.assign(ordinal=todo.groupby("step").cumcount())
    todo = todo[todo["ordinal"] < max_passes]
    base = step_spans(solved).to_numpy()
    steps = solved.step_groups.steps  # the index of every step_spans Series, ascending
    batches = [batch for _, batch in todo.groupby("ordinal")]
    members = (solved.plan.members_of(batch.index.to_numpy(np.int64)) for batch in batches)
    saved_ns = np.where(per["critical"].to_numpy(), np.nan, 0.0)
    where = per.index.to_numpy(np.int64)  # ascending (grouped by instance)
    for batch, spans in zip(batches, _hidden_many(solved, members)):
        # base - spans at each collective's step, by position (the Series arithmetic and reindex cost
        # ~0.8 ms a batch): a collective's step is its earliest member's, so it is one of `steps`
        at = np.searchsorted(steps, batch["step"].to_numpy(np.int64))
        saved_ns[np.searchsorted(where, batch.index.to_numpy(np.int64))] = \
            (base[at] - spans.to_numpy()[at]).astype(np.float64)
    return pd.DataFrame({"instance": per.index.to_numpy(np.int64), "step": per["step"].to_numpy(np.int64),
                         "saved_ns": saved_ns})
