"""The vocabulary the operator families use to map their ops to and from ONNX.

Import (ONNX node -> IR): each family module's `ONNX_IMPORT` maps an ONNX op type to a function
`mapper(imp, i, node)` that emits the IR node(s) with the same semantics through the importer
`imp` (onnx_io/importer.py `_Importer`: `type_of`, `val`, `emit`, `consts`, `const`, `opset`,
`fused_act`, `unused`, `fixed_dim`, `new_weight`, `alias`, `b` the GraphBuilder, ...) or raises
`NoMap` (via `need`) when the node does not map exactly; the node then stays an opaque node.

Export (IR -> ONNX): `OpDef.to_onnx(w, n)` writes the ONNX node(s) of one IR node `n` (an
`OnnxNode`) with a writer `w`, which is either the exporter's (onnx_io/exporter.py: helper values
named `r#hint`, static operands as Constant nodes, SAME padding as auto_pad) or the one-node model
builder's (cost/onnx_node.py: initializers, explicit pads). Both offer:

    w.opset                       the default-domain opset written
    w.add(op_type, ins, outs, **attributes)
    w.constant(n, hint, array, doc="", dtype=None) -> name   a static operand (shape, sizes, a
                                  scalar) of IR element type dtype (default: the array's)
    w.ints(n, hint, values) -> name                an int64 vector operand
    w.tmp(n, hint) -> name                         a helper value
    w.padding(a, hw, kernel) -> dict               a conv/pool padding's ONNX attributes
    w.weight_value(n, i) -> array | None           operand i's value when it is a weight
    w.fold(n, array)                               write the result as an initializer

Only `numpy` and the IR are imported here: onnx itself is imported where a function needs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..graph import TensorType


class NoMap(Exception):
    """This node does not map exactly onto the table: import it as an opaque node."""


Mapper = Callable[[Any, int, Any], None]
ACT_ONNX = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


@dataclass
class Const:
    """A constant ONNX value known at import (initializer, Constant node or folded value)."""

    value: np.ndarray
    from_constant_node: bool      # a Constant node (vs an initializer)
    doc: str = ""
    bf16: bool = False            # a bfloat16 value, held as float32 (ir/bfloat16.py)

    @property
    def dtype(self) -> str | None:
        """The IR element type of the value (None: one the IR lacks)."""
        from ..tensors import dtype_of_array
        return "bf16" if self.bf16 else dtype_of_array(self.value)

    def held(self) -> np.ndarray:
        """What a weight made of this constant holds: its value (`BitsConst`: its bits)."""
        return self.value


class BitsConst(Const):
    """A bfloat16 initializer left in its file (mapped_data.py): held as its bit patterns (a
    uint16 view), its float32 value made only where a mapper reads it."""

    def __init__(self, bits: np.ndarray) -> None:
        self.bits = bits
        super().__init__(None, False, bf16=True)

    @property                           # (a data descriptor: the dataclass's `value` field
    def value(self) -> np.ndarray:      # assignment lands in the setter)
        from ..bfloat16 import from_bits
        return from_bits(self.bits)

    @value.setter
    def value(self, _: Any) -> None:
        pass

    def held(self) -> np.ndarray:
        return self.bits


@dataclass
class OnnxNode:
    """One IR node as the ONNX writers see it: attributes, operand and result ONNX names.
    `main` is the name the op's own node writes (the result, or `r#act` when a fused
    activation follows); `inputs` and `results` are the IR values (what `w.weight_value` and
    `w.fold` key on)."""

    op: str
    a: dict[str, Any]
    ins: list[str]
    outs: list[str]
    main: str
    in_types: list[TensorType]
    out_types: list[TensorType]
    inputs: tuple[str, ...] = ()
    results: tuple[str, ...] = ()

    @property
    def r(self) -> str:
        return self.outs[0]


# ------------------------------------------------------------------ import helpers

def need(cond: bool) -> None:
    if not cond:
        raise NoMap


def attrs_of(node: Any) -> dict[str, Any]:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def known(attrs: dict, allowed: set[str]) -> None:
    need(set(attrs) <= allowed)


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def short(v: Any) -> float:
    """float32 attributes read back as the shortest decimal (1e-05, not 9.99999974e-06)."""
    v = np.asarray(v)[()]
    if isinstance(v, (np.float32, np.float16)) and np.isfinite(v):
        return float(str(v))         # NumPy prints the shortest decimal that reads back as v
    return float(v)


def exact_float(c: Const) -> float:
    """The float a scalar constant stands for: the exporter's exact repr in doc_string when it
    agrees with the tensor, else the shortest decimal that gives the tensor's value."""
    v = c.value.reshape(-1)[0]
    try:
        exact = float(c.doc)
        if np.asarray(exact, c.value.dtype) == v:
            return exact
    except ValueError:
        pass
    return short(v)


def broadcast_to(imp: Any, v: str, ty: TensorType, shape: tuple[int, ...]) -> str:
    """`v` broadcast to `shape` (nothing when it already has it)."""
    if ty.shape == shape:
        return v
    return imp.emit("broadcast", [v], shape=shape)


FLOATS = ("f16", "f32", "f64", "bf16")


def scalar_operand(imp: Any, node: Any) -> tuple[str, Const, TensorType] | None:
    """(the other operand, the constant, its type) when one operand of a two-operand float
    node is a scalar constant (one element) the node broadcasts to the other operand's shape:
    what `scale`/`shift`-style ops with the value as an attribute mean. A constant that has
    the result's shape itself and came from an initializer is a weight, not a scalar."""
    out = imp.type_of(node.output[0], node)
    if out.dtype not in FLOATS:
        return None
    a, b = node.input
    for x, s in ((a, b), (b, a)):
        c = imp.consts.get(s)
        if (c is not None and c.value.size == 1 and imp.type_of(x, node).shape == out.shape
                and (c.from_constant_node or c.value.shape != out.shape)
                and s not in imp.weight_ssa):
            return x, c, imp.type_of(x, node)
    return None


# ------------------------------------------------------------------ export helpers

def same_onnx(op_type: str) -> Callable[[Any, OnnxNode], None]:
    """`to_onnx` of an op that is one ONNX node `op_type` of the same operands, no attributes."""
    def write(w: Any, n: OnnxNode) -> None:
        w.add(op_type, n.ins, [n.main])
    return write


def scalar_onnx(op_type: str) -> Callable[[Any, OnnxNode], None]:
    """`to_onnx` of x (op) value: the value as a scalar Constant of x's element type, its
    exact repr in the doc string (read back by the importer)."""
    def write(w: Any, n: OnnxNode) -> None:
        value = n.a["value"]
        c = w.constant(n, "value", np.asarray(value), doc=repr(value), dtype=n.in_types[0].dtype)
        w.add(op_type, [n.ins[0], c], [n.main])
    return write
