"""The one CSR helper the extraction kernels share: reversing an adjacency (who points at whom),
which simplify.py needs for a class's users and decompose.py for the class graph's predecessors
and the dominator tree's children."""
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
