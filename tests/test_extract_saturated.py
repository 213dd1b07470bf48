"""Extraction on saturated e-graphs (TENSAT rules, TENSAT limits): greedy, ocf, ocf+switch and the
ILP (warm-started from ocf+switch) all give valid acyclic selections; ilp ≤ ocf+switch ≤ ocf in
true DAG cost; and every extracted graph computes the original outputs. Costs are checked at
full size, outputs at toy sizes (tools/gen_models.py) where the full model is too slow to
interpret (Inception-v3's full size takes ~10 s for the five graphs, so only its costs are
checked)."""
from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.egraph import egraph_to_graph, graph_to_egraph
from eqsat_nb.extract.dag import dag_cost, is_valid
from eqsat_nb.extract.problem import egraph_choice, from_egraph
from eqsat_nb.extract.run import METHODS, extract
from eqsat_nb.ir.interp import run
from eqsat_nb.ir.parse import load
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.saturate import Limits, saturate

ROOT = Path(__file__).resolve().parent.parent
FREE = ("lit", "input", "weight", "proj")
ILP_SECONDS = 20.0


def unit_costs(eg) -> np.ndarray:
    """1 per compute node; 0 for leaves, projections and weight-only (folded) subexpressions."""
    return np.array([0.0 if eg.op_name(n) in FREE or eg.is_const(eg.node_class(n)) else 1.0
                     for n in range(eg.num_nodes)])


@lru_cache(maxsize=1)
def _rules():
    return load_rules(ROOT / "rules")


@lru_cache(maxsize=1)
def _gen():
    spec = importlib.util.spec_from_file_location("gen_models", ROOT / "tools" / "gen_models.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def _graph(name: str):
    gen = _gen()
    toys = {
        "nasrnn_toy": lambda: gen.nasrnn(hidden=6, steps=2),
        "bert_toy": lambda: gen.bert(seq=4, hidden=8, heads=2, layers=2),
        "resnext50_toy": lambda: gen.resnext50(hw=16, stem=4, width=8, groups=2,
                                               blocks=(1, 1, 1, 1)),
        "nasneta_toy": lambda: gen.nasneta(hw=24, stem=4, oc=4, normal=2, rounds=2),
    }
    if name in toys:
        return toys[name]()
    return load(ROOT / "ir_examples" / f"{name}.tir")


@lru_cache(maxsize=None)
def _extracted(name: str):
    """(graph, e-graph, problem, {method: (choice, Extraction)})."""
    graph = _graph(name)
    eg = graph_to_egraph(graph)
    saturate(eg, _rules(), Limits())
    problem = from_egraph(eg, unit_costs(eg))
    results = {m: extract(problem, m, time_limit=ILP_SECONDS) if m != "ilp" else _ilp(problem)
               for m in METHODS}
    return graph, eg, problem, results


def _ilp(problem):
    """As optimize runs it: warm-started from ocf+switch (in-process here)."""
    from eqsat_nb.extract.ilp import extract_ilp
    from eqsat_nb.extract.ocf import extract_ocf
    from eqsat_nb.extract.run import Extraction
    from eqsat_nb.extract.switch import joint_switch
    res = extract_ilp(problem, time_limit=ILP_SECONDS,
                      warm_start=joint_switch(problem, extract_ocf(problem)), in_process=True)
    return Extraction(res.choice, res.bound, res.gap, "optimal" if res.optimal else res.status)


FULL = ["nasrnn", "bert", "squeezenet", "resnext50", "nasneta", "inceptionv3"]


@pytest.mark.parametrize("model", FULL)
def test_costs_ordered_on_saturated_egraphs(model):
    _, _, problem, results = _extracted(model)
    cost = {}
    for m, ex in results.items():
        assert is_valid(problem, ex.choice), m          # every reachable class chosen, acyclic
        cost[m] = dag_cost(problem, ex.choice)
    assert cost["ocf+switch"] <= cost["ocf"] + 1e-9
    ilp = results["ilp"]
    assert cost["ilp"] <= cost["ocf+switch"] + 1e-9        # never worse than its warm start
    assert ilp.bound is None or ilp.bound <= cost["ilp"] + 1e-6
    if ilp.status == "optimal":
        assert cost["ilp"] <= cost["greedy"] + 1e-9
    print(model, cost, ilp.status)


def test_switch_closes_the_nasneta_merge_gap():
    """NasNet-A's win needs merged convolutions that only pay when all consumers switch together:
    ocf alone misses it, the joint switch finds it."""
    _, _, problem, results = _extracted("nasneta")
    assert dag_cost(problem, results["ocf+switch"].choice) < dag_cost(problem,
                                                                      results["ocf"].choice)


@pytest.mark.parametrize("model", ["nasrnn_toy", "bert_toy", "resnext50_toy", "nasneta_toy",
                                   "squeezenet"])
def test_extracted_graphs_compute_the_original(model):
    graph, eg, problem, results = _extracted(model)
    expected = run(graph, seed=1, dtype=np.float64)
    for m, ex in results.items():
        assert is_valid(problem, ex.choice), m
        g = egraph_to_graph(eg, egraph_choice(problem, ex.choice, eg.num_nodes))
        got = run(g, seed=1, dtype=np.float64)
        assert len(got) == len(expected), m
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=m)


def test_joint_switch_takes_a_merge_no_single_switch_can():
    """x; A = a(x) | proj0(T); B = b(x) | proj1(T); T = split(M); M = m(x) 1.5; R = f(A, B).
    Per class a/b (1) beat proj (1 + 0.5 via M), but together the merge costs 1.5 < 2."""
    from eqsat_nb.extract.greedy import extract_greedy
    from eqsat_nb.extract.ocf import extract_ocf
    from eqsat_nb.extract.problem import from_arrays
    from eqsat_nb.extract.switch import joint_switch
    #                 x  a  p0 b  p1 split m    f
    p = from_arrays(6, [0, 1, 1, 2, 2, 3, 4, 5], [0, 1, 0, 1, 0, 0, 1.5, 1],
                    [[], [0], [3], [0], [3], [4], [0], [1, 2]], [5])
    for start in (extract_greedy(p), extract_ocf(p)):
        assert dag_cost(p, start) == 3.0
        out = joint_switch(p, start)
        assert is_valid(p, out) and dag_cost(p, out) == 2.5
        assert out[1] == 2 and out[2] == 4
    # never worse, and an already optimal selection is kept
    assert np.array_equal(joint_switch(p, out), out)


def test_joint_switch_takes_a_merge_of_merges_in_two_levels():
    """Q, K, V = single matmuls (1 each) | projections: Q, K of the two-way merge QK (a matmul
    of 2.05, more than Q and K apart), QK and V of the three-way merge M3 (2.5). No one-level
    move pays (Q, K to QK: 3.05; V alone to M3: 4.5); the two-level move (Q, K to QK, then QK
    and V to M3) costs 2.5 against 3."""
    from eqsat_nb.extract.problem import from_arrays
    from eqsat_nb.extract.switch import joint_switch
    # classes: 0 x, 1 Q, 2 K, 3 V, 4 QK, 5 split(QK), 6 M3, 7 split(M3), 8 R = f(Q, K, V)
    nodes = [(0, 0, []),                            # 0 x
             (1, 1, [0]), (1, 0, [5]),              # 1 Q: mm | proj0(S2)
             (2, 1, [0]), (2, 0, [5]),              # 3 K: mm | proj1(S2)
             (3, 1, [0]), (3, 0, [7]),              # 5 V: mm | proj1(S3)
             (4, 2.05, [0]), (4, 0, [7]),           # 7 QK: mm2 | proj0(S3)
             (5, 0, [4]),                           # 9 S2 = split(QK)
             (6, 2.5, [0]),                         # 10 M3: mm3
             (7, 0, [6]),                           # 11 S3 = split(M3)
             (8, 0, [1, 2, 3])]                     # 12 R
    p = from_arrays(9, [c for c, _, _ in nodes], [w for _, w, _ in nodes],
                    [k for _, _, k in nodes], [8])
    singles = np.array([0, 1, 3, 5, -1, -1, -1, -1, 12])
    assert is_valid(p, singles) and dag_cost(p, singles) == 3.0
    out = joint_switch(p, singles)
    assert is_valid(p, out) and dag_cost(p, out) == 2.5
    assert out[1] == 2 and out[2] == 4 and out[3] == 6 and out[4] == 8
