"""Finding a model's repeated layers: pieces of the graph equal up to their weights' values.

Exporters write a transformer one layer after the other, each layer's nodes in the same order
(they trace the same code once per layer), so the graph's activation nodes (pieces.py), read in
graph order as a string of node signatures (operator, attributes, result and operand types), are
periodic over the layers. Detection reads that string, not the names: the dynamo exporter names
values `linear_7`, `mul_13`, `val_174`, with no layer number anywhere.

1. The longest periodic run: for every period p, the runs where the string equals itself shifted
   by p; the run covering the most nodes in whole periods wins (the shortest period among equal
   coverage). Then the cut: of the p places a period can start, the one where a block reads and
   gives the fewest values across its border (one value, the residual stream, in BERT and Llama),
   then the most blocks, then the most reads of what crosses into a block (after BERT's
   LayerNorm, whose output feeds Q, K, V and the residual, rather than before it). The parts of
   the string before and after the blocks are searched the same way, for other repeated runs.
2. The proposal is checked exactly: every block becomes a piece with its canonical form
   (pieces.py), and blocks with equal forms are copies of one layer class. A block unlike every
   other is not a layer; its nodes go back to the rest of the graph.
3. Rewriting one copy and repeating it on the others is what optimizing each copy on its own
   gives. It could lose a rewrite that joins two copies, which needs two nodes of different
   copies that neither depends on (a merge through an operand they share, as TENSAT merges an
   unrolled RNN's gates across cells). So a class is taken only when its copies form a chain:
   every activation node of a copy depends on the copy before it (in the union of the classes
   taken), or computes, node for node, the same expression in every copy (a broadcast of a
   shared attention mask: one value, which the assembled graph computes once).

A graph with no class of two or more chained copies is left whole, and is optimized as before.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Graph
from .pieces import GraphIndex, Piece, canonical_attrs, expression_keys, make_piece

MIN_LAYER_NODES = 8     # activation nodes a layer must have (a transformer layer has 30-90)


@dataclass(frozen=True)
class LayerClass:
    """Copies of one layer, in graph order; the first is the representative."""

    copies: tuple[Piece, ...]

    @property
    def rep(self) -> Piece:
        return self.copies[0]


@dataclass(frozen=True)
class Layers:
    """A graph's repeated layers (classes of two or more copies) and the rest of it."""

    graph: Graph
    index: GraphIndex = field(repr=False)
    classes: tuple[LayerClass, ...]
    rest: tuple[int, ...]               # activation nodes in no copy (graph order)
    proposed: int = 0                   # blocks the periodic runs proposed
    not_chained: int = 0                # classes left whole: copies not one after the other
    # the rest by how many layers it follows: rest_parts[j] = (j, its nodes), the nodes that
    # depend on layer j of the chain (in graph order, counted from 1) and on no later one
    rest_parts: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @property
    def chain(self) -> list[tuple[int, Piece]]:
        """Every copy with its class's index, in graph order (one after the other)."""
        return sorted(((k, p) for k, c in enumerate(self.classes) for p in c.copies),
                      key=lambda kp: kp[1].act[0])

    @property
    def count(self) -> int:
        """Layers: copies of all classes."""
        return sum(len(c.copies) for c in self.classes)

    @property
    def distinct(self) -> int:
        return len(self.classes)

    def __bool__(self) -> bool:
        return bool(self.classes)


def find_layers(graph: Graph, min_nodes: int = MIN_LAYER_NODES,
                index: GraphIndex | None = None) -> Layers:
    """The repeated layers of `graph` (see the module doc); falsy when there are none."""
    ix = index or GraphIndex(graph)
    act = ix.act
    sig = _signatures(graph, ix, act)
    blocks: list[list[int]] = []
    for start, period, count in _periodic_runs(ix, act, sig, 0, len(act), max(min_nodes, 1)):
        for k in range(count):
            blocks.append(act[start + k * period:start + (k + 1) * period])
    groups: dict[tuple, list[Piece]] = {}
    for block in blocks:
        p = make_piece(ix, block)
        groups.setdefault(p.key, []).append(p)
    candidates = [LayerClass(tuple(sorted(ps, key=lambda p: p.act[0])))
                  for ps in groups.values() if len(ps) >= 2]
    # the classes covering most of the graph first: each must keep the union a chain
    candidates.sort(key=lambda c: (-len(c.copies) * len(c.rep.act), c.rep.act[0]))
    taken: list[LayerClass] = []
    refused = 0
    for c in candidates:
        trial = sorted([p for t in taken for p in t.copies] + list(c.copies),
                       key=lambda p: p.act[0])
        if _chained(ix, trial, taken + [c]):
            taken.append(c)
        else:
            refused += 1
    taken.sort(key=lambda c: c.rep.act[0])
    in_copies = {i for c in taken for p in c.copies for i in p.act}
    rest = tuple(i for i in act if i not in in_copies)
    chain = sorted((p for c in taken for p in c.copies), key=lambda p: p.act[0])
    return Layers(graph, ix, tuple(taken), rest, len(blocks), refused,
                  _rest_parts(ix, chain, rest))


def _rest_parts(ix: GraphIndex, chain: list[Piece], rest: tuple[int, ...]
                ) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The rest split by the last layer of the chain each node depends on. Optimized as graphs
    of their own, in the order before the layers, layer 1, after layer 1, ..., each part reads
    only what comes before it, so no rewrite inside a part can make the assembled graph cyclic
    (one graph for the whole rest could merge a node feeding layer 1 with one reading layer 12,
    since it sees no path between them)."""
    layer_of = {i: j + 1 for j, p in enumerate(chain) for i in p.act}
    level: dict[str, int] = {}
    parts: dict[int, list[int]] = {}
    in_rest = set(rest)
    for i, node in enumerate(ix.graph.nodes):
        lv = layer_of.get(i)
        if lv is None:
            lv = max((level.get(v, 0) for v in node.inputs), default=0)
        for r in node.results:
            level[r] = lv
        if i in in_rest:
            parts.setdefault(lv, []).append(i)
    return tuple((lv, tuple(nodes)) for lv, nodes in sorted(parts.items()))


# ------------------------------------------------------------------ 1. periodic runs
def _signatures(graph: Graph, ix: GraphIndex, act: list[int]) -> np.ndarray:
    """One integer per activation node: equal for nodes with the same operator, attributes,
    result types and operand types."""
    ids: dict[tuple, int] = {}
    out = np.empty(len(act), np.int64)
    for j, i in enumerate(act):
        n = graph.nodes[i]
        key = (n.op, canonical_attrs(n), n.types, tuple(ix.types[v] for v in n.inputs))
        out[j] = ids.setdefault(key, len(ids))
    return out


def _periodic_runs(ix: GraphIndex, act: list[int], sig: np.ndarray, lo: int, hi: int,
                   min_period: int) -> list[tuple[int, int, int]]:
    """(start, period, count) of the blocks found in sig[lo:hi], in order (positions in `act`)."""
    best = _longest_run(sig[lo:hi], min_period)
    if best is None:
        return []
    run_start, length, period = best
    start, count = _cut(ix, act, lo + run_start, length, period)
    return (_periodic_runs(ix, act, sig, lo, start, min_period) + [(start, period, count)]
            + _periodic_runs(ix, act, sig, start + count * period, hi, min_period))


def _longest_run(s: np.ndarray, min_period: int) -> tuple[int, int, int] | None:
    """(start, length, period) of the p-periodic stretch of `s` holding the most nodes in whole
    periods (at least two), the shortest period among equals; None when there is none."""
    n = len(s)
    best: tuple[int, int] | None = None     # (covered, -period)
    found = None
    for p in range(min_period, n // 2 + 1):
        if best is not None and (n // p) * p < best[0]:
            continue                        # cannot cover more than the best so far
        eq = np.concatenate(([False], s[:n - p] == s[p:], [False])).view(np.int8)
        d = np.diff(eq)
        starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
        lengths = ends - starts + p         # the stretch [start, start + length) is p-periodic
        ok = lengths >= 2 * p
        if not ok.any():
            continue
        covered = (lengths // p) * p
        covered[~ok] = 0
        j = int(np.argmax(covered))
        score = (int(covered[j]), -p)
        if best is None or score > best:
            best, found = score, (int(starts[j]), int(lengths[j]), p)
    return found


def _cut(ix: GraphIndex, act: list[int], run_start: int, length: int, period: int
         ) -> tuple[int, int]:
    """(start, count) of the blocks cut from a periodic stretch: the phase whose blocks have the
    fewest values crossing their border, then the most blocks, then the most reads of the values
    crossing in (see the module doc)."""
    best = None
    for o in range(period):
        count = (length - o) // period
        if count < 2:
            break
        k = 1 if count >= 3 else 0            # an inner block where there is one
        first = run_start + o + k * period
        crossing, reads = _border(ix, act[first:first + period])
        score = (crossing, -count, -reads, o)
        if best is None or score < best[0]:
            best = (score, run_start + o, count)
    assert best is not None                   # length >= 2 * period: o = 0 has two blocks
    return best[1], best[2]


def _border(ix: GraphIndex, block: list[int]) -> tuple[int, int]:
    """(values crossing the block's border either way, reads of values crossing into it)."""
    g = ix.graph
    inside = set(block)
    made = {r for i in block for r in g.nodes[i].results}
    ins: set[str] = set()
    reads = 0
    for i in block:
        for v in g.nodes[i].inputs:
            if v not in made and v not in ix.const:
                ins.add(v)
                reads += 1
    outs = sum(1 for r in made if r in ix.outputs
               or any(c not in inside for c in ix.consumers.get(r, ())))
    return len(ins) + outs, reads


# ------------------------------------------------------------------ 3. chains
def _chained(ix: GraphIndex, copies: list[Piece], classes: list[LayerClass]) -> bool:
    """Whether every activation node of every copy after the first depends on the copy before
    it, or is the same expression in every copy of its class (module doc, 3)."""
    g = ix.graph
    same = _same_everywhere(ix, classes)
    for prev, cur in zip(copies, copies[1:]):
        marked = {r for i in prev.act for r in g.nodes[i].results}
        for i in range(prev.act[0], cur.act[-1] + 1):
            node = g.nodes[i]
            if any(v in marked for v in node.inputs):
                marked.update(node.results)
        for i in cur.act:
            if g.nodes[i].results[0] not in marked and i not in same:
                return False
    return True


def _same_everywhere(ix: GraphIndex, classes: list[LayerClass]) -> set[int]:
    """Activation nodes that compute the same expression (same operators down to the same graph
    inputs, weights and outside values) as the nodes at their position in every other copy of
    their class."""
    keys = expression_keys((v for v, _ in ix.graph.inputs), ix.graph.nodes, {})
    same: set[int] = set()
    for c in classes:
        for pos in range(len(c.rep.act)):
            nodes = [p.act[pos] for p in c.copies]
            if len({keys[ix.graph.nodes[i].results[0]] for i in nodes}) == 1:
                same.update(nodes)
    return same
