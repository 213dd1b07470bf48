"""OCF (constituent-cost greedy) extraction: exact on unsaturated model e-graphs, never worse than
tree-cost greedy on random shared problems, counts shared subexpressions once, always acyclic."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.extract import ocf
from eqsat_nb.extract.dag import dag_cost, is_valid
from eqsat_nb.extract.ocf import NoAcyclicSelection, extract_ocf
from eqsat_nb.extract.problem import from_arrays, from_egraph
from eqsat_nb.ir.cse import cse
from eqsat_nb.ir.parse import load

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "ir_examples").glob("*.tir"))
FREE = {"lit", "input", "weight"}


def unit_costs(eg, free=FREE):
    return np.array([0.0 if eg.op_name(n) in free else 1.0 for n in range(eg.num_nodes)])


@pytest.fixture(params=[False, True], ids=["bitsets", "pool"])
def representation(request, monkeypatch):
    """Run each test with both exact set representations."""
    if request.param:
        monkeypatch.setattr(ocf, "BITSET_BYTES", -1)
    return request.param


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_initial_egraph_is_extracted_exactly(path, representation):
    graph = load(path)
    eg = graph_to_egraph(graph)
    problem = from_egraph(eg, unit_costs(eg))
    choice = extract_ocf(problem)
    assert is_valid(problem, choice)
    # one node per class: the only selection is the original graph; with unit cost per compute
    # node (projections of multi-result ops free) it costs the CSE'd graph's compute nodes
    problem0 = from_egraph(eg, unit_costs(eg, FREE | {"proj"}))
    n_compute = sum(1 for _ in cse(graph).compute_nodes())
    assert dag_cost(problem0, extract_ocf(problem0)) == n_compute
    projs = sum(1 for n in problem.node_ids if eg.op_name(int(n)) == "proj")
    assert dag_cost(problem, choice) == n_compute + projs


def tree_greedy(problem):
    """egg's bottom-up tree-cost greedy (Bellman-Ford to a fixpoint), in plain Python."""
    C = problem.n_classes
    cost = [np.inf] * C
    best = [-1] * C
    changed = True
    while changed:
        changed = False
        for i in range(problem.n_nodes):
            c = int(problem.node_class[i])
            t = problem.node_cost[i] + sum(cost[int(k)] for k in problem.children(i))
            if t < cost[c] - 1e-12:
                cost[c], best[c] = t, i
                changed = True
    return np.array(best, np.int64)


def random_problem(rng, n_classes=40, max_alts=3, p_back=0.0):
    """Classes 0..C-1 in topological order; class 0..3 leaves; each class has 1..max_alts nodes
    whose children are earlier classes (heavily shared), and with probability p_back a node other
    than the first also points to any class (a possible cycle)."""
    node_class, node_cost, kids = [], [], []
    for c in range(n_classes):
        for alt in range(1 if c < 4 else int(rng.integers(1, max_alts + 1))):
            node_class.append(c)
            node_cost.append(float(rng.integers(0, 10)))
            if c < 4:
                kids.append([])
                continue
            k = int(rng.integers(1, 4))
            ch = [int(x) for x in rng.integers(max(0, c - 8), c, size=k)]
            if alt and p_back and rng.random() < p_back:     # the first node stays acyclic
                ch.append(int(rng.integers(0, n_classes)))
            kids.append(ch)
    roots = [n_classes - 1, int(rng.integers(4, n_classes))]
    return from_arrays(n_classes, node_class, node_cost, kids, roots)


def test_random_shared_problems_beat_tree_greedy(representation):
    """Per instance OCF can lose to tree greedy (a child class keeps its own cheapest DAG while the
    tree choice happens to share more with a sibling: about 1 in 9 of these seeds), so the claim
    is checked in aggregate: valid always, never worse in total, strictly better far more often
    than worse."""
    ours = theirs = 0.0
    better = worse = 0
    for seed in range(150):
        rng = np.random.default_rng(seed)
        problem = random_problem(rng, int(rng.integers(8, 60)))
        choice = extract_ocf(problem)
        assert is_valid(problem, choice)
        greedy = tree_greedy(problem)
        a, b = dag_cost(problem, choice), dag_cost(problem, greedy)
        ours += a
        theirs += b
        better += a < b
        worse += a > b
    assert ours < theirs
    assert better > 3 * worse


@pytest.mark.parametrize("seed", range(60))
def test_random_cyclic_problems_are_valid(seed, representation):
    rng = np.random.default_rng(1000 + seed)
    problem = random_problem(rng, int(rng.integers(8, 60)), p_back=0.3)
    choice = extract_ocf(problem)
    assert is_valid(problem, choice)


def test_shared_subexpression_counted_once(representation):
    # class 0: leaf; 1: s = expensive(0) cost 10; 2: a = f(1) cost 1; 3: b = g(1) cost 1
    # root 4: n = h(a, b) cost 1  (tree cost 1+11+11 = 23, DAG cost 13)
    #         m = other(0) cost 15 (tree cost 15: what tree greedy picks)
    problem = from_arrays(5, [0, 1, 2, 3, 4, 4], [0, 10, 1, 1, 1, 15],
                          [[], [0], [1], [1], [2, 3], [0]], [4])
    assert tree_greedy(problem)[4] == 5
    choice = extract_ocf(problem)
    assert choice[4] == 4
    assert dag_cost(problem, choice) == 13
    assert dag_cost(problem, tree_greedy(problem)) == 15


def test_locally_cheapest_choice_is_cyclic(representation):
    # class 0 leaf; class 1: cyc(2) cost 0 or h(0) cost 5; class 2: m(1) cost 1 or n(0) cost 3
    # root 2: m(1) with 1 = cyc(2) is free but cyclic; the acyclic optimum is n(0) = 3
    problem = from_arrays(3, [0, 1, 1, 2, 2], [0, 0, 5, 1, 3],
                          [[], [2], [0], [1], [0]], [2])
    choice = extract_ocf(problem)
    assert is_valid(problem, choice)
    assert dag_cost(problem, choice) == 3
    # root 1: cyc(2) then 2 = n(0): 0 + 3 beats h(0) = 5, and 2 must not choose m(1)
    problem = from_arrays(3, [0, 1, 1, 2, 2], [0, 0, 5, 1, 3],
                          [[], [2], [0], [1], [0]], [1])
    choice = extract_ocf(problem)
    assert is_valid(problem, choice)
    assert dag_cost(problem, choice) == 3


def test_self_loop_and_no_acyclic_option(representation):
    # class 1 = id(1) cost 0 (a self loop) or f(0) cost 2
    problem = from_arrays(2, [0, 1, 1], [0, 0, 2], [[], [1], [0]], [1])
    choice = extract_ocf(problem)
    assert is_valid(problem, choice) and choice[1] == 2
    problem = from_arrays(2, [0, 1], [1, 1], [[1], [0]], [0])
    with pytest.raises(NoAcyclicSelection, match="no acyclic choice"):
        extract_ocf(problem)


def test_repair_of_stale_cycles(representation):
    """Whatever the fixpoint leaves (here: stopped after a few evaluations), the answer is valid."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        problem = random_problem(rng, 50, p_back=0.4)
        for budget in (1, 5, 20, 80):
            choice = extract_ocf(problem, max_evals=budget)
            assert is_valid(problem, choice)
