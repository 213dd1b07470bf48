"""One stable sort for every kernel that orders integer keys.

Numba's own `np.sort` / `np.argsort` compile a quicksort and a mergesort per call site signature
(about four seconds of a first run's compilation); this LSD radix sort is one small loop nest,
compiled once, and linear in the number of keys. Digits that every key shares are skipped, so keys
below 2**22 take two passes.
"""
from __future__ import annotations

import numpy as np
from numba import njit

BITS = 11                       # digit width: 2048 buckets, six passes cover 64 bits
BUCKETS = 1 << BITS
SIGN = np.uint64(1) << np.uint64(63)


@njit(cache=True)
def stable_order(keys: np.ndarray, n: int) -> np.ndarray:
    """The permutation that sorts keys[:n] (int64) ascending, equal keys in input order."""
    order = np.empty(n, np.int64)
    for i in range(n):
        order[i] = i
    if n < 2:
        return order
    spare = np.empty(n, np.int64)
    count = np.empty(BUCKETS + 1, np.int64)
    mask = np.uint64(BUCKETS - 1)
    for shift in range(0, 64, BITS):
        sh = np.uint64(shift)
        for b in range(BUCKETS + 1):
            count[b] = 0
        for i in range(n):          # sign bit flipped: negative keys order before positive ones
            d = ((np.uint64(keys[i]) ^ SIGN) >> sh) & mask
            count[d + 1] += 1
        skip = False
        for b in range(1, BUCKETS + 1):
            if count[b] == n:       # every key has this digit: the pass would not move anything
                skip = True
                break
        if skip:
            continue
        for b in range(BUCKETS):
            count[b + 1] += count[b]
        for i in range(n):
            j = order[i]
            d = ((np.uint64(keys[j]) ^ SIGN) >> sh) & mask
            spare[count[d]] = j
            count[d] += 1
        order, spare = spare, order
    return order
