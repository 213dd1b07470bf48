"""Sets kept as bitsets of 64-bit words (uint64 rows, bit b of word w is member 64 w + b), for
the extraction kernels (ocf.py's constituent sets, dominators.py's dominator sets): counting a
word's members and walking them. Inlined into their callers (`inline="always"`): they run in the
innermost loops.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def popcount(x):
    """The number of set bits of a uint64 word (SWAR: no popcnt instruction assumed)."""
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(cache=True, inline="always")
def pop_lowest(x):
    """(x without its lowest set bit, that bit's index 0-63), for a nonzero word: one step of a
    walk over the set bits, lowest first (`while x: x, b = pop_lowest(x)`)."""
    low = x & (~x + np.uint64(1))
    return x ^ low, popcount(low - np.uint64(1))
