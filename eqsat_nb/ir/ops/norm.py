"""Normalizations: batchnorm (inference, over axis 1), layernorm (over the axes from `axis` on,
then * gamma + beta), rmsnorm (x / sqrt(mean(x * x) + eps) over the axes from `axis` on, then *
gamma: ONNX's RMSNormalization, Llama's RMSNorm).

ONNX: BatchNormalization in inference mode (unused extra outputs dropped), LayerNormalization
(opset 17; a missing bias is a zero weight; gamma/beta broadcast to the normalized shape),
RMSNormalization (opset 23). Below those opsets the decompositions exporters write are written
(ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add; Pow, ReduceMean, Add, Sqrt, Div, Mul):
the forms onnxruntime fuses into LayerNormalization and SimplifiedLayerNormalization. Those
decompositions, and LlamaRMSNorm's (x * 1 / sqrt(...)), are raised to `layernorm` and `rmsnorm` by
rules/idioms/idioms.rules.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..graph import TensorType
from ..shapes import normalize_axis
from .onnx_map import attrs_of, broadcast_to, known, need, short
from .schema import AttrSpec, OpDef, axis_of, fail, numel_out, same_dtype, shape_text

Array = np.ndarray

# ----------------------------------------------------------------------------------- shapes


def _batchnorm(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, *params = ins
    if x.rank < 2:
        fail(f"input must have rank >= 2, got {shape_text(x)}")
    same_dtype(ins)
    for name, p in zip(("scale", "bias", "mean", "var"), params):
        if p.shape != (x.shape[1],):
            fail(f"{name} must have shape {x.shape[1]} (channels of {shape_text(x)}), got "
                 f"{shape_text(p)}")
    return [x]


def _layernorm(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, *params = ins
    axis = axis_of(a["axis"], x.rank)
    same_dtype(ins)
    norm = x.shape[axis:]
    for name, p in zip(("gamma", "beta"), params):
        if p.shape != norm:
            fail(f"{name} must have shape {'x'.join(map(str, norm))}, got {shape_text(p)}")
    return [x]


# ----------------------------------------------------------------------------------- reference

def batchnorm(x: Array, scale: Array, bias: Array, mean: Array, var: Array, a: dict) -> Array:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + a["eps"])
    return (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)


def layernorm(x: Array, gamma: Array, beta: Array, a: dict) -> Array:
    axes = tuple(range(normalize_axis(a["axis"], x.ndim), x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + a["eps"]) * gamma + beta


def rmsnorm(x: Array, gamma: Array, a: dict) -> Array:
    """ONNX RMSNormalization: x / sqrt(mean(x * x) + eps) * gamma, eps in x's element type."""
    axes = tuple(range(normalize_axis(a["axis"], x.ndim), x.ndim))
    ms = (x * x).mean(axis=axes, keepdims=True)
    return x / np.sqrt(ms + np.asarray(a["eps"], dtype=x.dtype)) * gamma


# ----------------------------------------------------------------------------------- ONNX

def _batchnorm_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"})
    need(not at.get("training_mode", 0) and at.get("spatial", 1) == 1)
    need(imp.opset >= 7 or at.get("is_test", 0) == 1)
    need(len(node.input) == 5 and all(node.input))
    need(all(imp.unused(o) for o in node.output[1:]))     # e.g. a Dropout mask nobody reads
    imp.emit("batchnorm", [imp.val(v, node) for v in node.input], node.output[0],
             eps=short(np.float32(at.get("epsilon", 1e-5))))


def _layernorm_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"axis", "epsilon", "stash_type"})
    need(at.get("stash_type", 1) == 1 and all(imp.unused(o) for o in node.output[1:]))
    need(len(node.input) >= 2 and node.input[1])
    x = imp.type_of(node.input[0], node)
    axis = at.get("axis", -1)
    norm = x.shape[axis % x.rank:]
    g = imp.val(node.input[1], node)
    g = broadcast_to(imp, g, imp.type_of(node.input[1], node), norm)
    if len(node.input) > 2 and node.input[2]:
        b = broadcast_to(imp, imp.val(node.input[2], node), imp.type_of(node.input[2], node), norm)
    else:            # no bias: a zero weight (the value travels with the other weights)
        from ..tensors import as_dtype
        b = imp.new_weight(node.output[0] + "_zero_bias", as_dtype(np.zeros(norm), x.dtype),
                           node.output[0], node, x.dtype)
    imp.emit("layernorm", [imp.val(node.input[0], node), g, b], node.output[0], axis=axis,
             eps=short(np.float32(at.get("epsilon", 1e-5))))


def _rmsnorm_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"axis", "epsilon", "stash_type"})
    need(at.get("stash_type", 1) == 1 and len(node.input) == 2 and all(node.input))
    x = imp.type_of(node.input[0], node)
    axis = at.get("axis", -1)
    g = broadcast_to(imp, imp.val(node.input[1], node), imp.type_of(node.input[1], node),
                     x.shape[axis % x.rank:])
    imp.emit("rmsnorm", [imp.val(node.input[0], node), g], node.output[0], axis=axis,
             eps=short(np.float32(at.get("epsilon", 1e-5))))


ONNX_IMPORT = {"BatchNormalization": _batchnorm_in, "LayerNormalization": _layernorm_in,
               "RMSNormalization": _rmsnorm_in}


def _mean_last(w: Any, n: Any, x: str, out: str) -> None:
    """ReduceMean of `x` over the normalized axes, kept, written as negative axes."""
    rank = n.in_types[0].rank
    axes = [k - rank for k in range(n.a["axis"] % rank, rank)]
    if w.opset >= 18:
        w.add("ReduceMean", [x, w.ints(n, out.rsplit("#", 1)[-1] + "_axes", axes)], [out])
    else:
        w.add("ReduceMean", [x], [out], axes=axes)


def _layernorm_onnx(w: Any, n: Any) -> None:
    if w.opset >= 17:
        w.add("LayerNormalization", n.ins, [n.main], axis=n.a["axis"], epsilon=n.a["eps"])
        return
    dt = n.in_types[0].dtype         # as torch writes LayerNorm below opset 17
    x, g, b = n.ins
    m, d, d2, v, ve, sd, y, yg = (w.tmp(n, k) for k in ("mean", "sub", "pow", "var", "add",
                                                         "sqrt", "div", "mul"))
    _mean_last(w, n, x, m)
    w.add("Sub", [x, m], [d])
    w.add("Pow", [d, w.constant(n, "two", np.asarray(2.0), dtype=dt)], [d2])
    _mean_last(w, n, d2, v)
    w.add("Add", [v, w.constant(n, "eps", np.asarray(n.a["eps"]), doc=repr(n.a["eps"]),
                                dtype=dt)],
          [ve])
    w.add("Sqrt", [ve], [sd])
    w.add("Div", [d, sd], [y])
    w.add("Mul", [y, g], [yg])
    w.add("Add", [yg, b], [n.main])


def _rmsnorm_onnx(w: Any, n: Any) -> None:
    if w.opset >= 23:
        w.add("RMSNormalization", n.ins, [n.main], axis=n.a["axis"], epsilon=n.a["eps"])
        return
    dt = n.in_types[0].dtype         # the form onnxruntime fuses (SimplifiedLayerNormalization)
    x, g = n.ins
    x2, m, me, rms, y = (w.tmp(n, k) for k in ("pow", "mean", "add", "sqrt", "div"))
    w.add("Pow", [x, w.constant(n, "two", np.asarray(2.0), dtype=dt)], [x2])
    _mean_last(w, n, x2, m)
    w.add("Add", [m, w.constant(n, "eps", np.asarray(n.a["eps"]), doc=repr(n.a["eps"]),
                                dtype=dt)],
          [me])
    w.add("Sqrt", [me], [rms])
    w.add("Div", [x, rms], [y])
    w.add("Mul", [y, g], [n.main])


def _layernorm_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    x_t = ts[0]
    axis = a["axis"] % len(x_t.shape)
    norm_shape, eps = tuple(x_t.shape[axis:]), a["eps"]
    return lambda x, g, b: torch.nn.functional.layer_norm(x, norm_shape, g.reshape(norm_shape),
                                                          b.reshape(norm_shape), eps)


def _rmsnorm_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    x_t = ts[0]
    axes = tuple(range(a["axis"] % len(x_t.shape), len(x_t.shape)))
    eps = a["eps"]
    return lambda x, g: x / torch.sqrt((x * x).mean(dim=axes, keepdim=True) + eps) * g


def _batchnorm_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    eps = a["eps"]
    return lambda x, s, b, m, v: torch.nn.functional.batch_norm(x, m, v, s, b, training=False,
                                                                eps=eps)


# ----------------------------------------------------------------------------------- the ops

OPS = [
    OpDef("batchnorm", (5, 5), (AttrSpec("eps", "float", 1e-5),), _batchnorm, numel_out,
          "inference batch norm over axis 1: (x - mean) / sqrt(var + eps) * scale + bias",
          eval=lambda a, *xs: batchnorm(*xs, a),
          to_onnx=lambda w, n: w.add("BatchNormalization", n.ins, [n.main], epsilon=n.a["eps"]),
          onnx_opset=(7, 9), torch=_batchnorm_torch, positive=(4,), interp_temps=2),
    OpDef("layernorm", (3, 3), (AttrSpec("axis", "int", -1), AttrSpec("eps", "float", 1e-5)),
          _layernorm, numel_out, "normalize over axes >= axis, then * gamma + beta",
          eval=lambda a, x, g, b: layernorm(x, g, b, a),
          to_onnx=_layernorm_onnx, onnx_opset=(7, 17), torch=_layernorm_torch, interp_temps=3),
    OpDef("rmsnorm", (2, 2), (AttrSpec("axis", "int", -1), AttrSpec("eps", "float", 1e-5)),
          _layernorm, numel_out, "x / sqrt(mean(x * x) + eps) over axes >= axis, then * gamma",
          eval=lambda a, x, g: rmsnorm(x, g, a), to_onnx=_rmsnorm_onnx, onnx_opset=(7, 7),
          torch=_rmsnorm_torch, interp_temps=3),
]
