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

from .dag import _walk, is_valid
from .greedy import tree_costs
from .problem import ExtractionProblem

EPS = 1e-9


def _groups(problem: ExtractionProblem) -> list[np.ndarray]:
    """Per shared child class: one candidate node per class that has a candidate using it (the
    cheapest), kept when at least two classes take part."""
    n = problem.n_nodes
    if n == 0:
        return []
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
    kid, cls, owner = kid[first], cls[first], owner[first]
    starts = np.flatnonzero(np.r_[True, kid[1:] != kid[:-1]])
    ends = np.r_[starts[1:], kid.size]
    return [owner[s:e] for s, e in zip(starts, ends) if e - s >= 2]


def joint_switch(problem: ExtractionProblem, choice: np.ndarray, max_rounds: int = 100
                 ) -> np.ndarray:
    """An improved copy of the valid selection `choice` (never worse, always valid); an invalid
    input is returned unchanged."""
    C = problem.n_classes
    choice = np.asarray(choice, np.int64).copy()
    if C == 0 or choice.shape != (C,) or not is_valid(problem, choice):
        return choice
    P = (problem.node_class, problem.node_cost, problem.child_start, problem.child_class,
         problem.roots)

    def walk(sel: np.ndarray):
        cost, status, state = _walk(*P, sel, C)
        return float(cost), int(status), state == 2

    fill, tree = tree_costs(problem.node_class, problem.node_cost, problem.child_start,
                            problem.child_class, C)
    cur = np.where(choice >= 0, choice, fill)
    best, status, reach = walk(cur)
    assert status == 0
    free = tree <= 0.0                        # zero-cost subexpressions: always available
    groups = _groups(problem)
    node_class = problem.node_class.astype(np.int64)

    def attempt(classes: np.ndarray, nodes: np.ndarray) -> bool:
        nonlocal cur, best, reach
        trial = cur.copy()
        trial[classes] = nodes
        cost, st, r = walk(trial)
        if st == 0 and cost < best - EPS:
            cur, best, reach = trial, cost, r
            return True
        return False

    for _ in range(max_rounds):
        improved = False
        for nodes in groups:
            cls = node_class[nodes]
            sel = reach[cls] & (cur[cls] != nodes)
            if sel.any() and attempt(cls[sel], nodes[sel]):
                improved = True
        for c in np.flatnonzero(reach):
            for i in problem.candidates(int(c)):
                if i == cur[c] or not reach[c]:
                    continue
                kids = problem.children(int(i))
                if kids.size and not np.all(reach[kids] | free[kids]):
                    continue
                if attempt(np.array([c]), np.array([i], np.int64)):
                    improved = True
        if not improved:
            break
    out = np.where(reach, cur, -1)
    return out if best < _cost(problem, choice) - EPS else choice


def _cost(problem: ExtractionProblem, choice: np.ndarray) -> float:
    return float(_walk(problem.node_class, problem.node_cost, problem.child_start,
                       problem.child_class, problem.roots, choice, problem.n_classes)[0])
