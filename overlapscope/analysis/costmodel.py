"""An α-β cost model per collective with a known size, against the peak of the link it ran on
(DESIGN.md "Cost model").

T = steps · α + factor · S / B, with S the nccl-tests size (bytes; the whole tensor for all_gather and
reduce_scatter), n the group size, B the link peak (GB/s = bytes/ns) and α the per-step latency:
- ring: all_reduce 2(n-1) steps, factor 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1) steps,
  factor (n-1)/n; broadcast, reduce (n-1) steps (pipelined chain), factor 1;
- tree: all_reduce 2⌈log2 n⌉ steps, factor 2 (a pipelined reduce then broadcast moves S each way);
  all_gather, reduce_scatter ⌈log2 n⌉ steps, factor (n-1)/n (recursive doubling / halving); broadcast,
  reduce ⌈log2 n⌉ steps, factor 1; all_to_all has no tree;
- flat (inside one NVSwitch node: every GPU reaches every other at B): one step (all_reduce: two, a
  reduce-scatter then an all-gather), ring's factor; NVLS (all_reduce inside an NVSwitch node with
  in-switch reduction, NVLink 4 and later): two steps, factor 1;
- send / recv / send_recv: one step, factor 1.
expected_ns = the least over the algorithms that apply. busbw (nccl-tests: algbw = S / t, busbw = algbw ×
the ring factor) is compared with B: pct_of_peak = 100 · busbw / B. Flags: latency_bound when the ring's
latency term exceeds its bandwidth term (small messages: bucket them); below_peak when it
is bandwidth-bound and busbw < below_peak_pct of B; tp_across_hosts when a tensor-parallel group (its
process group description names tp) spans hosts. B is the intra-node link when every rank of the
collective is on one host, else the inter-node one (the NIC per GPU is the narrowest hop).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from .collectives import busbw_factor
from .link_peaks import DEFAULT_LATENCY_US, Link, inter_node_link, intra_node_link

COST_COLUMNS = ("instance", "group", "collective", "bytes", "ranks", "hosts", "transfer_ns", "link", "peak_gbps",
                "ring_ns", "tree_ns", "flat_ns", "expected_ns", "algorithm", "busbw_gbps", "pct_of_peak",
                "latency_bound", "below_peak", "tp_across_hosts")


@dataclass(frozen=True, kw_only=True)
class CostConfig:
    link_gbps: float | None = None
    """Intra-node peak GB/s per direction per GPU (--link-gbps); default: from the GPU model."""
    inter_node_gbps: float | None = None
    """Inter-node peak GB/s per GPU (--inter-node-gbps); default: the NIC of the GPU's reference system."""
    latency_us: float | None = None
    """α per algorithm step in µs (--latency-us); default 1 µs inside a node, 5 µs across nodes."""
    below_peak_pct: float = 25.0
    """A bandwidth-bound collective whose busbw is under this share of the peak is flagged."""

    def __post_init__(self) -> None:
        for name in ("link_gbps", "inter_node_gbps", "latency_us"):
            v = getattr(self, name)
            if v is not None and not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name.replace('_', '-')} must be a number > 0, got {v}")


def _log2(n: np.ndarray) -> np.ndarray:
    return np.ceil(np.log2(np.maximum(n, 1))).astype(np.float64)


def algorithm_times(collective: np.ndarray, nbytes: np.ndarray, n: np.ndarray, peak_gbps: np.ndarray,
                    alpha_ns: np.ndarray, flat_ok: np.ndarray, nvls_ok: np.ndarray) -> dict[str, np.ndarray]:
    """ns per algorithm (NaN where it does not apply), one entry per collective (module docstring)."""
    coll = np.asarray(collective, dtype=object)
    n = np.asarray(n, dtype=np.float64)
    s_over_b = np.asarray(nbytes, dtype=np.float64) / np.asarray(peak_gbps, dtype=np.float64)
    ring_factor = busbw_factor(coll, n)
    ar = coll == "all_reduce"
    spread = np.isin(coll, ("all_gather", "reduce_scatter"))
    rooted = np.isin(coll, ("broadcast", "reduce"))
    p2p = np.isin(coll, ("send", "recv", "send_recv"))
    a2a = coll == "all_to_all"
    ring_steps = np.select([ar, spread | rooted | a2a, p2p], [2 * (n - 1), n - 1, np.ones_like(n)], np.nan)
    tree_steps = np.select([ar, spread | rooted], [2 * _log2(n), _log2(n)], np.nan)
    tree_factor = np.select([ar, spread, rooted], [np.full_like(n, 2.0), ring_factor, np.ones_like(n)], np.nan)
    flat_steps = np.where(ar, 2.0, np.where(spread | rooted | a2a, 1.0, np.nan))
    ring = ring_steps * alpha_ns + ring_factor * s_over_b
    tree = tree_steps * alpha_ns + tree_factor * s_over_b
    flat = np.where(flat_ok, flat_steps * alpha_ns + ring_factor * s_over_b, np.nan)
    nvls = np.where(nvls_ok & ar, 2.0 * alpha_ns + s_over_b, np.nan)
    return {"ring": ring, "tree": tree, "flat": flat, "nvls": nvls,
            "latency_ring": ring_steps * alpha_ns, "bandwidth_ring": ring_factor * s_over_b}


def cost_model(collectives: pd.DataFrame, *, hosts: Mapping[int, str], device_name: str | None,
               tp_groups: set[str] = frozenset(), config: CostConfig = CostConfig()) -> pd.DataFrame:
    """COST_COLUMNS, one row per collective instance with bytes > 0 (collectives.py's rows)."""
    if collectives is None or collectives.empty:
        return pd.DataFrame(columns=COST_COLUMNS)
    known = collectives[collectives["bytes"].to_numpy() > 0]
    if known.empty:
        return pd.DataFrame(columns=COST_COLUMNS)
    ranks, at = np.unique(known["rank"].to_numpy(np.int64), return_inverse=True)  # a lookup per rank, not per row
    host_of = pd.Series(np.array([hosts.get(int(r), "") for r in ranks], dtype=object)[at.reshape(-1)], index=known.index)
    per = known.assign(host=host_of).groupby("instance").agg(
        group=("group", "first"), collective=("collective", "first"), bytes=("bytes", "first"),
        ranks=("rank", "size"), group_size=("group_size", "first"), hosts=("host", "nunique"),
        transfer_ns=("instance_transfer_ns", "first"), busbw_gbps=("instance_busbw_gbps", "first")).reset_index()
    intra = intra_node_link(device_name)
    inter = inter_node_link(intra)
    intra_gbps = config.link_gbps or (intra.gbps if intra else np.nan)
    inter_gbps = config.inter_node_gbps or (inter.gbps if inter else np.nan)
    across = per["hosts"].to_numpy() > 1
    peak = np.where(across, inter_gbps, intra_gbps).astype(np.float64)
    link = np.where(across, _name(inter, config.inter_node_gbps, "inter-node"), _name(intra, config.link_gbps, "intra-node"))
    lat = DEFAULT_LATENCY_US if config.latency_us is None else {"intra": config.latency_us, "inter": config.latency_us}
    alpha = np.where(across, lat["inter"], lat["intra"]) * 1000.0
    switch = bool(intra and intra.nvswitch)
    nvls = switch and intra.name in ("NVLink 4", "NVLink 5")
    n = per["group_size"].to_numpy(np.float64)
    t = algorithm_times(per["collective"].to_numpy(object), per["bytes"].to_numpy(np.float64), n, peak, alpha,
                        ~across & switch, ~across & nvls)
    algos = np.stack([t["ring"], t["tree"], t["flat"], t["nvls"]])
    names = np.array(["ring", "tree", "flat", "nvls"], dtype=object)
    filled = np.where(np.isnan(algos), np.inf, algos)
    best = np.argmin(filled, axis=0)
    expected = filled[best, np.arange(best.size)]
    expected = np.where(np.isfinite(expected), expected, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        pct = 100.0 * per["busbw_gbps"].to_numpy(np.float64) / peak
    latency_bound = t["latency_ring"] > t["bandwidth_ring"]
    out = per.assign(link=link, peak_gbps=peak, ring_ns=t["ring"], tree_ns=t["tree"],
                     flat_ns=np.fmin(t["flat"], t["nvls"]), expected_ns=expected,
                     algorithm=np.where(np.isfinite(expected), names[best], "").astype(object), pct_of_peak=pct,
                     latency_bound=latency_bound & np.isfinite(peak),
                     below_peak=~latency_bound & (pct < config.below_peak_pct),
                     tp_across_hosts=across & per["group"].isin(tp_groups).to_numpy())
    return out[list(COST_COLUMNS)]


def _name(link: Link | None, override: float | None, where: str) -> str:
    if override is not None:
        return f"{where} {override:g} GB/s (--{'link' if where == 'intra-node' else 'inter-node'}-gbps)"
    return link.name if link else ""
