"""bfloat16 values on the host: float32 arrays that hold bfloat16 numbers exactly.

NumPy has no bfloat16 type, and what onnx gives for a BFLOAT16 tensor depends on its version
(float32 arrays up to 1.16, `ml_dtypes.bfloat16` arrays, a package the project does not depend
on, from 1.17 on). The IR's `bf16` values are therefore float32 arrays whose every element is a
bfloat16 number. A bfloat16 is the upper 16 bits of a float32 (sign, the same 8-bit exponent,
7 of the 23 mantissa bits), so widening is exact and a value narrowed again gives the same bits;
the interpreter computes floats in float32 anyway. Where a value becomes bfloat16 (an ONNX tensor
written, an operator's bf16 result emulated in float32) it is rounded to nearest, ties to even,
as hardware and onnxruntime round; a NaN stays a NaN (quiet, same sign) and values beyond the
largest bfloat16 become infinities.
"""
from __future__ import annotations

import numpy as np

_CHUNK = 1 << 22          # elements converted at a time: no temporaries of a whole large weight


def from_bits(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (an unsigned 16-bit array, any shape)."""
    wide = np.asarray(bits, dtype=np.uint16).astype(np.uint32)
    np.left_shift(wide, np.uint32(16), out=wide)        # in place: a 0-d array stays one
    return wide.view(np.float32)


def to_bits(values: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16, same shape) of float values, rounded to nearest even."""
    a = np.asarray(values, dtype=np.float32)
    if not a.flags.c_contiguous:        # (np.ascontiguousarray would make a 0-d array 1-d)
        a = a.copy(order="C")
    out = np.empty(a.shape, np.uint16)
    flat_in, flat_out = a.reshape(-1), out.reshape(-1)
    for start in range(0, a.size, _CHUNK):
        u = flat_in[start:start + _CHUNK].view(np.uint32)
        # adding 0x7FFF plus the lowest kept bit rounds to nearest, ties to the even pattern;
        # a carry out of the mantissa moves to the next exponent (to infinity past the largest)
        r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
        nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        if nan.any():        # keep NaNs NaN (the rounding could carry a payload into +-inf)
            r[nan] = (u[nan] >> np.uint32(16)) | np.uint32(0x0040)
        flat_out[start:start + _CHUNK] = r.astype(np.uint16)
    return out


def round_bf16(values: np.ndarray) -> np.ndarray:
    """`values` rounded to bfloat16 (nearest, ties to even), as a float32 array."""
    return from_bits(to_bits(values))


def is_bfloat16_array(a: np.ndarray) -> bool:
    """An array of the `ml_dtypes.bfloat16` type (what onnx >= 1.17 returns for BFLOAT16)."""
    return np.asarray(a).dtype.name == "bfloat16"


def host_array(a: np.ndarray) -> np.ndarray:
    """`a` as the IR holds it: an `ml_dtypes.bfloat16` array becomes float32 (its values
    exactly); any other array is returned as it is."""
    a = np.asarray(a)
    if is_bfloat16_array(a):
        return from_bits(a.view(np.uint16))
    return a
