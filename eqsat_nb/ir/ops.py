"""The operator table: one `OpDef` per operator with arity, attribute schema and shape function.

This table is the single source of truth for what an operator is. The parser, the graph builder,
the e-graph (operator ids = table order), rule application (shape checks) and the cost models all
read it. Shape functions reject invalid inputs with a `ShapeError` that names the operator. Element-
wise ops do not broadcast (TASO's implicit broadcasting let unsound rewrites through): `broadcast`
does. The one exception is `matmul`, which is ONNX/NumPy MatMul: its batch dims broadcast and the
operands' ranks may differ, so that `[B,S,H] @ [H,N]` keeps the weight as a weight.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Callable

from ..errors import ShapeError, TirError
from .graph import DTYPES, Attrs, TensorType
from .literal import format_literal
from .shapes import normalize_axis, spatial_out

REQUIRED = object()
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: its kind decides what literal is accepted and how it is stored.

    kinds: int, float, str (one of `choices`), ints (tuple of int), bool, padding ("same",
    "valid" or four ints [top, left, bottom, right]), dtype.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()


class AttrError(TirError):
    """A bad attribute; `attr` names it so the parser can point at it."""

    def __init__(self, message: str, attr: str | None = None) -> None:
        super().__init__(message)
        self.attr = attr


InferFn = Callable[[list[TensorType], dict[str, Any]], list[TensorType]]
FlopsFn = Callable[[list[TensorType], list[TensorType], dict[str, Any]], int]


@dataclass(frozen=True)
class OpDef:
    """An operator. `arity` is (min, max) inputs, max None for variadic."""

    name: str
    arity: tuple[int, int | None]
    attrs: tuple[AttrSpec, ...]
    infer: InferFn
    flops: FlopsFn
    doc: str
    leaf: bool = False          # no inputs; its value comes from outside (input, weight)
    multi_result: bool = False  # number of results decided by attributes (split)

    def attr_spec(self, name: str) -> AttrSpec | None:
        return next((s for s in self.attrs if s.name == name), None)


# ----------------------------------------------------------------------------------- helpers

def _fail(msg: str) -> None:
    raise ShapeError(msg)


def _same_dtype(ts: list[TensorType]) -> str:
    dtypes = {t.dtype for t in ts}
    if len(dtypes) > 1:
        _fail(f"inputs have different element types {sorted(dtypes)}")
    return ts[0].dtype


def _shape(t: TensorType) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def _rank(t: TensorType, rank: int, what: str) -> None:
    if t.rank != rank:
        _fail(f"{what} must have rank {rank}, got {_shape(t)}")


def _axis(axis: int, rank: int) -> int:
    try:
        return normalize_axis(axis, rank)
    except ValueError as e:
        raise ShapeError(str(e)) from None


def _numel_out(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return sum(t.numel for t in outs)


def _zero(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return 0


def _act_flops(outs: list[TensorType], a: dict) -> int:
    return 0 if a.get("act", "none") == "none" else outs[0].numel


# ----------------------------------------------------------------------------------- shape functions

def _leaf(ins: list[TensorType], a: dict) -> list[TensorType]:
    return [TensorType(a["shape"], a["dtype"])]


def _elementwise_binary(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, y = ins
    if x.shape != y.shape:
        _fail(f"operand shapes differ: {_shape(x)} vs {_shape(y)} (use broadcast explicitly)")
    _same_dtype(ins)
    return [x]


def _unary(ins: list[TensorType], a: dict) -> list[TensorType]:
    return [ins[0]]


def _matmul(ins: list[TensorType], a: dict) -> list[TensorType]:
    """NumPy/ONNX MatMul on operands of rank >= 2: batch dims broadcast (aligned from the end,
    equal or 1), ranks may differ ([B,S,H] @ [H,N] is one matmul on the weight as it is)."""
    x, y = ins
    _same_dtype(ins)
    if x.rank < 2 or y.rank < 2:
        _fail(f"operands must have rank >= 2, got {_shape(x)} and {_shape(y)}")
    if x.shape[-1] != y.shape[-2]:
        _fail(f"inner dimensions differ: {_shape(x)} @ {_shape(y)}")
    bx, by = x.shape[:-2], y.shape[:-2]
    n = max(len(bx), len(by))
    bx, by = (1,) * (n - len(bx)) + bx, (1,) * (n - len(by)) + by
    if any(d != e and d != 1 and e != 1 for d, e in zip(bx, by)):
        _fail(f"batch dimensions do not broadcast: {_shape(x)} @ {_shape(y)}")
    batch = tuple(e if d == 1 else d for d, e in zip(bx, by))
    return [x.with_shape(batch + (x.shape[-2], y.shape[-1]))]


def _matmul_flops(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return 2 * outs[0].numel * ins[0].shape[-1] + _act_flops(outs, a)


def conv_groups(x: TensorType, w: TensorType) -> int:
    """Groups of a convolution, inferred from shapes as in TASO: C_in / (weight dim 1)."""
    return x.shape[1] // w.shape[1]


def _conv2d(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, w = ins[:2]
    _rank(x, 4, "input")
    _rank(w, 4, "weight")
    _same_dtype(ins)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if len(ins) == 3 and ins[2].shape != (o,):
        _fail(f"bias must have shape {o} (the weight's output channels), got {_shape(ins[2])}")
    if cg <= 0 or c % cg:
        _fail(f"input has {c} channels, not a multiple of the weight's {cg} input channels per group")
    groups = c // cg
    if o % groups:
        _fail(f"{o} output channels do not divide into {groups} groups")
    ho, wo = spatial_out((h, wd), (kh, kw), a["stride"], a["pad"])
    if ho <= 0 or wo <= 0:
        _fail(f"kernel {kh}x{kw} does not fit input {_shape(x)} with pad {a['pad']}")
    return [x.with_shape((n, o, ho, wo))]


def _conv2d_flops(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    w = ins[1]
    return 2 * outs[0].numel * w.shape[1] * w.shape[2] * w.shape[3] + _act_flops(outs, a)


def _pool(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    _rank(x, 4, "input")
    if not isinstance(a["pad"], str) and any(p >= k for p, k in zip(a["pad"], a["kernel"] * 2)):
        _fail(f"explicit pads {list(a['pad'])} must be smaller than the window {list(a['kernel'])}")
    ho, wo = spatial_out(x.shape[2:], a["kernel"], a["stride"], a["pad"])
    if ho <= 0 or wo <= 0:
        _fail(f"window {a['kernel']} does not fit input {_shape(x)}")
    return [x.with_shape(x.shape[:2] + (ho, wo))]


def _pool_flops(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return outs[0].numel * a["kernel"][0] * a["kernel"][1] + _act_flops(outs, a)


def _transpose(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    perm = a["perm"]
    if sorted(perm) != list(range(x.rank)):
        _fail(f"perm {list(perm)} is not a permutation of the {x.rank} axes of {_shape(x)}")
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


def _enlarge(ins: list[TensorType], a: dict) -> list[TensorType]:
    w, ref = ins
    _rank(w, 4, "weight")
    _rank(ref, 4, "reference weight")
    kh, kw = w.shape[2:]
    rh, rw = ref.shape[2:]
    if rh < kh or rw < kw or (rh - kh) % 2 or (rw - kw) % 2:
        _fail(f"cannot centre a {kh}x{kw} kernel in {rh}x{rw}")
    return [w.with_shape(w.shape[:2] + (rh, rw))]


def _concat(ins: list[TensorType], a: dict) -> list[TensorType]:
    first = ins[0]
    axis = _axis(a["axis"], first.rank)
    _same_dtype(ins)
    for t in ins[1:]:
        if t.rank != first.rank or any(d != e for i, (d, e) in enumerate(zip(t.shape, first.shape))
                                       if i != axis):
            _fail(f"operands {_shape(first)} and {_shape(t)} differ outside axis {axis}")
    dims = list(first.shape)
    dims[axis] = sum(t.shape[axis] for t in ins)
    return [first.with_shape(dims)]


def _split(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    axis = _axis(a["axis"], x.rank)
    sizes = a["sizes"]
    if len(sizes) < 1 or any(s <= 0 for s in sizes) or sum(sizes) != x.shape[axis]:
        _fail(f"sizes {list(sizes)} do not partition axis {axis} of length {x.shape[axis]}")
    out = []
    for s in sizes:
        dims = list(x.shape)
        dims[axis] = s
        out.append(x.with_shape(dims))
    return out


def _merge(ins: list[TensorType], a: dict) -> list[TensorType]:
    (w,) = ins
    _rank(w, 4, "weight")
    count, groups = a["count"], a["groups"]
    if count < 1 or groups < 1 or groups % count or w.shape[0] % groups:
        _fail(f"cannot merge {groups} groups of a weight {_shape(w)} by {count}")
    return [w.with_shape((w.shape[0], w.shape[1] * count) + w.shape[2:])]


def _reshape(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    shape = a["shape"]
    if any(d <= 0 for d in shape) or prod(shape) != x.numel:
        _fail(f"cannot reshape {_shape(x)} ({x.numel} elements) to {list(shape)}")
    return [x.with_shape(shape)]


def _noop(ins: list[TensorType], a: dict) -> list[TensorType]:
    return [TensorType((), ins[0].dtype)]


def _batchnorm(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, *params = ins
    if x.rank < 2:
        _fail(f"input must have rank >= 2, got {_shape(x)}")
    _same_dtype(ins)
    for name, p in zip(("scale", "bias", "mean", "var"), params):
        if p.shape != (x.shape[1],):
            _fail(f"{name} must have shape {x.shape[1]} (channels of {_shape(x)}), got {_shape(p)}")
    return [x]


def _softmax(ins: list[TensorType], a: dict) -> list[TensorType]:
    _axis(a["axis"], ins[0].rank)
    return [ins[0]]


def _layernorm(ins: list[TensorType], a: dict) -> list[TensorType]:
    x, gamma, beta = ins
    axis = _axis(a["axis"], x.rank)
    _same_dtype(ins)
    norm = x.shape[axis:]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p.shape != norm:
            _fail(f"{name} must have shape {'x'.join(map(str, norm))}, got {_shape(p)}")
    return [x]


def _reduce_mean(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    axes = sorted({_axis(ax, x.rank) for ax in a["axes"]})
    if len(axes) != len(a["axes"]):
        _fail(f"repeated axis in {list(a['axes'])}")
    if a["keepdims"]:
        dims = [1 if i in axes else d for i, d in enumerate(x.shape)]
    else:
        dims = [d for i, d in enumerate(x.shape) if i not in axes]
    return [x.with_shape(dims)]


def _slice(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    axes, starts, ends = a["axes"], a["starts"], a["ends"]
    if not len(axes) == len(starts) == len(ends):
        _fail("axes, starts and ends must have the same length")
    dims = list(x.shape)
    seen = set()
    for ax, s, e in zip(axes, starts, ends):
        i = _axis(ax, x.rank)
        if i in seen:
            _fail(f"axis {ax} sliced twice")
        seen.add(i)
        if not 0 <= s < e <= x.shape[i]:
            _fail(f"slice [{s}:{e}] out of range for axis {i} of length {x.shape[i]}")
        dims[i] = e - s
    return [x.with_shape(dims)]


def _pad(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    pads = a["pads"]
    if len(pads) != 2 * x.rank or any(p < 0 for p in pads):
        _fail(f"pads must be {2 * x.rank} non-negative ints (all begins, then all ends)")
    return [x.with_shape([d + pads[i] + pads[i + x.rank] for i, d in enumerate(x.shape)])]


def _broadcast(ins: list[TensorType], a: dict) -> list[TensorType]:
    (x,) = ins
    shape = a["shape"]
    if any(d <= 0 for d in shape):
        _fail(f"broadcast shape {list(shape)} has a non-positive dimension")
    if len(shape) < x.rank:
        _fail(f"cannot broadcast {_shape(x)} to lower rank {list(shape)}")
    for d, t in zip(reversed(x.shape), reversed(shape)):
        if d != t and d != 1:
            _fail(f"cannot broadcast {_shape(x)} to {list(shape)}")
    return [x.with_shape(shape)]


# ----------------------------------------------------------------------------------- the table

_ACT = AttrSpec("act", "str", "none", ACTIVATIONS)
_STRIDE = AttrSpec("stride", "ints", (1, 1))
_PAD = AttrSpec("pad", "padding", "same")


def _defs() -> list[OpDef]:
    unary = "element-wise {}"
    defs = [
        OpDef("input", (0, 0), (AttrSpec("name", "str"), AttrSpec("shape", "ints"),
                                AttrSpec("dtype", "dtype", "f32")), _leaf, _zero,
              "a graph input (in text: a function argument)", leaf=True),
        OpDef("weight", (0, 0), (AttrSpec("name", "str"), AttrSpec("shape", "ints"),
                                 AttrSpec("dtype", "dtype", "f32")), _leaf, _zero,
              "a constant tensor, known before inference", leaf=True),
        OpDef("ewadd", (2, 2), (), _elementwise_binary, _numel_out, "x + y, equal shapes"),
        OpDef("ewmul", (2, 2), (), _elementwise_binary, _numel_out, "x * y, equal shapes"),
        OpDef("matmul", (2, 2), (_ACT,), _matmul, _matmul_flops,
              "(batched) matrix product as NumPy/ONNX MatMul (batch dims broadcast, ranks >= 2 may "
              "differ) with a fused activation"),
        OpDef("conv2d", (2, 3), (_STRIDE, _PAD, _ACT), _conv2d, _conv2d_flops,
              "NCHW convolution, OIHW weight, optional bias [O] (ONNX Conv's B); groups = C_in / "
              "weight dim 1; fused activation, applied after the bias"),
        OpDef("relu", (1, 1), (), _unary, _numel_out, unary.format("max(x, 0)")),
        OpDef("tanh", (1, 1), (), _unary, _numel_out, unary.format("tanh")),
        OpDef("sigmoid", (1, 1), (), _unary, _numel_out, unary.format("logistic sigmoid")),
        OpDef("poolmax", (1, 1), (AttrSpec("kernel", "ints"), _STRIDE, _PAD, _ACT), _pool,
              _pool_flops, "2-D max pooling (padding never wins)"),
        OpDef("poolavg", (1, 1), (AttrSpec("kernel", "ints"), _STRIDE, _PAD, _ACT), _pool,
              _pool_flops, "2-D average pooling; padding counts in the divisor (cuDNN/TASO)"),
        OpDef("transpose", (1, 1), (AttrSpec("perm", "ints"),), _transpose, _zero,
              "permute axes"),
        OpDef("enlarge", (2, 2), (), _enlarge, _zero,
              "zero-pad a conv kernel, centred, to the kernel size of the second operand"),
        OpDef("concat", (1, None), (AttrSpec("axis", "int"),), _concat, _zero,
              "join along an axis"),
        OpDef("split", (1, 1), (AttrSpec("axis", "int"), AttrSpec("sizes", "ints")), _split,
              _zero, "cut along an axis into pieces of the given sizes (one result each)",
              multi_result=True),
        OpDef("merge", (1, 1), (AttrSpec("count", "int"), AttrSpec("groups", "int")), _merge,
              _zero, "grouped-conv weight for groups/count groups, block-diagonal (TASO merge_gconv)"),
        OpDef("reshape", (1, 1), (AttrSpec("shape", "ints"),), _reshape, _zero,
              "same elements, new shape (row-major)"),
        OpDef("noop", (1, None), (), _noop, _zero,
              "joins several outputs into one root (TENSAT); computes nothing"),
        OpDef("batchnorm", (5, 5), (AttrSpec("eps", "float", 1e-5),), _batchnorm, _numel_out,
              "inference batch norm over axis 1: (x - mean) / sqrt(var + eps) * scale + bias"),
        OpDef("softmax", (1, 1), (AttrSpec("axis", "int", -1),), _softmax, _numel_out,
              "softmax along an axis"),
        OpDef("layernorm", (3, 3), (AttrSpec("axis", "int", -1), AttrSpec("eps", "float", 1e-5)),
              _layernorm, _numel_out, "normalize over axes >= axis, then * gamma + beta"),
        OpDef("gelu", (1, 1), (), _unary, _numel_out, unary.format("GELU, erf form")),
        OpDef("reduce_mean", (1, 1), (AttrSpec("axes", "ints"), AttrSpec("keepdims", "bool", True)),
              _reduce_mean, _numel_out, "mean over axes"),
        OpDef("slice", (1, 1), (AttrSpec("axes", "ints"), AttrSpec("starts", "ints"),
                                AttrSpec("ends", "ints")), _slice, _zero,
              "contiguous sub-tensor, [start, end) per listed axis"),
        OpDef("pad", (1, 1), (AttrSpec("pads", "ints"), AttrSpec("value", "float", 0.0)), _pad,
              _zero, "constant padding; pads = all begins then all ends (ONNX order)"),
        OpDef("dropout", (1, 1), (AttrSpec("ratio", "float", 0.5),), _unary, _zero,
              "identity at inference"),
        OpDef("broadcast", (1, 1), (AttrSpec("shape", "ints"),), _broadcast, _zero,
              "explicit NumPy-style broadcast to a shape"),
        OpDef("scale", (1, 1), (AttrSpec("value", "float"),), _unary, _numel_out,
              "multiply by a scalar constant"),
    ]
    return defs


OPS: dict[str, OpDef] = {d.name: d for d in _defs()}
OP_IDS: dict[str, int] = {name: i for i, name in enumerate(OPS)}
OP_NAMES: tuple[str, ...] = tuple(OPS)


# ----------------------------------------------------------------------------------- opaque

def _opaque_infer(ins: list[TensorType], a: dict) -> list[TensorType]:
    raise ShapeError("result types of an opaque node cannot be inferred; they must be declared")


# An operator the IR does not model (an imported ONNX node). It is deliberately *not* in `OPS`:
# OPS is the rewritable table whose order fixes the e-graph's op ids and the Numba shape port, and
# rules can only name ops in OPS, so no rule ever matches an opaque node. The e-graph has its own
# `opaque` op (egraph/store.py EXTRA_OPS). Text form (result types are required):
#   %y, %i = opaque(%x) {op = "TopK", opset = 11, onnx = "<base64 NodeProto>"} : T1, T2
# `onnx` is the serialized ONNX NodeProto (attributes included) whose inputs/outputs are the
# placeholders i0, i1, ... / o0, o1, ... for the operands/results in order and "" for an omitted
# optional one; `op` and `domain` repeat its op_type and domain for the reader; `opset` is the
# version of that domain the node was written for (eqsat_nb/ir/opaque.py decodes and runs it).
OPAQUE = OpDef("opaque", (0, None), (AttrSpec("op", "str"), AttrSpec("domain", "str", ""),
                                     AttrSpec("opset", "int"), AttrSpec("onnx", "str")),
               _opaque_infer, _zero,
               "an operator the IR does not model, kept verbatim (an ONNX node); types declared",
               multi_result=True)


def op_def(name: str) -> OpDef:
    """The operator named `name` (the table, or `opaque`); raises TirError when unknown."""
    if name == "opaque":
        return OPAQUE
    try:
        return OPS[name]
    except KeyError:
        raise TirError(f"unknown op '{name}'") from None


# ----------------------------------------------------------------------------------- attributes

def _check_value(spec: AttrSpec, value: Any) -> Any:
    k = spec.kind
    if k == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if k == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if k == "bool" and isinstance(value, bool):
        return value
    if k == "str" and isinstance(value, str):
        if spec.choices and value not in spec.choices:
            raise AttrError(f"attribute '{spec.name}' must be one of "
                            f"{', '.join(format_literal(c) for c in spec.choices)}, got {format_literal(value)}", spec.name)
        return value
    if k == "dtype" and value in DTYPES:
        return value
    if k == "ints" and isinstance(value, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    if k == "padding":
        if value in ("same", "valid"):
            return value
        if isinstance(value, (list, tuple)) and len(value) == 4 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            return tuple(value)
        raise AttrError(f"attribute '{spec.name}' must be \"same\", \"valid\" or "
                        f"[top, left, bottom, right], got {format_literal(value)}", spec.name)
    want = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "ints": "a list of integers", "dtype": f"one of {', '.join(DTYPES)}"}[k]
    raise AttrError(f"attribute '{spec.name}' must be {want}, got {format_literal(value)}", spec.name)


def _check_pair(name: str, value: tuple[int, ...]) -> None:
    if len(value) != 2 or any(v <= 0 for v in value):
        raise AttrError(f"attribute '{name}' must be two positive integers, got {list(value)}", name)


def normalize_attrs(opdef: OpDef, given: dict[str, Any]) -> Attrs:
    """Validate `given` against the schema, fill defaults, return the canonical attribute tuple."""
    for name in given:
        if opdef.attr_spec(name) is None:
            known = ", ".join(s.name for s in opdef.attrs) or "none"
            raise AttrError(f"op '{opdef.name}' has no attribute '{name}' (attributes: {known})", name)
    out = []
    for spec in opdef.attrs:
        if spec.name in given:
            value = _check_value(spec, given[spec.name])
        elif spec.default is REQUIRED:
            raise AttrError(f"op '{opdef.name}' requires attribute '{spec.name}'")
        else:
            value = spec.default
        if spec.name in ("stride", "kernel"):
            _check_pair(spec.name, value)
        out.append((spec.name, value))
    return tuple(out)


# ----------------------------------------------------------------------------------- inference

def check_arity(opdef: OpDef, n: int) -> None:
    lo, hi = opdef.arity
    if n < lo or (hi is not None and n > hi):
        want = (f"{lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise TirError(f"op '{opdef.name}' takes {want} operand{'s' if want != '1' else ''}, got {n}")


def infer_types(op: str, inputs: list[TensorType], attrs: Attrs,
                declared: list[TensorType] | tuple[TensorType, ...] | None = None
                ) -> list[TensorType]:
    """Result types of `op` applied to `inputs`; ShapeError naming the op when invalid.
    `declared` are the written result types, required (and checked) for `opaque` only."""
    opdef = op_def(op)
    if opdef is OPAQUE:
        check_arity(opdef, len(inputs))
        if declared is None:
            raise ShapeError("opaque: result types of an opaque node must be declared")
        from .opaque import check_opaque     # decoding needs onnx; only opaque nodes pay for it
        check_opaque(dict(attrs), len(inputs), len(declared))
        return list(declared)
    check_arity(opdef, len(inputs))
    try:
        return opdef.infer(inputs, dict(attrs))
    except ShapeError as e:
        raise ShapeError(f"{op}: {e.message}") from None


def flops(op: str, inputs: list[TensorType], outputs: list[TensorType], attrs: Attrs) -> int:
    """Floating-point operations of one node (a multiply-add counts 2); unknown for opaque: 0."""
    return op_def(op).flops(inputs, outputs, dict(attrs))
