"""Reductions: reduce_mean (over listed axes, keeping them or not) and softmax (along an axis).

ONNX: ReduceMean (axes as an attribute, or a constant input from opset 18; no axes = all axes),
Softmax (before opset 13 Softmax flattens from `axis` on: the same only on the last axis).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..graph import TensorType
from .onnx_map import attrs_of, known, need
from .schema import AttrSpec, OpDef, axis_of, fail, numel_out

Array = np.ndarray


def _softmax(ins: list[TensorType], a: dict) -> list[TensorType]:
    axis_of(a["axis"], ins[0].rank)
    return [ins[0]]


def _reduce_mean(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    axes = sorted({axis_of(ax, x.rank) for ax in a["axes"]})
    if len(axes) != len(a["axes"]):
        fail(f"repeated axis in {list(a['axes'])}")
    if a["keepdims"]:
        dims = [1 if i in axes else d for i, d in enumerate(x.shape)]
    else:
        dims = [d for i, d in enumerate(x.shape) if i not in axes]
    return [x.with_shape(dims)]


def softmax(x: Array, a: dict) -> Array:
    e = x - x.max(axis=a["axis"], keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=a["axis"], keepdims=True)
    return e


# ----------------------------------------------------------------------------------- ONNX

def _softmax_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"axis"})
    x = imp.type_of(node.input[0], node)
    if imp.opset < 13:     # older Softmax flattens from `axis` on: the same only on the last axis
        axis = at.get("axis", 1)
        need(axis % max(x.rank, 1) == x.rank - 1)
        imp.emit("softmax", [imp.val(node.input[0], node)], node.output[0], axis=-1)
        return
    imp.emit("softmax", [imp.val(node.input[0], node)], node.output[0], axis=at.get("axis", -1))


def _reduce_mean_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"axes", "keepdims", "noop_with_empty_axes"})
    x = imp.type_of(node.input[0], node)
    axes = at.get("axes")
    if len(node.input) > 1 and node.input[1]:
        c = imp.const(node.input[1])
        need(c is not None)
        axes = [int(v) for v in c.reshape(-1)]
    if not axes:
        need(not at.get("noop_with_empty_axes", 0))
        axes = list(range(x.rank))
    imp.emit("reduce_mean", [imp.val(node.input[0], node)], node.output[0], axes=tuple(axes),
             keepdims=bool(at.get("keepdims", 1)))


ONNX_IMPORT = {"Softmax": _softmax_in, "ReduceMean": _reduce_mean_in}


def _softmax_onnx(w: Any, n: Any) -> None:
    from ...errors import TirError
    rank = n.in_types[0].rank
    axis = n.a["axis"]
    if w.opset < 13 and axis % rank != rank - 1:
        raise TirError(f"softmax ({n.r}) over axis {axis} of a rank-{rank} tensor cannot be "
                       f"written in opset {w.opset} (only the last axis)")
    w.add("Softmax", n.ins, [n.main], axis=axis % rank if w.opset < 13 else axis)


def _reduce_mean_onnx(w: Any, n: Any) -> None:
    a = n.a
    if w.opset >= 18:          # axes became an input in opset 18
        w.add("ReduceMean", [n.ins[0], w.ints(n, "axes", a["axes"])], [n.main],
              keepdims=int(a["keepdims"]))
    else:
        w.add("ReduceMean", n.ins, [n.main], axes=list(a["axes"]), keepdims=int(a["keepdims"]))


# ----------------------------------------------------------------------------------- the ops

OPS = [
    OpDef("softmax", (1, 1), (AttrSpec("axis", "int", -1),), _softmax, numel_out,
          "softmax along an axis", eval=lambda a, x: softmax(x, a), to_onnx=_softmax_onnx,
          onnx_opset=(1, 13),
          torch=lambda torch, a, ts: (lambda x: torch.softmax(x, dim=a["axis"])),
          cost="transcendental", interp_temps=2),
    OpDef("reduce_mean", (1, 1), (AttrSpec("axes", "ints"), AttrSpec("keepdims", "bool", True)),
          _reduce_mean, numel_out, "mean over axes",
          eval=lambda a, x: x.mean(axis=tuple(a["axes"]), keepdims=a["keepdims"]),
          to_onnx=_reduce_mean_onnx,
          torch=lambda torch, a, ts: (lambda x: x.mean(dim=tuple(a["axes"]),
                                                       keepdim=bool(a["keepdims"])))),
]
