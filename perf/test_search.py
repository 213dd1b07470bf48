"""The search as `eqsat-nb bench --device a100` runs it, per model: `optimize()` with the default
scheduled saturation (k_multi 2, backoff, node budget) and ILP extraction on a100 costs, and
MCTS (budget 128, node limit 2 000) beside it. `extra_info` carries the e-graph size, the stop
reason, the rules the scheduler held back and the estimated speed-up, so a search that drowns
again (ViT / TT at 50 000 nodes and a 60 s ILP) shows as a slower run and a lower speed-up.
Quick tier: SqueezeNet; full tier: every benchmark model, and MCTS on three."""
from __future__ import annotations

import pytest
from benchutil import RULES, Rounds, example

from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.ir.parse import load
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.mcts import MctsOptions, mcts_optimize

pytestmark = pytest.mark.usefixtures("warm_jit")

MODELS = ("bert", "inceptionv3", "mobilenetv2", "nasneta", "nasrnn", "resnet50", "resnext50",
          "squeezenet", "vgg19", "transformer_transducer", "vit_base", "vit_large", "vit_huge")
QUICK = ("squeezenet",)


@pytest.mark.parametrize("model", [m if m in QUICK else pytest.param(m, marks=pytest.mark.full)
                                   for m in MODELS])
def test_saturate_ilp_a100(bench, benchmark, model):
    """Search + pricing + ILP extraction (optimize() as `bench --device a100` calls it, without
    verification)."""
    graph = load(example(model))
    rules = load_rules(RULES)
    cost = AnalyticCostModel("a100")
    result = bench(lambda: optimize(graph, cost, rules, Options()), rounds=Rounds(3, 3))
    benchmark.extra_info.update(
        model=model, nodes=result.egraph_nodes, classes=result.egraph_classes,
        iterations=result.iterations, stop=result.stop_reason,
        banned=sorted(result.rules_banned), speedup_pct=round(result.speedup_pct, 2),
        cost_after_us=round(result.cost_after, 3), extraction=result.extraction,
        phase_s={k: round(v, 4) for k, v in result.times.items()})


@pytest.mark.full
@pytest.mark.parametrize("model", ["bert", "inceptionv3", "vit_large"])
def test_mcts_a100(bench, benchmark, model):
    """MCTS at the paper's settings with ILP as the final extraction (tools/mcts_compare.py runs
    it on every model next to TENSAT mode)."""
    graph = load(example(model))
    rules = load_rules(RULES)
    cost = AnalyticCostModel("a100")

    def run():
        return mcts_optimize(graph_to_egraph(graph), rules, cost, MctsOptions())

    rep = bench(run, rounds=Rounds(1, 1))
    benchmark.extra_info.update(model=model, speedup_pct=round(rep.speedup_pct, 2),
                                cost_after_us=round(rep.cost_after, 3),
                                decisions=len(rep.decisions), stop=rep.stop_reason,
                                simulations=rep.simulations, extraction=rep.extraction,
                                search_s=round(rep.search_seconds, 3))
