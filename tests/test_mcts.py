"""MCTS-guided e-graph construction: reproducible for a seed (also with two worker processes),
never worse than the original, at least as good as TENSAT mode on small models, and the pieces it
relies on (blacklists, saturated children, incremental pricing, the fast extraction problem)."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.cost.model import CostModel, graph_cost
from eqsat_nb.egraph import egraph_to_graph, graph_to_egraph
from eqsat_nb.extract.dag import dag_cost
from eqsat_nb.extract.problem import from_egraph
from eqsat_nb.extract.run import extract
from eqsat_nb.ir.builder import GraphBuilder
from eqsat_nb.ir.interp import run
from eqsat_nb.ir.parse import load
from eqsat_nb.rules.parse import load_rules, parse_rules
from eqsat_nb.search.mcts import MctsOptions, mcts_optimize
from eqsat_nb.search.mcts_tree import (Context, Node, Pricer, State, _expand, masked_costs,
                                       run_simulations)
from eqsat_nb.search.mcts_workers import Job
from eqsat_nb.search.saturate import Limits, compile_rules, saturate

ROOT = Path(__file__).resolve().parent.parent
TINY = ("tiny_mlp", "tiny_conv", "tiny_branches")


@pytest.fixture(scope="module")
def rules():
    return load_rules(ROOT / "rules")


@pytest.fixture(scope="module")
def cpu():
    return AnalyticCostModel("cpu")


def _mcts(name: str, rules, model, **kw):
    eg = graph_to_egraph(load(ROOT / "ir_examples" / f"{name}.tir"))
    opts = MctsOptions(**{"budget": 8, "final_extract": "ocf", **kw})
    return eg, mcts_optimize(eg, rules, model, opts)


def _tensat_cost(name: str, rules, model) -> float:
    eg = graph_to_egraph(load(ROOT / "ir_examples" / f"{name}.tir"))
    saturate(eg, rules, Limits(node_limit=2000))
    problem = from_egraph(eg, model.egraph_costs(eg))
    return dag_cost(problem, extract(problem, "ilp").choice)


def _summary(eg, rep):
    return ([(d.action, d.visits, round(d.mean_value, 12), d.nodes) for d in rep.decisions],
            rep.cost_after, rep.stop_reason, rep.rules_applied, eg.num_nodes, eg.fingerprint(),
            rep.simulations)


def test_same_seed_same_run(rules, cpu):
    a = _summary(*_mcts("squeezenet", rules, cpu, seed=3, budget=6))
    b = _summary(*_mcts("squeezenet", rules, cpu, seed=3, budget=6))
    assert a == b
    assert a[0], "squeezenet has an improving first decision (relu into conv)"


@pytest.mark.parametrize("name", TINY)
def test_never_worse_than_original_and_extracts_a_valid_graph(name, rules, cpu):
    graph = load(ROOT / "ir_examples" / f"{name}.tir")
    eg, rep = _mcts(name, rules, cpu, seed=1)
    before = graph_cost(cpu, graph)
    assert rep.cost_before == pytest.approx(before)
    assert rep.cost_after <= before + 1e-9
    if rep.choice is not None:
        out = egraph_to_graph(eg, rep.choice)
        assert graph_cost(cpu, out) == pytest.approx(rep.cost_after)
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal(t.shape).astype(np.float32) for n, t in graph.inputs}
        for x, y in zip(run(graph, feeds), run(out, feeds)):
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["tiny_mlp", "tiny_conv"])
@pytest.mark.parametrize("device", ["cpu", "a100"])
def test_not_worse_than_tensat_mode_and_improves(name, device, rules):
    model = AnalyticCostModel(device)
    _, rep = _mcts(name, rules, model, budget=16, final_extract="ilp")
    assert rep.cost_after <= _tensat_cost(name, rules, model) * (1 + 1e-9)
    assert rep.cost_after < rep.cost_before


def test_workers_two_is_valid_and_deterministic(rules, cpu):
    a = _summary(*_mcts("tiny_conv", rules, cpu, seed=5, budget=8, workers=2))
    b = _summary(*_mcts("tiny_conv", rules, cpu, seed=5, budget=8, workers=2))
    assert a == b
    assert a[1] <= graph_cost(cpu, load(ROOT / "ir_examples" / "tiny_conv.tir"))
    assert a[6] > 0


# ------------------------------------------------------------------ the pieces
def _toy():
    b = GraphBuilder("toy")
    x, y, z = b.input((4, 8)), b.input((4, 8)), b.input((4, 8))
    return b.build(b.op("relu", b.op("ewadd", b.op("ewadd", x, y), z)))


TOY_RULES = """
rule assoc_l: (ewadd (ewadd ?a ?b) ?c) => (ewadd ?a (ewadd ?b ?c))
rule assoc_r: (ewadd ?a (ewadd ?b ?c)) => (ewadd (ewadd ?a ?b) ?c)
rule mul_comm: (ewmul ?a ?b) => (ewmul ?b ?a)
"""


def _toy_context(model, **kw):
    eg = graph_to_egraph(_toy())
    actions = compile_rules(parse_rules(TOY_RULES, "<toy>"), eg)
    eg.rebuild()
    ctx = Context(actions, model, MctsOptions(**kw), 1.0)
    raw = ctx.pricer.raw(eg)
    return eg, actions, ctx, raw


def test_blacklist_drops_actions_whose_pattern_is_absent(cpu):
    eg, actions, ctx, raw = _toy_context(cpu)
    assert [actions[a].name for a in ctx.applicable(eg)] == ["assoc_l"]   # no ewmul, no x+(y+z)
    changed, _, _, _ = ctx.apply(eg, raw, [a.name for a in actions].index("assoc_l"), 1)
    assert changed
    assert [actions[a].name for a in ctx.applicable(eg)] == ["assoc_l", "assoc_r"]


def test_unchanged_child_is_saturated_and_root_closes(cpu):
    eg, actions, ctx, raw = _toy_context(cpu)
    root = Node(-1, None, State(eg, raw, ctx.cost(eg, raw)), 0.0, False)
    child = _expand(root, ctx, random.Random(0))
    assert child is not None and actions[child.action].name == "assoc_l"
    assert _expand(root, ctx, random.Random(0)) is None    # nothing else applies at the root
    # below it, assoc_l and assoc_r both rebuild what is already there: no child, saturated
    assert _expand(child, ctx, random.Random(1)) is None
    assert not child.children and child.untried == []
    run_simulations(root, ctx, 10, seed=2)
    assert root.closed and child.closed             # the search has nothing left to try


def test_saturated_search_stops(cpu):
    """The paper's loop (continue_on_zero): the only applicable action pays nothing but is applied
    anyway; after it every action rebuilds what is there, so the search is saturated."""
    eg = graph_to_egraph(_toy())
    rep = mcts_optimize(eg, parse_rules(TOY_RULES, "<toy>"), cpu,
                        MctsOptions(budget=16, final_extract="ocf+switch"))
    assert rep.stop_reason == "saturated" and rep.extraction == "ocf+switch"
    assert [d.action for d in rep.decisions] == ["assoc_l"]
    assert rep.decisions[0].mean_value == 0.0
    assert rep.cost_after == pytest.approx(rep.cost_before)   # nothing here is cheaper


def test_stop_at_first_zero_value_decision_when_asked(cpu):
    eg = graph_to_egraph(_toy())
    rep = mcts_optimize(eg, parse_rules(TOY_RULES, "<toy>"), cpu,
                        MctsOptions(budget=16, final_extract="ocf", continue_on_zero=False))
    assert rep.stop_reason == "no improving action"
    assert len(rep.decisions) == 0 and rep.simulations <= 2
    assert rep.cost_after == pytest.approx(rep.cost_before)


def test_continuing_past_zero_value_decisions_reaches_the_node_limit_and_is_no_worse(rules):
    """On NASRNN (a100) the first decisions pay and then runs of them have value 0 in the
    rollouts; going on to the node limit gives the final ILP an e-graph that contains the stopped
    run's one. (Node limit 900: with issue 19's a100 profile, at 700 the continuing run reached
    the limit exactly where patience 1 stops; with the two-level joint-switch of 3f00a73, seed 2
    did so at 900: seed 5.)"""
    model = AnalyticCostModel("a100")
    kw = dict(budget=4, node_limit=900, final_extract="ilp", seed=5)
    # TASO's rules, which the seed and limits were chosen for (rules/transformer.rules' actions
    # never apply on NasRNN's 2-D matmuls but change the random rollouts)
    rules = [r for r in rules if not (r.file or "").endswith("transformer.rules")]
    eg_stop, stop = _mcts("nasrnn", rules, model, continue_on_zero=False, **kw)
    eg_go, go = _mcts("nasrnn", rules, model, zero_patience=None, **kw)
    assert stop.stop_reason == "no improving action"
    assert go.stop_reason == "node limit" and eg_go.num_nodes >= 700
    assert len(go.decisions) > len(stop.decisions)
    actions = [d.action for d in go.decisions]
    assert actions[:len(stop.decisions)] == [d.action for d in stop.decisions]
    zeros = [d.mean_value == 0.0 for d in go.decisions]
    assert zeros.count(True) >= 2
    assert go.cost_after <= stop.cost_after * (1 + 1e-9)
    # patience 1: the same run up to the second zero-value decision in a row, then a stop
    _, pat = _mcts("nasrnn", rules, model, zero_patience=1, **kw)
    run = next(i for i in range(1, len(zeros)) if zeros[i - 1] and zeros[i])
    assert pat.stop_reason == "no improving action in 2 decisions"
    assert [d.action for d in pat.decisions] == actions[:run]
    assert pat.simulations < go.simulations


def _relus(n: int):
    b = GraphBuilder("relus")
    return b.build(*[b.op("relu", b.input((4, 8))) for _ in range(n)])


@pytest.mark.parametrize("cap", [3, 10, 1000])
def test_multi_match_cap_bounds_the_pairs_one_action_joins(cap, rules, cpu):
    """merge_relus_axis0_2d's two sources share no variable: 6 relus join to 6 x 5 / 2 = 15
    unordered pairs (the rule is symmetric: concat(b, a) would only mirror concat(a, b), so each
    pair is merged once, as TENSAT does); the cap keeps the first `cap` of them."""
    eg = graph_to_egraph(_relus(6))
    actions = compile_rules(rules, eg)
    eg.rebuild()
    ctx = Context(actions, cpu, MctsOptions(multi_match_limit=cap), 1.0)
    a = [x.name for x in actions].index("merge_relus_axis0_2d")
    assert actions[a].is_multi
    changed, _, _, applied = ctx.apply(eg, ctx.pricer.raw(eg), a, 1)
    assert changed
    assert applied["merge_relus_axis0_2d"] == min(cap, 15)


@pytest.mark.parametrize("device", ["cpu", "a100"])
def test_incremental_pricing_matches_the_reference(device, rules):
    model = AnalyticCostModel(device)
    eg = graph_to_egraph(load(ROOT / "ir_examples" / "tiny_branches.tir"))
    pricer = Pricer(model)
    raw = pricer.raw(eg)
    n0 = eg.num_nodes
    saturate(eg, rules, Limits(node_limit=600, iter_limit=3))
    raw = pricer.raw(eg, n0, raw)
    costs = masked_costs(eg, raw)
    np.testing.assert_allclose(costs, model.egraph_costs(eg))
    problem = from_egraph(eg, costs)
    np.testing.assert_allclose(problem.node_cost, model.egraph_costs(eg)[problem.node_ids])


class _ConstSensitive(CostModel):
    """Prices weight-only operands differently, as the measuring backends do."""

    name = "const-sensitive"
    launch_us = 1.0

    def _cost(self, sig):
        return 10.0 + 100.0 * len(sig.const_inputs)


def test_incremental_pricing_sees_weight_only_operands(rules):
    model = _ConstSensitive()
    eg = graph_to_egraph(load(ROOT / "ir_examples" / "tiny_conv.tir"))
    saturate(eg, rules, Limits(node_limit=600, iter_limit=3))
    costs = masked_costs(eg, Pricer(model).raw(eg))
    expected = model.egraph_costs(eg)
    assert np.any(expected >= 110.0)                 # some priced node reads a weight
    np.testing.assert_allclose(costs, expected)


def test_chunked_node_limit_stays_near_the_limit(rules):
    eg = graph_to_egraph(load(ROOT / "ir_examples" / "bert.tir"))
    plain = eg.snapshot()
    # (limit 300: with each unordered pair of a symmetric multi-pattern merged once, BERT's
    # first iteration ends at 504 nodes, so a 400 limit is hardly crossed; no scheduler, which
    # would hold the merges back at so small a limit)
    every_rule = dict(iter_limit=1, match_limit=None, budget_share=None)
    saturate(plain, rules, Limits(node_limit=300, chunked_node_limit=False, **every_rule))
    saturate(eg, rules, Limits(node_limit=300, chunked_node_limit=True, **every_rule))
    assert plain.num_nodes > 450                   # the rule that crosses the limit overshoots
    most = max(r.applier.new_nodes for r in compile_rules(rules, eg.snapshot()))
    assert 300 <= eg.num_nodes < 300 + most        # less than one match's nodes past it


def test_executor_interface_jobs_are_pure(rules, cpu):
    """The same job run twice (fresh trees, same seed) gives the same statistics: what a
    distributed executor relies on."""
    eg = graph_to_egraph(load(ROOT / "ir_examples" / "tiny_conv.tir"))
    actions = compile_rules(rules, eg)
    eg.rebuild()
    out = []
    for _ in range(2):
        ctx = Context(actions, cpu, MctsOptions(), 28.0)
        raw = ctx.pricer.raw(eg)
        root = Node(-1, None, State(eg.snapshot(), raw, ctx.cost(eg, raw)), 0.0, False)
        job = Job(root, 6, 11)
        tree = run_simulations(job.tree, ctx, job.n, job.seed)
        out.append(sorted((a, c.visits, round(c.value, 12)) for a, c in tree.children.items()))
    assert out[0] == out[1] and out[0]


def test_decision_finishes_its_rule_past_the_limit_up_to_twice_it(rules):
    """Rollouts stop a rule at the node limit; the real e-graph's decision finishes it, as TENSAT
    mode does, but a multi-pattern action on ResNet-50 (120 000 nodes unbounded) stops at 2x."""
    model = AnalyticCostModel("a100")
    eg, rep = _mcts("resnet50", rules, model, budget=4, node_limit=1000, zero_patience=None)
    assert rep.stop_reason == "node limit"
    assert rep.decisions[-1].nodes == eg.num_nodes
    assert 1000 < eg.num_nodes < 2 * 1000 + 16 * 64  # one chunk of at most 16 matches past 2x
