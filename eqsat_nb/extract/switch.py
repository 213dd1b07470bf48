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
  (already reachable, or of zero tree cost such as weight-only subexpressions);
- two-level group moves, once a round of the others finds nothing: a group move that does not
  pay, followed by the move of another group that holds a class it newly reaches and a class
  reached before. A three-way merged projection (Q, K and V from one matmul) is reached through
  a two-way one (Q and K), which alone may not pay: its classes are the two-way merge's output
  and V. One-level moves are tried by their cost rise, least first, within a budget of walks
  (DEEP_WALKS). On the benchmark runs this finds the ILP's optimum for TT (3 730.4 -> 3 540.5,
  optimum 3 540.4) and ViT-Large (11 438.0 -> 11 088.2); on the reference e-graphs BERT 613.7 ->
  534.3 (optimal), TENSAT's BERT 441.7 -> 402.4 (best known 398.4), ViT-Base at 80 000 nodes
  4 077.8 -> 4 019.9 (optimal).

Classes a move newly reaches take the input selection's node, or the tree-cost greedy's where the
input has none. A move is kept when the selection stays valid (dag._walk) and its true DAG cost
drops; rounds repeat until no move improves. The result is never worse than the input and is
trimmed to the reachable classes (-1 elsewhere), like every extractor's answer.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .csr import reverse_csr
from .dag import _walk, is_valid
from .greedy import tree_costs
from .problem import ExtractionProblem

EPS = 1e-9
# two-level group moves: at most this many DAG walks a deep round, fewer on large e-graphs (at most
# DEEP_WORK classes walked; a walk visits up to all of them): 0.05-0.4 s on the benchmark runs'
# and the reference e-graphs, where 30 000 walks find the same answers (InceptionV3's 0.002 %
# better)
DEEP_WALKS = 3000
DEEP_WORK = 60_000_000


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
                          max_rounds, max(100, min(DEEP_WALKS, DEEP_WORK // max(C, 1))))
    out = np.where(reach, cur, -1)
    return out if best < _cost(problem, choice) - EPS else choice


@kernel(
    "Tuple((f8, b1[::1],))(i4[::1], f8[::1], i4[::1], i4[::1], i4[::1], i4[::1], "
    "i4[::1], i8, i8[::1], b1[::1], i8[::1], i8[::1], i8, i8)")
def _switch(node_class: np.ndarray, node_cost: np.ndarray, child_start: np.ndarray,
            child_class: np.ndarray, roots: np.ndarray, class_start: np.ndarray,
            class_nodes: np.ndarray, n_classes: int, cur: np.ndarray, free: np.ndarray,
            g_start: np.ndarray, g_nodes: np.ndarray, max_rounds: int, deep_walks: int):
    """The move rounds on `cur` in place: (its DAG cost, its reachable mask). `free`: classes of
    zero tree cost (always available); groups in CSR form (`g_start`, `g_nodes`); at most
    `deep_walks` walks for the two-level moves of a deep round."""
    best, status, state = _walk(node_class, node_cost, child_start, child_class, roots, cur,
                                n_classes)
    reach = state == 2
    trial = cur.copy()
    budget = np.full(1, deep_walks, np.int64)
    # per class, the groups one of its candidates is in
    of_start, of_groups = reverse_csr(g_start, node_class[g_nodes],
                                      np.ones(g_start.size - 1, np.bool_), n_classes)
    deep = False            # two-level group moves: only once one-level rounds find nothing
    delta = np.empty(g_start.size, np.float64)      # a deep round's one-level moves: their
    moves = np.empty(g_start.size, np.int64)        # cost rise, and their group
    for _ in range(max_rounds):
        improved = False
        n_moves = 0
        for g in range(g_start.size - 1):        # group moves
            if not _apply_group(trial, cur, reach, node_class, g_start, g_nodes, g):
                continue
            cost, st, state = _walk(node_class, node_cost, child_start, child_class, roots,
                                    trial, n_classes)
            if st == 0 and cost < best - EPS:
                for q in range(cur.size):
                    cur[q] = trial[q]
                best, reach, improved = cost, state == 2, True
                continue
            if deep and st == 0:
                delta[n_moves] = cost - best
                moves[n_moves] = g
                n_moves += 1
            _undo_group(trial, cur, node_class, g_start, g_nodes, g)
        if deep:    # two levels, the one-level moves that cost least first, within the budget
            for t in np.argsort(delta[:n_moves]):
                if budget[0] <= 0:
                    break
                g = moves[t]
                if not _apply_group(trial, cur, reach, node_class, g_start, g_nodes, g):
                    continue
                budget[0] -= 1      # (a move that pays since an earlier one here: next round)
                _, st, state = _walk(node_class, node_cost, child_start, child_class, roots,
                                     trial, n_classes)
                if st == 0:
                    cost2, trial2, state2 = _second_level(
                        node_class, node_cost, child_start, child_class, roots, n_classes, trial,
                        state, reach, g, g_start, g_nodes, of_start, of_groups, best, budget)
                    if cost2 < best - EPS:
                        for q in range(cur.size):
                            cur[q] = trial2[q]
                            trial[q] = trial2[q]
                        best, reach, improved = cost2, state2 == 2, True
                        continue
                _undo_group(trial, cur, node_class, g_start, g_nodes, g)
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
            if deep:
                break
            deep = True
        else:
            deep = False
    return best, reach


@njit(cache=True, inline="always")
def _apply_group(trial, cur, reach, node_class, g_start, g_nodes, g):
    """Group g's move in `trial`: each reachable class of the group not using it yet switches to
    its candidate there; whether any did."""
    moved = False
    for j in range(g_start[g], g_start[g + 1]):
        nd = g_nodes[j]
        c = node_class[nd]
        if reach[c] and cur[c] != nd:
            trial[c] = nd
            moved = True
    return moved


@njit(cache=True, inline="always")
def _undo_group(trial, cur, node_class, g_start, g_nodes, g):
    """Group g's classes back to `cur`'s choice in `trial`."""
    for j in range(g_start[g], g_start[g + 1]):
        c = node_class[g_nodes[j]]
        trial[c] = cur[c]


@njit(cache=True)
def _second_level(node_class, node_cost, child_start, child_class, roots, n_classes, trial,
                  state, reach, g, g_start, g_nodes, of_start, of_groups, best, budget):
    """The best of group g's move (`trial`, reaching `state`) followed by a move of another
    group that holds a class g newly reaches (a merge of merges: the three-way merged
    projection is reached through the two-way one, which alone may not pay): (cost, selection,
    state); (inf, ...) when none is valid."""
    best2 = np.inf
    out = trial.copy()
    out_state = state
    t2 = trial.copy()
    reached = state == 2
    tried = set()
    tried.add(g)
    # the classes the move newly reaches: below its switched nodes, down to reached ones
    new = []
    seen = set()
    stack = []
    for j in range(g_start[g], g_start[g + 1]):
        nd = g_nodes[j]
        if trial[node_class[nd]] == nd:
            for e in range(child_start[nd], child_start[nd + 1]):
                stack.append(np.int64(child_class[e]))
    while stack:
        c = stack.pop()
        if reach[c] or c in seen:
            continue
        seen.add(c)
        new.append(c)
        i = trial[c]
        for e in range(child_start[i], child_start[i + 1]):
            stack.append(np.int64(child_class[e]))
    for c in new:
        for p in range(of_start[c], of_start[c + 1]):
            g2 = of_groups[p]
            if g2 in tried:
                continue
            tried.add(g2)
            old = False     # it must also switch a class the selection reached before
            for j in range(g_start[g2], g_start[g2 + 1]):
                nd = g_nodes[j]
                if reach[node_class[nd]] and trial[node_class[nd]] != nd:
                    old = True
                    break
            if not old:
                continue
            moved = _apply_group(t2, trial, reached, node_class, g_start, g_nodes, g2)
            if moved and budget[0] > 0:
                budget[0] -= 1
                cost, st, st2 = _walk(node_class, node_cost, child_start, child_class, roots, t2,
                                      n_classes)
                if st == 0 and cost < best2:
                    best2, out_state = cost, st2
                    for q in range(t2.size):
                        out[q] = t2[q]
            _undo_group(t2, trial, node_class, g_start, g_nodes, g2)
    return best2, out, out_state


def _cost(problem: ExtractionProblem, choice: np.ndarray) -> float:
    return float(_walk(problem.node_class, problem.node_cost, problem.child_start,
                       problem.child_class, problem.roots, choice, problem.n_classes)[0])
