"""Each distinct layer once: a model's repeated layers found (detect.py), one representative per
class optimized and its rewrite repeated on every copy with that copy's weights (repeat.py,
assemble.py), every rewritten copy checked with its own weights (check.py)."""
from __future__ import annotations

from typing import Callable, Sequence

from ..cost.model import CostModel
from ..ir.graph import Graph
from ..optimize import Options, Result
from ..rules.pattern import Rule
from .detect import Layers, find_layers
from .repeat import LayerRun, optimize_layers, work_share

MODES = ("auto", "on", "off")
# "auto" optimizes by layers when that optimizes at most MAX_WORK_SHARE of the graph's nodes
# (each class once, each border test as one layer, the rest) and the whole graph's saturated
# e-graph would have at least MIN_WHOLE_EGRAPH nodes (estimated from the border test's two
# layers). Each graph optimized has a start-up of about a second (rules compiled against its
# e-graph, an ILP worker), which the smaller e-graphs must pay for. Measured on the 2-vCPU
# development machine under load: BERT-base (12 layers; an e-graph of 35 759 nodes whole, 3 172
# for one layer) optimized in 2.7-5.6 s by layers against 5.2-8.5 s whole; a 1-B Llama (16
# layers, 3 416 nodes whole) in 2.8 s against 1.9 s, a 16-layer small Llama (3 653 nodes) in
# 2.8-4.0 s against 1.6-2.3 s
MAX_WORK_SHARE = 0.5
MIN_WHOLE_EGRAPH = 10_000

__all__ = ["MODES", "LayerRun", "Layers", "find_layers", "optimize_layers", "optimize_model"]


def optimize_model(graph: Graph, cost_model: CostModel, rules: Sequence[Rule],
                   options: Options = Options(), layers: str = "auto",
                   on_iteration: Callable[..., None] | None = None,
                   on_decision: Callable[..., None] | None = None
                   ) -> tuple[Result, LayerRun | None]:
    """`optimize`, one layer class at a time where the graph repeats layers and as one graph
    otherwise: the result and, when optimized by layers, how (None otherwise). `layers`: "on"
    whenever the graph repeats layers, "auto" where that also pays (MAX_WORK_SHARE,
    MIN_WHOLE_EGRAPH), "off" never; never either where `options.alternatives` asks for the
    other extractors' answers (whole graphs, confirmed end to end). When layers were found but
    the graph was optimized as one (too small a saving, or a border test failed),
    `result.layers` says so."""
    from ..optimize import optimize      # looked up at call time, as run.py always did

    if layers not in MODES:
        raise ValueError(f"unknown layers mode {layers!r} (known: {', '.join(MODES)})")
    # a choice confirmed end to end on the GPU (Options.alternatives) is among whole graphs
    found = find_layers(graph) if layers != "off" and not options.alternatives else None
    if not found:
        return optimize(graph, cost_model, rules, options, on_iteration, on_decision), None
    share = work_share(found)
    if layers == "auto" and share > MAX_WORK_SHARE:
        result = optimize(graph, cost_model, rules, options, on_iteration, on_decision)
        result.layers = LayerRun(found, [], whole=(
            f"layer by layer would optimize {100 * share:.0f} % of its nodes (each class once, "
            f"two layers together to test their border, the rest), too few saved to pay for "
            f"the searches' start-ups; --layers on optimizes it by layers"))
        return result, None
    result, run = optimize_layers(graph, found, cost_model, rules, options, on_iteration,
                                  on_decision, MIN_WHOLE_EGRAPH if layers == "auto" else 0)
    return result, None if run.whole else run
