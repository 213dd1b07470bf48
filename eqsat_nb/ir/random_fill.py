"""Uniform random floats for the reference interpreter's inputs and weights, from a
counter-based stream: number i of a stream is a hash of (the stream's key, i), so a tensor is
filled in one pass, a chunk at a time or whole, with the same numbers.

Verification draws every weight of both graphs (ViT-Huge: 632 M numbers); NumPy's generator
takes about 2 ns a number here. The hash is splitmix64's finaliser over a Weyl sequence (what
splitmix64 itself is, a generator that passes BigCrush); its top 24 bits make a float32 in [0, 1).
"""
from __future__ import annotations

import numpy as np

from ..hash64 import mix64
from ..kernels import kernel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_ULP = np.float32(1.0 / (1 << 24))


@kernel("void(f4[::1], i8, i8, f8, f8)", "void(f8[::1], i8, i8, f8, f8)")
def fill_uniform(out, key, start, offset, scale):
    """out[j] = (u_{start+j} + offset) * scale, with u_i the stream `key`'s number i, uniform
    in [0, 1); computed in float32 whatever out's dtype is."""
    seed = mix64(np.uint64(key))
    off, sc = np.float32(offset), np.float32(scale)
    for j in range(out.size):
        x = mix64(seed + np.uint64(start + j) * _GOLDEN)
        u = np.float32(x >> np.uint64(40)) * _ULP
        out[j] = (u + off) * sc
