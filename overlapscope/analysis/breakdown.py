"""Exposed comm broken down by a key (collective, process group, launching scope).

For key k: |M_k \\ C| with M_k the union of k's comm intervals inside the step windows; when comm of
two keys overlaps in time both count it (DESIGN.md). Loops over keys (a few to a few hundred),
never over events.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..core import intervals as iv
from ..core.codes import codes_names, isin, shared_codes
from ..core.frames import column_values, built_once, empty_frame
from ..core.roles import SCOPE_ROLES
from .overlap import lane_sets, window_set


def exposed_by_key_and_step(events: pd.DataFrame, windows: pd.DataFrame, keys: np.ndarray, column: str, *,
                            sets: dict[str, iv.Intervals] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """keys: one label per row of `events` (only comm rows are used). Returns two frames:
    - totals: column, count, comm_ns, exposed_comm_ns; largest exposed time first;
    - per step window: step, column, count (comm events starting in the window), comm_ns,
      exposed_comm_ns; rows only where a key has comm in the step. Summed over steps, comm_ns and
      exposed_comm_ns equal the totals (M_k is cut at the window edges).
    sets: `lane_sets(events)` when known."""
    comm = isin(column_values(events, "kind"), ("comm",))
    if not comm.any():  # most sections of a rank without comm: the frames below, empty, copied
        return _no_comm(column)
    compute = (sets or lane_sets(events))["compute"]
    inside = iv.merge(*window_set(windows))
    win_starts = column_values(windows, "start_ns", np.int64)
    win_ends = column_values(windows, "end_ns", np.int64)
    n_win = len(windows)
    start = column_values(events, "start_ns", np.int64)[comm]
    end = column_values(events, "end_ns", np.int64)[comm]
    labels = np.asarray(keys, dtype=object)[comm]
    # the window each comm event starts in (-1: none), for per-step counts
    start_win = np.searchsorted(win_starts, start, side="right") - 1
    start_win[(start_win >= 0) & (start >= win_ends[np.maximum(start_win, 0)])] = -1
    totals, per_step = [], []
    uniq, inverse = np.unique(labels.astype(str), return_inverse=True)
    for code, label in enumerate(uniq):
        sel = inverse == code
        # M_k, cut where one window ends and the next begins (windows may touch), so that each
        # piece lies in one window
        m_k = iv.cut_at(iv.intersect(iv.merge(start[sel], end[sel]), inside), win_starts)
        lengths = m_k.ends - m_k.starts
        exposed = lengths - iv.overlap_lengths(m_k.starts, m_k.ends, compute)
        win = np.searchsorted(win_starts, m_k.starts, side="right") - 1
        comm_w = np.zeros(n_win, dtype=np.int64)
        exposed_w = np.zeros(n_win, dtype=np.int64)
        np.add.at(comm_w, win, lengths)
        np.add.at(exposed_w, win, exposed)
        counted = start_win[sel]
        count_w = np.bincount(counted[counted >= 0], minlength=n_win).astype(np.int64)
        totals.append((label, int(sel.sum()), int(comm_w.sum()), int(exposed_w.sum())))
        present = np.flatnonzero((comm_w > 0) | (count_w > 0))
        per_step.append((present, np.full(present.size, code), count_w[present], comm_w[present], exposed_w[present]))
    return _frames(column, totals, per_step, uniq, column_values(windows, "step", np.int32))


def _no_comm(column: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """exposed_by_key_and_step's frames for no comm at all: built once per column by _frames itself
    (the same dtypes), then copied (two frame constructions cost ~0.8 ms a call)."""
    def build(i: int) -> pd.DataFrame:
        return _frames(column, [], [], np.empty(0, dtype=object), np.empty(0, np.int32))[i]

    return (built_once(f"breakdown totals {column}", lambda: build(0)),
            built_once(f"breakdown steps {column}", lambda: build(1)))


def _frames(column: str, totals: list, per_step: list, uniq: np.ndarray,
            window_steps: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    # Largest exposed first, then by key: the keys are sorted, so a stable sort on exposed keeps them.
    t_label, t_count, t_comm, t_exposed = (np.array(c, dtype=d) for c, d in zip(
        zip(*totals) if totals else ((), (), (), ()), (object, np.int64, np.int64, np.int64)))
    rank_order = np.argsort(-t_exposed, kind="stable")
    out = pd.DataFrame({column: t_label[rank_order], "count": t_count[rank_order], "comm_ns": t_comm[rank_order],
                        "exposed_comm_ns": t_exposed[rank_order]})
    if per_step:
        win, code, count, comm_ns, exposed_ns = (np.concatenate(parts) for parts in zip(*per_step))
    else:
        win = code = count = comm_ns = exposed_ns = np.empty(0, np.int64)
    order = np.lexsort((code, win))  # by step window, then key (the keys are sorted)
    steps = pd.DataFrame({"step": window_steps[win[order]],
                          column: uniq.astype(object)[code[order]],
                          "count": count[order].astype(np.int64), "comm_ns": comm_ns[order].astype(np.int64),
                          "exposed_comm_ns": exposed_ns[order].astype(np.int64)})
    return out, steps


def exposed_by_key_of_intervals(starts: np.ndarray, ends: np.ndarray, keys: np.ndarray, windows: pd.DataFrame,
                                uncovered: pd.DataFrame, column: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`exposed_by_key_and_step` from comm intervals and the rank's uncovered time (W \\ C, as
    `collectives.uncovered_set` gives it) instead of its event table: what the cross-rank reduce has.
    Inside the windows, compute is W \\ uncovered, so |M_k \\ C| is the same number."""
    comm = pd.DataFrame({"kind": np.full(len(starts), "comm", dtype=object), "start_ns": starts, "end_ns": ends})
    gaps = iv.Intervals(column_values(uncovered, "start_ns", np.int64), column_values(uncovered, "end_ns", np.int64))
    compute = iv.difference(iv.merge(*window_set(windows)), gaps)
    return exposed_by_key_and_step(comm, windows, keys, column, sets={"compute": compute})


def launch_scopes(events: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """For each selected row (boolean mask `rows`), the innermost annotation (record_function / NVTX range) on its launching thread
    that held its launch, skipping step ranges and communication calls (the `role` column: an
    annotation whose role is a scope, an FSDP unit phase or a micro-batch); '' when none."""
    name_codes, names = codes_names(column_values(events, "name"))
    ann = np.flatnonzero(isin(column_values(events, "kind"), ("annotation",))
                         & isin(column_values(events, "role"), SCOPE_ROLES))
    lanes, launch_lanes = shared_codes(column_values(events, "lane"), column_values(events, "launch_lane"))
    query = np.flatnonzero(rows)
    found = iv.innermost_containing(
        lanes[ann], column_values(events, "start_ns", np.int64)[ann], column_values(events, "end_ns", np.int64)[ann],
        launch_lanes[query], column_values(events, "launch_ns", np.int64)[query])
    scopes = np.full(len(events), "", dtype=object)
    hit = found >= 0
    scopes[query[hit]] = names[name_codes[ann[found[hit]]]]
    return scopes


def exposed_by_label_pass(events: pd.DataFrame, windows: pd.DataFrame, scopes: np.ndarray, label, *,
                          sets: dict[str, iv.Intervals] | None = None) -> pd.DataFrame:
    """Per step window and pass, the union of the comm launched under scopes matching `label` (a compiled
    regex whose last group is ":bwd" for backward): step, pass, count, comm_ns, exposed_comm_ns.

    A union, not a sum over scopes: transfers of two micro-batches in flight at once (the point of
    overlapping them) must not count one wait twice."""
    # factorize, not astype(str) + np.unique: a fixed-width string copy of every row costs ~0.8x of
    # a 1 GB trace's JSON in memory; the label is matched once per distinct scope (str(NaN) is "nan",
    # as astype(str) gave)
    inverse, uniq = pd.factorize(np.asarray(scopes, dtype=object), use_na_sentinel=False)
    matched = [label.match(str(u)) for u in uniq]
    pass_of = np.array(["" if m is None else "backward" if m.groups()[-1] else "forward" for m in matched],
                       dtype=object)
    if not (pass_of != "").any():  # no such label (most runs): skip the breakdown of all comm as ""
        return empty_frame(("step", "pass", "count", "comm_ns", "exposed_comm_ns"), {"step": np.int32, "pass": object})
    _, per_step = exposed_by_key_and_step(events, windows, pass_of[inverse], "pass", sets=sets)
    return per_step[per_step["pass"] != ""].reset_index(drop=True)
