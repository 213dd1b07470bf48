"""The true cost of a selection and its validity: what every extractor's answer is checked with.

A selection counts each class reachable from the roots once (a DAG, not a tree): the cost is the
sum of the chosen nodes' costs over reachable classes. It is valid when every reachable class has a
chosen candidate and the chosen nodes form no cycle.
"""
from __future__ import annotations

import numpy as np

from ..kernels import kernel
from .problem import ExtractionProblem


@kernel(
    "Tuple((f8, i8, i1[::1],))(i4[::1], f8[::1], i4[::1], i4[::1], i4[::1], "
    "i8[::1], i8)")
def _walk(node_class: np.ndarray, node_cost: np.ndarray, child_start: np.ndarray,
          child_class: np.ndarray, roots: np.ndarray, choice: np.ndarray, n_classes: int):
    """(cost, status, reachable mask): status 0 ok, 1 a reachable class has no choice, 2 cycle,
    3 a choice is not a candidate of its class."""
    state = np.zeros(n_classes, np.int8)        # 0 new, 1 on stack, 2 done
    stack_c = np.empty(n_classes + 1, np.int64)
    stack_k = np.empty(n_classes + 1, np.int64)
    cost = 0.0
    for r in roots:
        if state[r] == 2:
            continue
        if choice[r] < 0:
            return cost, 1, state
        if node_class[choice[r]] != r:
            return cost, 3, state
        sp = 0
        stack_c[0] = r
        stack_k[0] = 0
        state[r] = 1
        while sp >= 0:
            c = stack_c[sp]
            i = choice[c]
            k = stack_k[sp]
            if child_start[i] + k >= child_start[i + 1]:
                state[c] = 2
                cost += node_cost[i]
                sp -= 1
                continue
            stack_k[sp] = k + 1
            kid = child_class[child_start[i] + k]
            if state[kid] == 2:
                continue
            if state[kid] == 1:
                return cost, 2, state
            j = choice[kid]
            if j < 0:
                return cost, 1, state
            if node_class[j] != kid:
                return cost, 3, state
            sp += 1
            stack_c[sp] = kid
            stack_k[sp] = 0
            state[kid] = 1
    return cost, 0, state


class InvalidSelection(ValueError):
    pass


def dag_cost(problem: ExtractionProblem, choice: np.ndarray) -> float:
    """Sum of chosen costs over the classes reachable from the roots; raises InvalidSelection."""
    cost, status, _ = _walk(problem.node_class, problem.node_cost, problem.child_start,
                            problem.child_class, problem.roots, np.asarray(choice, np.int64),
                            problem.n_classes)
    if status:
        raise InvalidSelection({1: "a reachable class has no chosen node",
                                2: "the chosen nodes form a cycle",
                                3: "a class chose a node of another class"}[status])
    return float(cost)


def is_valid(problem: ExtractionProblem, choice: np.ndarray) -> bool:
    return _walk(problem.node_class, problem.node_cost, problem.child_start, problem.child_class,
                 problem.roots, np.asarray(choice, np.int64), problem.n_classes)[1] == 0


def reachable(problem: ExtractionProblem, choice: np.ndarray) -> np.ndarray:
    """bool[C]: classes the selection uses (valid selections only)."""
    return _walk(problem.node_class, problem.node_cost, problem.child_start, problem.child_class,
                 problem.roots, np.asarray(choice, np.int64), problem.n_classes)[2] == 2
