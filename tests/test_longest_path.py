"""The frontier forward pass (only what moved is computed again, warm what-if solves) against the
full recomputing solver on random dependency graphs whose answer the oracle gives."""
from __future__ import annotations

import numpy as np
import pytest

from longest_path_reference import full_backward, full_forward
from overlapscope.analysis.longest_path import Graph, Plan, backward, forward


def random_graph(rng: np.random.Generator, chains: int = 60, levels: int = 30) -> Graph:
    """Chains of non-comm nodes at increasing levels and single-node comm chains; collectives tie
    comm nodes of one level; every explicit edge goes to a higher level, so there is no cycle."""
    level, head, inst = [], [], []
    next_inst = 0
    for _ in range(chains):
        if rng.random() < 0.4:
            level.append(int(rng.integers(0, levels))), head.append(True), inst.append(-2)  # comm, tied below
        else:
            length = int(rng.integers(1, 6))
            lv = np.sort(rng.choice(levels, size=min(length, levels), replace=False))
            level.extend(lv.tolist()), head.extend([True] + [False] * (lv.size - 1)), inst.extend([-1] * lv.size)
    level, head, inst = np.array(level), np.array(head), np.array(inst)
    comm = np.flatnonzero(inst == -2)
    inst[comm] = -1
    for lv in np.unique(level[comm]):
        at = comm[level[comm] == lv]
        groups = rng.integers(0, 3, at.size)  # up to three collectives per level, some members left unmatched
        for grp in np.unique(groups):
            members = at[groups == grp]
            if grp < 2:
                inst[members] = next_inst
                next_inst += 1
    n = level.size
    pairs = rng.integers(0, n, size=(4 * n, 2))
    pairs = pairs[level[pairs[:, 0]] < level[pairs[:, 1]]]
    return Graph(chain=np.cumsum(head) - 1, head=head, base=rng.integers(0, 50, n), g=np.where(head, 0, rng.integers(-3, 1, n)),
                 u=rng.integers(0, 5, n), dur=np.where(inst >= 0, 0, rng.integers(0, 40, n)), inst=inst,
                 transfer=np.where(inst >= 0, rng.integers(0, 30, n), 0), src=pairs[:, 0], dst=pairs[:, 1],
                 lag=rng.integers(-5, 10, pairs.shape[0]))


# the schedule's full sweep (full_sweep.py), the sweep that tracks what moved (a plan without a
# schedule), and the passes (a plan without an order)
@pytest.mark.parametrize("solver", ["schedule", "tracked", "passes"])
@pytest.mark.parametrize("seed", range(40))
def test_forward_equals_the_full_solve_cold_and_warm(seed, solver):
    rng = np.random.default_rng(seed)
    graph = random_graph(rng)
    plan = Plan.of(graph)
    assert plan.order is not None and plan.schedule is not None  # the random graphs are DAGs
    if solver == "tracked":
        plan = plan._replace(schedule=None)
    elif solver == "passes":
        plan = plan._replace(order=None)
    x0, y0 = full_forward(graph)
    x, y = forward(graph, plan=plan)
    assert np.array_equal(x, x0) and np.array_equal(y, y0)
    # what-ifs as whatif.py solves them: hide a set of comm nodes, warm from the base solution
    for _ in range(5):
        mask = (graph.inst >= 0) | (rng.random(graph.base.size) < 0.2)
        mask &= rng.random(graph.base.size) < 0.3
        matched = graph.inst >= 0
        dur = np.where(mask & ~matched, 0, graph.dur)
        transfer = np.where(mask & matched, 0, graph.transfer)
        want = full_forward(graph, dur=dur, transfer=transfer)
        got = forward(graph, dur=dur, transfer=transfer, plan=plan, warm=(x0, y0, mask))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        untied = graph._replace(inst=np.where(mask, -1, graph.inst))  # no_sync: the rendezvous removed too
        want = full_forward(untied, dur=dur, transfer=transfer)
        got = forward(untied, dur=dur, transfer=transfer, plan=plan, warm=(x0, y0, mask))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("ordered", [True, False])  # the schedule's layers in reverse, and the passes
@pytest.mark.parametrize("seed", range(40))
def test_backward_equals_the_full_solve(seed, ordered, monkeypatch):
    import overlapscope.analysis.longest_path as lp
    swept = []
    monkeypatch.setattr(lp, "full_sweep_back", lambda *a, sweep=lp.full_sweep_back: swept.append(sweep(*a)) or swept[-1])
    rng = np.random.default_rng(seed)
    graph = random_graph(rng)
    plan = Plan.of(graph)
    assert plan.schedule is not None
    if not ordered:
        plan = plan._replace(schedule=None)
    _, y = full_forward(graph)
    # every node by the latest end (as slack asks), and some nodes by tighter deadlines of their own
    deadline = np.where(rng.random(y.size) < 0.2, y + rng.integers(0, 20, y.size), y.max())
    want = full_backward(graph, deadline)
    got = backward(graph, deadline, plan=plan)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    # the reverse sweep itself solved it (it declines only a member that ends a longer sub-chain)
    assert (len(swept) == 1 and swept[0] is not None) if ordered else not swept


def test_a_member_that_ends_a_longer_sub_chain_is_solved_backward_by_the_passes(monkeypatch):
    """Node 1, a collective member, ends the sub-chain [0, 1] (a chain depgraph never builds: comm
    nodes head their own chains): the forward schedule takes it (nothing reads its x + d), the
    reverse sweep declines it (the collective's layer would need node 1 before node 0's sub-chain),
    and the passes give the oracle's latest times."""
    import overlapscope.analysis.longest_path as lp
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    graph = Graph(chain=i64(0, 0, 1), head=np.array([True, False, True]), base=i64(0, 0, 4), g=i64(0, 0, 0),
                  u=i64(0, 0, 0), dur=i64(3, 0, 0), inst=i64(-1, 0, 0), transfer=i64(0, 5, 5),
                  src=i64(), dst=i64(), lag=i64())
    plan = Plan.of(graph)
    assert plan.schedule is not None
    x, y = forward(graph, plan=plan)
    assert x.tolist() == [0, 3, 4] and y.tolist() == [3, 9, 9]
    declined = []
    monkeypatch.setattr(lp, "full_sweep_back", lambda *a, sweep=lp.full_sweep_back: declined.append(sweep(*a)) or None)
    got = backward(graph, np.full(3, 9, np.int64), plan=plan)
    want = full_backward(graph, np.full(3, 9, np.int64))
    assert declined == [None] and np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_chain_that_continues_after_a_collective_member_is_solved_without_a_schedule(monkeypatch):
    """The schedule reads a chain's x + d as its y, which a member's is not: a graph where a chain
    goes on after a member (depgraph builds none: comm nodes head their own chains) gets no
    schedule, and the sweep that tracks what moved solves it. Member 0 ends at max(J, x) + t =
    max(10, 0) + 5 = 15, but node 1 continues its chain from x0 + d0 = 0: it starts at 0, not 15."""
    import overlapscope.analysis.longest_path as lp
    i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731
    graph = Graph(chain=i64(0, 0, 1), head=np.array([True, False, True]), base=i64(0, 0, 10), g=i64(0, 0, 0),
                  u=i64(0, 0, 0), dur=i64(0, 3, 0), inst=i64(0, -1, 0), transfer=i64(5, 0, 5),
                  src=i64(), dst=i64(), lag=i64())
    plan = Plan.of(graph)
    assert plan.order is not None and plan.schedule is None
    used = []
    monkeypatch.setattr(lp, "full_sweep", lambda *a, sweep=lp.full_sweep: used.append(1) or sweep(*a))
    x, y = forward(graph, plan=plan)
    assert x.tolist() == [0, 0, 10] and y.tolist() == [15, 3, 15] and not used
    assert np.array_equal(x, full_forward(graph)[0]) and np.array_equal(y, full_forward(graph)[1])


def test_a_warm_solve_with_nothing_changed_returns_the_solution_at_once():
    graph = random_graph(np.random.default_rng(1))
    x0, y0 = full_forward(graph)
    x, y = forward(graph, warm=(x0, y0, np.zeros(graph.base.size, bool)))
    assert np.array_equal(x, x0) and np.array_equal(y, y0)


def test_a_warm_solve_follows_times_that_grow_too():
    rng = np.random.default_rng(2)
    graph = random_graph(rng)
    x0, y0 = full_forward(graph)
    grown = rng.random(graph.base.size) < 0.1
    dur, transfer = graph.dur + 7 * grown, graph.transfer + 5 * (grown & (graph.inst >= 0))
    want = full_forward(graph, dur=dur, transfer=transfer)
    got = forward(graph, dur=dur, transfer=transfer, warm=(x0, y0, grown))
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_cycle_is_reported_not_looped_on(monkeypatch):
    import overlapscope.analysis.longest_path as lp
    monkeypatch.setattr(lp, "MAX_PASSES", 50)
    # two single-node chains feeding each other with a positive lag never settle
    graph = Graph(chain=np.array([0, 1]), head=np.array([True, True]), base=np.zeros(2, np.int64),
                  g=np.zeros(2, np.int64), u=np.zeros(2, np.int64), dur=np.ones(2, np.int64),
                  inst=np.array([-1, -1]), transfer=np.zeros(2, np.int64), src=np.array([0, 1]),
                  dst=np.array([1, 0]), lag=np.ones(2, np.int64))
    with pytest.raises(AssertionError, match="cycle"):
        lp.forward(graph)


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.parametrize("seed", range(20))
def test_many_what_ifs_swept_together_equal_each_solved_alone(seed, ordered, monkeypatch):
    import overlapscope.analysis.longest_path as lp
    rng = np.random.default_rng(100 + seed)
    graph = random_graph(rng)
    plan = Plan.of(graph)
    if not ordered:
        plan = plan._replace(order=None)
    x0, y0 = full_forward(graph)
    matched = graph.inst >= 0
    variants, wants = [], []
    for _ in range(7):
        mask = rng.random(graph.base.size) < rng.choice([0.02, 0.1, 0.4])
        grown = rng.random(graph.base.size) < 0.05  # and some times that grow
        dur = np.where(mask & ~matched, 0, graph.dur) + 3 * (grown & ~matched)
        transfer = np.where(mask & matched, 0, graph.transfer) + 4 * (grown & matched)
        variants.append((dur, transfer, mask | grown))
        wants.append(full_forward(graph, dur=dur, transfer=transfer)[1])
    # batches of 1, 3 and all 7 variants (the last batch short)
    for per_batch in (1, 3, 7):
        monkeypatch.setattr(lp, "MAX_COPY_NODES", per_batch * graph.base.size)
        got = list(lp.forward_many(graph, iter(variants), plan=plan, warm=(x0, y0)))
        assert len(got) == len(wants)
        for g, w in zip(got, wants):
            assert np.array_equal(g, w)


def synced_graph(rng: np.random.Generator, ranks: int = 12, steps: int = 3, collectives: int = 8,
                 pinned: bool = False) -> Graph:
    """Each rank's steps: runs of one to three compute kernels (one chain) between all-reduces that
    every rank of the step joins; lane edges around the comm nodes; every node's base is its step's
    window start. Hiding one all-reduce shifts what follows it on every rank by the same amount once
    the next all-reduce has gathered the ranks: the early stop's case. pinned: one kernel per step
    late in rank 0's step starts at a fixed time (its base), so the shift cannot pass it."""
    head, base, g, dur, inst, transfer, src, dst, lag = ([] for _ in range(9))
    for r in range(ranks):
        for s in range(steps):
            window = s * 10_000
            for k in range(collectives):
                for j in range(int(rng.integers(1, 4))):
                    if j == 0 and k > 0:  # the lane edge from the all-reduce before
                        src.append(len(head) - 1), dst.append(len(head)), lag.append(int(rng.integers(0, 3)))
                    head.append(j == 0), base.append(window), g.append(0 if j == 0 else int(rng.integers(-2, 1)))
                    dur.append(int(rng.integers(5, 60))), inst.append(-1), transfer.append(0)
                src.append(len(head) - 1), dst.append(len(head)), lag.append(0)
                head.append(True), base.append(window), g.append(0), dur.append(0)
                inst.append(s * collectives + k), transfer.append(int(rng.integers(1, 40)))
    n = len(head)
    u = rng.integers(0, 4, n)
    graph = Graph(chain=np.cumsum(head) - 1, head=np.array(head), base=np.array(base), g=np.array(g), u=u,
                  dur=np.array(dur), inst=np.array(inst), transfer=np.array(transfer), src=np.array(src),
                  dst=np.array(dst), lag=np.array(lag))
    if pinned:
        x0, _ = full_forward(graph)
        rank0 = np.flatnonzero((np.arange(n) < n // ranks) & (graph.inst < 0))
        late = [int(rank0[(graph.base[rank0] == s * 10_000)][-2]) for s in range(steps)]
        base = graph.base.copy()
        base[late] = x0[late] - graph.u[late]  # its start now set by its base: no headroom
        graph = graph._replace(base=base)
    return graph


@pytest.mark.parametrize("pinned", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_a_what_if_that_became_a_uniform_shift_stops_early_and_equals_the_full_solve(seed, pinned, monkeypatch):
    import overlapscope.analysis.longest_path as lp
    import overlapscope.analysis.uniform_shift as us
    rng = np.random.default_rng(300 + seed)
    graph = synced_graph(rng, pinned=pinned)
    plan = Plan.of(graph)
    assert plan.order is not None
    x0, y0 = full_forward(graph)
    outcomes = []
    shift_rest = us.Cuts.shift_rest
    monkeypatch.setattr(us.Cuts, "shift_rest", lambda self, *a: outcomes.append(shift_rest(self, *a)) or outcomes[-1])
    matched = graph.inst >= 0
    variants, wants = [], []
    collectives = int(graph.inst.max()) + 1
    for k in range(collectives // 3):  # hide the k-th all-reduce of every step, as whatif_by_instance does
        mask = np.isin(graph.inst, [k, k + collectives // 3, k + 2 * collectives // 3])
        transfer = np.where(mask & matched, 0, graph.transfer)
        variants.append((graph.dur, transfer, mask))
        wants.append(full_forward(graph, transfer=transfer)[1])
    for per_batch in (1, 4):
        monkeypatch.setattr(lp, "MAX_COPY_NODES", per_batch * graph.base.size)
        outcomes.clear()
        got = list(lp.forward_many(graph, iter(variants), plan=plan, warm=(x0, y0)))
        for g, w in zip(got, wants):
            assert np.array_equal(g, w)
        assert not all(outcomes)  # declined where the shift was not yet uniform
        if not pinned:
            assert any(outcomes)  # taken, and gave the full solve's answer
    if pinned:  # the headroom rule is what keeps it exact there: without it the answers go wrong
        monkeypatch.setattr(us.Cuts, "_room_after", lambda self, comps, layer: np.full(comps.size, 2 ** 62))
        got = list(lp.forward_many(graph, iter(variants), plan=plan, warm=(x0, y0)))
        assert any(outcomes) and not all(np.array_equal(g, w) for g, w in zip(got, wants))


@pytest.mark.parametrize("seed", range(6))
def test_weak_components_equal_scipy(seed):
    # uniform_shift's NumPy union-find against SciPy's graph search, on random sparse graphs with long
    # chains (a lane), self-loops and isolated nodes; labels numbered by least node, as SciPy's
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from overlapscope.analysis.uniform_shift import _weak_components

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    chain = rng.permutation(n)[: n // 2]
    src = np.r_[chain[:-1], rng.integers(0, n, n // 3)].astype(np.int64)
    dst = np.r_[chain[1:], rng.integers(0, n, n // 3)].astype(np.int64)
    expected = connected_components(coo_matrix((np.ones(src.size), (src, dst)), shape=(n, n)),
                                    directed=True, connection="weak")[1]
    np.testing.assert_array_equal(_weak_components(n, src, dst), expected)


@pytest.mark.parametrize("seed", range(5))
def test_members_of_instances_are_the_nodes_of_those_instances(seed):
    rng = np.random.default_rng(400 + seed)
    graph = random_graph(rng)
    plan = Plan.of(graph)
    count = int(graph.inst.max()) + 1
    ids = rng.permutation(count)[: int(rng.integers(0, count + 1))]
    got = plan.members_of(ids.astype(np.int64))
    assert np.array_equal(np.sort(got), np.flatnonzero(np.isin(graph.inst, ids)))
    assert np.array_equal(graph.inst[got], np.repeat(ids, np.bincount(graph.inst[graph.inst >= 0], minlength=count)[ids]))


@pytest.mark.parametrize("seed", range(4))
def test_a_layer_s_frontier_is_every_entry_computed_by_then_and_read_after(seed, monkeypatch):
    # Cuts.frontier finds short-lived entries by one range of their layer and long-lived ones by a scan;
    # against the definition, with SHORT_SPAN 1 too so that many entries are long-lived
    import overlapscope.analysis.uniform_shift as us

    rng = np.random.default_rng(500 + seed)
    graph = synced_graph(rng) if seed % 2 else random_graph(rng)
    plan = Plan.of(graph)
    x0, y0 = full_forward(graph)
    for span in (us.SHORT_SPAN, 1):
        monkeypatch.setattr(us, "SHORT_SPAN", span)
        cuts = us.Cuts.of(graph, plan, x0, y0)
        for layer in cuts.checkable.tolist():
            node, is_y, was, starts = cuts.frontier(layer)
            want = np.flatnonzero((cuts.entry_lo <= layer) & (cuts.entry_hi > layer))
            assert sorted(zip(node.tolist(), is_y.tolist())) == sorted(zip(cuts.entry_node[want].tolist(),
                                                                           cuts.entry_is_y[want].tolist()))
            assert np.array_equal(was, np.where(is_y, y0[node], x0[node]))
            comp = cuts.comp[node]
            firsts = np.flatnonzero(np.r_[True, comp[1:] != comp[:-1]]) if comp.size else comp
            assert (np.diff(comp) >= 0).all() and np.array_equal(starts, firsts)


@pytest.mark.parametrize("seed", range(4))
def test_the_least_headroom_from_each_position_is_over_the_rest_of_its_component(seed):
    """Cuts.room_after, by the definition: along the nodes ordered by (component, layer), the least
    headroom x - u - base from each position to the last of its component, the headroom clipped to
    +-2^61 (starts 2^62 too early give -2^61 everywhere)."""
    import overlapscope.analysis.uniform_shift as us

    rng = np.random.default_rng(900 + seed)
    graph = synced_graph(rng) if seed % 2 else random_graph(rng)
    plan = Plan.of(graph)
    x0, y0 = full_forward(graph)
    for shift in (0, -(2 ** 62)):
        cuts = us.Cuts.of(graph, plan, x0 + shift, y0)
        key = cuts.comp * (cuts.layers + 1) + cuts.x_layer
        by = np.argsort(key, kind="stable")
        assert np.array_equal(key[by], cuts.room_key)
        room = np.clip(x0 + shift - graph.u - graph.base, -(2 ** 61), 2 ** 61)[by].tolist()
        comp = cuts.comp[by].tolist()
        want = [min(r for r, c in zip(room[i:], comp[i:]) if c == comp[i]) for i in range(len(room))]
        assert cuts.room_after.tolist() == want


def _oracle_step_max(y: np.ndarray, step_of: np.ndarray, steps: int, wstart: np.ndarray) -> np.ndarray:
    out = np.full(steps, -(2 ** 62), np.int64)
    for s in range(steps):
        if (step_of == s).any():
            out[s] = (y - wstart)[step_of == s].max()
    return out


@pytest.mark.parametrize("tables", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_many_what_ifs_step_spans_equal_the_full_solve_s(seed, tables, monkeypatch):
    # forward_many(steps=...): each variant's largest y - window start per step, read from the layers it
    # changed and the measured maxima before / after them (uniform_shift.ShiftedSpans), or from its whole
    # y when the tables would be too large; both against the oracle's y, on graphs that stop early
    # (synced, pinned or not) and on random ones whose variants grow some times
    import overlapscope.analysis.longest_path as lp
    import overlapscope.analysis.uniform_shift as us
    if not tables:
        monkeypatch.setattr(us, "MAX_SPAN_TABLE", 0)
    built, shifts = [], []
    of, uniform_shift = us.ShiftedSpans.of, us.Cuts.uniform_shift
    monkeypatch.setattr(us.ShiftedSpans, "of", lambda *a: built.append(of(*a)) or built[-1])
    monkeypatch.setattr(us.Cuts, "uniform_shift", lambda *a: shifts.append(uniform_shift(*a)) or shifts[-1])
    rng = np.random.default_rng(500 + seed)
    for graph in (synced_graph(rng, pinned=seed % 2 == 1), random_graph(rng)):
        plan = Plan.of(graph)
        x0, y0 = full_forward(graph)
        n = graph.base.size
        steps = int(rng.integers(1, 5))
        step_of = rng.integers(0, steps, n)
        wstart = rng.integers(0, 30, n)
        matched = graph.inst >= 0
        variants, wants = [], []
        collectives = int(graph.inst.max()) + 1
        for k in range(7):
            mask = rng.random(n) < rng.choice([0.02, 0.1, 0.4])
            if k % 2 == 0:  # the k-th collective, as whatif_by_instance hides them: shifts uniformly later
                mask = np.isin(graph.inst, [k % collectives])
            grown = (rng.random(n) < 0.05) & (rng.random() < 0.5)
            dur = np.where(mask & ~matched, 0, graph.dur) + 3 * (grown & ~matched)
            transfer = np.where(mask & matched, 0, graph.transfer) + 4 * (grown & matched)
            variants.append((graph.dur if not (mask | grown)[~matched].any() else dur, transfer, mask | grown))
            wants.append(_oracle_step_max(full_forward(graph, dur=variants[-1][0], transfer=transfer)[1],
                                          step_of, steps, wstart))
        for per_batch in (1, 3):
            monkeypatch.setattr(lp, "MAX_COPY_NODES", per_batch * n)
            got = list(lp.forward_many(graph, iter(variants), plan=plan, warm=(x0, y0),
                                       steps=(step_of, steps, wstart)))
            assert len(got) == len(wants)
            for g, w in zip(got, wants):
                assert np.array_equal(g, w)
    assert all((b is not None) == tables for b in built) and built
    if seed % 2 == 0:  # unpinned: some variant stopped early on a shift
        assert any(s is not None and s.any() for s in shifts)


@pytest.mark.parametrize("seed", range(40))
def test_a_guess_is_taken_only_when_it_is_the_solution(seed, monkeypatch):
    """forward(guess=) returns the guess when it satisfies every equation (the solution itself: on a
    DAG it is unique), and solves as without it for any other guess: one start off by 1 ns, one end,
    a collective member's end, or a plausible solution of other durations."""
    import overlapscope.analysis.longest_path as lp
    rng = np.random.default_rng(seed)
    graph = random_graph(rng)
    plan = Plan.of(graph)
    x0, y0 = full_forward(graph)
    swept = []
    for name in ("_sweep", "full_sweep"):
        monkeypatch.setattr(lp, name, lambda *a, sweep=getattr(lp, name), **k: swept.append(1) or sweep(*a, **k))
    x, y = forward(graph, plan=plan, guess=(x0, y0))
    assert np.array_equal(x, x0) and np.array_equal(y, y0) and not swept  # taken: no sweep
    x[:] = 0  # a copy: the caller's guess is not handed back to be written into
    assert x0.any()
    other = full_forward(graph, dur=graph.dur + 1)
    matched = np.flatnonzero(graph.inst >= 0)
    wrong = [(x0 + (np.arange(x0.size) == k), y0) for k in rng.integers(0, x0.size, 3)]
    wrong += [(x0, y0 - (np.arange(y0.size) == k)) for k in rng.integers(0, y0.size, 3)]
    wrong += [(x0, y0 + (np.arange(y0.size) == k)) for k in matched[:2]]
    wrong += [other]
    for guess in wrong:
        swept.clear()
        x, y = forward(graph, plan=plan, guess=guess)
        assert np.array_equal(x, x0) and np.array_equal(y, y0) and swept


@pytest.mark.parametrize("seed", range(10))
def test_components_by_chain_equal_components_by_node(seed):
    """uniform_shift._components joins chains, not nodes: the same labels as the union-find over every
    node with each lane neighbour pair as an edge (numbered by least node)."""
    from overlapscope.analysis.uniform_shift import _components, _weak_components

    rng = np.random.default_rng(900 + seed)
    graph = synced_graph(rng) if seed % 2 else random_graph(rng)
    plan = Plan.of(graph)
    n = graph.base.size
    lane = np.flatnonzero(~graph.head)
    first_member = np.repeat(plan.members[plan.member_ptr[:-1]], np.diff(plan.member_ptr))
    by_node = _weak_components(n, np.r_[lane - 1, graph.src, first_member].astype(np.int64),
                               np.r_[lane, graph.dst, plan.members].astype(np.int64))
    np.testing.assert_array_equal(_components(graph, plan, n), by_node)
