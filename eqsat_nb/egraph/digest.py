"""A deterministic fingerprint of an e-graph (the key for caching extraction results)."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .layout import C_PARENT, F_DEAD, N_CLS, N_FLAGS, N_NCH, N_OP, N_PAYLOAD
from .unionfind import find


@njit(cache=True)
def _mix(h: np.uint64) -> np.uint64:
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xFF51AFD7ED558CCD)
    h ^= h >> np.uint64(33)
    h *= np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


@kernel("u8(i4[:, ::1], i4[:, ::1], i4[:, ::1], i8)")
def fingerprint(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray,
                n_nodes: int) -> np.uint64:
    """Order-independent sum of hashes of (canonical node, canonical class) over live nodes."""
    parent = classes[C_PARENT]
    total = np.uint64(0)
    for n in range(n_nodes):
        if nodes[N_FLAGS, n] & F_DEAD:
            continue
        h = _mix(np.uint64(nodes[N_OP, n]) + np.uint64(1))
        h = _mix(h ^ np.uint64(nodes[N_PAYLOAD, n] & 0xFFFFFFFF))
        for k in range(nodes[N_NCH, n]):
            h = _mix(h ^ np.uint64(find(parent, children[n, k])))
        h = _mix(h ^ (np.uint64(find(parent, nodes[N_CLS, n])) << np.uint64(32)))
        total += h
    return total
