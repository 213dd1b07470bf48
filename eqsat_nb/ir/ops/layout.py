"""Ops that move elements without arithmetic: transpose, concat, split (explicit sizes, one
result each), reshape, slice, pad (constant), broadcast (NumPy-style, the IR's only way to
broadcast).

ONNX: Transpose, Concat, Split (sizes from the inferred output shapes), Reshape / Flatten /
Squeeze / Unsqueeze with static parameters (a reshape to the inferred shape), Slice (static, step
1, clamped), Pad (constant mode), Expand with a static shape. Written back in the model's opset:
Split's sizes and Slice's and Pad's parameters as attributes in old opsets, as inputs in new ones.
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable, Sequence

import numpy as np

from ..graph import TensorType
from ..shapes import normalize_axis
from .onnx_map import Const, attrs_of, exact_float, known, need, text
from .schema import AttrSpec, OpDef, axis_of, fail, same_dtype, shape_text, zero

Array = np.ndarray

# ----------------------------------------------------------------------------------- shapes


def _transpose(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    perm = a["perm"]
    if sorted(perm) != list(range(x.rank)):
        fail(f"perm {list(perm)} is not a permutation of the {x.rank} axes of {shape_text(x)}")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


def _concat(ins: list[TensorType], a: dict) -> list[TensorType]:
    first = ins[0]
    axis = axis_of(a["axis"], first.rank)
    same_dtype(ins)
    for t in ins[1:]:
        if t.rank != first.rank or any(d != e for i, (d, e) in enumerate(zip(t.shape, first.shape))
                                       if i != axis):
            fail(f"operands {shape_text(first)} and {shape_text(t)} differ outside axis {axis}")
    dims = list(first.shape)
    dims[axis] = sum(t.shape[axis] for t in ins)
    return [first.with_shape(dims)]


def _split(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    axis = axis_of(a["axis"], x.rank)
    sizes = a["sizes"]
    if len(sizes) < 1 or any(s <= 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        fail(f"sizes {list(sizes)} do not partition axis {axis} of length {x.shape[axis]}")
    out = []
    for s in sizes:
        dims = list(x.shape)
        dims[axis] = s
        out.append(x.with_shape(dims))
    return out


def _reshape(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    shape = a["shape"]
    if any(d <= 0 for d in shape) or prod(shape) != x.numel:
        fail(f"cannot reshape {shape_text(x)} ({x.numel} elements) to {list(shape)}")
    return [x.with_shape(shape)]


def _slice(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    axes, starts, ends = a["axes"], a["starts"], a["ends"]
    if not len(axes) == len(starts) == len(ends):
        fail("axes, starts and ends must have the same length")
    dims = list(x.shape)
    seen = set()
    for ax, s, e in zip(axes, starts, ends):
        i = axis_of(ax, x.rank)
        if i in seen:
            fail(f"axis {ax} sliced twice")
        seen.add(i)
        if not 0 <= s < e <= x.shape[i]:
            fail(f"slice [{s}:{e}] out of range for axis {i} of length {x.shape[i]}")
        dims[i] = e - s
    return [x.with_shape(dims)]


def _pad(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    pads = a["pads"]
    if len(pads) != 2 * x.rank or any(p < 0 for p in pads):
        fail(f"pads must be {2 * x.rank} non-negative ints (all begins, then all ends)")
    return [x.with_shape([d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape)])]


def _broadcast(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    shape = a["shape"]
    if any(d <= 0 for d in shape):
        fail(f"broadcast shape {list(shape)} has a non-positive dimension")
    if len(shape) < x.rank:
        fail(f"cannot broadcast {shape_text(x)} to lower rank {list(shape)}")
    for d, t in zip(reversed(x.shape), reversed(shape)):
        if d != t and d != 1:
            fail(f"cannot broadcast {shape_text(x)} to {list(shape)}")
    return [x.with_shape(shape)]


# ----------------------------------------------------------------------------------- reference

def transpose(x: Array, perm: Sequence[int]) -> Array:
    """A matrix transpose stays a view (F-ordered; BLAS and NumPy read it as it lies, where copying
    VGG-19's 25088x4096 weight took a second); higher ranks are copied, so that a batched matmul
    never meets an operand without a unit stride (NumPy's slow non-BLAS loop)."""
    t = np.transpose(x, perm)
    return t if t.ndim <= 2 else np.ascontiguousarray(t)


def split(x: Array, a: dict) -> tuple[Array, ...]:
    cuts = np.cumsum(a["sizes"])[:-1]
    return tuple(np.split(x, cuts, axis=a["axis"]))


def slice_(x: Array, a: dict) -> Array:
    index = [slice(None)] * x.ndim
    for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
        index[normalize_axis(ax, x.ndim)] = slice(s, e)
    return x[tuple(index)]


def pad(x: Array, a: dict) -> Array:
    r = x.ndim
    p = a["pads"]
    return np.pad(x, [(p[i], p[i + r]) for i in range(r)], constant_values=a["value"])


# ----------------------------------------------------------------------------------- ONNX import

def _concat_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"axis"})
    need(all(node.input))
    imp.emit("concat", [imp.val(v, node) for v in node.input], node.output[0], axis=at["axis"])


def _split_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"axis", "split", "num_outputs"})
    need(all(node.output))
    if len(node.input) > 1 and node.input[1]:
        need(imp.const(node.input[1]) is not None)    # sizes must be static
    axis = at.get("axis", 0)
    x = imp.type_of(node.input[0], node)
    sizes = tuple(imp.type_of(o, node).shape[axis % x.rank] for o in node.output)
    names = [imp.ssa_for(o) for o in node.output]
    imp.before(names[0])
    imp.b.op("split", imp.val(node.input[0], node), names=names, axis=axis, sizes=sizes)
    imp.defined.update(node.output)


def _reshape_like(static_inputs: int, allowed: set[str]) -> Callable:
    """Reshape/Flatten/Squeeze/Unsqueeze with static parameters: a reshape to the inferred shape."""
    def mapper(imp: Any, i: int, node: Any) -> None:
        known(attrs_of(node), allowed)
        for v in node.input[1:1 + static_inputs]:
            need(not v or imp.const(v) is not None)
        need(len(node.input) <= 1 + static_inputs)
        out = imp.type_of(node.output[0], node)
        imp.emit("reshape", [imp.val(node.input[0], node)], node.output[0], shape=out.shape)
    return mapper


def _transpose_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"perm"})
    x = imp.type_of(node.input[0], node)
    perm = tuple(at.get("perm", range(x.rank - 1, -1, -1)))
    imp.emit("transpose", [imp.val(node.input[0], node)], node.output[0], perm=perm)


def _slice_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    x = imp.type_of(node.input[0], node)
    if imp.opset < 10:
        known(at, {"starts", "ends", "axes"})
        starts, ends = list(at["starts"]), list(at["ends"])
        axes = list(at.get("axes", range(len(starts))))
    else:
        need(not at)
        vals = []
        for k in range(1, 5):
            v = node.input[k] if len(node.input) > k and node.input[k] else None
            c = imp.const(v) if v else None
            need(v is None or c is not None)
            vals.append(None if c is None else [int(t) for t in c.reshape(-1)])
        starts, ends, axes, steps = vals
        axes = axes if axes is not None else list(range(len(starts)))
        need(steps is None or all(s == 1 for s in steps))
    out_s, out_e, out_a = [], [], []
    for ax, s, e in zip(axes, starts, ends):
        dim = x.shape[ax % x.rank]
        s = min(max(s + dim if s < 0 else s, 0), dim)
        e = min(max(e + dim if e < 0 else e, 0), dim)
        need(s < e)
        out_a.append(ax)
        out_s.append(s)
        out_e.append(e)
    imp.emit("slice", [imp.val(node.input[0], node)], node.output[0], axes=tuple(out_a),
             starts=tuple(out_s), ends=tuple(out_e))


def _pad_in(imp: Any, i: int, node: Any) -> None:
    at = attrs_of(node)
    known(at, {"mode", "pads", "value"})
    need(text(at.get("mode", "constant")) == "constant")
    x = imp.type_of(node.input[0], node)
    value = at.get("value", 0.0)
    doc = ""
    if imp.opset >= 11:
        p = imp.const(node.input[1]) if len(node.input) > 1 else None
        need(p is not None)
        pads = [int(v) for v in p.reshape(-1)]
        if len(node.input) > 2 and node.input[2]:
            c = imp.consts.get(node.input[2])
            need(c is not None and c.value.size == 1)
            value, doc = c.value.reshape(-1)[0], c.doc
        if len(node.input) > 3 and node.input[3]:
            a = imp.const(node.input[3])
            need(a is not None)
            axes = [int(v) % x.rank for v in a.reshape(-1)]
            full = [0] * (2 * x.rank)
            for k, ax in enumerate(axes):
                full[ax], full[ax + x.rank] = pads[k], pads[k + len(axes)]
            pads = full
    else:
        pads = list(at.get("pads", ()))
    need(len(pads) == 2 * x.rank and all(p >= 0 for p in pads))
    v = exact_float(Const(np.asarray(value), False, doc)) if np.ndim(value) == 0 else 0.0
    imp.emit("pad", [imp.val(node.input[0], node)], node.output[0], pads=tuple(pads), value=v)


def _expand_in(imp: Any, i: int, node: Any) -> None:
    need(not node.attribute and len(node.input) == 2 and imp.const(node.input[1]) is not None)
    out = imp.type_of(node.output[0], node)
    imp.emit("broadcast", [imp.val(node.input[0], node)], node.output[0], shape=out.shape)


ONNX_IMPORT = {
    "Concat": _concat_in, "Split": _split_in, "Transpose": _transpose_in,
    "Reshape": _reshape_like(1, {"allowzero"}), "Flatten": _reshape_like(0, {"axis"}),
    "Squeeze": _reshape_like(1, {"axes"}), "Unsqueeze": _reshape_like(1, {"axes"}),
    "Slice": _slice_in, "Pad": _pad_in, "Expand": _expand_in,
}

# ----------------------------------------------------------------------------------- ONNX export


def _split_onnx(w: Any, n: Any) -> None:
    if w.opset < 13:
        w.add("Split", [n.ins[0]], n.outs, axis=n.a["axis"], split=list(n.a["sizes"]))
    else:
        w.add("Split", [n.ins[0], w.ints(n, "sizes", n.a["sizes"])], n.outs, axis=n.a["axis"])


def _slice_onnx(w: Any, n: Any) -> None:
    a = n.a
    if w.opset < 10:
        w.add("Slice", n.ins, [n.main], starts=list(a["starts"]), ends=list(a["ends"]),
              axes=list(a["axes"]))
    else:
        w.add("Slice", [n.ins[0], w.ints(n, "starts", a["starts"]), w.ints(n, "ends", a["ends"]),
                        w.ints(n, "axes", a["axes"])], [n.main])


def _pad_onnx(w: Any, n: Any) -> None:
    a = n.a
    if w.opset < 11:
        w.add("Pad", n.ins, [n.main], mode="constant", pads=list(a["pads"]),
              value=float(a["value"]))
        return
    value = w.constant(n, "value", np.asarray(a["value"]), doc=repr(a["value"]),
                       dtype=n.in_types[0].dtype)
    w.add("Pad", [n.ins[0], w.ints(n, "pads", a["pads"]), value], [n.main], mode="constant")


# ----------------------------------------------------------------------------------- torch

def _slice_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    rank = ts[0].rank
    index = [slice(None)] * rank
    for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
        index[ax % rank] = slice(s, e)
    idx = tuple(index)
    return lambda x: x[idx]


def _pad_torch(torch: Any, a: dict, ts: list[TensorType]) -> Any:
    r = ts[0].rank
    p = a["pads"]
    flat: list[int] = []
    for i in reversed(range(r)):
        flat += [p[i], p[i + r]]
    value = float(a["value"])
    return lambda x: torch.nn.functional.pad(x, tuple(flat), value=value)


# ----------------------------------------------------------------------------------- the ops

def _ints(op: str) -> Callable:
    """Writer of an op whose one static parameter (`shape`) is an int64 operand."""
    onnx_op = {"reshape": "Reshape", "broadcast": "Expand"}[op]
    return lambda w, n: w.add(onnx_op, [n.ins[0], w.ints(n, "shape", n.a["shape"])], [n.main])


OPS = [
    OpDef("transpose", (1, 1), (AttrSpec("perm", "ints"),), _transpose, zero, "permute axes",
          eval=lambda a, x: transpose(x, a["perm"]),
          to_onnx=lambda w, n: w.add("Transpose", n.ins, [n.main], perm=list(n.a["perm"])),
          torch=lambda torch, a, ts: (lambda x, p=tuple(a["perm"]): x.permute(p).contiguous()),
          cost="transpose"),
    OpDef("concat", (1, None), (AttrSpec("axis", "int"),), _concat, zero, "join along an axis",
          eval=lambda a, *xs: np.concatenate(xs, axis=a["axis"]),
          to_onnx=lambda w, n: w.add("Concat", n.ins, [n.main], axis=n.a["axis"]),
          torch=lambda torch, a, ts: (lambda *xs: torch.cat(xs, dim=a["axis"])), cost="concat"),
    OpDef("split", (1, 1), (AttrSpec("axis", "int"), AttrSpec("sizes", "ints")), _split,
          zero, "cut along an axis into pieces of the given sizes (one result each)",
          multi_result=True, eval=lambda a, x: split(x, a), to_onnx=_split_onnx,
          onnx_opset=(2, 13),
          torch=lambda torch, a, ts: (lambda x: torch.split(x, list(a["sizes"]), dim=a["axis"])),
          cost="split"),
    OpDef("reshape", (1, 1), (AttrSpec("shape", "ints"),), _reshape, zero,
          "same elements, new shape (row-major)", eval=lambda a, x: x.reshape(a["shape"]),
          to_onnx=_ints("reshape"), onnx_opset=(5, 5),
          torch=lambda torch, a, ts: (lambda x, s=tuple(a["shape"]): x.reshape(s)), cost="view"),
    OpDef("slice", (1, 1), (AttrSpec("axes", "ints"), AttrSpec("starts", "ints"),
                            AttrSpec("ends", "ints")), _slice, zero,
          "contiguous sub-tensor, [start, end) per listed axis", eval=lambda a, x: slice_(x, a),
          to_onnx=_slice_onnx, onnx_opset=(1, 10), torch=_slice_torch),
    OpDef("pad", (1, 1), (AttrSpec("pads", "ints"), AttrSpec("value", "float", 0.0)), _pad,
          zero, "constant padding; pads = all begins then all ends (ONNX order)",
          eval=lambda a, x: pad(x, a), to_onnx=_pad_onnx, onnx_opset=(2, 11), torch=_pad_torch),
    OpDef("broadcast", (1, 1), (AttrSpec("shape", "ints"),), _broadcast, zero,
          "explicit NumPy-style broadcast to a shape",
          eval=lambda a, x: np.broadcast_to(x, a["shape"]).copy(), to_onnx=_ints("broadcast"),
          onnx_opset=(8, 8),
          torch=lambda torch, a, ts: (lambda x, s=tuple(a["shape"]): x.expand(s).contiguous())),
]
