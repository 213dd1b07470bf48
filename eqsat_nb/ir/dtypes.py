"""IR element types as ONNX numbers them and as the host holds them in NumPy: the one table
the importer, exporter, interpreter and opaque nodes share (below all of them)."""
from __future__ import annotations

from typing import Any

import numpy as np

# IR element type <-> ONNX TensorProto.DataType (the numbers are fixed by the ONNX standard)
DTYPE_TO_ONNX: dict[str, int] = {"f32": 1, "i32": 6, "i64": 7, "bool": 9, "f16": 10, "f64": 11,
                                 "bf16": 16}
ONNX_TO_DTYPE: dict[int, str] = {v: k for k, v in DTYPE_TO_ONNX.items()}
# the NumPy type the host holds each IR element type in: bf16 values are float32 arrays of
# bfloat16 numbers (NumPy has no bfloat16; ir/bfloat16.py), converted to and from ONNX tensors
# by ir/tensors.py, never by NumPy's dtype alone
NP_DTYPES: dict[str, Any] = {"f16": np.float16, "f32": np.float32, "f64": np.float64,
                             "i32": np.int32, "i64": np.int64, "bool": np.bool_,
                             "bf16": np.float32}
