"""The expert- and context-parallel tables of a report: all-to-all imbalance, MoE exposure, ring steps."""
from __future__ import annotations

import math

import pandas as pd

from ..analysis.all_to_all import moe_summary
from ..analysis.result import Analysis
from ..analysis.ring import ring_summary

MS = 1e6
Table = tuple[str, list[str], list[list[str]]]


def _ms(ns: float) -> str:
    return f"{ns / MS:,.3f}"


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}" if whole else "-"


def _kib(n: float) -> str:
    return "-" if n is None or (isinstance(n, float) and math.isnan(n)) or n < 0 else f"{n / 1024:,.1f}"


def all_to_all_table(analysis: Analysis, top: int = 10) -> Table:
    """The most imbalanced all-to-alls (instances without splits last, saying what is missing)."""
    header = ["scope", "step", "ranks", "KiB", "max recv KiB", "mean recv KiB", "imbalance", "hot rank",
              "waited for", "max wait ms"]
    a = analysis.all_to_all
    if a is None or a.empty:
        return "All-to-all traffic (most imbalanced)", header, []
    worst = a.sort_values(["imbalance", "max_wait_ns"], ascending=False, na_position="last", kind="stable").head(top)
    rows = [[str(r.scope) or "-", str(r.step), str(r.ranks), _kib(r.bytes), _kib(r.max_received_bytes),
             _kib(r.mean_received_bytes),
             f"{r.imbalance:.2f}x" if not pd.isna(r.imbalance) else f"- ({r.missing})",
             str(r.hot_rank) if r.hot_rank >= 0 else "-", str(r.waited_for_rank) if r.waited_for_rank >= 0 else "-",
             _ms(r.max_wait_ns)] for r in worst.itertuples(index=False)]
    return "All-to-all traffic (most imbalanced)", header, rows


def moe_table(analysis: Analysis) -> Table:
    header = ["layer", "phase", "pass", "count", "comm ms", "exposed ms", "exposed % of its comm"]
    s = moe_summary(analysis.moe_layers)
    rows = [[str(r.layer), str(r.phase), str(r[2]), str(r.count), _ms(r.comm_ns), _ms(r.exposed_comm_ns),
             _pct(r.exposed_comm_ns, r.comm_ns)] for r in s.itertuples(index=False)]
    return "Exposed MoE dispatch/combine per layer (all ranks, steps, micro-batches)", header, rows


def ring_table(analysis: Analysis) -> Table:
    header = ["ring step", "pass", "count", "p2p ms", "exposed ms", "hidden ms", "attention ms",
              "hidden by its attention ms"]
    s = ring_summary(analysis.ring_steps)
    rows = [[str(r.ring_step), str(r[1]), str(r.count), _ms(r.comm_ns), _ms(r.exposed_comm_ns), _ms(r.hidden_ns),
             _ms(r.attn_ns), _ms(r.hidden_by_attn_ns)] for r in s.itertuples(index=False)]
    return "Ring-attention steps (all ranks, steps, layers)", header, rows


def tables(analysis: Analysis) -> list[Table]:
    return [all_to_all_table(analysis), moe_table(analysis), ring_table(analysis)]
