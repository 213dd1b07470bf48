"""Forms the ONNX writer wants that the e-graph does not produce directly.

- `flatten_splits`: the merge rules join projections two at a time, so Q/K/V come out as a split
  of a split (`[q+k, v]`, then `[q, k]`). Written as they are that is two Split nodes; a runtime
  wants one (`[q, k, v]`), which is what vLLM's and TensorRT-LLM's fused QKV layers compute.
- `compact_concat`: a merged projection's bias is the concat of its parts' biases, each
  `broadcast(b)` to the activation's shape. Broadcast values are written compactly (the bias
  vector, broadcast by the Add that reads it); this says how the concat of such values can be
  written compactly too: a Concat of the compact operands.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ..ir.graph import Graph


def flatten_splits(graph: Graph, keep: Iterable[str] = ()) -> Graph:
    """`graph` with every split whose input is the only use of a result of another split on the
    same axis merged into that split (its pieces take that result's place). Splits with a result
    in `keep` (values the caller must keep as they are) are left alone."""
    keep = set(keep)
    nodes = list(graph.nodes)
    while True:
        uses: dict[str, int] = {}
        for n in nodes:
            for v in n.inputs:
                uses[v] = uses.get(v, 0) + 1
        for v in graph.outputs:
            uses[v] = uses.get(v, 0) + 1
        producer = {r: i for i, n in enumerate(nodes) for r in n.results}
        for k, inner in enumerate(nodes):
            if inner.op != "split" or keep & set(inner.results):
                continue
            src = inner.inputs[0]
            i = producer.get(src)
            if i is None or uses[src] != 1:
                continue
            outer = nodes[i]
            if outer.op != "split" or keep & set(outer.results):
                continue
            rank = outer.types[0].rank
            if outer.attr["axis"] % rank != inner.attr["axis"] % rank:
                continue
            j = outer.results.index(src)
            sizes = outer.attr["sizes"]
            merged = replace(
                outer,
                attrs=tuple((n, tuple(sizes[:j]) + tuple(inner.attr["sizes"]) + tuple(sizes[j + 1:])
                             if n == "sizes" else a) for n, a in outer.attrs),
                results=outer.results[:j] + inner.results + outer.results[j + 1:],
                types=outer.types[:j] + inner.types + outer.types[j + 1:])
            nodes[i] = merged
            del nodes[k]
            break
        else:
            return replace(graph, nodes=tuple(nodes))


def compact_concat(compacts: list[tuple[int, ...]], fulls: list[tuple[int, ...]], axis: int
                   ) -> int | None:
    """The axis of a Concat of the compact operands (`compacts`, each broadcasting to its
    `fulls` entry) that broadcasts to the concat of the full operands along `axis`
    (non-negative), or None when there is none: the compacts need one rank, the concat axis
    unbroadcast in each, and equal sizes on every other axis."""
    ranks = {len(c) for c in compacts}
    if len(ranks) != 1:
        return None
    rc = ranks.pop()
    r = len(fulls[0])
    ax = axis - (r - rc)
    if ax < 0:
        return None
    for c, f in zip(compacts, fulls):
        if c[ax] != f[axis]:
            return None
    rest = {c[:ax] + c[ax + 1:] for c in compacts}
    return ax if len(rest) == 1 else None
