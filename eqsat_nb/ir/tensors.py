"""ONNX tensors <-> NumPy arrays for the IR's element types, bfloat16 included.

Every place that reads an ONNX tensor's values (initializers, Constant attributes) or writes one
(weights, folded constants, a written scalar operand) goes through this pair, so a `bf16` value
is a float32 array on the host (ir/bfloat16.py) and a BFLOAT16 tensor in a file, whatever onnx
version reads or writes it. The other element types are NumPy's own (`opaque.NP_DTYPES`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .bfloat16 import from_bits, host_array, is_bfloat16_array, round_bf16, to_bits
from .dtypes import NP_DTYPES

BFLOAT16 = 16             # onnx.TensorProto.BFLOAT16
_EXTERNAL = 1             # onnx.TensorProto.EXTERNAL


def to_array(t: Any) -> np.ndarray:
    """The values of ONNX tensor `t` (its data read into memory): `numpy_helper.to_array`,
    except that a BFLOAT16 tensor gives a float32 array holding its values exactly.
    ValueError when the data do not match the tensor's dims."""
    from onnx import numpy_helper

    if t.data_type != BFLOAT16 or t.data_location == _EXTERNAL:
        return host_array(numpy_helper.to_array(t))
    dims = tuple(int(d) for d in t.dims)
    n = int(np.prod(dims)) if dims else 1
    if t.HasField("raw_data"):
        if len(t.raw_data) != 2 * n:
            raise ValueError(f"tensor '{t.name}' holds {len(t.raw_data)} bytes of bfloat16 data "
                             f"for dims {list(dims)} ({2 * n} expected)")
        bits = np.frombuffer(t.raw_data, dtype="<u2")
    else:                 # bfloat16 bit patterns in int32_data, one a number
        if len(t.int32_data) != n:
            raise ValueError(f"tensor '{t.name}' holds {len(t.int32_data)} bfloat16 values for "
                             f"dims {list(dims)} ({n} expected)")
        bits = np.asarray(t.int32_data, dtype=np.int64).astype(np.uint16)
    return from_bits(bits).reshape(dims)


def as_dtype(values: Any, dtype: str) -> np.ndarray:
    """`values` as the host holds IR element type `dtype`: NumPy's type, and for bf16 float32
    rounded to bfloat16 (a no-op for values that are bfloat16 numbers already; uint16 values are
    bfloat16 bit patterns, a mapped weight's, widened)."""
    a = host_array(np.asarray(values))
    if dtype == "bf16":         # bf16 bit patterns (a mapped weight) are bfloat16 numbers
        return from_bits(a) if a.dtype == np.uint16 else round_bf16(a)
    return a.astype(NP_DTYPES[dtype], copy=False)


def from_array(values: Any, name: str, dtype: str | None = None) -> Any:
    """The ONNX tensor `name` holding `values` as IR element type `dtype` (None: the array's own
    NumPy type, and BFLOAT16 for an `ml_dtypes.bfloat16` array). A bf16 tensor is written as
    BFLOAT16 raw data, each value rounded to nearest even."""
    import onnx
    from onnx import numpy_helper

    a = np.asarray(values)
    if dtype is None and is_bfloat16_array(a):
        dtype = "bf16"
    if dtype == "bf16":
        t = onnx.TensorProto()
        t.name = name
        t.data_type = BFLOAT16
        t.dims.extend(int(d) for d in a.shape)
        bits = a if a.dtype == np.uint16 else to_bits(host_array(a))    # bits: as they are
        t.raw_data = bits.astype("<u2", copy=False).tobytes()
        return t
    if dtype is not None:
        a = a.astype(NP_DTYPES[dtype], copy=False)
    return numpy_helper.from_array(a, name)


def dtype_of_array(a: np.ndarray) -> str | None:
    """The IR element type of a NumPy array's type (float32 is f32: whether a float32 array
    holds a bf16 value is known from where it came), None when the IR has none."""
    for k, v in NP_DTYPES.items():
        if k != "bf16" and a.dtype == np.dtype(v):
            return k
    return None
