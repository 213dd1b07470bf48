"""Each distinct layer once: a model's repeated layers found (detect.py), one representative per
class optimized and its rewrite repeated on every copy with that copy's weights (repeat.py,
assemble.py), every rewritten copy checked with its own weights (check.py)."""
from __future__ import annotations

from typing import Callable, Sequence

from ..cost.model import CostModel
from ..ir.graph import Graph
from ..optimize import Options, Result, optimize
from ..rules.pattern import Rule
from .detect import Layers, find_layers
from .repeat import LayerRun, optimize_layers

MODES = ("auto", "off")

__all__ = ["MODES", "LayerRun", "Layers", "find_layers", "optimize_layers", "optimize_model"]


def optimize_model(graph: Graph, cost_model: CostModel, rules: Sequence[Rule],
                   options: Options = Options(), layers: str = "auto",
                   on_iteration: Callable[..., None] | None = None,
                   on_decision: Callable[..., None] | None = None
                   ) -> tuple[Result, LayerRun | None]:
    """`optimize`, layer by layer where the graph repeats layers (`layers` "auto") and as one
    graph otherwise (or with `layers` "off"): the result and, when by layers, how."""
    if layers not in MODES:
        raise ValueError(f"unknown layers mode {layers!r} (known: {', '.join(MODES)})")
    if layers == "auto":
        found = find_layers(graph)
        if found:
            return optimize_layers(graph, found, cost_model, rules, options, on_iteration,
                                   on_decision)
    return optimize(graph, cost_model, rules, options, on_iteration, on_decision), None
