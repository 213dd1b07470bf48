"""Element-wise functions of one tensor: relu, tanh, sigmoid, gelu (erf form, or the tanh
approximation), silu (x * sigmoid(x)), erf, sqrt, reciprocal, dropout (the identity at inference).
`ACT` is also what the fused `act` attribute of conv2d, matmul and the pools applies last.

ONNX: Relu, Tanh, Sigmoid, Erf, Sqrt, Reciprocal, Gelu (opset 20; below it the decomposition as
torch and HF write it: 0.5 * x * (1 + erf(x / sqrt 2)), or for the tanh form 0.5 * x * (1 +
tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))); onnxruntime's CPU optimizer fuses the erf form back
into Gelu), silu as Sigmoid and Mul (as torch writes F.silu), Dropout in inference mode (its mask
unused). The decomposed forms exporters write are raised to gelu and silu by
rules/idioms/idioms.rules.
"""
from __future__ import annotations

from math import erf, pi, sqrt
from typing import Any, Callable

import numpy as np

from ...kernels import kernel
from .onnx_map import attrs_of, known, need, short, text, same_onnx
from .schema import AttrSpec, OpDef, numel_out, unary, zero

Array = np.ndarray

ACT: dict[str, Callable[[Array], Array]] = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
}


@kernel("none(f4[::1])", "none(f8[::1])")
def _erf_inplace(x: Array) -> None:
    """libm's erf of every element, in place (NumPy has none). A kernel, not a Numba ufunc: a
    ufunc is rebuilt at every import (0.2 s of every run), a kernel is compiled ahead of time."""
    for i in range(x.size):
        x[i] = erf(x[i])


def erf_(x: Array) -> Array:
    t = np.array(x, dtype=x.dtype, order="C")
    _erf_inplace(t.reshape(-1))
    return t


def gelu(x: Array, approximate: str = "none") -> Array:
    """0.5 * x * (1 + erf(x / sqrt 2)), in place in one temporary (the same numbers: * 0.5 is
    exact); `approximate` "tanh": 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))),
    in the order HF's GELU writes it, constants in x's element type."""
    if approximate == "tanh":
        c = lambda v: np.asarray(v, dtype=x.dtype)     # noqa: E731
        inner = (x + np.power(x, c(3.0)) * c(0.044715)) * c(sqrt(2.0 / pi))
        return (x * c(0.5)) * (np.tanh(inner) + c(1.0))
    t = x / np.asarray(sqrt(2.0), dtype=x.dtype)
    _erf_inplace(t.reshape(-1))
    t += 1
    t *= x
    t *= 0.5
    return t


# ----------------------------------------------------------------------------------- ONNX

def _unary(op: str) -> Callable:
    def mapper(imp: Any, i: int, node: Any) -> None:
        need(len(node.input) == 1 and not node.attribute)
        imp.emit(op, [imp.val(node.input[0], node)], node.output[0])
    return mapper


def _gelu_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"approximate"})
    approximate = text(at.get("approximate", "none"))
    need(approximate in ("none", "tanh"))
    imp.emit("gelu", [imp.val(node.input[0], node)], node.output[0], approximate=approximate)


def _dropout_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"ratio", "seed", "is_test"})
    need(all(imp.unused(o) for o in node.output[1:]))     # e.g. a Dropout mask nobody reads
    ratio = at.get("ratio", 0.5)
    if imp.opset >= 12:
        if len(node.input) > 2 and node.input[2]:
            t = imp.const(node.input[2])
            need(t is not None and not bool(t.reshape(-1)[0]))
        if len(node.input) > 1 and node.input[1]:
            r = imp.consts.get(node.input[1])
            need(r is not None and r.value.size == 1)
            ratio = r.value.reshape(-1)[0]
    else:
        need(imp.opset >= 7)
    imp.emit("dropout", [imp.val(node.input[0], node)], node.output[0], ratio=short(ratio))


ONNX_IMPORT = {"Relu": _unary("relu"), "Sigmoid": _unary("sigmoid"), "Tanh": _unary("tanh"),
               "Erf": _unary("erf"), "Sqrt": _unary("sqrt"), "Reciprocal": _unary("reciprocal"),
               "Gelu": _gelu_in, "Dropout": _dropout_in}


def _gelu_onnx(w: Any, n: Any) -> None:
    tanh = n.a["approximate"] == "tanh"
    if w.opset >= 20:
        w.add("Gelu", n.ins, [n.main], **({"approximate": "tanh"} if tanh else {}))
        return
    dt = n.in_types[0].dtype
    x, r = n.ins[0], n.main
    if tanh:              # as HF's GELU: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
        h, p, q, s, u, t, v = (w.tmp(n, k) for k in ("half", "cube", "kx3", "sum", "inner",
                                                     "tanh", "add"))
        w.add("Mul", [x, w.constant(n, "c_half", np.asarray(0.5), dtype=dt)], [h])
        w.add("Pow", [x, w.constant(n, "three", np.asarray(3.0), dtype=dt)], [p])
        w.add("Mul", [p, w.constant(n, "kappa", np.asarray(0.044715), dtype=dt)], [q])
        w.add("Add", [x, q], [s])
        w.add("Mul", [s, w.constant(n, "beta", np.asarray(sqrt(2.0 / pi)), dtype=dt)], [u])
        w.add("Tanh", [u], [t])
        w.add("Add", [t, w.constant(n, "one", np.asarray(1.0), dtype=dt)], [v])
        w.add("Mul", [h, v], [r])
        return
    # 0.5 * x * (1 + erf(x / sqrt 2)), as torch writes it
    d, e, s, m = (w.tmp(n, k) for k in ("div", "erf", "add", "mul"))
    w.add("Div", [x, w.constant(n, "sqrt2", np.asarray(np.sqrt(2.0)), dtype=dt)], [d])
    w.add("Erf", [d], [e])
    w.add("Add", [e, w.constant(n, "one", np.asarray(1.0), dtype=dt)], [s])
    w.add("Mul", [x, s], [m])
    w.add("Mul", [m, w.constant(n, "half", np.asarray(0.5), dtype=dt)], [r])


def _dropout_onnx(w: Any, n: Any) -> None:
    if w.opset < 12:
        w.add("Dropout", n.ins, [n.main], ratio=float(n.a["ratio"]))
    else:       # the ratio as a double keeps its exact value (T1 may differ from T)
        w.add("Dropout", [n.ins[0], w.constant(n, "ratio", np.asarray(n.a["ratio"],
                                                                       np.float64))], [n.main])


def _act_torch(name: str) -> Callable:
    return lambda torch, a, ts: {"relu": torch.relu, "sigmoid": torch.sigmoid,
                                 "tanh": torch.tanh}[name]


# ----------------------------------------------------------------------------------- the ops

def _silu_onnx(w: Any, n: Any) -> None:
    """x * Sigmoid(x), as torch writes F.silu."""
    s = w.tmp(n, "sigmoid")
    w.add("Sigmoid", n.ins, [s])
    w.add("Mul", [n.ins[0], s], [n.main])


def _torch_fn(name: str) -> Callable:
    return lambda torch, a, ts: getattr(torch, name)


_UNARY = "element-wise {}"

OPS = [
    OpDef("relu", (1, 1), (), unary, numel_out, _UNARY.format("max(x, 0)"),
          eval=lambda a, x: ACT["relu"](x), to_onnx=same_onnx("Relu"), torch=_act_torch("relu")),
    OpDef("tanh", (1, 1), (), unary, numel_out, _UNARY.format("tanh"),
          eval=lambda a, x: np.tanh(x), to_onnx=same_onnx("Tanh"), torch=_act_torch("tanh"),
          cost="transcendental"),
    OpDef("sigmoid", (1, 1), (), unary, numel_out, _UNARY.format("logistic sigmoid"),
          eval=lambda a, x: ACT["sigmoid"](x), to_onnx=same_onnx("Sigmoid"),
          torch=_act_torch("sigmoid"), cost="transcendental", interp_temps=2),
    OpDef("gelu", (1, 1), (AttrSpec("approximate", "str", "none", ("none", "tanh")),), unary,
          numel_out, _UNARY.format("GELU, erf form (approximate \"tanh\": the tanh form)"),
          eval=lambda a, x: gelu(x, a["approximate"]), to_onnx=_gelu_onnx, onnx_opset=(9, 9),
          measure_opset=20,
          torch=lambda torch, a, ts: (lambda x: torch.nn.functional.gelu(
              x, approximate=a["approximate"])),
          cost="transcendental", interp_temps=3),
    OpDef("dropout", (1, 1), (AttrSpec("ratio", "float", 0.5),), unary, zero,
          "identity at inference", eval=lambda a, x: x, to_onnx=_dropout_onnx,
          onnx_opset=(7, 12), torch=lambda torch, a, ts: (lambda x: x), cost="view"),
    OpDef("erf", (1, 1), (), unary, numel_out, _UNARY.format("error function"),
          eval=lambda a, x: erf_(x), to_onnx=same_onnx("Erf"), onnx_opset=(9, 9),
          torch=_torch_fn("erf"), cost="transcendental", interp_temps=1),
    OpDef("sqrt", (1, 1), (), unary, numel_out, _UNARY.format("square root"),
          eval=lambda a, x: np.sqrt(x), to_onnx=same_onnx("Sqrt"), torch=_torch_fn("sqrt"),
          cost="transcendental", positive=(0,)),
    OpDef("reciprocal", (1, 1), (), unary, numel_out, _UNARY.format("1 / x"),
          eval=lambda a, x: np.asarray(1, dtype=x.dtype) / x, to_onnx=same_onnx("Reciprocal"),
          torch=_torch_fn("reciprocal"), cost="transcendental"),
    OpDef("silu", (1, 1), (), unary, numel_out, _UNARY.format("x * sigmoid(x) (SiLU, swish)"),
          eval=lambda a, x: x * ACT["sigmoid"](x), to_onnx=_silu_onnx, onnx_opset=(7, 7),
          torch=lambda torch, a, ts: torch.nn.functional.silu, cost="transcendental",
          interp_temps=2),
]
