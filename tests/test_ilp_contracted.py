"""The glue-contracted model (extract/ilp/contracted.py): exact on acyclic problems, checked
against brute force and against the full model on problems shaped like merged ops."""
from __future__ import annotations

import numpy as np
import pytest

from eqsat_nb.extract import problem as pb
from eqsat_nb.extract.ilp import extract_ilp
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.ilp.contracted import (_Contracted, _dominator_closure, _undominated,
                                             applies)
from eqsat_nb.extract.ilp.model import _presolve
from eqsat_nb.extract.ilp.prepare import _with_rows
from eqsat_nb.extract.ilp.selection import _arrays, _valid_walk
from test_ilp import brute_force, check


def random_glue_problem(rng: np.random.Generator, C: int) -> pb.ExtractionProblem:
    """Acyclic (children only in higher classes): 1-3 candidates per class, of which about half
    are glue (zero cost, one child class) and the rest cost 1-9 with 0-3 children."""
    node_class, cost, kids = [], [], []
    for c in range(C):
        below = C - 1 - c
        for j in range(int(rng.integers(1, 4))):
            node_class.append(c)
            if below and (j or not rng.integers(0, 3)) and rng.integers(0, 2):
                cost.append(0.0)
                kids.append([int(rng.integers(c + 1, C))])
            else:
                cost.append(float(rng.integers(1, 10)))
                k = min(int(rng.choice([0, 1, 1, 2, 3])), below)
                kids.append([int(x) for x in rng.integers(c + 1, C, size=k)] if k else [])
    return pb.from_arrays(C, node_class, cost, kids, [0])


def merged_projections(n: int = 4) -> pb.ExtractionProblem:
    """A root needs n projections p_0..p_{n-1} of one input x (class n+1, a leaf of cost 1);
    each p_i is its own matmul (cost 4) or a proj (glue) of a merged matmul over a contiguous
    run of them (cost 2 + 1.5 per part), and each merged class is also a proj of any longer run
    containing it, in both nestings: the shape TENSAT's merges leave."""
    runs = [(a, b) for a in range(n) for b in range(a + 2, n + 1)]
    cls = {("p", i): i for i in range(n)}
    root, x = n, n + 1
    for r in runs:
        cls[r] = len(cls) + 2
    C = len(cls) + 2
    node_class, cost, kids = [root, x], [0.5, 1.0], [[cls[("p", i)] for i in range(n)], []]

    def node(c: int, w: float, ks: list[int]) -> None:
        node_class.append(c)
        cost.append(w)
        kids.append(ks)
    for i in range(n):
        node(cls[("p", i)], 4.0, [x])
        for r in runs:
            if r[0] <= i < r[1]:
                node(cls[("p", i)], 0.0, [cls[r]])
    for r in runs:
        node(cls[r], 2.0 + 1.5 * (r[1] - r[0]), [x])
        for s in runs:
            if s != r and s[0] <= r[0] and r[1] <= s[1]:
                node(cls[r], 0.0, [cls[s]])
    return pb.from_arrays(C, node_class, cost, kids, [root])


def _contracted(r) -> bool:
    layers = r.stats.get("layers") or [r.stats]
    return any((lay.get("model") or {}).get("contracted") for lay in layers)


def test_merged_projections_exact():
    p = merged_projections(4)
    on = extract_ilp(p, time_limit=30, in_process=True, contract=True)
    off = extract_ilp(p, time_limit=30, in_process=True, contract=False)
    check(p, on)
    assert _contracted(on) and not _contracted(off)
    assert on.optimal and off.optimal
    # one merge of all four: x + 2 + 4 * 1.5 + the root
    assert on.cost == pytest.approx(off.cost) == pytest.approx(1.0 + 8.0 + 0.5)


def test_random_acyclic_against_brute_force():
    rng = np.random.default_rng(3)
    ran = 0
    for _ in range(60):
        p = random_glue_problem(rng, int(rng.integers(3, 7)))
        r = extract_ilp(p, time_limit=10, in_process=True, contract=True)
        check(p, r)
        opt = brute_force(p)
        assert r.optimal and r.cost == pytest.approx(opt)
        ran += _contracted(r)
    assert ran >= 10            # the simplifications leave glue to contract often enough


def test_random_acyclic_against_full_model():
    rng = np.random.default_rng(11)
    ran = 0
    for _ in range(25):
        p = random_glue_problem(rng, int(rng.integers(20, 60)))
        ws = extract_ocf(p)
        on = extract_ilp(p, time_limit=20, in_process=True, contract=True, warm_start=ws)
        off = extract_ilp(p, time_limit=20, in_process=True, contract=False, warm_start=ws)
        check(p, on)
        assert on.optimal and off.optimal
        assert on.cost == pytest.approx(off.cost)
        ran += _contracted(on)
    assert ran >= 10


def test_applies_only_to_acyclic_models_with_glue():
    cyc = pb.from_arrays(2, [0, 0, 1, 1], [1.0, 0.0, 0.0, 3.0], [[1], [1], [0], []], [0])
    P = _arrays(cyc)
    assert not applies(P, _presolve(P))          # a cycle: the full model
    P = _arrays(merged_projections(3))
    assert applies(P, _presolve(P))
    plain = pb.from_arrays(2, [0, 0, 1], [1.0, 2.0, 1.0], [[1], [1], []], [0])
    P = _arrays(plain)
    assert not applies(P, _presolve(P))          # no glue


def random_cyclic_glue_problem(rng: np.random.Generator, C: int) -> pb.ExtractionProblem:
    """Children in any class (cycles of every length, through glue too): 1-3 candidates a
    class, about half of them glue, and a leaf in the last class."""
    node_class, cost, kids = [C - 1], [7.0], [[]]
    for c in range(C):
        for _ in range(int(rng.integers(1, 4))):
            node_class.append(c)
            if rng.integers(0, 2):
                cost.append(0.0)
                kids.append([int(rng.integers(0, C))])
            else:
                cost.append(float(rng.integers(1, 10)))
                kids.append([int(x) for x in rng.integers(0, C, size=int(rng.integers(0, 3)))])
    return pb.from_arrays(C, node_class, cost, kids, [0])


def test_cyclic_relaxation_bound_holds():
    """On a cyclic model the contracted model is a relaxation: its optimum never exceeds the
    true optimum (its coverage leaves out only classes a child's every derivation contains),
    and a solution it maps to a valid selection costs no more than the solution."""
    highspy = pytest.importorskip("highspy")
    rng = np.random.default_rng(5)
    tested = tight = 0
    for _ in range(150):
        p = random_cyclic_glue_problem(rng, int(rng.integers(4, 8)))
        P = _with_rows(p)
        pre = _presolve(P)
        if not pre["feasible"] or not pre["cyclic"].any():
            continue
        opt = brute_force(p)
        m = _Contracted(P, pre, {})
        m.h.run()
        assert m.h.getModelStatus() == highspy.HighsModelStatus.kOptimal
        value = m.h.getInfo().objective_function_value
        assert value <= opt + 1e-6
        sel = m.selection(np.asarray(m.h.getSolution().col_value))
        walked = _valid_walk(P, sel)
        if walked is not None:
            assert opt - 1e-6 <= walked[0] <= value + 1e-6
            tight += abs(walked[0] - opt) < 1e-6
        tested += 1
    assert tested >= 30 and tight >= 10


def test_cyclic_phase_against_brute_force():
    """With the contracted phase before the full model (cyclic models with glue), answers and
    bounds stay exact."""
    rng = np.random.default_rng(29)
    phases = 0
    for _ in range(40):
        p = random_cyclic_glue_problem(rng, int(rng.integers(4, 8)))
        opt = brute_force(p)
        if not np.isfinite(opt):
            continue
        r = extract_ilp(p, time_limit=10, in_process=True, warm_start=extract_ocf(p))
        check(p, r)
        assert r.optimal and r.cost == pytest.approx(opt)
        phases += "contracted" in r.stats
    assert phases >= 5


def test_dominator_closure():
    P = {"dominators": np.array([[0, 1], [1, 2], [2, 3], [4, 2]])}
    d = _dominator_closure(P)
    assert d[0] == {1, 2, 3} and d[1] == {2, 3} and d[4] == {2, 3} and d[2] == {3}
    assert _dominator_closure({}) == {}


def test_undominated_columns():
    """A column is dropped for a kept one that costs no more, needs a subset of its children and
    covers a superset; the dropped one's head maps to it."""
    f = frozenset
    groups = {(2.0, f({5}), f({1})): [10], (2.0, f({5, 6}), f({1})): [11],
              (1.0, f({5, 6, 7}), f({1, 2})): [12], (2.0, f({6}), f({1})): [13],
              (3.0, f({5}), f({1, 3})): [14], (2.5, f({5}), f({1})): [15]}
    cols, rep = _undominated(groups)
    assert sorted(cols) == [10, 12, 13, 14]
    assert rep == {11: 10, 15: 10}


def stacked_gates(cells: int = 3) -> pb.ExtractionProblem:
    """An RNN-like chain h_0 -> h_1 -> ...: cell t's gate g_t needs h_{t-1}, its activation a_t is
    relu(g_t) (cost 2) or a projection (glue) of relu(concat(g_t, g_u)) for another cell u (cost
    2 too, the shape TENSAT's merges leave), and h_t = tanh(a_t) (cost 5). The merged relu never
    pays: it is the same cost and needs the other cell's gate as well (a cycle for u > t)."""
    node_class, cost, kids = [], [], []
    h = [3 * t for t in range(cells + 1)]           # h_t, g_t = h_t + 1, a_t = h_t + 2
    C = 3 * cells + 1
    stacked = {}
    for t in range(1, cells + 1):
        for u in range(1, cells + 1):
            if u != t:
                stacked[(t, u)] = C
                C += 1

    def node(c: int, w: float, ks: list[int]) -> None:
        node_class.append(c)
        cost.append(w)
        kids.append(ks)
    node(h[0], 1.0, [])
    for t in range(1, cells + 1):
        g, a = h[t - 1] + 1, h[t - 1] + 2
        node(g, 3.0, [h[t - 1]])
        node(a, 2.0, [g])
        node(h[t], 5.0, [a])
        for u in range(1, cells + 1):
            if u != t:
                node(a, 0.0, [stacked[(t, u)]])
                node(stacked[(t, u)], 2.0, [g, h[u - 1] + 1])
    return pb.from_arrays(C, node_class, cost, kids, [h[cells]])


def test_stacked_gates_dropped():
    """The merged relus are dominated by each gate's own relu: the contracted model keeps none of
    them, and its optimum is the chain's (cells x (3 + 2 + 5) + h_0)."""
    p = stacked_gates(3)
    P = _with_rows(p)
    pre = _presolve(P)
    assert pre["cyclic"].any()
    m = _Contracted(P, pre, {})
    assert all(len(pre["kids"][int(i)]) <= 1 for i in m.nodes)
    r = extract_ilp(p, time_limit=10, in_process=True, warm_start=extract_ocf(p))
    check(p, r)
    assert r.optimal and r.cost == pytest.approx(3 * 10.0 + 1.0) == pytest.approx(brute_force(p))
