"""A representative's rewrite carried over to its copies, and the whole graph put back together.

`for_copy` renames the representative's optimized graph into a copy's: the representative's
inputs become the copy's, each weight the copy's weight at the same position (the merged Q/K/V
of layer k concatenates layer k's weights), every value the optimized graph kept from the
representative (the same expression of the same inputs and weights: names say nothing, as
extraction may give an old name to a new value) the value at the same canonical position of
the copy (pieces.correspondence), and such an opaque node its counterpart's stored ONNX node
(equal up to metadata, which the copy's own node keeps, so splicing still recognizes it as the
model's own). Values the rewrite made get fresh names, or the copy's output names where they
are its outputs.

`assemble` joins the pieces (every copy of every class, and the rest of the graph) into one
graph: values that a piece's outputs became replace those outputs wherever they are read, nodes
are ordered topologically, close to where their originals were, expressions computed by several
pieces (constants every copy reads, the same broadcast of a shared mask) are computed once, as
the e-graph would hold them as one class, and nodes nothing reads are dropped.
"""
from __future__ import annotations

import heapq
from dataclasses import replace
from typing import Sequence

from ..ir.cse import cse
from ..ir.graph import Graph, Node
from ..ir.names import unique
from .pieces import Piece, canonical_attrs, correspondence, expression_keys, is_constant


def for_copy(optimized: Graph, graph: Graph, rep: Piece, copy: Piece, taken: set[str],
             name: str | None = None) -> Graph:
    """`optimized` (the representative `rep`'s piece, optimized) as the piece `copy` of
    `graph` (see the module doc). `taken` holds every value name in use; fresh names are added
    to it."""
    values, weights = correspondence(graph, rep, copy)
    ids: dict[tuple, int] = {}
    rep_nodes = [graph.nodes[i] for i in rep.nodes]
    before = expression_keys(rep.inputs, rep_nodes, ids)
    original: dict[int, str] = {}            # expression → the representative's value
    for v in list(rep.inputs) + rep.values(graph):
        original.setdefault(before[v], v)
    after = expression_keys((v for v, _ in optimized.inputs), optimized.nodes, ids)
    producer = {r: graph.nodes[i] for i in copy.nodes for r in graph.nodes[i].results}
    expected: dict[str, str] = {}            # an output of `optimized` → the copy's output
    for v, want in zip(optimized.outputs, copy.outputs):
        expected.setdefault(v, want)
    opaque = _opaque_counterparts(graph, rep, copy)
    names = {v: values[v] for v, _ in optimized.inputs}
    used = set(names.values())
    nodes = []
    for node in optimized.nodes:
        inputs = tuple(names[v] for v in node.inputs)
        kept = original.get(after[node.results[0]]) is not None
        results = []
        for r in node.results:
            u = original.get(after[r])
            if u is not None:                # the representative's own value: the copy's
                n = values[u]
            elif r in expected and expected[r] not in used:
                n = expected[r]              # a new value the copy's readers outside read
            else:
                n = unique(r, taken)
            used.add(n)
            names[r] = n
            results.append(n)
        attrs = node.attrs
        if node.op == "weight":
            attrs = tuple((k, weights.get(v, v) if k == "name" else v) for k, v in attrs)
        elif node.op == "opaque":
            own = producer.get(results[0])
            if kept and own is not None and own.op == "opaque":
                attrs = own.attrs            # the copy's own node, metadata and all
            else:
                attrs = opaque.get(canonical_attrs(node), attrs)
        nodes.append(Node(node.op, inputs, attrs, tuple(results), node.types, node.loc))
    return Graph(name or optimized.name, tuple((names[v], t) for v, t in optimized.inputs),
                 tuple(nodes), tuple(names[v] for v in optimized.outputs))


def _opaque_counterparts(graph: Graph, rep: Piece, copy: Piece) -> dict[tuple, tuple]:
    """Canonical attributes of the representative's opaque nodes → its counterpart's attributes,
    where that is one counterpart (two nodes alike up to metadata whose counterparts differ
    are left out)."""
    out: dict[tuple, tuple] = {}
    ambiguous: set[tuple] = set()
    for i, j in zip(rep.nodes, copy.nodes):
        a, b = graph.nodes[i], graph.nodes[j]
        if a.op != "opaque":
            continue
        canon = canonical_attrs(a)
        if out.get(canon, b.attrs) != b.attrs:
            ambiguous.add(canon)
        out[canon] = b.attrs
    for key in ambiguous:
        del out[key]
    return out


def assemble(graph: Graph, parts: Sequence[tuple[Graph, Piece]]) -> Graph:
    """One graph computing `graph`'s outputs from the parts: each a piece of `graph` (a copy or
    the rest) and the graph that now computes it (inputs and outputs in the piece's order,
    possibly with other names for its outputs)."""
    producer = {r: i for i, n in enumerate(graph.nodes) for r in n.results}
    alias: dict[str, str] = {}
    defined: dict[str, Node] = {}
    entries: list[tuple[tuple[int, int, int], Node]] = []
    taken = set(producer) | {v for v, _ in graph.inputs}
    for p, (g, piece) in enumerate(parts):
        local: dict[str, str] = {}
        anchor = min(piece.nodes) if piece.nodes else 0
        for seq, node in enumerate(g.nodes):
            node = replace(node, inputs=tuple(local.get(v, v) for v in node.inputs))
            known = [producer[r] for r in node.results if r in producer]
            if known:
                anchor = min(known)
            first = defined.get(node.results[0])
            if first is not None:
                if first == node:
                    continue            # a constant several pieces read: defined once
                fresh = tuple(unique(r, taken) for r in node.results)
                local.update(zip(node.results, fresh))
                node = replace(node, results=fresh)
            for r in node.results:
                defined[r] = node
                taken.add(r)
            entries.append(((anchor, p, seq), node))
        for expected, actual in zip(piece.outputs, g.outputs):
            actual = local.get(actual, actual)
            if actual != expected:
                alias[expected] = actual

    def resolve(v: str) -> str:
        seen = set()
        while v in alias and v not in seen:
            seen.add(v)
            v = alias[v]
        return v

    entries = [(k, replace(n, inputs=tuple(resolve(v) for v in n.inputs))) for k, n in entries]
    outputs = tuple(resolve(v) for v in graph.outputs)
    entries += _constants_read(graph, entries, outputs, producer, len(parts))
    ordered = _topological(entries, {v for v, _ in graph.inputs})
    merged = cse(Graph(graph.name, graph.inputs, tuple(ordered), outputs))
    return _without_dead_nodes(merged)


def _constants_read(graph: Graph, entries: list[tuple[tuple, Node]], outputs: tuple[str, ...],
                    producer: dict[str, int], order: int) -> list[tuple[tuple, Node]]:
    """The original graph's constant nodes that values read, but defined by no piece, need (a
    constant the graph returns is in no piece: pieces hold the constants their nodes read)."""
    made = {r for _, n in entries for r in n.results} | {v for v, _ in graph.inputs}
    const: set[str] = set()
    for node in graph.nodes:
        if is_constant(node, const):
            const.update(node.results)
    wanted = [v for _, n in entries for v in n.inputs if v not in made]
    wanted += [v for v in outputs if v not in made]
    out: list[tuple[tuple, Node]] = []
    while wanted:
        v = wanted.pop()
        if v in made:
            continue
        if v not in producer or v not in const:
            raise ValueError(f"value {v} is read but defined by no piece")
        i = producer[v]
        node = graph.nodes[i]
        out.append(((i, order, 0), node))
        made.update(node.results)
        wanted.extend(node.inputs)
    return out


def _topological(entries: list[tuple[tuple, Node]], given: set[str]) -> list[Node]:
    """The nodes in a topological order, the smallest key first among those ready (Kahn)."""
    waiting: dict[str, list[int]] = {}
    missing = [0] * len(entries)
    made = {r for _, n in entries for r in n.results}
    for j, (_, node) in enumerate(entries):
        needs = {v for v in node.inputs if v not in given}
        unknown = [v for v in needs if v not in made]
        if unknown:
            raise ValueError(f"value {unknown[0]} is read but defined by no piece")
        missing[j] = len(needs)
        for v in needs:
            waiting.setdefault(v, []).append(j)
    ready = [(entries[j][0], j) for j in range(len(entries)) if missing[j] == 0]
    heapq.heapify(ready)
    out: list[Node] = []
    while ready:
        _, j = heapq.heappop(ready)
        node = entries[j][1]
        out.append(node)
        for r in node.results:
            for k in waiting.pop(r, ()):
                missing[k] -= 1
                if missing[k] == 0:
                    heapq.heappush(ready, (entries[k][0], k))
    if len(out) != len(entries):
        raise ValueError("the assembled pieces read each other in a cycle")
    return out


def _without_dead_nodes(graph: Graph) -> Graph:
    """`graph` without the nodes no output depends on."""
    live = set(graph.outputs)
    keep = []
    for node in reversed(graph.nodes):
        if any(r in live for r in node.results):
            keep.append(node)
            live.update(node.inputs)
    return Graph(graph.name, graph.inputs, tuple(reversed(keep)), graph.outputs)
