"""Common-subexpression elimination: what hash-consing does to a graph on its way into an e-graph.

Two nodes with the same op, attributes and (already merged) operands compute the same value, so an
e-graph holds them as one class; `cse(g)` is therefore what Graph → EGraph → Graph gives back.
Random draws (opaque RandomNormal, Bernoulli, ...) are the exception there and here: each is a
value of its own.
"""
from __future__ import annotations

from dataclasses import replace

from .graph import Graph, Node
from .opaque import NONDETERMINISTIC


def cse(graph: Graph) -> Graph:
    """`graph` with every repeated computation replaced by its first occurrence."""
    alias: dict[str, str] = {}
    seen: dict[tuple, Node] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        inputs = tuple(alias.get(v, v) for v in node.inputs)
        key = (node.op, node.attrs, inputs)
        if node.op == "opaque" and node.attr.get("op") in NONDETERMINISTIC:
            key += (node.results,)
        first = seen.get(key)
        if first is not None:
            alias.update(zip(node.results, first.results))
            continue
        kept = replace(node, inputs=inputs) if inputs != node.inputs else node
        seen[key] = kept
        nodes.append(kept)
    return Graph(graph.name, graph.inputs, tuple(nodes),
                 tuple(alias.get(v, v) for v in graph.outputs))
