"""poolmax, poolavg: 2-D pooling over NCHW with a window, stride, padding and a fused
activation. Padding never wins a max; an average counts the padding in its divisor (cuDNN,
TASO).

ONNX: MaxPool, AveragePool (count_include_pad; without it only where nothing is padded),
GlobalMaxPool, GlobalAveragePool (a window of the whole plane); ceil_mode, storage_order and
dilations other than 1 stay opaque, as does a MaxPool whose indices are read.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..graph import TensorType
from ..shapes import padded_out, spatial_out, spatial_pads, window_pads
from .activation import ACT
from .conv import ACT_SPEC, PAD, STRIDE, pad_spatial, taps, window_common
from .onnx_map import attrs_of, known, need
from .schema import AttrSpec, OpDef, act_flops, fail, need_rank, shape_text

Array = np.ndarray


def _pool(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    need_rank(x, 4, "input")
    if not isinstance(a["pad"], str) and any(p >= k for p, k in zip(a["pad"], a["kernel"] * 2)):
        fail(f"explicit pads {list(a['pad'])} must be smaller than the window "
             f"{list(a['kernel'])}")
    ho, wo = spatial_out(x.shape[2:], a["kernel"], a["stride"], a["pad"])
    if ho <= 0 or wo <= 0:
        fail(f"window {a['kernel']} does not fit input {shape_text(x)}")
    return [x.with_shape(x.shape[:2] + (ho, wo))]


def _pool_flops(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return outs[0].numel * a["kernel"][0] * a["kernel"][1] + act_flops(outs, a)


def pool(x: Array, a: dict, kind: str) -> Array:
    """Max or average over each window, as an element-wise max / sum over the kernel taps."""
    kernel, stride = a["kernel"], a["stride"]
    pads = spatial_pads(x.shape[2:], kernel, stride, a["pad"])
    out_hw = padded_out(x.shape[2:], pads, kernel, stride)
    xp = pad_spatial(x, pads, -np.inf if kind == "max" else 0.0)
    combine = np.maximum if kind == "max" else np.add
    out = None
    for _, _, view in taps(xp, kernel, stride, out_hw):
        if out is None:
            out = view.copy()
        else:
            combine(out, view, out=out)
    if kind != "max":
        out = out / (kernel[0] * kernel[1])
    return ACT[a["act"]](out.astype(x.dtype, copy=False))


# ----------------------------------------------------------------------------------- ONNX

def _pool_in(kind: str) -> Callable:
    def mapper(imp: Any, i: int, node: Any) -> None:
        at = attrs_of(node)
        known(at, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape",
                   "pads", "strides", "storage_order"})
        need(node.output[0] and all(imp.unused(o) for o in node.output[1:]))
        need(not at.get("ceil_mode", 0) and not at.get("storage_order", 0))
        kernel = tuple(at["kernel_shape"])
        x, stride, pad = window_common(imp, node, at, kernel)
        if kind == "poolavg" and not at.get("count_include_pad", 0):
            # padding left out of the divisor: exact only where there is no padding at all
            hw = x.shape[2:]
            if isinstance(pad, str):
                need(all(window_pads(hw[k], kernel[k], stride[k], pad) == (0, 0)
                         for k in (0, 1)))
            else:
                need(not any(pad))
        act, final = imp.fused_act(node)
        imp.emit(kind, [imp.val(node.input[0], node)], final or node.output[0], kernel=kernel,
                 stride=stride, pad=pad, act=act)
    return mapper


def _global_pool_in(kind: str) -> Callable:
    def mapper(imp: Any, i: int, node: Any) -> None:
        need(not node.attribute)
        x = imp.type_of(node.input[0], node)
        need(x.rank == 4)
        imp.emit(kind, [imp.val(node.input[0], node)], node.output[0], kernel=x.shape[2:],
                 pad="valid")
    return mapper


ONNX_IMPORT = {"MaxPool": _pool_in("poolmax"), "AveragePool": _pool_in("poolavg"),
               "GlobalAveragePool": _global_pool_in("poolavg"),
               "GlobalMaxPool": _global_pool_in("poolmax")}


def _pool_onnx(kind: str) -> Callable:
    def write(w: Any, n: Any) -> None:
        extra = {"count_include_pad": 1} if kind == "poolavg" else {}
        w.add("MaxPool" if kind == "poolmax" else "AveragePool", n.ins, [n.main],
              kernel_shape=list(n.a["kernel"]), strides=list(n.a["stride"]),
              **w.padding(n.a, n.in_types[0].shape[2:], n.a["kernel"]), **extra)
    return write


def _pool_torch(kind: str) -> Callable:
    def lower(torch: Any, a: dict, ts: list[TensorType]) -> Any:
        F = torch.nn.functional
        (x_t,) = ts
        (t, b), (l, r) = spatial_pads(tuple(x_t.shape[2:]), tuple(a["kernel"]),
                                      tuple(a["stride"]), a["pad"])
        act = {"none": lambda x: x, "relu": torch.relu, "sigmoid": torch.sigmoid,
               "tanh": torch.tanh}[a["act"]]
        kernel, stride = tuple(a["kernel"]), tuple(a["stride"])
        fn = F.max_pool2d if kind == "poolmax" else F.avg_pool2d
        fill = float("-inf") if kind == "poolmax" else 0.0
        extra = {} if kind == "poolmax" else {"count_include_pad": True}
        if t == b and l == r and 2 * t <= kernel[0] and 2 * l <= kernel[1]:
            return lambda x: act(fn(x, kernel, stride, padding=(t, l), **extra))
        return lambda x: act(fn(F.pad(x, (l, r, t, b), value=fill), kernel, stride))
    return lower


# ----------------------------------------------------------------------------------- the ops

_WINDOW = (AttrSpec("kernel", "ints"), STRIDE, PAD, ACT_SPEC)

OPS = [
    OpDef("poolmax", (1, 1), _WINDOW, _pool, _pool_flops, "2-D max pooling (padding never wins)",
          eval=lambda a, x: pool(x, a, "max"), to_onnx=_pool_onnx("poolmax"),
          torch=_pool_torch("poolmax"), cost="pool", interp_temps=1),
    OpDef("poolavg", (1, 1), _WINDOW, _pool, _pool_flops,
          "2-D average pooling; padding counts in the divisor (cuDNN/TASO)",
          eval=lambda a, x: pool(x, a, "avg"), to_onnx=_pool_onnx("poolavg"),
          torch=_pool_torch("poolavg"), cost="pool", interp_temps=1),
]
