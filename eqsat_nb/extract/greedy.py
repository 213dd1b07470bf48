"""egg's bottom-up tree-cost greedy (the papers' "default cost function").

cost(class) = min over its nodes of node cost + Σ cost(child classes), to a fixpoint. Fast, but a
shared child is paid once per use, so it overestimates DAGs and can prefer unshared options. With
non-negative costs and strict improvement only, the chosen nodes never form a cycle.
"""
from __future__ import annotations

import numpy as np

from ..kernels import kernel
from .problem import ExtractionProblem


@kernel("Tuple((i8[::1], f8[::1],))(i4[::1], f8[::1], i4[::1], i4[::1], i8)")
def tree_costs(node_class: np.ndarray, node_cost: np.ndarray, child_start: np.ndarray,
               child_class: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(best candidate per class or -1, tree cost per class, inf where none is finite)."""
    cost = np.full(n_classes, np.inf)
    best = np.full(n_classes, -1, np.int64)
    changed = True
    while changed:
        changed = False
        for i in range(node_class.size):
            total = node_cost[i]
            for p in range(child_start[i], child_start[i + 1]):
                total += cost[child_class[p]]
            c = node_class[i]
            if total < cost[c]:
                cost[c] = total
                best[c] = i
                changed = True
    return best, cost


def extract_greedy(problem: ExtractionProblem) -> np.ndarray:
    """Choice per class by tree cost; raises ValueError when a root has no finite option."""
    best, cost = tree_costs(problem.node_class, problem.node_cost, problem.child_start,
                            problem.child_class, problem.n_classes)
    if np.any(best[problem.roots] < 0):
        raise ValueError("a root class has no acyclic option")
    return best
