"""ONNX graphs and nodes with half-precision element types made float32, in place.

Every tensor of a widened element type becomes float32 (initializers, sparse values and constant
attributes: their values exactly, since every fp16 and bf16 value is a float32 value), and so do
declared input/output/value types and the types nodes produce by attribute (`Cast`'s `to`, the
`dtype` of `EyeLike` and the random generators), in subgraphs too. The result computes the same
function with float32 rounding in place of half-precision rounding. Two users: the reference a
half model is judged against (onnx_io/widen.py, both half types), and opaque nodes with bf16
operands or results, which onnxruntime's CPU mostly has no kernels for (ir/opaque.py, bf16 only,
its rounding emulated there).
"""
from __future__ import annotations

from typing import Any, Collection

FLOAT = 1
FLOAT16, BFLOAT16 = 10, 16
HALF_TYPES = (FLOAT16, BFLOAT16)
_DTYPE_ATTRS = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Bernoulli": "dtype",
                "Multinomial": "dtype"}


def widen_tensor(t: Any, types: Collection[int] = HALF_TYPES) -> None:
    """Make tensor `t` float32 if its element type is in `types` (its data must be in memory)."""
    if t.data_type not in types:
        return
    from .tensors import from_array, to_array

    arr = to_array(t)
    name = t.name
    t.Clear()
    t.CopyFrom(from_array(arr, name, "f32"))


def widen_value(vi: Any, types: Collection[int] = HALF_TYPES) -> None:
    """Make a declared tensor type (ValueInfoProto) float32 if its element type is in `types`."""
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is not None and tt.elem_type in types:
        tt.elem_type = FLOAT


def widen_node(n: Any, types: Collection[int] = HALF_TYPES) -> None:
    """Make node `n`'s attributes (and subgraphs) produce float32 where they produce `types`."""
    for a in n.attribute:
        if n.op_type in ("Cast", "CastLike") and a.name == "to" and a.i in types:
            a.i = FLOAT
        elif n.op_type in _DTYPE_ATTRS and a.name == _DTYPE_ATTRS[n.op_type] and a.i in types:
            a.i = FLOAT
        if a.HasField("t"):
            widen_tensor(a.t, types)
        for t in a.tensors:
            widen_tensor(t, types)
        if a.HasField("sparse_tensor"):
            widen_tensor(a.sparse_tensor.values, types)
        if a.HasField("g"):
            widen_graph(a.g, types)
        for sub in a.graphs:
            widen_graph(sub, types)


def widen_graph(g: Any, types: Collection[int] = HALF_TYPES) -> None:
    """Make graph `g` float32 wherever it holds or produces `types` (see the module doc)."""
    for t in g.initializer:
        widen_tensor(t, types)
    for s in g.sparse_initializer:
        widen_tensor(s.values, types)
    for vi in (*g.input, *g.output, *g.value_info):
        widen_value(vi, types)
    for n in g.node:
        widen_node(n, types)


def holds(node: Any, types: Collection[int]) -> bool:
    """Whether a node's attributes or subgraphs hold or produce an element type in `types`."""
    def tensor(t: Any) -> bool:
        return t.data_type in types

    def graph(g: Any) -> bool:
        return (any(map(tensor, g.initializer))
                or any(tensor(s.values) for s in g.sparse_initializer)
                or any(vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in types
                       for vi in (*g.input, *g.output, *g.value_info))
                or any(holds(m, types) for m in g.node))

    for a in node.attribute:
        if node.op_type in ("Cast", "CastLike") and a.name == "to" and a.i in types:
            return True
        if node.op_type in _DTYPE_ATTRS and a.name == _DTYPE_ATTRS[node.op_type] and a.i in types:
            return True
        if (a.HasField("t") and tensor(a.t)) or any(map(tensor, a.tensors)):
            return True
        if a.HasField("sparse_tensor") and tensor(a.sparse_tensor.values):
            return True
        if (a.HasField("g") and graph(a.g)) or any(map(graph, a.graphs)):
            return True
    return False
