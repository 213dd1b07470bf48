"""A half-precision ONNX model widened to float32: the reference a half model is judged against.

Every fp16 and bf16 tensor becomes float32: initializers and constant attributes (their values
exactly: every half value is a float32 value), declared input/output/value types, and the types
nodes produce by attribute (`Cast`'s `to`, `ConstantOfShape`'s value, the `dtype` of `EyeLike`
and the random generators), in subgraphs too. The result computes the same function as the
original with float32 rounding instead of half rounding: `check.check_models` measures how far
the half model itself is from it, and an optimized model may not be much further.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

FLOAT = 1
HALF_TYPES = (10, 16)        # FLOAT16, BFLOAT16
_DTYPE_ATTRS = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype",
                "Multinomial": "dtype"}


def widen(model: Any) -> Any:
    """A copy of `model` with every half-precision tensor and type in float32."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    _graph(out.graph)
    return out


def widen_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs for the widened model: half-precision arrays as float32, others as they are."""
    return {k: _widen_array(v) for k, v in feeds.items()}


def _widen_array(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.float16 or a.dtype.name == "bfloat16":
        return a.astype(np.float32)
    return a


def _tensor(t: Any) -> None:
    """Make tensor `t` float32 in place (an external tensor's data is read first)."""
    if t.data_type not in HALF_TYPES:
        return
    from onnx import numpy_helper
    arr = numpy_helper.to_array(t).astype(np.float32)
    name = t.name
    t.Clear()
    t.CopyFrom(numpy_helper.from_array(arr, name))


def _value(vi: Any) -> None:
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is not None and tt.elem_type in HALF_TYPES:
        tt.elem_type = FLOAT


def _graph(g: Any) -> None:
    for t in g.initializer:
        _tensor(t)
    for s in g.sparse_initializer:
        _tensor(s.values)
    for vi in (*g.input, *g.output, *g.value_info):
        _value(vi)
    for n in g.node:
        for a in n.attribute:
            if n.op_type in ("Cast", "CastLike") and a.name == "to" and a.i in HALF_TYPES:
                a.i = FLOAT
            elif n.op_type in _DTYPE_ATTRS and a.name == _DTYPE_ATTRS[n.op_type] \
                    and a.i in HALF_TYPES:
                a.i = FLOAT
            if a.HasField("t"):
                _tensor(a.t)
            for t in a.tensors:
                _tensor(t)
            if a.HasField("sparse_tensor"):
                _tensor(a.sparse_tensor.values)
            if a.HasField("g"):
                _graph(a.g)
            for sub in a.graphs:
                _graph(sub)
