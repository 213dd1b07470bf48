"""Parts of a graph as graphs of their own, and the canonical form that says when two are equal.

A *piece* is a set of a graph's computing nodes (those that read, through any path, a graph
input: the *activation* nodes) together with every constant node they read (weights and nodes
computed from weights only, which cost nothing at inference and which the e-graph prices as
free), listed in one canonical order: the activation nodes in graph order, each preceded by the
constant nodes it reads that are not listed yet (depth first, operands in order). Its inputs are
the values it reads from outside (graph inputs, other pieces' activations), numbered in order of
first use; its outputs are its activation values read outside it or returned by the graph.

Two pieces are copies of one layer when their canonical forms are equal: node by node the same
operator, attributes, result types and operands (a local node and result, or the same input
position), the same outputs and the same input types. A weight's name is not part of the form
(weights are matched by position, as the layer's k-th weight), but which operands read the same
weight is. Copies correspond node by node, value by value and weight by weight in that order,
which is what carries a rewrite of one copy over to another.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from ..ir.graph import Graph, Node, TensorType
from ..ir.opaque import NONDETERMINISTIC


@dataclass(frozen=True)
class Piece:
    """A piece of a graph (see the module doc); node indices refer to the graph's `nodes`."""

    nodes: tuple[int, ...]      # canonical order (a topological order)
    act: tuple[int, ...]        # its activation nodes, in graph order
    inputs: tuple[str, ...]     # values read from outside, in order of first use
    outputs: tuple[str, ...]    # activation values read outside or returned by the graph
    key: tuple                  # the canonical form: equal keys, copies of one layer

    def values(self, graph: Graph) -> list[str]:
        """Every value the piece defines, in canonical order (node by node, result by result):
        the order in which two copies' values correspond."""
        return [r for i in self.nodes for r in graph.nodes[i].results]

    def weight_names(self, graph: Graph) -> list[str]:
        """The names of the weights it reads, in canonical order (with repeats: one entry per
        weight node)."""
        return [graph.nodes[i].attr["name"] for i in self.nodes if graph.nodes[i].op == "weight"]


class GraphIndex:
    """Who defines and who reads each value of a graph, and which values are constants."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.types: dict[str, TensorType] = graph.types()
        self.producer: dict[str, tuple[int, int]] = {}      # value → (node index, result index)
        self.consumers: dict[str, list[int]] = {}           # value → reading node indices
        self.const: set[str] = set()
        self.outputs = frozenset(graph.outputs)
        for i, node in enumerate(graph.nodes):
            for k, r in enumerate(node.results):
                self.producer[r] = (i, k)
            for v in node.inputs:
                self.consumers.setdefault(v, []).append(i)
            if is_constant(node, self.const):
                self.const.update(node.results)
        self.act: list[int] = [i for i, n in enumerate(graph.nodes)
                               if not self.is_const_node(i)]

    def is_const_node(self, i: int) -> bool:
        return self.graph.nodes[i].results[0] in self.const

    def producer_node(self, value: str) -> int | None:
        p = self.producer.get(value)
        return None if p is None else p[0]


def is_constant(node: Node, const: set[str]) -> bool:
    """A weight, or a node computed from constants only (not a random draw, which is a new value
    at every run, nor a node with no operands but a weight)."""
    if node.op == "weight":
        return True
    if not node.inputs:
        return False
    if node.op == "opaque" and node.attr.get("op") in NONDETERMINISTIC:
        return False
    return all(v in const for v in node.inputs)


def make_piece(ix: GraphIndex, act: Iterable[int]) -> Piece:
    """The piece of `ix.graph` made of the activation nodes `act` (indices) and the constant nodes
    they read, with its canonical form."""
    g = ix.graph
    act = tuple(sorted(act))
    act_set = set(act)
    order: list[int] = []
    pos: dict[int, int] = {}            # node index → canonical position

    def add_constants(root: int) -> None:
        stack = [(root, 0)]
        while stack:                    # post-order: operands before the node that reads them
            i, k = stack.pop()
            if i in pos:
                continue
            ins = g.nodes[i].inputs
            if k < len(ins):
                stack.append((i, k + 1))
                p = ix.producer_node(ins[k])
                if p is not None and p not in pos:
                    stack.append((p, 0))
                continue
            pos[i] = len(order)
            order.append(i)

    for i in act:
        for v in g.nodes[i].inputs:
            p = ix.producer_node(v)
            if p is not None and p not in pos and p not in act_set and ix.is_const_node(p):
                add_constants(p)
        pos[i] = len(order)
        order.append(i)

    inputs: dict[str, int] = {}
    keys = []
    for i in order:
        node = g.nodes[i]
        refs = []
        for v in node.inputs:
            p = ix.producer.get(v)
            if p is not None and p[0] in pos:
                refs.append((pos[p[0]], p[1]))
            else:
                refs.append((-1, inputs.setdefault(v, len(inputs))))
        keys.append((node.op, canonical_attrs(node), node.types, tuple(refs)))
    outputs: list[str] = []
    out_refs = []
    for i in act:
        for k, r in enumerate(g.nodes[i].results):
            if r in ix.outputs or any(c not in act_set for c in ix.consumers.get(r, ())):
                outputs.append(r)
                out_refs.append((pos[i], k))
    in_types = tuple(ix.types[v] for v in inputs)
    key = (tuple(keys), tuple(out_refs), in_types)
    return Piece(tuple(order), act, tuple(inputs), tuple(outputs), key)


def canonical_attrs(node: Node) -> tuple:
    """A node's attributes without what says nothing about the function it computes: a weight's
    name (weights match by position), and an opaque node's ONNX metadata (the dynamo exporter
    writes each node's scope, FX node and stack trace there: `model.layers.3.self_attn`)."""
    if node.op == "weight":
        return tuple((k, None if k == "name" else v) for k, v in node.attrs)
    if node.op == "opaque":
        return tuple((k, _without_metadata(v) if k == "onnx" else v) for k, v in node.attrs)
    return node.attrs


@lru_cache(maxsize=None)
def _without_metadata(encoded: str) -> str:
    """An opaque node's stored ONNX node (ir/opaque.py) with its metadata_props cleared."""
    import onnx

    node = onnx.NodeProto()
    node.ParseFromString(base64.b64decode(encoded))
    if not len(node.metadata_props):
        return encoded
    del node.metadata_props[:]
    return base64.b64encode(node.SerializeToString(deterministic=True)).decode("ascii")


def piece_graph(ix: GraphIndex, piece: Piece, name: str) -> Graph:
    """The piece as a graph of its own: its inputs, its nodes in canonical order, its outputs."""
    return Graph(name, tuple((v, ix.types[v]) for v in piece.inputs),
                 tuple(ix.graph.nodes[i] for i in piece.nodes), piece.outputs)


def correspondence(graph: Graph, rep: Piece, copy: Piece) -> tuple[dict[str, str],
                                                                     dict[str, str]]:
    """(value map, weight-name map) from the representative `rep` to `copy` (equal keys): inputs
    to inputs, each defined value to the value at the same canonical position, each weight name
    to the name of the weight at the same position."""
    if rep.key != copy.key:
        raise ValueError("the pieces are not copies of one layer")
    values = dict(zip(rep.inputs, copy.inputs))
    values.update(zip(rep.values(graph), copy.values(graph)))
    weights = dict(zip(rep.weight_names(graph), copy.weight_names(graph)))
    return values, weights


def expression_keys(inputs: Iterable[str], nodes: Iterable[Node], ids: dict[tuple, int]
                    ) -> dict[str, int]:
    """An id per value, equal for values that compute the same expression: the same operators
    and attributes down to the same inputs and weights (by name), as hash-consing sees them
    (each random draw its own value). `ids` interns the keys; share it to compare graphs."""
    keys = {v: ids.setdefault(("input", v), len(ids)) for v in inputs}
    for node in nodes:
        base: tuple = (node.op, node.attrs, tuple(keys[v] for v in node.inputs))
        if node.op == "opaque" and node.attr.get("op") in NONDETERMINISTIC:
            base += (node.results,)
        for k, r in enumerate(node.results):
            keys[r] = ids.setdefault(base + (k,), len(ids))
    return keys
