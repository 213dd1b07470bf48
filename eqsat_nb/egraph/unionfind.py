"""Union-find over e-class ids (path compression; union by size lives in rebuild.union)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .layout import C_PARENT


@njit(cache=True, inline="always")
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


@njit(cache=True, inline="always")
def find_cls(classes: np.ndarray, x: int) -> int:
    """`find` on the union-find row of the class table (classes[C_PARENT]), indexed in place:
    a kernel called per node or per union takes no row view (each view costs two atomic
    reference-count updates)."""
    root = x
    while classes[C_PARENT, root] != root:
        root = classes[C_PARENT, root]
    while classes[C_PARENT, x] != root:
        nxt = classes[C_PARENT, x]
        classes[C_PARENT, x] = root
        x = nxt
    return root


@njit(cache=True, inline="always")
def root(parent: np.ndarray, x: int) -> int:
    """`find` without path compression: reads only (for look-ahead such as prefetching)."""
    while parent[x] != x:
        x = parent[x]
    return x


@kernel("i4[::1](i4[::1], i4[::1])")
def find_all(parent: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """`find` of every id in `ids` (negative ids pass through)."""
    out = np.empty_like(ids)
    for i in range(ids.size):
        out[i] = find(parent, ids[i]) if ids[i] >= 0 else ids[i]
    return out
