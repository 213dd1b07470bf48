"""splitmix64's finaliser, the one 64-bit mixing step the kernels share (structural hashes of
extraction layers, the interpreter's random stream)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def mix64(x):
    """A well-spread 64-bit hash of the uint64 x (a bijection: distinct inputs never collide)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))
