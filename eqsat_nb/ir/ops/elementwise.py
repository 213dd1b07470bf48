"""Element-wise arithmetic: ewadd, ewmul, ewsub, ewdiv of two tensors of one shape, and the
forms with a scalar constant held as an attribute, so that rules can read it: scale (x * value),
shift (x + value), divide (x / value), power (x ** value). The value is applied in x's element
type (`np.asarray(value, x.dtype)`), as an ONNX scalar constant of that type is.

ONNX: Add, Mul, Sub, Div (ONNX broadcasting made explicit by `broadcast` nodes), Sum (a chain of
ewadd); a scalar constant operand (one element, broadcast to the other operand's shape) gives
the attribute forms: Mul -> scale, Add -> shift, Div -> divide (scale by the exact reciprocal when
the divisor is a power of two; 1 / x is `reciprocal`), Pow with a scalar exponent -> power.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from .onnx_map import (FLOATS, broadcast_to, exact_float, need, scalar_onnx, scalar_operand,
                       same_onnx)
from .schema import AttrSpec, OpDef, elementwise_binary, numel_out, unary

# ----------------------------------------------------------------------------------- ONNX import


_SCALAR_FORM = {"ewmul": "scale", "ewadd": "shift"}     # the op with a scalar operand


def _binary(op: str) -> Callable:
    """Add/Mul/Sub/Div: both operands broadcast (explicitly) to the result's shape; Mul and Add
    with a scalar constant operand are `scale` and `shift`."""
    def mapper(imp: Any, i: int, node: Any) -> None:
        need(len(node.input) == 2 and not node.attribute)
        if op in _SCALAR_FORM:
            s = scalar_operand(imp, node)
            if s is not None:
                x, c, _ = s
                imp.emit(_SCALAR_FORM[op], [imp.val(x, node)], node.output[0],
                         value=exact_float(c))
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
    """x / c for a scalar constant c: x * (1/c) exactly when c is a power of two (attention's
    division by sqrt(head size) = 8), else divide {value = c}; 1 / x is reciprocal(x); other
    divisions ewdiv, broadcast explicitly."""
    need(len(node.input) == 2 and not node.attribute)
    x, d = node.input
    c = imp.consts.get(d)
    out = imp.type_of(node.output[0], node)
    if (c is not None and c.value.size == 1 and out.dtype in FLOATS and d not in imp.defined
            and d not in imp.weight_ssa and imp.type_of(x, node).shape == out.shape):
        v = float(c.value.reshape(-1)[0])
        need(v != 0 and np.isfinite(v))
        m, _ = math.frexp(abs(v))
        if m == 0.5:                  # a power of two: the reciprocal is exact
            imp.emit("scale", [imp.val(x, node)], node.output[0], value=1.0 / v)
        else:
            imp.emit("divide", [imp.val(x, node)], node.output[0], value=exact_float(c))
        return
    n = imp.consts.get(x)
    if (n is not None and n.value.size == 1 and out.dtype in FLOATS and x not in imp.defined
            and x not in imp.weight_ssa and imp.type_of(d, node).shape == out.shape
            and float(n.value.reshape(-1)[0]) == 1.0):
        imp.emit("reciprocal", [imp.val(d, node)], node.output[0])
        return
    _binary("ewdiv")(imp, i, node)


def _pow(imp: Any, i: int, node: Any) -> None:
    """x ** c for a scalar constant exponent c (float or integer): power {value = c}."""
    need(len(node.input) == 2 and not node.attribute)
    x, e = node.input
    c = imp.consts.get(e)
    out = imp.type_of(node.output[0], node)
    need(c is not None and c.value.size == 1 and c.value.dtype.kind in "fiu"
         and out.dtype in FLOATS and e not in imp.defined and e not in imp.weight_ssa
         and imp.type_of(x, node).shape == out.shape)
    value = exact_float(c) if c.value.dtype.kind == "f" else float(c.value.reshape(-1)[0])
    imp.emit("power", [imp.val(x, node)], node.output[0], value=value)


ONNX_IMPORT = {"Add": _binary("ewadd"), "Mul": _binary("ewmul"), "Sub": _binary("ewsub"),
               "Div": _div, "Pow": _pow, "Sum": _sum}

# ----------------------------------------------------------------------------------- the ops

def _value(fn: Callable[[Any, Any], Any]) -> Callable:
    """Reference of an op with a scalar attribute: fn(x, value in x's element type)."""
    return lambda a, x: fn(x, np.asarray(a["value"], dtype=x.dtype))


def _value_torch(fn: Callable[[Any, float], Any]) -> Callable:
    return lambda torch, a, ts: (lambda x, v=float(a["value"]): fn(x, v))


_VALUE = (AttrSpec("value", "float"),)

OPS = [
    OpDef("ewadd", (2, 2), (), elementwise_binary, numel_out, "x + y, equal shapes",
          eval=lambda a, x, y: x + y, to_onnx=same_onnx("Add"),
          torch=lambda torch, a, ts: torch.add),
    OpDef("ewmul", (2, 2), (), elementwise_binary, numel_out, "x * y, equal shapes",
          eval=lambda a, x, y: x * y, to_onnx=same_onnx("Mul"),
          torch=lambda torch, a, ts: torch.mul),
    OpDef("scale", (1, 1), _VALUE, unary, numel_out, "multiply by a scalar constant",
          eval=_value(lambda x, v: x * v), to_onnx=scalar_onnx("Mul"),
          torch=_value_torch(lambda x, v: x * v)),
    OpDef("ewsub", (2, 2), (), elementwise_binary, numel_out, "x - y, equal shapes",
          eval=lambda a, x, y: x - y, to_onnx=same_onnx("Sub"),
          torch=lambda torch, a, ts: torch.sub),
    OpDef("ewdiv", (2, 2), (), elementwise_binary, numel_out, "x / y, equal shapes",
          eval=lambda a, x, y: x / y, to_onnx=same_onnx("Div"),
          torch=lambda torch, a, ts: torch.div),
    OpDef("shift", (1, 1), _VALUE, unary, numel_out, "add a scalar constant",
          eval=_value(lambda x, v: x + v), to_onnx=scalar_onnx("Add"), onnx_opset=(7, 7),
          torch=_value_torch(lambda x, v: x + v)),
    OpDef("divide", (1, 1), _VALUE, unary, numel_out, "divide by a scalar constant",
          eval=_value(lambda x, v: x / v), to_onnx=scalar_onnx("Div"), onnx_opset=(7, 7),
          torch=_value_torch(lambda x, v: x / v)),
    OpDef("power", (1, 1), _VALUE, unary, numel_out, "raise to a scalar constant power",
          eval=_value(np.power), to_onnx=scalar_onnx("Pow"), onnx_opset=(7, 7),
          torch=_value_torch(lambda x, v: x.pow(v)), cost="transcendental"),
]
