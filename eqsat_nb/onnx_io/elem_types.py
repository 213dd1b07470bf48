"""ONNX element types as the IR holds them: names for messages, conversions, the clear error
for a type the IR lacks (it holds float16, bfloat16, float, double, int32, int64, bool)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import TirError
from ..ir.opaque import DTYPE_TO_ONNX, ONNX_TO_DTYPE
from ..ir.tensors import dtype_of_array

TYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32",
               13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16"}


def ir_dtype(elem: int, what: str) -> str:
    """The IR element type of ONNX element type `elem`; TirError naming `what` if none."""
    try:
        return ONNX_TO_DTYPE[elem]
    except KeyError:
        name = TYPE_NAMES.get(elem, f"type {elem}")
        raise TirError(f"{what} has element type {name}, which the IR cannot hold (it holds "
                       f"float16, bfloat16, float, double, int32, int64, bool)") from None


def onnx_elem(arr: np.ndarray, name: str, imp: Any, node: Any) -> int:
    """The ONNX element type of a constant's array (float32 for a float32 array: a bf16
    constant says so itself, `Const.bf16`); the importer's error if the IR lacks it."""
    k = dtype_of_array(arr)
    if k is not None:
        return DTYPE_TO_ONNX[k]
    raise imp.err(f"constant '{name}' has element type {arr.dtype}, which the IR cannot hold",
                  node)


def np_to_onnx(dt: Any) -> int:
    """The ONNX element type of a NumPy dtype (0 when ONNX has none)."""
    from onnx import helper
    try:
        return int(helper.np_dtype_to_tensor_dtype(np.dtype(dt)))
    except Exception:    # noqa: BLE001
        return 0
