"""Saturation: counts equal egglog's closed forms on the side-by-side workloads, the e-graph stays
acyclic and keeps the original graph, and every graph it holds computes the same outputs."""
from __future__ import annotations

from math import comb
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.egraph import EGraph, egraph_to_graph, graph_to_egraph, original_choice
from eqsat_nb.ir.cse import cse
from eqsat_nb.ir.interp import run
from eqsat_nb.ir.parse import load
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.cycles import heights
from eqsat_nb.egraph.index import build_index
from eqsat_nb.egraph.store import EOP_NAMES
from eqsat_nb.search.saturate import Limits, saturate
from eqsat_nb.search.workloads import run_workload, tensor_counts

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("m", [2, 3, 5, 8, 12])
@pytest.mark.parametrize("incremental", [True, False])
def test_mm_chain_closed_form(m, incremental):
    eg, report = run_workload("mm_chain", m, 100, incremental)
    assert report.stop_reason == "saturated"
    assert tensor_counts(eg) == (m + comb(m + 1, 3), m * (m + 1) // 2)


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_add_ac_closed_form(n):
    eg, report = run_workload("add_ac", n, 100)
    assert report.stop_reason == "saturated"
    assert tensor_counts(eg) == (n + 3**n - 2**(n + 1) + 1, 2**n - 1)


@pytest.mark.parametrize("layers", [1, 10, 50])
def test_mlp_73_nodes_per_layer(layers):
    eg, report = run_workload("mlp", layers, 100)
    assert report.stop_reason == "saturated" and len(report.iterations) == 6
    assert tensor_counts(eg) == (73 * layers + 1, 22 * layers + 1)


def test_mlp2_per_iteration_counts_match_egglog():
    """EGGLOG_WORKLOADS.md: mlp2 L=10, (nodes, classes) after each of 5 iterations."""
    want = [(138, 96), (308, 168), (828, 372), (2612, 1020), (10872, 3752)]
    for k, expected in enumerate(want, start=1):
        eg, _ = run_workload("mlp2", 10, k)
        assert tensor_counts(eg) == expected, k


def test_incremental_equals_full_search():
    for kind, size, iters in (("mlp2", 6, 4), ("add_ac", 5, 100), ("mm_chain", 7, 100)):
        a, _ = run_workload(kind, size, iters, incremental=True)
        b, _ = run_workload(kind, size, iters, incremental=False)
        assert tensor_counts(a) == tensor_counts(b)


# ------------------------------------------------------------------ TENSAT rules on models

def _random_choice(eg: EGraph, rng: np.random.Generator) -> np.ndarray:
    """One random unfiltered live node per class (cycle filtering makes any choice a DAG)."""
    choice = np.full(eg.num_nodes, -1, np.int64)
    for c in eg.class_ids():
        options = [n for n in eg.class_nodes(int(c)) if not eg.is_filtered(n)]
        choice[c] = options[rng.integers(len(options))]
    return choice


@pytest.fixture(scope="module")
def tensat_rules():
    return load_rules(ROOT / "rules")


def _small_model(name: str):
    """Shipped tiny models, and the benchmark recipes at toy sizes (tools/gen_models.py)."""
    if name.startswith("tiny"):
        return load(ROOT / "ir_examples" / f"{name}.tir")
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen_models", ROOT / "tools" / "gen_models.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    if name == "nasrnn_small":
        return gen.nasrnn(hidden=6, steps=2)
    return gen.bert(seq=4, hidden=8, heads=2, layers=2)


@pytest.mark.parametrize("model", ["tiny_mlp", "tiny_branches", "tiny_conv", "nasrnn_small",
                                   "bert_small"])
def test_saturated_models_stay_equivalent(model, tensat_rules):
    graph = _small_model(model)
    eg = graph_to_egraph(graph)
    report = saturate(eg, tensat_rules, Limits(node_limit=3000, iter_limit=6))
    assert sum(report.applied.values()) > 0
    # the original graph is still there
    assert egraph_to_graph(eg, original_choice(eg)) == cse(graph)
    # acyclic over unfiltered nodes
    cstart, cnodes, _, _ = build_index(eg.nodes, eg.classes, eg.num_nodes, len(EOP_NAMES), 0)
    found = np.full(4, -1, np.int64)
    heights(cstart, cnodes, eg.nodes, eg.children, eg.classes, found)
    assert found[0] == -1
    # every graph the e-graph holds computes the same outputs
    expected = run(graph, seed=1, dtype=np.float64)
    rng = np.random.default_rng(0)
    for _ in range(20):
        g = egraph_to_graph(eg, _random_choice(eg, rng))
        for got, want in zip(run(g, seed=1, dtype=np.float64), expected):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("model", ["nasrnn", "bert", "resnext50", "squeezenet", "vgg19"])
def test_tensat_settings_terminate_and_keep_original(model, tensat_rules):
    path = ROOT / "ir_examples" / f"{model}.tir"
    graph = load(path)
    eg = graph_to_egraph(graph)
    report = saturate(eg, tensat_rules, Limits())
    assert report.stop_reason in ("saturated", "node limit", "iteration limit")
    assert egraph_to_graph(eg, original_choice(eg)) == cse(graph)
    assert not any(eg.is_filtered(n) for n in original_choice(eg) if n >= 0)


@pytest.mark.parametrize("model", ["nasrnn", "squeezenet", "tiny_branches"])
def test_cycle_mask_equals_the_per_pair_search(model):
    """The root-grouped ancestor marking of `cycle_mask` answers exactly what `would_cycle` (a
    pruned search from each variable) answers, on random (root, variable) rows of a saturated
    e-graph, many of them cyclic."""
    from eqsat_nb.egraph.layout import C_PARENT
    from eqsat_nb.egraph.unionfind import find
    from eqsat_nb.search.cycles import cycle_mask, would_cycle

    eg = graph_to_egraph(load(ROOT / "ir_examples" / f"{model}.tir"))
    saturate(eg, load_rules(ROOT / "rules"), Limits(node_limit=3000, iter_limit=3))
    cstart, cnodes, _, _ = build_index(eg.nodes, eg.classes, eg.num_nodes, len(EOP_NAMES), 0)
    height = heights(cstart, cnodes, eg.nodes, eg.children, eg.classes, np.full(8, -1, np.int64))
    parent = eg.classes[C_PARENT]
    live = np.flatnonzero(np.diff(cstart) > 0)
    rng = np.random.default_rng(1)
    n = cstart.size - 1
    mark, stack, stamp = np.zeros(n, np.int64), np.empty(n + 1, np.int64), 0
    for n_roots, n_vars in [(1, 2), (2, 3)]:
        rows = rng.choice(live, size=(600, n_roots + n_vars)).astype(np.int32)
        rows[:20, n_roots] = rows[:20, 0]
        var_cols = np.arange(n_roots, n_roots + n_vars, dtype=np.int64)
        none = np.zeros(0, np.int64)
        got, pstart, pcls = cycle_mask(rows, n_roots, var_cols, height, cstart, cnodes,
                                       eg.nodes, eg.children, eg.classes, none, none)
        again, *_ = cycle_mask(rows, n_roots, var_cols, height, cstart, cnodes, eg.nodes,
                               eg.children, eg.classes, pstart, pcls)   # reversed edges reused
        np.testing.assert_array_equal(again, got)
        want = np.ones(len(rows), bool)
        for i, row in enumerate(rows):
            for r in range(n_roots):
                for v in var_cols:
                    stamp += 1
                    want[i] &= not would_cycle(find(parent, row[r]), find(parent, row[v]),
                                               height, cstart, cnodes, eg.nodes, eg.children,
                                               eg.classes, mark, stamp, stack)
        assert 20 <= np.sum(~want) < len(rows)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("model", ["bert", "vit_base", "nasrnn"])
def test_incremental_multi_join_is_the_full_join_of_new_pairs(model, tensat_rules):
    """Semi-naive multi-pattern search: in every iteration, a multi-pattern rule's incremental
    join equals its full join (every match of both sources, searched on a fresh index) restricted
    to the pairs with at least one new match — new × all ∪ all × new, not new × new."""
    from eqsat_nb.rules.match import MatchIndex
    from eqsat_nb.search.saturate import (_search_all, compile_rules, run_iteration,
                                          source_matches)

    eg = graph_to_egraph(load(ROOT / "ir_examples" / f"{model}.tir"))
    compiled = compile_rules(tensat_rules, eg)
    multi = [r for r in compiled if r.is_multi]
    limits = Limits(node_limit=20_000, k_multi=3)
    checked = 0
    for it in range(3):
        if it > 0:
            since = it
            index = MatchIndex(eg, since)
            inc = _search_all(multi, eg, index, True, limits, since)
            full = _search_all(multi, eg, MatchIndex(eg, 0), True, limits, 0)
            cache: dict = {}
            for rule in multi:
                new = []
                for s, p in enumerate(rule.sources):
                    rows, names = source_matches(eg, index, p, f"$check{s}_", since, cache)
                    cols = [2 + rule.var_names.index(n) for n in names]
                    new.append((cols, {(int(r[0]),) + tuple(map(int, r[1:])) for r in rows}))

                def uses_new(row) -> bool:
                    return any((int(row[s]),) + tuple(int(row[c]) for c in cols) in rows
                               for s, (cols, rows) in enumerate(new))

                want = {tuple(map(int, r)) for r in full[rule.name] if uses_new(r)}
                got = [tuple(map(int, r)) for r in inc[rule.name]]
                assert len(got) == len(set(got)), rule.name        # each pair once
                assert set(got) == want, (rule.name, it, len(got), len(want))
                checked += len(want)
        _, hit_limit, changed = run_iteration(eg, compiled, limits, it + 1, True, it)
        if hit_limit or not changed:
            break
    assert checked > 0


def test_nasrnn_merges_each_unordered_pair_once(tensat_rules):
    """merge_matmuls_axis1_2d's two sources are one pattern up to renaming: (m1, m2) and (m2, m1)
    build mirrored merges, so each unordered pair is applied once — NasRNN's first iteration has
    280 first-level matmul merges, as TENSAT (not 560)."""
    eg = graph_to_egraph(load(ROOT / "ir_examples" / "nasrnn.tir"))
    report = saturate(eg, tensat_rules, Limits(iter_limit=1))
    st = report.iterations[0].rules["merge_matmuls_axis1_2d"]
    assert st.matches == 280 and st.applied == 280


def test_which_multi_rules_are_symmetric(tensat_rules):
    """One ordering per unordered pair only where the sources and conditions cannot tell the two
    matches apart: not for the enlarge merges (the smaller kernel is enlarged) nor for pairs of
    different patterns."""
    from eqsat_nb.rules.multi import is_symmetric

    sym = {r.name for r in tensat_rules if r.is_multi and is_symmetric(r.lhs, r.rhs, r.conds)}
    assert sym == {"merge_relus_axis1_2d", "merge_matmuls_axis1_2d", "merge_matmuls_axis0_2d",
                   "merge_relus_axis0_2d", "merge_relus_axis1_4d", "merge_convs_axis0",
                   "merge_relus_axis0_4d", "merge_convs_axis1", "merge_convbiases_axis1",
                   "merge_projections", "merge_projections_bias", "merge_projections_bias_first",
                   "merge_linears_2d"}


def test_attribute_variables_bound_to_lists_with_one_first_value():
    """Two matches of one rule whose attribute variable binds perms that start alike ([0, 1, 3, 2]
    and [0, 2, 3, 1]) build nodes of different types: the applier's type cache must tell the
    literals apart (it once keyed them on their first value and merged a 1x4x8x16 class with a
    1x4x16x8 one)."""
    from eqsat_nb.ir.parse import parse
    from eqsat_nb.rules.parse import parse_rules
    g = parse("""func @t(%x: tensor<1x8x4x16xf32>) -> tensor<1x4x16x8xf32> {
  %a = transpose(%x) {perm = [0, 2, 1, 3]} : tensor<1x4x8x16xf32>
  %b = transpose(%a) {perm = [0, 1, 3, 2]} : tensor<1x4x16x8xf32>
  %c = scale(%b) {value = 0.5} : tensor<1x4x16x8xf32>
  return %c
}""")
    rules = parse_rules("""
rule scale_through_transpose: (scale (transpose ?a {perm = ?p}) {value = ?s})
    => (transpose (scale ?a {value = ?s}) {perm = ?p})
rule transposes: (transpose (transpose ?x {perm = [0, 2, 1, 3]}) {perm = [0, 1, 3, 2]})
    => (transpose ?x {perm = [0, 2, 3, 1]})
""")
    eg = graph_to_egraph(g)
    saturate(eg, rules, Limits(iter_limit=5))
    assert eg.class_type(eg.find(eg.roots[0])).shape == (1, 4, 16, 8)
