"""The circuit simplifications (extract/simplify.py) keep the optimum and map selections back
exactly; the dominator and closure rows (extract/dominators.py) hold for every valid selection."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from eqsat_nb.extract import dag
from eqsat_nb.extract import problem as pb
from eqsat_nb.extract.dominators import dominator_rows
from eqsat_nb.extract.simplify import simplify


def random_problem(rng: np.random.Generator) -> pb.ExtractionProblem:
    """3-7 classes, 1-3 candidates each of cost 0-4 (zero-cost wires and leaves are common),
    children in any class (cycles of every length), a leaf in the last class."""
    C = int(rng.integers(3, 8))
    node_class, cost, kids = [], [], []
    for c in range(C):
        for _ in range(int(rng.integers(1, 4))):
            node_class.append(c)
            cost.append(float(rng.choice([0, 0, 1, 2, 3, 4])))
            kids.append([int(x) for x in rng.integers(0, C, size=int(rng.choice([0, 1, 1, 2, 3])))])
    node_class.append(C - 1)
    cost.append(5.0)
    kids.append([])
    roots = sorted({0, int(rng.integers(0, C))})
    return pb.from_arrays(C, node_class, cost, kids, roots)


def valid_selections(p: pb.ExtractionProblem):
    options = [list(p.candidates(c)) + [-1] for c in range(p.n_classes)]
    seen = set()
    for combo in itertools.product(*options):
        sel = np.array(combo, np.int64)
        if not dag.is_valid(p, sel):
            continue
        sel = np.where(dag.reachable(p, sel), sel, -1)
        if tuple(sel) not in seen:
            seen.add(tuple(sel))
            yield sel


def optimum(p: pb.ExtractionProblem) -> float:
    return min((dag.dag_cost(p, s) for s in valid_selections(p)), default=float("inf"))


def test_simplified_problem_has_the_same_optimum_and_lifts_exactly():
    rng = np.random.default_rng(3)
    shrunk = 0
    for _ in range(150):
        p = random_problem(rng)
        s = simplify(p)
        q = s.problem
        shrunk += q.n_classes < p.n_classes
        best = optimum(p)
        if not np.isfinite(best):
            continue
        assert optimum(q) == pytest.approx(best)
        for sel in valid_selections(q):                 # every selection lifts at its cost
            lifted = s.lift(sel)
            assert dag.is_valid(p, lifted)
            assert dag.dag_cost(p, lifted) == pytest.approx(dag.dag_cost(q, sel))
        for sel in valid_selections(p):                 # restrict never raises the cost
            small = s.restrict(sel)
            if small is not None and dag.is_valid(q, small):
                assert dag.dag_cost(q, small) <= dag.dag_cost(p, sel) + 1e-9
    assert shrunk > 50


def test_free_classes_wires_and_single_users():
    """class 0 (root) = f(1, 2) cost 1; class 1 = relu(3) cost 2; class 2 = proj(4) cost 0;
    class 3 = a weight (free); class 4 = g(3) cost 3 or a leaf of cost 7. Round 1: class 3 is
    free, so g becomes a leaf of cost 3 and dominates the leaf of cost 7; relu (one user) goes
    into f; round 2: class 4 (one candidate, one user) goes into the wire proj, the wire into f.
    What is left is f alone, costing 1 + 2 + 0 + 3, which lifts to the whole selection."""
    p = pb.from_arrays(5, [0, 1, 2, 3, 4, 4], [1, 2, 0, 0, 3, 7],
                       [[1, 2], [3], [4], [], [3], []], [0])
    s = simplify(p)
    q = s.problem
    assert q.n_classes == 1 and list(s.class_orig) == [0] and list(s.node_orig) == [0]
    assert q.node_cost[0] == 6.0 and q.children(0).size == 0
    assert optimum(p) == 6.0
    assert list(s.lift(np.array([0]))) == [0, 1, 2, 3, 4]
    assert list(s.restrict(np.array([0, 1, 2, 3, 5]))) == [0]


def test_dominator_and_closure_rows_hold_for_every_valid_selection():
    rng = np.random.default_rng(9)
    rows = 0
    for _ in range(120):
        p = random_problem(rng)
        d = dominator_rows(p)
        rows += len(d.pairs) + len(d.closure)
        for sel in valid_selections(p):
            active = dag.reachable(p, sel)
            chosen = np.zeros(p.n_nodes, bool)
            chosen[sel[active]] = True
            for c, k in d.pairs:
                assert not active[c] or active[k], (c, k, sel)
            for r, (c, k) in enumerate(d.closure):
                members = d.closure_nodes[d.closure_start[r]: d.closure_start[r + 1]]
                assert chosen[members].sum() <= active[k], (c, k, members, sel)
    assert rows > 100


# ---------------------------------------------------------------------------------------------
# Independent layers (extract/decompose.py)

def chain_of_cells(n_cells: int, costs=(4.0, 5.0), leaf: float = 9.0, leaf_step: float = 0.0
                   ) -> pb.ExtractionProblem:
    """An RNN-like chain: h_0 a leaf of cost 1; cell t: A_t = a(h) | p(M_t), B_t = b(h) | q(M_t),
    M_t = merged(h) (costs[1]), a and b cost costs[0], the projections 0, or g(h, D_t) of cost 1
    with D_t a leaf of cost leaf + t x leaf_step; h_t = f(A_t, B_t) of cost 1. Every h_t is a
    separator; with leaf_step 0 the cells above the first are identical."""
    node_class, cost, kids = [0], [1.0], [[]]
    h = 0
    cls = 1
    for t in range(n_cells):
        A, B, M, D, H = cls, cls + 1, cls + 2, cls + 3, cls + 4
        cls += 5
        node_class += [A, A, A, B, B, B, M, D, H]
        cost += [costs[0], 0.0, 1.0, costs[0], 0.0, 1.0, costs[1], leaf + t * leaf_step, 1.0]
        kids += [[h], [M], [h, D], [h], [M], [h, D], [h], [], [A, B]]
        h = H
    return pb.from_arrays(cls, node_class, cost, kids, [h])


def test_layers_of_a_chain_are_independent_and_identical(monkeypatch):
    from eqsat_nb.extract import decompose
    from eqsat_nb.extract.ilp import extract_ilp

    p = chain_of_cells(4)
    d = dominator_rows(p)
    parts = decompose.layers(p, d.mandatory, min_layer=3)
    assert len(parts) == 4
    keys = [decompose.canonical(part.problem)[0] for part in parts]
    assert len(set(keys[1:])) == 1            # the cells above the first are the same problem
    # every class lies in exactly one layer (separators below a layer are leaves of it)
    owned = [np.delete(part.class_map, part.problem.node_class[part.node_map < 0])
             for part in parts]
    assert sorted(np.concatenate(owned).tolist()) == list(range(p.n_classes))
    monkeypatch.setattr(decompose, "MIN_LAYER", 3)
    r = extract_ilp(p, in_process=True)
    assert r.optimal and r.cost == pytest.approx(1.0 + 4 * (5.0 + 1.0))
    assert dag.is_valid(p, r.choice) and dag.dag_cost(p, r.choice) == r.cost
    assert len(r.stats["layers"]) == 4 and any("twin_of" in layer.get("stats", {}) or
                                               "twin_of" in layer for layer in r.stats["layers"])


def test_layered_extraction_matches_brute_force(monkeypatch):
    """Random cells chained through separators: the layered ILP gives the brute-force optimum."""
    from eqsat_nb.extract import decompose
    from eqsat_nb.extract.ilp import extract_ilp

    monkeypatch.setattr(decompose, "MIN_LAYER", 2)
    rng = np.random.default_rng(4)
    checked = 0
    for _ in range(12):
        p = chain_of_cells(2, costs=(float(rng.integers(1, 8)), float(rng.integers(1, 12))))
        r = extract_ilp(p, in_process=True)
        best = optimum(p)
        assert r.optimal and r.cost == pytest.approx(best)
        checked += len(r.stats.get("layers", [])) > 1
    assert checked == 12


def test_layers_a_stall_left_untried_still_get_their_bounds(monkeypatch):
    """The stall rule sees the sum over the layers and may stop the solve in its first layer
    (TENSAT's VGG-19); the layers not yet tried then get a short solve of their own
    (BOUND_PASS_SHARE of the time spent), so the bound reported is theirs and not 0. Here the
    rule is made to fire at layer 0's first report (an injected clock jumps past the window):
    the pass, given ample time, proves the two other layers (and improves their answers); without
    it the bound is layer 0's alone."""
    from eqsat_nb.extract import decompose
    from eqsat_nb.extract.ilp import extract_ilp, solve, stop

    monkeypatch.setattr(decompose, "MIN_LAYER", 3)
    p = chain_of_cells(3, leaf_step=1.0)            # three different cells: no twins
    now = [0.0]
    monkeypatch.setattr(stop, "_CLOCK", lambda: now[0])
    real_solve = solve._solve
    calls = []

    def solve_layer(P: dict, opts: dict) -> dict:
        if not calls:
            for t in (0.0, 100.0):                  # layer 0's bound 0, then a window later
                now[0] = t
                opts["outer"](float("inf"), 0.0)
        calls.append(P)
        return real_solve(P, opts)

    monkeypatch.setattr(solve, "_solve", solve_layer)       # what _solve_layers calls per layer
    monkeypatch.setattr(solve, "BOUND_PASS_SHARE", 1e6)
    r = extract_ilp(p, in_process=True, stall=3.0)
    layers = r.stats["layers"]
    assert len(calls) == 3 and r.status == "stalled" and not r.optimal
    assert [layer["status"] for layer in layers[1:]] == ["optimal", "optimal"]
    assert [layer["bound"] for layer in layers[1:]] == [layer["cost"] for layer in layers[1:]]
    assert r.bound == pytest.approx(sum(layer["bound"] for layer in layers)) and \
        r.bound >= sum(layer["cost"] for layer in layers[1:]) - 1e-9
    assert dag.is_valid(p, r.choice) and dag.dag_cost(p, r.choice) == pytest.approx(r.cost)
    calls.clear()
    monkeypatch.setattr(solve, "BOUND_PASS_SHARE", 0.0)
    r0 = extract_ilp(p, in_process=True, stall=3.0)
    assert len(calls) == 1 and r0.status == "stalled" and r0.cost >= r.cost   # warm starts
    assert r0.bound == pytest.approx(r0.stats["layers"][0]["bound"]) and r0.bound < r.bound - 1


def test_a_layer_that_is_nearly_the_whole_problem_keeps_highs_presolve(monkeypatch):
    """Layers are solved without HiGHS's presolve (ours ran), except one that holds
    WHOLE_LAYER_SHARE of the candidates (a transformer's one big layer beside a few tiny ones),
    which is solved as the whole problem would be; the stats say which."""
    from eqsat_nb.extract import decompose
    from eqsat_nb.extract.ilp import extract_ilp, solve

    parts = [{"P": {"node_class": np.zeros(n)}} for n in (90, 5, 5)]
    assert solve.WHOLE_LAYER_SHARE == 0.9
    assert solve._layer_highs(parts) == [{}, solve.LAYER_HIGHS, solve.LAYER_HIGHS]
    parts[0]["P"]["node_class"] = np.zeros(89)
    assert solve._layer_highs(parts) == [solve.LAYER_HIGHS] * 3
    monkeypatch.setattr(decompose, "MIN_LAYER", 3)
    p = chain_of_cells(4)
    r = extract_ilp(p, in_process=True)
    assert [layer["highs"] for layer in r.stats["layers"]] == [solve.LAYER_HIGHS] * 4
    monkeypatch.setattr(solve, "WHOLE_LAYER_SHARE", 0.2)      # every cell is 1/4 of the problem
    r2 = extract_ilp(p, in_process=True)
    assert [layer["highs"] for layer in r2.stats["layers"]] == [{}] * 4
    assert r2.optimal and r2.cost == r.cost
