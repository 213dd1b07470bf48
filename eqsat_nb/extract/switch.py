"""The joint-switch post-pass (DESIGN §6): local search over a valid selection, moves checked with
the exact DAG cost.

Bottom-up greedies (tree cost, constituent cost) decide one class at a time, so they never take a
rewrite that pays only when several classes switch together — the merged convolution/matmul
(concat the weights → one op → split) is worth it only once *every* consumer reads its `proj`
outputs. This pass tries such moves explicitly:

- group moves: the candidates are grouped by a shared child class k (any class that is a child of
  candidates in at least two different classes — e.g. the split tuple of a merged convolution,
  whose `proj` nodes serve several classes). For each group, every currently reachable class of
  the group that does not already use it switches at once to its candidate in the group (the
  cheapest one where a class has several);
- single moves: a reachable class switches to a candidate whose children are all available
  (already reachable, or of zero tree cost such as weight-only subexpressions).

Classes a move newly reaches take the input selection's node, or the tree-cost greedy's where the
input has none. A move is kept when the selection stays valid (dag._walk) and its true DAG cost
drops; rounds repeat until no move improves. The result is never worse than the input and is
trimmed to the reachable classes (-1 elsewhere), like every extractor's answer.
"""
from __future__ import annotations

import numpy as np

from ..kernels import kernel
from .dag import _walk, is_valid
from .greedy import tree_costs
from .problem import ExtractionProblem

EPS = 1e-9


def _groups(problem: ExtractionProblem) -> tuple[np.ndarray, np.ndarray]:
    """Per shared child class: one candidate node per class that has a candidate using it (the
    cheapest), kept when at least two classes take part. CSR: group g is
    nodes[start[g]:start[g + 1]]."""
    n = problem.n_nodes
    if n == 0:
        return np.zeros(1, np.int64), np.zeros(0, np.int64)
    deg = np.diff(problem.child_start).astype(np.int64)
    owner = np.repeat(np.arange(n, dtype=np.int64), deg)          # node of each child slot
    kid = problem.child_class.astype(np.int64)
    cls = problem.node_class.astype(np.int64)[owner]
    cost = problem.node_cost[owner]
    # sort by (shared child, class, cost): the first row of each (child, class) run is the pick
    order = np.lexsort((owner, cost, cls, kid))
    kid, cls, owner = kid[order], cls[order], owner[order]
    first = np.ones(kid.size, bool)
    first[1:] = (kid[1:] != kid[:-1]) | (cls[1:] != cls[:-1])
    kid, owner = kid[first], owner[first]
    starts = np.flatnonzero(np.r_[True, kid[1:] != kid[:-1]])
    ends = np.r_[starts[1:], kid.size]
    big = ends - starts >= 2
    starts, ends = starts[big], ends[big]
    sizes = ends - starts
    start = np.zeros(sizes.size + 1, np.int64)
    np.cumsum(sizes, out=start[1:])
    # the slots of every kept run, in order: run r covers owner[starts[r]:ends[r]]
    idx = np.repeat(starts - start[:-1], sizes) + np.arange(start[-1])
    return start, owner[idx]


def joint_switch(problem: ExtractionProblem, choice: np.ndarray, max_rounds: int = 100
                 ) -> np.ndarray:
    """An improved copy of the valid selection `choice` (never worse, always valid); an invalid
    input is returned unchanged."""
    C = problem.n_classes
    choice = np.asarray(choice, np.int64).copy()
    if C == 0 or choice.shape != (C,) or not is_valid(problem, choice):
        return choice
    fill, tree = tree_costs(problem.node_class, problem.node_cost, problem.child_start,
                            problem.child_class, C)
    cur = np.where(choice >= 0, choice, fill).astype(np.int64)
    g_start, g_nodes = _groups(problem)
    best, reach = _switch(problem.node_class, problem.node_cost, problem.child_start,
                          problem.child_class, problem.roots, problem.class_start,
                          problem.class_nodes, C, cur, tree <= 0.0, g_start, g_nodes,
                          max_rounds)
    out = np.where(reach, cur, -1)
    return out if best < _cost(problem, choice) - EPS else choice


@kernel(
    "Tuple((f8, b1[::1],))(i4[::1], f8[::1], i4[::1], i4[::1], i4[::1], i4[::1], "
    "i4[::1], i8, i8[::1], b1[::1], i8[::1], i8[::1], i8)")
def _switch(node_class: np.ndarray, node_cost: np.ndarray, child_start: np.ndarray,
            child_class: np.ndarray, roots: np.ndarray, class_start: np.ndarray,
            class_nodes: np.ndarray, n_classes: int, cur: np.ndarray, free: np.ndarray,
            g_start: np.ndarray, g_nodes: np.ndarray, max_rounds: int):
    """The move rounds on `cur` in place: (its DAG cost, its reachable mask). `free`: classes of
    zero tree cost (always available); groups in CSR form (`g_start`, `g_nodes`)."""
    best, status, state = _walk(node_class, node_cost, child_start, child_class, roots, cur,
                                n_classes)
    reach = state == 2
    trial = cur.copy()
    for _ in range(max_rounds):
        improved = False
        for g in range(g_start.size - 1):        # group moves
            moved = False
            for j in range(g_start[g], g_start[g + 1]):
                nd = g_nodes[j]
                c = node_class[nd]
                if reach[c] and cur[c] != nd:
                    trial[c] = nd
                    moved = True
            if not moved:
                continue
            cost, st, state = _walk(node_class, node_cost, child_start, child_class, roots,
                                    trial, n_classes)
            if st == 0 and cost < best - EPS:
                for q in range(cur.size):
                    cur[q] = trial[q]
                best, reach, improved = cost, state == 2, True
            else:
                for j in range(g_start[g], g_start[g + 1]):
                    c = node_class[g_nodes[j]]
                    trial[c] = cur[c]
        for c in np.flatnonzero(reach):          # single moves (over the classes reachable now)
            for p in range(class_start[c], class_start[c + 1]):
                i = class_nodes[p]
                if i == cur[c] or not reach[c]:
                    continue
                ok = True
                for q in range(child_start[i], child_start[i + 1]):
                    k = child_class[q]
                    if not (reach[k] or free[k]):
                        ok = False
                        break
                if not ok:
                    continue
                trial[c] = i
                cost, st, state = _walk(node_class, node_cost, child_start, child_class, roots,
                                        trial, n_classes)
                if st == 0 and cost < best - EPS:
                    cur[c] = i
                    best, reach, improved = cost, state == 2, True
                else:
                    trial[c] = cur[c]
        if not improved:
            break
    return best, reach


def _cost(problem: ExtractionProblem, choice: np.ndarray) -> float:
    return float(_walk(problem.node_class, problem.node_cost, problem.child_start,
                       problem.child_class, problem.roots, choice, problem.n_classes)[0])
