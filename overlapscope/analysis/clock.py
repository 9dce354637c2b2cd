"""Clock alignment across ranks from the ends of matched collectives (DESIGN.md "Clock alignment").

Once the last rank arrives, every rank of a collective finishes within a short tail of the others,
so for a matched collective the difference of two ranks' recorded end times is their clock offset
plus noise. Each rank's offset is the median of those differences (a few mismatched or slow-tailed
collectives cannot move a median the way they move a mean). Aligned time = recorded time + offset;
the lowest rank is the reference (offset 0). A rank that shares no collective with the reference
is aligned through a rank that does (breadth first), and one that shares none with any aligned rank
keeps offset 0 and is reported.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)


class ClockOffsets(NamedTuple):
    offsets_ns: dict[int, int]
    """rank -> offset; aligned = recorded + offset."""
    pairs: dict[int, int]
    """rank -> number of matched collective ends its offset was estimated from (0: not estimated)."""
    unaligned: list[int]
    """Ranks that share no matched collective with any aligned rank (their offset is 0)."""


def estimate_offsets(ends: pd.DataFrame, ranks: list[int] | None = None) -> ClockOffsets:
    """Offsets from matched collective ends.

    `ends`: one row per (instance, rank) of matched collectives, columns instance, rank, end_ns
    (recorded). `ranks`: every rank of the run (those absent from `ends` get 0 and are unaligned).
    """
    all_ranks = sorted(set(ranks or []) | set(ends["rank"].astype(int).tolist()))
    if not all_ranks:
        return ClockOffsets({}, {}, [])
    frame = ends[["instance", "rank", "end_ns"]].astype({"rank": np.int64, "end_ns": np.int64})
    reference = all_ranks[0]
    offsets: dict[int, int] = {reference: 0}
    pairs: dict[int, int] = {reference: 0}
    pending = set(all_ranks) - {reference}
    while pending:
        known = frame[frame["rank"].isin(list(offsets))]
        known = known.assign(aligned_ns=known["end_ns"] + known["rank"].map(offsets).astype(np.int64))
        # One aligned end per instance from the already-aligned ranks: their median (robust too).
        anchor = known.groupby("instance")["aligned_ns"].median()
        cand = frame[frame["rank"].isin(list(pending)) & frame["instance"].isin(anchor.index)]
        if cand.empty:
            break
        diff = anchor.reindex(cand["instance"]).to_numpy(np.float64) - cand["end_ns"].to_numpy(np.float64)
        per_rank = pd.DataFrame({"rank": cand["rank"].to_numpy(), "diff": diff}).groupby("rank")["diff"]
        counts = per_rank.size()
        # Align the best-supported rank first: later ranks then have more anchors to lean on.
        best = int(counts.idxmax())
        offsets[best] = int(np.rint(per_rank.median()[best]))
        pairs[best] = int(counts[best])
        pending.discard(best)
    unaligned = sorted(pending)
    for r in unaligned:
        offsets[r] = 0
        pairs[r] = 0
    if unaligned:
        log.warning("ranks %s share no matched collective with the others: their clocks are not aligned",
                    unaligned)
    return ClockOffsets({r: offsets[r] for r in all_ranks}, {r: pairs[r] for r in all_ranks}, unaligned)
