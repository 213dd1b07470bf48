"""End to end per model: `optimize()` (graph → e-graph → saturation at the default settings
→ analytic CPU costs → ocf extraction → graph) on every benchmark example; `extra_info` carries the
estimated costs before and after and the speed-up, so a quality regression shows next to a speed
one. Quick tier: a few small models; full tier: all of them."""
from __future__ import annotations

import pytest
from benchutil import RULES, Rounds, all_examples, example

from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.ir.parse import load
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.rules.parse import load_rules

pytestmark = pytest.mark.usefixtures("warm_jit")

QUICK = ("tiny_mlp", "tiny_conv", "squeezenet")


@pytest.mark.parametrize("model", [m if m in QUICK else pytest.param(m, marks=pytest.mark.full)
                                   for m in all_examples()])
def test_optimize(bench, benchmark, model):
    graph = load(example(model))
    rules = load_rules(RULES)
    result = bench(lambda: optimize(graph, AnalyticCostModel("cpu"), rules,
                                    Options(extract="ocf")), rounds=Rounds(3, 3))
    benchmark.extra_info.update(
        model=model, graph_nodes=len(graph.nodes), nodes=result.egraph_nodes,
        classes=result.egraph_classes, iterations=result.iterations, stop=result.stop_reason,
        cost_before_us=round(result.cost_before, 3), cost_after_us=round(result.cost_after, 3),
        speedup_pct=round(result.speedup_pct, 2), extraction=result.extraction,
        phase_s={k: round(v, 4) for k, v in result.times.items()})
