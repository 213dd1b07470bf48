"""Element-wise arithmetic: ewadd, ewmul of two tensors of one shape, and `scale` (x times a
scalar constant held as an attribute, so rules can read it).

ONNX: Add, Mul (with ONNX broadcasting made explicit by `broadcast` nodes), Sum (a chain of
ewadd), Mul by a scalar constant (scale), Div by a power-of-two scalar (scale by its exact
reciprocal).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .onnx_map import (FLOATS, broadcast_to, exact_float, need, scalar_onnx, scalar_operand,
                       unary_onnx)
from .schema import AttrSpec, OpDef, elementwise_binary, numel_out, unary

# ----------------------------------------------------------------------------------- ONNX import


def _binary(op: str) -> Callable:
    """Add/Mul: both operands broadcast (explicitly) to the result's shape; Mul by a scalar
    constant is `scale`."""
    def mapper(imp: Any, i: int, node: Any) -> None:
        need(len(node.input) == 2 and not node.attribute)
        if op == "ewmul" and i in imp.gelu_at:
            imp.emit("gelu", [imp.val(imp.gelu_at[i], node)], node.output[0])
            return
        if op == "ewmul":
            s = scalar_operand(imp, node)
            if s is not None:
                x, c, _ = s
                imp.emit("scale", [imp.val(x, node)], node.output[0], value=exact_float(c))
                return
        a, b = node.input
        out = imp.type_of(node.output[0], node)
        ta, tb = imp.type_of(a, node), imp.type_of(b, node)
        va, vb = imp.val(a, node), imp.val(b, node)
        imp.emit(op, [broadcast_to(imp, va, ta, out.shape), broadcast_to(imp, vb, tb, out.shape)],
                 node.output[0])
    return mapper


def _sum(imp: Any, i: int, node: Any) -> None:
    """Sum of N operands (ONNX broadcasting): a chain of ewadd, left to right."""
    need(not node.attribute and node.input and all(node.input))
    out = imp.type_of(node.output[0], node)
    if len(node.input) == 1:
        need(imp.type_of(node.input[0], node).shape == out.shape)
        imp.alias(node.output[0], imp.val(node.input[0], node))
        return
    vals = [broadcast_to(imp, imp.val(v, node), imp.type_of(v, node), out.shape)
            for v in node.input]
    acc = vals[0]
    for k, v in enumerate(vals[1:], 2):
        acc = imp.emit("ewadd", [acc, v], node.output[0] if k == len(vals) else None)


def _div(imp: Any, i: int, node: Any) -> None:
    """x / c for a scalar constant c that is a power of two: x * (1/c) exactly (attention's
    division by sqrt(head size) = 8); other divisions stay opaque."""
    need(len(node.input) == 2 and not node.attribute)
    x, d = node.input
    c = imp.consts.get(d)
    out = imp.type_of(node.output[0], node)
    need(c is not None and c.value.size == 1 and out.dtype in FLOATS
         and d not in imp.defined and imp.type_of(x, node).shape == out.shape)
    v = float(c.value.reshape(-1)[0])
    need(v != 0 and np.isfinite(v))
    m, _ = math.frexp(abs(v))
    need(m == 0.5)                  # a power of two: the reciprocal is exact
    imp.emit("scale", [imp.val(x, node)], node.output[0], value=1.0 / v)


ONNX_IMPORT = {"Add": _binary("ewadd"), "Mul": _binary("ewmul"), "Sum": _sum, "Div": _div}

# ----------------------------------------------------------------------------------- the ops

OPS = [
    OpDef("ewadd", (2, 2), (), elementwise_binary, numel_out, "x + y, equal shapes",
          eval=lambda a, x, y: x + y, to_onnx=unary_onnx("Add"),
          torch=lambda torch, a, ts: torch.add),
    OpDef("ewmul", (2, 2), (), elementwise_binary, numel_out, "x * y, equal shapes",
          eval=lambda a, x, y: x * y, to_onnx=unary_onnx("Mul"),
          torch=lambda torch, a, ts: torch.mul),
    OpDef("scale", (1, 1), (AttrSpec("value", "float"),), unary, numel_out,
          "multiply by a scalar constant",
          eval=lambda a, x: x * np.asarray(a["value"], dtype=x.dtype),
          to_onnx=scalar_onnx("Mul"),
          torch=lambda torch, a, ts: (lambda x, v=float(a["value"]): x * v)),
]
