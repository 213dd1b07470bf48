"""matmul: the (batched) matrix product with a fused activation, as NumPy/ONNX MatMul.

Operands of rank >= 2; batch dims broadcast (aligned from the end, equal or 1) and ranks may
differ, so `[B,S,H] @ [H,N]` is one matmul on the weight as it is. (Element-wise ops do not
broadcast: TASO's implicit broadcasting let unsound rewrites through; matmul is the exception.)

ONNX: MatMul (a rank-1 operand made a matrix and the result reshaped back, as ONNX defines it),
Gemm (transposes, alpha as `scale`, C broadcast and added; torch's Linear, a Gemm with transB of
a constant weight, becomes matmul with that weight transposed once at import).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..graph import TensorType
from .activation import ACT
from .onnx_map import attrs_of, broadcast_to, known, need, short
from .schema import AttrSpec, OpDef, act_flops, fail, same_dtype, shape_text

_ACT = AttrSpec("act", "str", "none", ("none", "relu", "sigmoid", "tanh"))


def _matmul(ins: list[TensorType], a: dict) -> list[TensorType]:
    """NumPy/ONNX MatMul on operands of rank >= 2: batch dims broadcast (aligned from the end,
    equal or 1), ranks may differ ([B,S,H] @ [H,N] is one matmul on the weight as it is)."""
    x, y = ins
    same_dtype(ins)
    if x.rank < 2 or y.rank < 2:
        fail(f"operands must have rank >= 2, got {shape_text(x)} and {shape_text(y)}")
    if x.shape[-1] != y.shape[-2]:
        fail(f"inner dimensions differ: {shape_text(x)} @ {shape_text(y)}")
    bx, by = x.shape[:-2], y.shape[:-2]
    n = max(len(bx), len(by))
    bx, by = (1,) * (n - len(bx)) + bx, (1,) * (n - len(by)) + by
    if any(d != e and d != 1 and e != 1 for d, e in zip(bx, by)):
        fail(f"batch dimensions do not broadcast: {shape_text(x)} @ {shape_text(y)}")
    batch = tuple(e if d == 1 else d for d, e in zip(bx, by))
    return [x.with_shape(batch + (x.shape[-2], y.shape[-1]))]


def _matmul_flops(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return 2 * outs[0].numel * ins[0].shape[-1] + act_flops(outs, a)


# ----------------------------------------------------------------------------------- ONNX import

def _matmul_in(imp: Any, i: int, node: Any) -> None:
    """ONNX MatMul is the IR's matmul (NumPy broadcasting of batch dims, a weight as it is); a
    rank-1 operand is made a matrix and the result reshaped back, as ONNX defines it."""
    need(len(node.input) == 2 and not node.attribute)
    a, b = node.input
    ta, tb = imp.type_of(a, node), imp.type_of(b, node)
    out = imp.type_of(node.output[0], node)
    act, final = imp.fused_act(node)
    va, vb = imp.val(a, node), imp.val(b, node)
    if ta.rank >= 2 and tb.rank >= 2:
        imp.emit("matmul", [va, vb], final or node.output[0], act=act)
        return
    need(act == "none")
    if ta.rank == 1:
        va = imp.emit("reshape", [va], shape=(1,) + ta.shape)
    if tb.rank == 1:
        vb = imp.emit("reshape", [vb], shape=tb.shape + (1,))
    y = imp.emit("matmul", [va, vb])
    imp.emit("reshape", [y], node.output[0], shape=out.shape)


def _gemm_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"alpha", "beta", "transA", "transB"})
    need(len(node.input) in (2, 3))
    a = imp.val(node.input[0], node)
    bname = node.input[1]
    c = imp.consts.get(bname)
    if at.get("transB", 0) and c is not None and bname not in imp.defined \
            and bname not in imp.meta_weight_inputs and c.value.ndim == 2:
        # torch's Linear as Gemm(transB=1): the weight transposed once, so the rules see
        # matmul(x, W) as in the .tir models (the ONNX initializer itself maps to no IR value)
        b = imp.new_weight(bname + "_T", np.ascontiguousarray(c.value.T), bname, node, c.dtype)
        at = {**at, "transB": 0}
    else:
        b = imp.val(bname, node)
    if at.get("transA", 0):
        a = imp.emit("transpose", [a], perm=(1, 0))
    if at.get("transB", 0):
        b = imp.emit("transpose", [b], perm=(1, 0))
    out = imp.type_of(node.output[0], node)
    alpha, beta = short(np.float32(at.get("alpha", 1.0))), short(np.float32(at.get("beta", 1.0)))
    has_c = len(node.input) == 3 and node.input[2] and beta != 0.0
    last = not has_c
    y = imp.emit("matmul", [a, b], node.output[0] if last and alpha == 1.0 else None)
    if alpha != 1.0:
        y = imp.emit("scale", [y], node.output[0] if last else None, value=alpha)
    if has_c:
        c = imp.val(node.input[2], node)
        c = broadcast_to(imp, c, imp.type_of(node.input[2], node), out.shape)
        if beta != 1.0:
            c = imp.emit("scale", [c], value=beta)
        imp.emit("ewadd", [y, c], node.output[0])


ONNX_IMPORT = {"MatMul": _matmul_in, "Gemm": _gemm_in}


def _matmul_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    act = {"none": lambda x: x, "relu": torch.relu, "sigmoid": torch.sigmoid,
           "tanh": torch.tanh}[a["act"]]
    return lambda x, y: act(torch.matmul(x, y))


# ----------------------------------------------------------------------------------- the ops

OPS = [
    OpDef("matmul", (2, 2), (_ACT,), _matmul, _matmul_flops,
          "(batched) matrix product as NumPy/ONNX MatMul (batch dims broadcast, ranks >= 2 may "
          "differ) with a fused activation",
          eval=lambda a, x, y: ACT[a["act"]](np.matmul(x, y)),
          to_onnx=lambda w, n: w.add("MatMul", n.ins, [n.main]), torch=_matmul_torch,
          cost="matrix", interp_temps=1, interp_gemm=True),
]
