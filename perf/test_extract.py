"""Extraction (issue target: OCF < 1 ms median on a 2 000-node e-graph), and every extractor on
each TENSAT model's saturated e-graph, with the true DAG cost of its answer in `extra_info`.
Warm JIT: each extractor runs once before timing."""
from __future__ import annotations

import numpy as np
import pytest
from benchutil import Rounds, saturated_egraph

from eqsat_nb.extract.dag import dag_cost, is_valid
from eqsat_nb.extract.greedy import extract_greedy
from eqsat_nb.extract.ilp import extract_ilp
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.problem import ExtractionProblem as Problem, from_arrays, from_egraph
from eqsat_nb.extract.switch import joint_switch


def random_problem(n_classes: int = 1300, n_nodes: int = 2000, n_back: int = 20,
                   seed: int = 0) -> Problem:
    """Seeded: classes in topological order (the first 100 leaves), every class one node whose
    children are 1–3 recent classes (sharing), the remaining nodes extra alternatives (2–4 per
    class), and `n_back` alternatives that also point to a later class (possible cycles)."""
    rng = np.random.default_rng(seed)
    node_class = list(range(n_classes))
    extra = rng.integers(100, n_classes, size=n_nodes - n_classes)
    node_class += [int(c) for c in extra]
    kids, costs = [], []
    for i, c in enumerate(node_class):
        costs.append(float(rng.integers(1, 10)) if c >= 100 else 0.0)
        if c < 100:
            kids.append([])
            continue
        ch = [int(x) for x in rng.integers(max(0, c - 40), c, size=int(rng.integers(1, 4)))]
        if i >= n_classes and i < n_classes + n_back:
            ch.append(int(rng.integers(c, n_classes)))
        kids.append(ch)
    roots = [n_classes - 1 - k for k in range(5)]
    return from_arrays(n_classes, node_class, costs, kids, roots)


def test_ocf_2000_nodes(bench, benchmark):
    problem = random_problem()
    assert problem.n_nodes == 2000 and problem.n_classes == 1300
    assert is_valid(problem, extract_ocf(problem))          # warm the JIT
    choice = bench(extract_ocf, args=(problem,), rounds=Rounds(50, 200))
    assert is_valid(problem, choice)
    benchmark.extra_info.update(classes=problem.n_classes, nodes=problem.n_nodes,
                                dag_cost=dag_cost(problem, choice))


# ------------------------------------------------------------------ saturated benchmark models

MODELS = ["nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "vgg19", "inceptionv3"]
METHODS = ["greedy", "ocf", "ocf+switch", "ilp"]
QUICK = {("nasrnn", "greedy"), ("nasrnn", "ocf"), ("nasrnn", "ocf+switch"),
         ("squeezenet", "ilp")}
_PROBLEMS: dict[str, Problem] = {}


def unit_cost_problem(model: str) -> Problem:
    """The saturated e-graph with unit costs per compute node (weight-only and layout-free
    nodes cost 0), so the DAG cost counts kernels."""
    if model not in _PROBLEMS:
        eg = saturated_egraph(model)
        free = ("lit", "input", "weight", "proj")
        costs = np.array([0.0 if eg.op_name(n) in free or eg.is_const(eg.node_class(n)) else 1.0
                          for n in range(eg.num_nodes)])
        _PROBLEMS[model] = from_egraph(eg, costs)
    return _PROBLEMS[model]


@pytest.mark.parametrize("model,method", [
    (m, x) if (m, x) in QUICK else pytest.param(m, x, marks=pytest.mark.full)
    for m in MODELS for x in METHODS])
def test_extract_saturated(bench, benchmark, warm_jit, model, method):
    """Each extractor on the model's e-graph saturated at TENSAT's settings. ILP runs
    in-process, warm-started from greedy, 60 s limit."""
    problem = unit_cost_problem(model)
    run = {"greedy": lambda: extract_greedy(problem),
           "ocf": lambda: extract_ocf(problem),
           "ocf+switch": lambda: joint_switch(problem, extract_ocf(problem)),
           "ilp": lambda: extract_ilp(problem, time_limit=60, in_process=True,
                                      warm_start=extract_greedy(problem)).choice}[method]
    run()                                                    # warm the JIT
    choice = bench(run, rounds=Rounds(3, 5), warmup=0)
    assert is_valid(problem, choice)
    benchmark.extra_info.update(model=model, method=method, classes=problem.n_classes,
                                nodes=problem.n_nodes, dag_cost=dag_cost(problem, choice))
