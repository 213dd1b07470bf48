"""ILP extraction (DESIGN §6): exact against brute force, valid, lazy cycle cuts, warm start,
time limit, and the killable subprocess path."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.extract import dag
from eqsat_nb.extract import problem as pb
from eqsat_nb.extract.ilp import IlpResult, extract_ilp

REPO = Path(__file__).resolve().parents[1]


def random_problem(rng: np.random.Generator) -> pb.ExtractionProblem:
    C = int(rng.integers(2, 6))
    node_class, cost, kids = [], [], []
    for c in range(C):
        for _ in range(int(rng.integers(1, 4))):
            node_class.append(c)
            cost.append(float(rng.integers(0, 6)))
            k = int(rng.choice([0, 1, 1, 2, 2, 3]))
            kids.append([int(x) for x in rng.integers(0, C, size=k)])
    # a guaranteed cycle: a node of class 0 uses class 1, a node of class 1 uses class 0
    node_class += [0, 1]
    cost += [0.0, 0.0]
    kids += [[1], [0]]
    return pb.from_arrays(C, node_class, cost, kids, [0])


def brute_force(p: pb.ExtractionProblem) -> float:
    best = float("inf")
    options = [list(p.candidates(c)) for c in range(p.n_classes)]
    for combo in itertools.product(*options):
        choice = np.array(combo, np.int64)
        if dag.is_valid(p, choice):
            best = min(best, dag.dag_cost(p, choice))
    return best


def check(p: pb.ExtractionProblem, r: IlpResult) -> None:
    assert r.choice.shape == (p.n_classes,)
    if np.isfinite(r.cost):
        assert dag.is_valid(p, r.choice)
        assert r.cost == pytest.approx(dag.dag_cost(p, r.choice))
        assert r.bound <= r.cost + 1e-6


def test_random_against_brute_force():
    rng = np.random.default_rng(7)
    n_cuts = 0
    for _ in range(40):
        p = random_problem(rng)
        r = extract_ilp(p, time_limit=10, in_process=True)
        check(p, r)
        opt = brute_force(p)
        if np.isfinite(opt):
            assert r.optimal and r.status == "optimal"
            assert r.cost == pytest.approx(opt)
            assert r.bound == pytest.approx(opt)
            assert r.gap == 0.0
        else:
            assert r.status == "infeasible" and r.cost == float("inf")
        n_cuts += r.cuts
    assert n_cuts > 0          # the generator's cycles do get cut somewhere


def cyclic_problem() -> pb.ExtractionProblem:
    # class 0 (root): n0 = f(class 1) cost 1, n1 = big leaf cost 100
    # class 1:        n2 = g(class 0) cost 1 (cheap but cyclic), n3 = h(class 2) cost 3
    # class 2:        n4 = leaf cost 4, n5 = k(class 1) cost 0 (cyclic, free)
    return pb.from_arrays(3, [0, 0, 1, 1, 2, 2], [1, 100, 1, 3, 4, 0],
                          [[1], [], [0], [2], [], [1]], [0])


def test_cycle_forces_cut():
    p = cyclic_problem()
    r = extract_ilp(p, in_process=True)
    check(p, r)
    assert r.cuts > 0
    assert r.optimal and r.cost == 8.0
    assert list(r.choice) == [0, 3, 4]
    assert brute_force(p) == 8.0


def test_order_formulation_agrees():
    rng = np.random.default_rng(3)
    for _ in range(10):
        p = random_problem(rng)
        a = extract_ilp(p, in_process=True)
        b = extract_ilp(p, in_process=True, acyclic="order")
        check(p, b)
        assert b.cuts == 0
        assert a.cost == b.cost


def test_shared_subexpression_counted_once():
    # root = add(x, x) where x = relu(leaf) cost 5, or x = expensive leaf cost 6: DAG cost 1+5
    p = pb.from_arrays(3, [0, 1, 1, 2], [1, 5, 6, 0], [[1, 1], [2], [], []], [0])
    r = extract_ilp(p, in_process=True)
    assert r.cost == 6.0 and list(r.choice) == [0, 1, 3]


def test_dominated_and_unproductive_nodes():
    # class 1: n1 dominated by n2 (same cost, superset children); n3 uses a class with no
    # acyclic derivation (class 3 only derives from itself)
    p = pb.from_arrays(4, [0, 1, 1, 1, 2, 3], [1, 2, 2, 0, 1, 0],
                       [[1], [2, 2], [], [3], [], [3]], [0])
    r = extract_ilp(p, in_process=True)
    check(p, r)
    assert r.cost == 3.0 and r.choice[1] == 2 and r.choice[3] == -1


def test_infeasible_root():
    p = pb.from_arrays(1, [0], [1.0], [[0]], [0])
    r = extract_ilp(p, in_process=True)
    assert r.status == "infeasible" and r.cost == float("inf") and not r.optimal


def _model_problem(name: str):
    from eqsat_nb import load
    from eqsat_nb.egraph import graph_to_egraph, original_choice

    eg = graph_to_egraph(load(REPO / "ir_examples" / f"{name}.tir"))
    costs = np.array([0.0 if eg.op_name(n) in ("lit", "input", "weight") else 1.0
                      for n in range(eg.num_nodes)])
    p = pb.from_egraph(eg, costs)
    oc = original_choice(eg)
    where = {int(n): i for i, n in enumerate(p.node_ids)}
    choice = np.array([where[int(oc[p.class_ids[c]])] for c in range(p.n_classes)], np.int64)
    return p, choice


@pytest.mark.parametrize("name", ["nasrnn", "tiny_branches"])
def test_initial_egraph_cost(name):
    p, orig = _model_problem(name)
    r = extract_ilp(p, in_process=True)
    check(p, r)
    assert r.optimal
    assert r.cost == dag.dag_cost(p, orig)


def test_warm_start_and_time_limit():
    p = cyclic_problem()
    warm = np.array([1, -1, -1], np.int64)          # the big leaf: valid, cost 100
    assert dag.is_valid(p, warm)
    r = extract_ilp(p, warm_start=warm, in_process=True)
    check(p, r)
    assert r.optimal and r.cost == 8.0
    # no time at all: the best known valid selection comes back, with a gap
    r = extract_ilp(p, time_limit=0.0, warm_start=warm, in_process=True)
    check(p, r)
    assert not r.optimal and r.status == "time_limit"
    assert np.isfinite(r.cost) and r.cost <= 100.0 and r.gap > 0
    # an invalid warm start is ignored
    r = extract_ilp(p, warm_start=np.array([0, 2, -1]), in_process=True)
    assert r.optimal and r.cost == 8.0
    # deterministic for a seed
    q, _ = _model_problem("nasrnn")
    a = extract_ilp(q, seed=5, in_process=True)
    b = extract_ilp(q, seed=5, in_process=True)
    assert np.array_equal(a.choice, b.choice)


def test_subprocess_path():
    p = cyclic_problem()
    r = extract_ilp(p, time_limit=20)
    check(p, r)
    assert r.status == "optimal" and r.cost == 8.0 and r.cuts > 0


def test_subprocess_killed_returns_warm_start():
    p = cyclic_problem()
    warm = np.array([1, -1, -1], np.int64)
    # a deadline shorter than the interpreter start-up: the worker is killed
    r = extract_ilp(p, time_limit=0.0, warm_start=warm, kill_margin=0.001)
    assert r.status == "killed" and not r.optimal
    assert list(r.choice) == [1, -1, -1] and r.cost == 100.0
