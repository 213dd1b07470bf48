"""Extraction speed (issue: OCF < 1 ms median on a 2 000-node e-graph). Warm JIT: each extractor
runs once before timing."""
from __future__ import annotations

import numpy as np
import pytest

from eqsat_nb.extract.dag import is_valid
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.problem import from_arrays


def random_problem(n_classes: int = 1300, n_nodes: int = 2000, n_back: int = 20, seed: int = 0):
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


@pytest.fixture(scope="module")
def problem():
    p = random_problem()
    assert p.n_nodes == 2000 and p.n_classes == 1300
    assert is_valid(p, extract_ocf(p))          # warm the JIT
    return p


def test_ocf_2000_nodes(benchmark, problem):
    choice = benchmark(extract_ocf, problem)
    assert is_valid(problem, choice)


# ------------------------------------------------------------------ saturated benchmark models

def _saturated_problem(model: str):
    from pathlib import Path

    from eqsat_nb.egraph import graph_to_egraph
    from eqsat_nb.extract.problem import from_egraph
    from eqsat_nb.ir.parse import load
    from eqsat_nb.rules.parse import load_rules
    from eqsat_nb.search.saturate import Limits, saturate

    root = Path(__file__).resolve().parent.parent
    eg = graph_to_egraph(load(root / "ir_examples" / f"{model}.tir"))
    saturate(eg, load_rules(root / "rules"), Limits())
    free = ("lit", "input", "weight", "proj")
    costs = np.array([0.0 if eg.op_name(n) in free or eg.is_const(eg.node_class(n)) else 1.0
                      for n in range(eg.num_nodes)])
    return from_egraph(eg, costs)


MODELS = ["nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "vgg19", "inceptionv3"]


@pytest.fixture(scope="module")
def saturated():
    return {m: _saturated_problem(m) for m in MODELS}


@pytest.mark.parametrize("method", ["greedy", "ocf", "ocf+switch", "ilp"])
@pytest.mark.parametrize("model", MODELS)
def test_extract_saturated(benchmark, saturated, model, method):
    """Each extractor on the model's e-graph saturated at TENSAT's settings (unit costs per
    compute node; weight-only and layout-free nodes cost 0). ILP runs in-process here."""
    from eqsat_nb.extract.dag import dag_cost
    from eqsat_nb.extract.greedy import extract_greedy
    from eqsat_nb.extract.ilp import extract_ilp
    from eqsat_nb.extract.switch import joint_switch

    problem = saturated[model]
    run = {"greedy": lambda: extract_greedy(problem),
           "ocf": lambda: extract_ocf(problem),
           "ocf+switch": lambda: joint_switch(problem, extract_ocf(problem)),
           "ilp": lambda: extract_ilp(problem, time_limit=60, in_process=True,
                                      warm_start=extract_greedy(problem)).choice}[method]
    run()                                                    # warm the JIT
    choice = benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(model=model, method=method, classes=problem.n_classes,
                                nodes=problem.n_nodes, dag_cost=dag_cost(problem, choice))
