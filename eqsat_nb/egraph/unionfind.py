"""Union-find over e-class ids (path compression; union by size lives in rebuild.union)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def find(parent: np.ndarray, x: int) -> int:
    """Canonical id of class `x`, compressing the path on the way."""
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        nxt = parent[x]
        parent[x] = root
        x = nxt
    return root


@njit(cache=True)
def find_all(parent: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`find` of every id in `ids` (negative ids pass through)."""
    out = np.empty_like(ids)
    for i in range(ids.size):
        out[i] = find(parent, ids[i]) if ids[i] >= 0 else ids[i]
    return out
