"""conv2d and the two weight transforms TASO's conv rewrites need: enlarge (zero-pad a kernel to a
larger size, centred) and merge (a grouped conv's weight for fewer, wider groups).

conv2d: NCHW input, OIHW weight, optional bias [O]; groups = C_in / weight dim 1 (inferred from
the shapes, as in TASO); padding "same" (SAME_UPPER: the odd pixel after), "valid" or explicit
[top, left, bottom, right]; a fused activation applied after the bias.

ONNX: Conv (its bias as the third input B; explicit pads equal to SAME at the input's size read as
"same", zero pads as "valid", SAME_LOWER as explicit pads; dilations must be 1). enlarge and merge
have no ONNX op: written folded into an initializer when their operand is a weight, else as Pad
(enlarge) or Reshape, Mul by a block-diagonal 0/1 mask, Reshape (merge).
"""
from __future__ import annotations

from math import prod
from typing import Any, Iterator, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..graph import TensorType
from ..shapes import padded_out, spatial_out, spatial_pads, window_pads
from .activation import ACT
from .onnx_map import attrs_of, known, need, text
from .schema import AttrSpec, OpDef, act_flops, fail, need_rank, same_dtype, shape_text, zero

Array = np.ndarray
ACT_SPEC = AttrSpec("act", "str", "none", ("none", "relu", "sigmoid", "tanh"))
STRIDE = AttrSpec("stride", "ints", (1, 1))
PAD = AttrSpec("pad", "padding", "same")


def conv_groups(x: TensorType, w: TensorType) -> int:
    """Groups of a convolution, inferred from shapes as in TASO: C_in / (weight dim 1)."""
    return x.shape[1] // w.shape[1]


# ----------------------------------------------------------------------------------- shapes

def _conv2d(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, w = ins[:2]
    need_rank(x, 4, "input")
    need_rank(w, 4, "weight")
    same_dtype(ins)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if len(ins) == 3 and ins[2].shape != (o,):
        fail(f"bias must have shape {o} (the weight's output channels), got "
             f"{shape_text(ins[2])}")
    if cg <= 0 or c % cg:
        fail(f"input has {c} channels, not a multiple of the weight's {cg} input channels per "
             f"group")
    groups = c // cg
    if o % groups:
        fail(f"{o} output channels do not divide into {groups} groups")
    ho, wo = spatial_out((h, wd), (kh, kw), a["stride"], a["pad"])
    if ho <= 0 or wo <= 0:
        fail(f"kernel {kh}x{kw} does not fit input {shape_text(x)} with pad {a['pad']}")
    return [x.with_shape((n, o, ho, wo))]


def _conv2d_flops(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    w = ins[1]
    return 2 * outs[0].numel * w.shape[1] * w.shape[2] * w.shape[3] + act_flops(outs, a)


def _enlarge(ins: list[TensorType], a: dict) -> list[TensorType]:
    w, ref = ins
    need_rank(w, 4, "weight")
    need_rank(ref, 4, "reference weight")
    kh, kw = w.shape[2:]
    rh, rw = ref.shape[2:]
    if rh < kh or rw < kw or (rh - kh) % 2 or (rw - kw) % 2:
        fail(f"cannot centre a {kh}x{kw} kernel in {rh}x{rw}")
    return [w.with_shape(w.shape[:2] + (rh, rw))]


def _merge(ins: list[TensorType], a: dict) -> list[TensorType]:
    (w,) = ins
    need_rank(w, 4, "weight")
    count, groups = a["count"], a["groups"]
    if count < 1 or groups < 1 or groups % count or w.shape[0] % groups:
        fail(f"cannot merge {groups} groups of a weight {shape_text(w)} by {count}")
    return [w.with_shape((w.shape[0], w.shape[1] * count) + w.shape[2:])]


# ----------------------------------------------------------------------------------- reference

def pad_spatial(x: Array, pads: tuple[tuple[int, int], tuple[int, int]], value: float) -> Array:
    (t, b), (l, r) = pads
    if t == b == l == r == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)


def taps(xp: Array, kernel: Sequence[int], stride: Sequence[int], out_hw: tuple[int, int]
         ) -> Iterator[tuple[int, int, Array]]:
    """(i, j, view) for each kernel tap: the strided view [..., Ho, Wo] of the padded input that
    the tap reads at every output position."""
    (s0, s1), (ho, wo) = stride, out_hw
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            yield i, j, xp[..., i:i + s0 * (ho - 1) + 1:s0, j:j + s1 * (wo - 1) + 1:s1]


def conv2d_path(w_shape: Sequence[int], pads) -> str:
    """How `conv2d` computes: '1x1' (no padding: one matmul on the input as it lies), 'taps' (one
    input channel per group: kh*kw element-wise multiply-adds, where a matmul per group would be
    kh*kw-long dot products), else 'im2col'. The verification planner prices each path."""
    _, cg, kh, kw = w_shape
    if kh == kw == 1 and not any(p for pair in pads for p in pair):
        return "1x1"
    return "taps" if cg == 1 else "im2col"


def conv2d(x: Array, w: Array, a: dict, b: Array | None = None) -> Array:
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    g, og = c // cg, o // (c // cg)
    stride = a["stride"]
    pads = spatial_pads(x.shape[2:], (kh, kw), stride, a["pad"])
    ho, wo = padded_out(x.shape[2:], pads, (kh, kw), stride)
    path = conv2d_path(w.shape, pads)
    if path == "1x1":
        xs = x[:, :, ::stride[0], ::stride[1]]
        out = np.matmul(w.reshape(g, og, cg), xs.reshape(n, g, cg, ho * wo))
    elif path == "taps":     # out[n, o] = sum over taps (i, j) of w[o, 0, i, j] * x[n, o // og]
        xp = pad_spatial(x, pads, 0.0)
        xp = xp.reshape(n, g, 1, *xp.shape[2:])
        wt = w.reshape(g, og, kh, kw)
        out = np.zeros((n, g, og, ho, wo), dtype=np.result_type(x, w))
        term = np.empty_like(out)
        for i, j, view in taps(xp, (kh, kw), stride, (ho, wo)):
            np.multiply(view, wt[:, :, i, j].reshape(1, g, og, 1, 1), out=term)
            out += term
    else:       # im2col laid out [g, Cg*kh*kw, N*Ho*Wo]: one matmul per group gives [O, N*Ho*Wo]
        xp = pad_spatial(x, pads, 0.0)
        win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride[0], ::stride[1]]
        cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(g, cg * kh * kw, n * ho * wo)
        out = np.matmul(w.reshape(g, og, cg * kh * kw), cols)
        if n > 1:
            out = np.ascontiguousarray(out.reshape(o, n, ho * wo).transpose(1, 0, 2))
    out = out.reshape(n, o, ho, wo)
    if b is not None:
        out = out + b.reshape(o, 1, 1)
    return ACT[a["act"]](out)


def _conv2d_work(ins: list[TensorType], outs: list[TensorType], a: dict, nbytes: Any
                 ) -> tuple[int, bool]:
    """Bytes of `conv2d`'s temporaries besides its result, for the path it takes: a copy of the
    (strided) input for a 1x1; the padded input and one product for taps; the padded input, the
    im2col columns and (batch > 1) a reordered result for im2col. Taps run element-wise, the
    other paths as BLAS GEMMs."""
    x, w = ins[:2]
    out = outs[0]
    item = nbytes(TensorType((), x.dtype))
    pads = spatial_pads(x.shape[2:], w.shape[2:], a["stride"], a["pad"])
    n, c, h, wd = x.shape
    padded = n * c * (h + sum(pads[0])) * (wd + sum(pads[1])) * item
    path = conv2d_path(w.shape, pads)
    temps = 2 * nbytes(out)
    if path == "1x1":
        return temps + n * c * prod(out.shape[2:]) * item, True
    if path == "taps":
        return temps + padded + nbytes(out), False
    cols = c * w.shape[2] * w.shape[3] * n * prod(out.shape[2:])
    return temps + padded + cols * item + (nbytes(out) if n > 1 else 0), True


def enlarge(w: Array, ref: Array) -> Array:
    kh, kw = w.shape[2:]
    rh, rw = ref.shape[2:]
    ph, pw = (rh - kh) // 2, (rw - kw) // 2
    return np.pad(w, ((0, 0), (0, 0), (ph, rh - kh - ph), (pw, rw - kw - pw)))


def merge(w: Array, a: dict) -> Array:
    """Weight of the same convolution computed with groups/count groups: output channel o of old
    group j = o // (O/groups) reads its Cg inputs at slot j % count of its new, wider group."""
    count, groups = a["count"], a["groups"]
    o, cg = w.shape[:2]
    out = np.zeros((o, cg * count) + w.shape[2:], dtype=w.dtype)
    for ch in range(o):
        slot = (ch // (o // groups)) % count
        out[ch, slot * cg:(slot + 1) * cg] = w[ch]
    return out


# ----------------------------------------------------------------------------------- ONNX import

def padding(imp: Any, node: Any, at: dict, hw: tuple[int, int], kernel: tuple[int, int],
            stride: tuple[int, int]) -> Any:
    """The IR padding of an ONNX Conv/Pool's auto_pad/pads attributes."""
    auto = text(at.get("auto_pad", "NOTSET"))
    if auto == "SAME_UPPER":
        return "same"
    if auto == "VALID":
        return "valid"
    if auto == "SAME_LOWER":
        (t, b_), (l, r) = [window_pads(hw[k], kernel[k], stride[k], "same") for k in (0, 1)]
        return (b_, r, t, l)               # the odd pixel goes before
    need(auto == "NOTSET")
    pads = tuple(at.get("pads", (0, 0, 0, 0)))
    need(len(pads) == 4 and all(p >= 0 for p in pads))
    # canonical forms, so that rules written for pad = "same" (the default) / "valid" match
    # exporter output: explicit pads equal to SAME at this input size are "same" (a 1x1 conv's
    # zero pads too), other zero pads "valid"
    (t, b_), (l, r) = [window_pads(hw[k], kernel[k], stride[k], "same") for k in (0, 1)]
    if pads == (t, l, b_, r) and all(stride[k] == 1 or imp.fixed_dim(node.input[0], 2 + k)
                                     for k in (0, 1)):
        return "same"       # strided SAME depends on the size: only where the size is fixed
    if not any(pads):
        return "valid"
    return pads


def window_common(imp: Any, node: Any, at: dict, kernel: tuple[int, int]) -> tuple:
    """(input type, stride, padding) of an ONNX Conv/Pool that maps onto the IR."""
    x = imp.type_of(node.input[0], node)
    need(x.rank == 4 and len(kernel) == 2)
    need(all(d == 1 for d in at.get("dilations", (1, 1))))
    stride = tuple(at.get("strides", (1, 1)))
    need(len(stride) == 2)
    return x, stride, padding(imp, node, at, x.shape[2:], kernel, stride)


def _conv_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    need(len(node.input) in (2, 3))
    w = imp.type_of(node.input[1], node)
    need(w.rank == 4)
    kernel = tuple(w.shape[2:])
    need(tuple(at.get("kernel_shape", kernel)) == kernel)
    x, stride, pad = window_common(imp, node, at, kernel)
    need(x.shape[1] // w.shape[1] == at.get("group", 1) and x.shape[1] % w.shape[1] == 0)
    ins = [imp.val(node.input[0], node), imp.val(node.input[1], node)]
    if len(node.input) == 3 and node.input[2]:     # B [M], constant or not: conv2d's bias
        need(imp.type_of(node.input[2], node).shape == (w.shape[0],))
        ins.append(imp.val(node.input[2], node))
    act, final = imp.fused_act(node)
    imp.emit("conv2d", ins, final or node.output[0], stride=stride, pad=pad, act=act)


ONNX_IMPORT = {"Conv": _conv_in}


# ----------------------------------------------------------------------------------- ONNX export

def _conv_onnx(w: Any, n: Any) -> None:     # an optional bias is Conv's third input B
    x, k = n.in_types[:2]
    w.add("Conv", n.ins, [n.main], kernel_shape=list(k.shape[2:]), strides=list(n.a["stride"]),
          group=x.shape[1] // k.shape[1], **w.padding(n.a, x.shape[2:], k.shape[2:]))


def _enlarge_onnx(w: Any, n: Any) -> None:
    k, ref = n.in_types
    value = w.weight_value(n, 0)
    if value is not None:                             # a weight: fold
        w.fold(n, enlarge(value, np.empty(ref.shape)))
        return
    kh, kw = k.shape[2:]
    rh, rw = ref.shape[2:]
    ph, pw = (rh - kh) // 2, (rw - kw) // 2
    w.add("Pad", [n.ins[0], w.ints(n, "pads", [0, 0, ph, pw, 0, 0, rh - kh - ph, rw - kw - pw])],
          [n.main], mode="constant")         # the reference kernel only lends its shape


def _merge_onnx(w: Any, n: Any) -> None:
    value = w.weight_value(n, 0)
    if value is not None:
        w.fold(n, merge(value, n.a))
        return
    from ..opaque import NP_DTYPES
    (k,) = n.in_types
    count, groups = n.a["count"], n.a["groups"]
    o, cg, kh, kw = k.shape
    blocks = (groups // count, count, o // groups, 1, cg, kh, kw)
    mask = np.eye(count, dtype=NP_DTYPES[k.dtype]).reshape(1, count, 1, count, 1, 1, 1)
    r, m = w.tmp(n, "blocks"), w.tmp(n, "masked")
    w.add("Reshape", [n.ins[0], w.ints(n, "blocks_shape", blocks)], [r])
    w.add("Mul", [r, w.constant(n, "mask", mask)], [m])
    w.add("Reshape", [m, w.ints(n, "shape", n.out_types[0].shape)], [n.main])


# ----------------------------------------------------------------------------------- torch

def _spatial_torch(x_t: TensorType, kernel: Sequence[int], stride: Sequence[int], pad: Any
                   ) -> tuple[int, int, int, int]:
    (t, b), (l, r) = spatial_pads(tuple(x_t.shape[2:]), tuple(kernel), tuple(stride), pad)
    return t, b, l, r


def _conv_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    F = torch.nn.functional
    act = {"none": lambda x: x, "relu": torch.relu, "sigmoid": torch.sigmoid,
           "tanh": torch.tanh}[a["act"]]
    x_t, w_t = ts[:2]
    t, b, l, r = _spatial_torch(x_t, w_t.shape[2:], a["stride"], a["pad"])
    groups = conv_groups(x_t, w_t)
    stride = tuple(a["stride"])
    if t == b and l == r:      # bias=None where conv2d has none
        return lambda x, w, bias=None: act(F.conv2d(x, w, bias, stride=stride, padding=(t, l),
                                                    groups=groups))
    return lambda x, w, bias=None: act(F.conv2d(F.pad(x, (l, r, t, b)), w, bias, stride=stride,
                                                groups=groups))


def _enlarge_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    w_t, ref_t = ts
    kh, kw = w_t.shape[2:]
    rh, rw = ref_t.shape[2:]
    ph, pw = (rh - kh) // 2, (rw - kw) // 2
    pads = (pw, rw - kw - pw, ph, rh - kh - ph)
    return lambda w, ref: torch.nn.functional.pad(w, pads)


def _merge_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    (w_t,) = ts
    count, groups = a["count"], a["groups"]
    o, cg, kh, kw = w_t.shape
    blocks = (groups // count, count, o // groups, 1, cg, kh, kw)
    out_shape = tuple(_merge([w_t], a)[0].shape)
    mask_np = np.eye(count, dtype=np.float32).reshape(1, count, 1, count, 1, 1, 1)
    cache: dict[Any, Any] = {}

    def run(w: Any) -> Any:
        key = (w.device, w.dtype)
        if key not in cache:            # the mask in the weight's own type (f16, bf16, ...)
            cache[key] = torch.as_tensor(mask_np, device=w.device).to(w.dtype)
        return (w.reshape(blocks) * cache[key]).reshape(out_shape)
    return run


# ----------------------------------------------------------------------------------- the ops

OPS = [
    OpDef("conv2d", (2, 3), (STRIDE, PAD, ACT_SPEC), _conv2d, _conv2d_flops,
          "NCHW convolution, OIHW weight, optional bias [O] (ONNX Conv's B); groups = C_in / "
          "weight dim 1; fused activation, applied after the bias",
          eval=lambda a, x, w, b=None: conv2d(x, w, a, b), to_onnx=_conv_onnx,
          torch=_conv_torch, cost="matrix", work=_conv2d_work),
    OpDef("enlarge", (2, 2), (), _enlarge, zero,
          "zero-pad a conv kernel, centred, to the kernel size of the second operand",
          eval=lambda a, w, ref: enlarge(w, ref), to_onnx=_enlarge_onnx, onnx_opset=(11, 13),
          torch=_enlarge_torch),
    OpDef("merge", (1, 1), (AttrSpec("count", "int"), AttrSpec("groups", "int")), _merge, zero,
          "grouped-conv weight for groups/count groups, block-diagonal (TASO merge_gconv)",
          eval=lambda a, w: merge(w, a), to_onnx=_merge_onnx, onnx_opset=(11, 13),
          torch=_merge_torch, interp_temps=1),
]
