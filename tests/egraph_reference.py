"""A small, obviously-correct reference e-graph for differential tests of the array EGraph.

Not a test module (no `test_` prefix): tests/test_egraph.py imports it.

Semantics (the same as eqsat_nb.egraph.store.EGraph):
  * a node is (op, payload, children), children being e-class ids; a class is named by the id of
    the node that created it;
  * `add` canonicalizes the children and returns the class of an existing node with that key, or
    creates a node with a fresh class;
  * `union` merges two classes at once; `rebuild` restores congruence closure by naive repeated
    full canonicalization of every node until nothing changes;
  * const analysis: a class is const iff one of its nodes is const, where a `lit`/`weight` node is
    const when all its children are (vacuously for `lit`), an `input` node never is, and any other
    node is const when it has at least one child and all its children are const (least fixpoint).

Everything is plain dicts and lists, no path compression, no cleverness: speed does not matter.
"""
from __future__ import annotations

from typing import Hashable, Sequence

CONST_LEAF_OPS = frozenset({"lit", "weight"})
INPUT_OPS = frozenset({"input"})

Key = tuple[str, Hashable, tuple[int, ...]]


class RefEGraph:
    def __init__(self) -> None:
        self.parent: list[int] = []                 # union-find over class (= node) ids
        self.nodes: list[tuple[str, Hashable, tuple[int, ...]]] = []   # as added
        self.memo: dict[Key, int] = {}              # hash-cons: canonical key -> node id

    # ------------------------------------------------------------------ union-find
    def find(self, x: int) -> int:
        while self.parent[x] != x:
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> int:
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a
        return a

    # ------------------------------------------------------------------ nodes
    def key(self, n: int) -> Key:
        op, payload, children = self.nodes[n]
        return op, payload, tuple(self.find(c) for c in children)

    def add(self, op: str, children: Sequence[int] = (), payload: Hashable = None) -> int:
        key: Key = (op, payload, tuple(self.find(c) for c in children))
        hit = self.memo.get(key)
        if hit is not None:
            return self.find(hit)
        n = len(self.nodes)
        self.nodes.append((op, payload, tuple(children)))
        self.parent.append(n)
        self.memo[key] = n
        return n

    def rebuild(self) -> None:
        """Congruence closure: merge nodes with equal canonical keys until a fixpoint."""
        while True:
            changed = False
            memo: dict[Key, int] = {}
            for n in range(len(self.nodes)):
                k = self.key(n)
                other = memo.setdefault(k, n)
                if self.find(other) != self.find(n):
                    self.union(other, n)
                    changed = True
            if not changed:
                break
        self.memo = {self.key(n): n for n in range(len(self.nodes))}

    # ------------------------------------------------------------------ reading
    def classes(self) -> set[int]:
        return {self.find(n) for n in range(len(self.nodes))}

    @property
    def num_classes(self) -> int:
        return len(self.classes())

    def const_classes(self) -> set[int]:
        const: set[int] = set()
        while True:
            grew = False
            for n, (op, _, children) in enumerate(self.nodes):
                c = self.find(n)
                if c in const or op in INPUT_OPS:
                    continue
                if op not in CONST_LEAF_OPS and not children:
                    continue
                if all(self.find(k) in const for k in children):
                    const.add(c)
                    grew = True
            if not grew:
                return const

    def is_const(self, c: int) -> bool:
        return self.find(c) in self.const_classes()
