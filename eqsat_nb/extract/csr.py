"""The CSR helpers the extraction kernels share: the class graph (each class's child classes over
all its candidates), which ocf.py's component ranking and decompose.py's dominator tree walk, and
reversing an adjacency (who points at whom), which simplify.py needs for a class's users and
decompose.py for the class graph's predecessors and the dominator tree's children."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def reverse_csr(start, items, keep, n_targets):
    """(rstart, sources): for each target t in 0..n_targets-1, the sources s (keep[s] true, in
    increasing order) whose list items[start[s]:start[s + 1]] holds t, once per occurrence."""
    S = keep.size
    rstart = np.zeros(n_targets + 1, np.int64)
    for s in range(S):
        if keep[s]:
            for e in range(start[s], start[s + 1]):
                rstart[items[e] + 1] += 1
    for t in range(n_targets):
        rstart[t + 1] += rstart[t]
    fill = rstart[:-1].copy()
    sources = np.empty(rstart[n_targets], np.int64)
    for s in range(S):
        if keep[s]:
            for e in range(start[s], start[s + 1]):
                t = items[e]
                sources[fill[t]] = s
                fill[t] += 1
    return rstart, sources


@njit(cache=True)
def class_graph(child_start, child_class, class_start, class_nodes, n_classes, roots):
    """(start, succ): the child classes of every candidate of class c, in order, are
    succ[start[c]:start[c + 1]]; row n_classes is a virtual root whose successors are `roots`
    (empty for none). `start` has n_classes + 2 entries."""
    C = np.int64(n_classes)
    start = np.zeros(C + 2, np.int64)
    for c in range(C):
        m = np.int64(0)
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            m += child_start[i + 1] - child_start[i]
        start[c + 1] = start[c] + m
    start[C + 1] = start[C] + roots.size
    succ = np.empty(start[C + 1], np.int64)
    f = np.int64(0)
    for c in range(C):
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            for e in range(child_start[i], child_start[i + 1]):
                succ[f] = child_class[e]
                f += 1
    for r in roots:
        succ[f] = r
        f += 1
    return start, succ
