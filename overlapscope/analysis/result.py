"""What `analyze()` returns: one DataFrame per section, columns as in the JSON report (DESIGN.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from ..core.table import Run

# Per-step and per-rank overlap columns, in report order.
OVERLAP_COLUMNS = (
    "window_ns", "compute_ns", "comm_ns", "overlapped_ns",
    "exposed_comm_ns", "exposed_memcpy_ns", "idle_ns",
)

NO_KEY_LABELS = {"group": "(no group)", "scope": "(no enclosing range)", "op": "-"}
"""How every report and the dashboard spell an empty key: a trace that names no process group, comm
launched outside any range, a collective launched by no op range. One spelling each, everywhere."""


def key_label(key: object, column: str) -> str:
    """The key as shown: itself, or NO_KEY_LABELS' words for an empty one ("(unknown)" otherwise)."""
    text = "" if key is None else str(key)
    return text or NO_KEY_LABELS.get(column, "(unknown)")


@dataclass
class Analysis:
    """Every number overlapscope reports for one run.

    All frames have a `rank` column (except the cross-rank ones, keyed by group and seq) and only
    ever gain columns. Percentages are 0-100 and NaN where undefined (the JSON writes null).
    """

    run: dict[str, Any]
    """Run identity: path, world_size, ranks, device, backend, manifest fields, how ranks were found."""
    steps: pd.DataFrame
    """rank, step, window_start_ns, window_end_ns, OVERLAP_COLUMNS, overlap_pct, exposed_comm_pct."""
    totals: pd.DataFrame
    """rank, source, steps (count), OVERLAP_COLUMNS summed over steps, overlap_pct, exposed_comm_pct."""
    by_collective: pd.DataFrame
    """rank, collective, count, comm_ns, exposed_comm_ns (|M_k \\ C| over all steps)."""
    by_group: pd.DataFrame
    """rank, group, count, comm_ns, exposed_comm_ns."""
    by_scope: pd.DataFrame
    """rank, scope, count, comm_ns, exposed_comm_ns: scope is the innermost annotation that launched the comm."""
    by_key_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, section (by_collective, by_group, by_scope), key, count, comm_ns, exposed_comm_ns: the
    three breakdowns per step (rows where the key has comm in the step); they sum to the by_* totals.
    The CI gate's per-key samples; not in the JSON report."""
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Cross-rank: one row per (collective instance, rank): group, seq, collective, bytes, rank, start_ns,
    end_ns, wait_ns, transfer_ns, exposed_wait_ns, exposed_transfer_ns, algbw_gbps, busbw_gbps."""
    wait_transfer: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, group, collective, op, collectives, wait_ns, transfer_ns, exposed_wait_ns, exposed_transfer_ns:
    per rank and key, wait and transfer as lengths of time (unions, so wait + transfer <= comm even where
    collectives of one key run at once; analysis/wait_transfer.py). What tables and the dashboard sum."""
    stragglers: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, last_arrivals, mean_lateness_ns; worst first."""
    unmatched: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, group, collective, op, reason, count: comm events no cross-rank collective holds, and why."""
    prefetch: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, unit, pass, prefetch_gap_ns, lead_ns."""
    bubbles: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, bubble_ns, bubble_pct, theory_pct, schedule, stages, microbatches."""
    pipeline_spans: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, stage, action (F/B/I/W), microbatch, start_ns, end_ns: the Gantt view of a pipeline."""
    all_to_all: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per all-to-all instance: instance, group, seq, step, scope, ranks, bytes, max_received_bytes,
    mean_received_bytes, imbalance (max/mean received), hot_rank, waited_for_rank, max_wait_ns, missing."""
    all_to_all_traffic: pd.DataFrame = field(default_factory=pd.DataFrame)
    """instance, step, src, dst, bytes: the traffic matrix of every all-to-all with known splits."""
    moe_layers: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, layer, microbatch, phase (dispatch|combine), pass (forward|backward), count, comm_ns,
    exposed_comm_ns: the comm launched under the MoE labels `moe:L<l>:mb<m>:<phase>[:bwd]`."""
    moe_passes: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, pass, count, comm_ns, exposed_comm_ns: the union of all MoE-labelled comm of a pass
    (exposed dispatch+combine; per-key rows of moe_layers overlap when micro-batches overlap)."""
    ring_passes: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, pass, count, comm_ns, exposed_comm_ns: the union of all ring-step comm of a pass."""
    ring_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rank, step, layer, ring_step, pass, count, comm_ns, exposed_comm_ns, hidden_ns, attn_ns,
    hidden_by_attn_ns: ring-attention p2p per ring step (labels `ring:L<l>:step<k>[:bwd]`)."""
    comm_families: pd.DataFrame = field(default_factory=pd.DataFrame)
    """rule, kernels, example, count, device_ns, device_pct: which rule made which device work comm
    (library rule, user rule or launch context) and its share of the run's device time."""
    comm_candidates: pd.DataFrame = field(default_factory=pd.DataFrame)
    """name, ranks, count, device_ns, device_pct, why, comm_pattern: kernels counted as compute that
    look like communication, and the --comm-pattern that would count them."""
    collective_conflicts: pd.DataFrame = field(default_factory=pd.DataFrame)
    """collective (the op's, counted), kernel_collective (the kernel name's), kernel, count."""
    clock_offsets_ns: dict[int, int] = field(default_factory=dict)
    """Aligned time = recorded time + offset; the reference rank has 0."""
    diagnoses: list[str] = field(default_factory=list)
    """One-line explanations from the analyzers (prefetch late, straggler, comm on compute stream...)."""
    overlap_bounds: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per rank over its steps: rank, window_ns, compute_ns, comm_ns, launch_bound_idle_ns, no_overlap_ns,
    perfect_overlap_ns, overlap_efficiency_pct (bounds.py); the same columns per step are in `steps`."""
    critical_steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per step: step, rank (where the critical path ends), path_ns, comm_on_path_ns, ranks_on_path, lanes_on_path."""
    critical_path: pd.DataFrame = field(default_factory=pd.DataFrame)
    """The critical path's segments: step, order, rank, lane, kind (compute, comm, copy, lag, launch), label,
    collective, group, scope, start_ns, end_ns (aligned clock)."""
    collective_slack: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per matched collective: instance (as in `collectives`), step, group, collective, scope, pass, slack_ns,
    on_critical_path, saved_ns (the step's span minus its span with this collective hidden)."""
    whatif: pd.DataFrame = field(default_factory=pd.DataFrame)
    """key_type, key, steps, collectives, saved_ns, saved_per_step_ns, saved_pct: hiding every collective of
    the key; most saved first."""
    cost_model: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per collective with a known size: α-β expected times (ring, tree, flat), busbw vs link peak, flags."""
    traces: Run | None = field(default=None, repr=False, compare=False)
    """The event tables the numbers came from, kept only when asked (`analyze_run(keep_events=True)`:
    the dashboard and the Perfetto export draw them); not part of any report."""
