"""depgraph's node frames as the reduce joins them: text columns coded per rank, one block layout for
every rank (with or without nodes), joined by codes into the values each rank recorded."""
from __future__ import annotations

import numpy as np
import pandas as pd

from crossrank_tables import US, ev, table
from overlapscope.analysis.depgraph import NODE_COLUMNS, rank_graph
from overlapscope.core.frames import _joined_blocks, stacked_frames

TEXT = ("lane", "cls", "label", "collective", "group", "scope", "pass", "launch_lane")


def _windows(start: int, end: int) -> pd.DataFrame:
    return pd.DataFrame({"step": np.array([0], np.int64), "start_ns": np.array([start], np.int64),
                         "end_ns": np.array([end], np.int64)})


def _layout(frame: pd.DataFrame) -> list[tuple[str, list[int]]]:
    return [(type(b.dtype).__name__ if isinstance(b.dtype, pd.CategoricalDtype) else str(b.dtype),
             b.mgr_locs.as_array.tolist()) for b in frame._mgr.blocks]


def test_nodes_of_ranks_with_and_without_work_join_by_codes():
    busy = table(0, [ev("stream:7", "compute", "gemm", 0, 10 * US),
                     ev("stream:9", "comm", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5 * US, 20 * US,
                        collective="all_reduce", group="0", seq=0),
                     ev("stream:7", "comm", "ncclDevKernel_Broadcast_RING_LL", 12 * US, 18 * US,
                        collective="broadcast", group="0", seq=1)])  # after gemm on its lane: a lane edge
    other = table(1, [ev("stream:7", "compute", "attn", 0, 5 * US), ev("stream:7", "compute", "attn", 6 * US, 8 * US)])
    idle = table(2, [ev("stream:7", "compute", "gemm", 50 * US, 60 * US)])  # outside its window: no nodes
    graphs = [rank_graph(t, _windows(0, 40 * US)) for t in (busy, other, idle)]
    nodes = [g.nodes for g in graphs]
    assert [len(n) for n in nodes] == [3, 2, 0]
    assert all(list(n.columns) == [*NODE_COLUMNS, "corr"] for n in nodes)
    assert all(isinstance(n[c].dtype, pd.CategoricalDtype) for n in nodes for c in TEXT)
    assert all(len({id(n[c].dtype) for c in TEXT}) == 1 for n in nodes)  # one dtype for a rank's 8 columns
    assert _layout(nodes[0]) == _layout(nodes[1]) == _layout(nodes[2])  # an empty graph too
    assert _joined_blocks(nodes, union_categories=True) is not None  # block by block, no pd.concat
    joined = stacked_frames(nodes, union_categories=True)
    want = pd.concat([n.astype({c: object for c in TEXT}) for n in nodes], ignore_index=True)
    for c in TEXT:
        assert joined[c].astype(object).tolist() == want[c].tolist(), c
    assert joined["label"].tolist() == ["gemm", "ncclDevKernel_Broadcast_RING_LL",
                                        "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "attn", "attn"]
    assert joined["cls"].tolist() == ["compute", "comm", "comm", "compute", "compute"]
    assert joined["collective"].tolist() == ["", "broadcast", "all_reduce", "", ""]
    numbers = [c for c in joined.columns if c not in TEXT]
    pd.testing.assert_frame_equal(joined[numbers], want[numbers], check_exact=True)
    edges = [g.edges for g in graphs]  # the edge types too: categorical, one layout, joined by codes
    assert len(edges[0]) > 0 and len(edges[2]) == 0 and _layout(edges[0]) == _layout(edges[2])
    assert "lane" in edges[0]["type"].tolist()
    assert _joined_blocks(edges, union_categories=True) is not None
    types = stacked_frames(edges, union_categories=True)["type"]
    assert isinstance(types.dtype, pd.CategoricalDtype)
    assert types.tolist() == [t for e in edges for t in e["type"].tolist()]
