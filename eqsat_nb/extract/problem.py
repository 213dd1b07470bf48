"""The extraction problem as flat arrays, independent of how the e-graph stores itself.

Classes are renumbered densely (0..C-1) and only live, unfiltered nodes are candidates. Every
extractor takes an `ExtractionProblem` and returns `choice`: for each dense class the index of its
chosen candidate node, or -1 for classes it does not need. Children are classes (attribute
literals included: they are leaf classes of cost 0), stored CSR.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..egraph.layout import F_DEAD, F_FILTERED, N_CLS, N_FLAGS, N_NCH
from ..egraph.store import EGraph


@dataclass(frozen=True)
class ExtractionProblem:
    n_classes: int
    node_ids: np.ndarray       # int32[N]: e-graph node id of candidate i
    node_class: np.ndarray     # int32[N]: dense class of candidate i
    node_cost: np.ndarray      # float64[N]
    child_start: np.ndarray    # int32[N + 1]
    child_class: np.ndarray    # int32[...]: dense child classes of candidate i (CSR)
    class_start: np.ndarray    # int32[C + 1]
    class_nodes: np.ndarray    # int32[...]: candidates of each dense class (CSR)
    roots: np.ndarray          # int32[R]: dense root classes
    class_ids: np.ndarray      # int32[C]: e-graph class id of dense class c

    @property
    def n_nodes(self) -> int:
        return int(self.node_ids.size)

    def children(self, i: int) -> np.ndarray:
        return self.child_class[self.child_start[i]: self.child_start[i + 1]]

    def candidates(self, c: int) -> np.ndarray:
        return self.class_nodes[self.class_start[c]: self.class_start[c + 1]]


def from_arrays(n_classes: int, node_class: np.ndarray, node_cost: np.ndarray,
                node_children: list[list[int]] | tuple, roots: list[int] | np.ndarray,
                node_ids: np.ndarray | None = None,
                class_ids: np.ndarray | None = None) -> ExtractionProblem:
    """Build a problem from per-node lists (tests, JSON e-graphs)."""
    node_class = np.asarray(node_class, np.int32)
    n = node_class.size
    child_start = np.zeros(n + 1, np.int32)
    child_start[1:] = np.cumsum([len(c) for c in node_children])
    child_class = np.array([k for ch in node_children for k in ch], np.int32)
    order = np.argsort(node_class, kind="stable").astype(np.int32)
    class_start = np.zeros(n_classes + 1, np.int32)
    np.add.at(class_start, node_class + 1, 1)
    class_start = np.cumsum(class_start).astype(np.int32)
    return ExtractionProblem(
        n_classes, np.arange(n, dtype=np.int32) if node_ids is None else np.asarray(node_ids,
                                                                                     np.int32),
        node_class, np.asarray(node_cost, np.float64), child_start, child_class, class_start,
        order, np.asarray(roots, np.int32),
        np.arange(n_classes, dtype=np.int32) if class_ids is None else np.asarray(class_ids,
                                                                                  np.int32))


def from_egraph(eg: EGraph, costs: np.ndarray) -> ExtractionProblem:
    """The problem for a (rebuilt) e-graph; `costs[n]` is the cost of e-graph node n. Candidates
    are the live, unfiltered nodes; classes are numbered densely in order of e-class id."""
    eg.rebuild()
    n_all = eg.num_nodes
    flags = eg.nodes[N_FLAGS, :n_all]
    cand = np.nonzero((flags & (F_DEAD | F_FILTERED)) == 0)[0].astype(np.int32)
    while True:
        canon = eg.canonical(eg.nodes[N_CLS, cand])
        class_ids, node_class = np.unique(canon, return_inverse=True)
        node_class = node_class.astype(np.int32)
        n_classes = int(class_ids.size)
        dense = np.full(n_all, -1, np.int32)
        dense[class_ids] = np.arange(n_classes, dtype=np.int32)
        nch = eg.nodes[N_NCH, cand].astype(np.int32)
        mask = np.arange(eg.children.shape[1])[None, :] < nch[:, None]
        flat = np.ascontiguousarray(eg.children[cand][mask], np.int32)
        child_class = dense[eg.canonical(flat)] if flat.size else np.zeros(0, np.int32)
        if not child_class.size or child_class.min() >= 0:
            break
        # a child class without candidates (its nodes all dead or cycle-filtered: the class is
        # only derivable through a cycle) makes its users underivable: drop them, and so on up
        owner = np.repeat(np.arange(cand.size), nch)
        keep = np.ones(cand.size, bool)
        keep[owner[child_class < 0]] = False
        cand = cand[keep]
    child_start = np.zeros(cand.size + 1, np.int32)
    child_start[1:] = np.cumsum(nch)
    order = np.argsort(node_class, kind="stable").astype(np.int32)
    class_start = np.zeros(n_classes + 1, np.int32)
    np.add.at(class_start, node_class + 1, 1)
    class_start = np.cumsum(class_start).astype(np.int32)
    roots = dense[eg.canonical(np.asarray(eg.roots, np.int32))].astype(np.int32)
    return ExtractionProblem(n_classes, cand, node_class, np.asarray(costs, np.float64)[cand],
                             child_start, child_class.astype(np.int32), class_start, order,
                             roots, class_ids.astype(np.int32))


def egraph_choice(problem: ExtractionProblem, choice: np.ndarray, n_nodes: int) -> np.ndarray:
    """The selection as `egraph_to_graph` takes it: e-graph node id per e-graph class id."""
    out = np.full(n_nodes, -1, np.int64)
    for c in range(problem.n_classes):
        if choice[c] >= 0:
            out[problem.class_ids[c]] = problem.node_ids[choice[c]]
    return out
