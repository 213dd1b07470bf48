"""Does any rewrite reach across the border of two consecutive layers?

Optimizing layers one at a time finds every rewrite that stays inside one layer. A rewrite
whose match spans the border (TENSAT's BERT: a layer's last matmul feeds the next layer's Q/K/V
with nothing between, and `matmul(matmul(x, A), B) = matmul(x, matmul(A, B))` multiplies the
two weights first) is lost. Such a rewrite leaves a mark in the e-graph of the two layers
saturated together: an e-node of one layer's e-class reads an e-class of the other layer's
inside (anything but the values that cross the border in the original graph, the inputs and
what both layers share), or two such e-classes are merged. Without such a mark, every graph
the joint e-graph holds computes the second layer from the first layer's outputs alone, as
the layers optimized apart do.

The mark is necessary, not sufficient: reassociating a residual Add across the border leaves
one and gains nothing. `saturate_pair` only says whether to look closer (repeat.py then
extracts the pair jointly and compares costs), and how large the saturated e-graph of two
layers is (how large the whole graph's would be).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..egraph.convert import graph_to_egraph
from ..ir.graph import Graph
from ..rules.pattern import Rule
from ..search.limits import Limits
from ..search.saturate import saturate
from .pieces import expression_keys


@dataclass(frozen=True)
class Saturated:
    """Two consecutive layers saturated together."""

    crossed: bool               # a rewrite reaches across their border (module doc)
    nodes: int                  # the e-graph's size when the search stopped
    seconds: float


def saturate_pair(pair: Graph, first: Iterable[str], second: Iterable[str],
                  border: Iterable[str], rules: Sequence[Rule], limits: Limits) -> Saturated:
    """Saturate `pair` (two consecutive layers as one graph) with `rules` and say whether a
    rewrite reaches across their border (module doc). `first` and `second` are the values each
    layer defines (constants included), `border` the first's values that the second reads."""
    t = time.perf_counter()
    eg = graph_to_egraph(pair)
    classes = _value_classes(pair, eg)
    first, second, border = set(first), set(second), set(border)
    a0 = {eg.find(classes[v]) for v in first - second - border if v in classes}
    b0 = {eg.find(classes[v]) for v in second - first if v in classes}
    fixed = a0 & b0                         # one expression in both before any rewrite
    fixed |= {eg.find(classes[v]) for v in border | (first & second) if v in classes}
    fixed |= {eg.find(c) for _, c in eg.inputs}
    a0 -= fixed
    b0 -= fixed
    saturate(eg, rules, limits)
    a = {eg.find(c) for c in a0}
    b = {eg.find(c) for c in b0}
    stop = {eg.find(c) for c in fixed}
    crossed = bool((a & b) - stop) or (     # a class of one layer merged with the other's
        _reaches(eg, b - stop, a - stop, stop) or _reaches(eg, a - stop, b - stop, stop))
    return Saturated(crossed, eg.num_nodes, time.perf_counter() - t)


def _value_classes(graph: Graph, eg) -> dict[str, int]:
    """The e-class each value of `graph` went into (graph_to_egraph names each class after its
    first value; the values hash-consed into it compute the same expression)."""
    keys = expression_keys((v for v, _ in graph.inputs), graph.nodes, {})
    by_key: dict[int, int] = {}
    for c, name in eg.names.items():
        if name in keys:
            by_key.setdefault(keys[name], c)
    return {v: by_key[k] for v, k in keys.items() if k in by_key}


def _reaches(eg, start: set[int], targets: set[int], stop: set[int]) -> bool:
    """Whether some e-node of a class reachable from `start` (through e-node operands, not
    entering `stop`) reads a class in `targets`."""
    seen = set(start)
    todo = list(start)
    while todo:
        c = todo.pop()
        for n in eg.class_nodes(c):
            if eg.op_name(n) == "lit":
                continue
            for child in eg.node_children(n):
                child = eg.find(child)
                if child in targets:
                    return True
                if child in seen or child in stop:
                    continue
                seen.add(child)
                todo.append(child)
    return False
