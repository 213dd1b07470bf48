"""One-node ONNX models: every compute operator of the table lowered to a single ONNX node (or the
smallest subgraph that means the same), shared by the measuring cost backends (`ort`, and the GPU
backends that build an engine from the same model).

Conventions:
- operand `i` is named `in{i}`; results are `out{j}`.
- operands whose index is in `weight_inputs` become random initializers (weights, known before
  inference); the others are graph inputs (activations). A node whose operands are all
  initializers is constant-folded away by onnxruntime, so measure with activations as inputs.
- a fused `act` (matmul, conv2d, poolmax, poolavg) becomes a following Relu/Sigmoid/Tanh node, as
  an imported model would have it (onnxruntime fuses Conv+Relu itself).
- conv/pool padding is always explicit ONNX `pads` [top, left, bottom, right] computed by
  `spatial_pads` ("same" = SAME_UPPER); groups = C_in / weight dim 1 (`ops.conv_groups`).

Lowerings: ewadd->Add, ewmul->Mul, matmul->MatMul, conv2d->Conv, relu/tanh/sigmoid, poolmax->MaxPool,
poolavg->AveragePool(count_include_pad=1), transpose, concat, split->Split (sizes as an
initializer), reshape (shape initializer), batchnorm->BatchNormalization, softmax,
layernorm->LayerNormalization (opset 17), gelu->Gelu (opset 20), reduce_mean->ReduceMean (axes an input from opset 18), slice, pad, dropout->Identity,
broadcast->Expand, scale->Mul by a scalar initializer, enlarge->Pad of the kernel (the reference
operand only contributes its shape and is not part of the model), merge->Reshape, Mul by a
block-diagonal 0/1 mask, Reshape. Leaves (`input`, `weight`) and `noop` have no ONNX node:
`one_node_model` raises NotImplementedError for them.

Models are written in opset `OPSET` (17) unless the caller asks for a later one (`opset`); the
`ort` backend uses the exporter's, so onnxruntime runs the kernel versions of an exported model.

Element types map one to one (f32 -> FLOAT, ...). onnxruntime's CPU provider has float32-only
kernels for Conv, AveragePool, Gelu and Erf, so measure float models as f32.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir.graph import TensorType
from ..ir.opaque import DTYPE_TO_ONNX, NP_DTYPES
from ..ir.ops import OPS, infer_types, normalize_attrs, op_def
from ..ir.shapes import spatial_pads

OPSET = 17
GELU_OPSET = 20
IR_VERSION = 9          # what onnxruntime 1.31 accepts

ONNX_DTYPES = DTYPE_TO_ONNX     # IR dtype -> ONNX element type (the IR's one table)
_ACT_ONNX = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}

#: Operators without an ONNX lowering, and why.
UNSUPPORTED = {
    "input": "a leaf: a graph input, computes nothing",
    "weight": "a leaf: a constant tensor, computes nothing",
    "noop": "joins outputs into one root; computes nothing (costs 0)",
}
SUPPORTED = tuple(op for op, d in OPS.items() if op not in UNSUPPORTED)


class _Lowering:
    """Collects nodes and initializers for one model."""

    def __init__(self, input_types: Sequence[TensorType], weights: set[int], seed: int,
                 positive: set[int]) -> None:
        self.types = list(input_types)
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.positive = positive
        self._n = 0

    def const(self, value: Any, dtype: Any = np.int64, name: str | None = None) -> str:
        name = name or f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def tmp(self) -> str:
        self._n += 1
        return f"t{self._n}"

    def node(self, op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, outputs, **attrs))

    def operand(self, i: int) -> str:
        return f"in{i}"

    def random(self, i: int, ty: TensorType) -> np.ndarray:
        return random_array(ty, self.rng, positive=i in self.positive)


def random_array(ty: TensorType, rng: np.random.Generator, positive: bool = False) -> np.ndarray:
    """A random array of type `ty` (positive values in [0.5, 1.5) where asked)."""
    dt = NP_DTYPES[ty.dtype]
    if ty.dtype == "bool":
        return rng.random(ty.shape) < 0.5
    if ty.dtype in ("i32", "i64"):
        return rng.integers(-8, 8, ty.shape).astype(dt)
    if positive:
        return rng.uniform(0.5, 1.5, ty.shape).astype(dt)
    return rng.standard_normal(ty.shape).astype(dt)


def _act(lw: _Lowering, act: str, src: str, out: str) -> None:
    lw.node(_ACT_ONNX[act], [src], [out])


def _with_act(lw: _Lowering, act: str, op_type: str, inputs: list[str], out: str, **attrs: Any) -> None:
    if act == "none":
        lw.node(op_type, inputs, [out], **attrs)
    else:
        t = lw.tmp()
        lw.node(op_type, inputs, [t], **attrs)
        _act(lw, act, t, out)


def _onnx_pads(x: TensorType, kernel: Sequence[int], stride: Sequence[int], pad: Any) -> list[int]:
    (t, b), (l, r) = spatial_pads(tuple(x.shape[2:]), tuple(kernel), tuple(stride), pad)
    return [int(t), int(l), int(b), int(r)]


def _lower(lw: _Lowering, op: str, a: dict, outs: list[TensorType], opset: int = OPSET
           ) -> tuple[list[str], int]:
    """Emit the nodes of `op` for (at least) `opset`; returns (the operand names the model reads,
    opset)."""
    ins = [lw.operand(i) for i in range(len(lw.types))]
    ts = lw.types
    simple = {"ewadd": "Add", "ewmul": "Mul", "relu": "Relu", "tanh": "Tanh",
              "sigmoid": "Sigmoid", "dropout": "Identity"}
    if op in simple:
        lw.node(simple[op], ins, ["out0"])
    elif op == "matmul":
        _with_act(lw, a["act"], "MatMul", ins, "out0")
    elif op == "conv2d":      # an optional bias is Conv's B, fused into the kernel
        x, w = ts[:2]
        kernel = w.shape[2:]
        _with_act(lw, a["act"], "Conv", ins, "out0", kernel_shape=list(kernel),
                  strides=list(a["stride"]), pads=_onnx_pads(x, kernel, a["stride"], a["pad"]),
                  group=x.shape[1] // w.shape[1], dilations=[1, 1])
    elif op in ("poolmax", "poolavg"):
        extra = {"count_include_pad": 1} if op == "poolavg" else {}
        _with_act(lw, a["act"], "MaxPool" if op == "poolmax" else "AveragePool", ins, "out0",
                  kernel_shape=list(a["kernel"]), strides=list(a["stride"]),
                  pads=_onnx_pads(ts[0], a["kernel"], a["stride"], a["pad"]), **extra)
    elif op == "transpose":
        lw.node("Transpose", ins, ["out0"], perm=list(a["perm"]))
    elif op == "concat":
        lw.node("Concat", ins, ["out0"], axis=a["axis"])
    elif op == "split":
        lw.node("Split", [ins[0], lw.const(a["sizes"])], [f"out{j}" for j in range(len(outs))],
                axis=a["axis"])
    elif op == "reshape":
        lw.node("Reshape", [ins[0], lw.const(a["shape"])], ["out0"])
    elif op == "batchnorm":
        lw.node("BatchNormalization", ins, ["out0"], epsilon=a["eps"])
    elif op == "softmax":
        lw.node("Softmax", ins, ["out0"], axis=a["axis"])
    elif op == "layernorm":
        lw.node("LayerNormalization", ins, ["out0"], axis=a["axis"], epsilon=a["eps"])
    elif op == "gelu":     # Gelu exists from opset 20 (onnxruntime: float32 kernel only)
        lw.node("Gelu", ins, ["out0"])
        opset = max(opset, GELU_OPSET)
    elif op == "reduce_mean":
        if opset >= 18:        # axes became an input in opset 18
            lw.node("ReduceMean", [ins[0], lw.const(a["axes"])], ["out0"],
                    keepdims=int(a["keepdims"]))
        else:
            lw.node("ReduceMean", ins, ["out0"], axes=list(a["axes"]), keepdims=int(a["keepdims"]))
    elif op == "slice":
        lw.node("Slice", [ins[0], lw.const(a["starts"]), lw.const(a["ends"]),
                          lw.const(a["axes"])], ["out0"])
    elif op == "pad":
        lw.node("Pad", [ins[0], lw.const(a["pads"]),
                        lw.const(a["value"], NP_DTYPES[ts[0].dtype])], ["out0"], mode="constant")
    elif op == "broadcast":
        lw.node("Expand", [ins[0], lw.const(a["shape"])], ["out0"])
    elif op == "scale":
        lw.node("Mul", [ins[0], lw.const(a["value"], NP_DTYPES[ts[0].dtype])], ["out0"])
    elif op == "enlarge":
        w, ref = ts
        kh, kw = w.shape[2:]
        rh, rw = ref.shape[2:]
        ph, pw = (rh - kh) // 2, (rw - kw) // 2
        pads = [0, 0, ph, pw, 0, 0, rh - kh - ph, rw - kw - pw]
        lw.node("Pad", [ins[0], lw.const(pads)], ["out0"], mode="constant")
        ins = ins[:1]           # the reference kernel only lends its shape
    elif op == "merge":
        (w,) = ts
        count, groups = a["count"], a["groups"]
        o, cg, kh, kw = w.shape
        blocks = (groups // count, count, o // groups, 1, cg, kh, kw)
        mask = np.eye(count, dtype=NP_DTYPES[w.dtype]).reshape(1, count, 1, count, 1, 1, 1)
        r, m = lw.tmp(), lw.tmp()
        lw.node("Reshape", [ins[0], lw.const(blocks)], [r])
        lw.node("Mul", [r, lw.const(mask, mask.dtype)], [m])
        lw.node("Reshape", [m, lw.const(outs[0].shape)], ["out0"])
    else:  # pragma: no cover - guarded by UNSUPPORTED
        raise NotImplementedError(f"no ONNX lowering for op '{op}'")
    return ins, opset


def one_node_model(op: str, attrs: Mapping[str, Any] | Iterable[tuple[str, Any]],
                   input_types: Sequence[TensorType], weight_inputs: set[int] | None = None,
                   seed: int = 0, check: bool = True, opset: int = OPSET) -> onnx.ModelProto:
    """The ONNX model of one `op(inputs) {attrs}` node, in `opset` (or the later one the op needs).

    Operands in `weight_inputs` become random initializers (batchnorm variances positive), the
    others graph inputs `in{i}`. Attributes are validated and defaults filled as in the IR; the
    output shapes come from the operator table. The model passes `onnx.checker` (when `check`).
    """
    if op in UNSUPPORTED:
        raise NotImplementedError(f"op '{op}' has no ONNX lowering: {UNSUPPORTED[op]}")
    opdef = op_def(op)
    norm = normalize_attrs(opdef, dict(attrs))
    input_types = [TensorType(tuple(t.shape), t.dtype) for t in input_types]
    outs = infer_types(op, input_types, norm)
    weights = set(weight_inputs or ())
    if any(not 0 <= i < len(input_types) for i in weights):
        raise ValueError(f"weight_inputs {sorted(weights)} out of range for {len(input_types)} operands")
    positive = {4} if op == "batchnorm" else set()
    lw = _Lowering(input_types, weights, seed, positive)
    used, opset = _lower(lw, op, dict(norm), outs, opset)
    graph_inputs = []
    for i, ty in enumerate(input_types):
        name = lw.operand(i)
        if name not in used:
            continue
        if i in weights:
            lw.inits.append(numpy_helper.from_array(lw.random(i, ty), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(name, ONNX_DTYPES[ty.dtype],
                                                              list(ty.shape)))
    graph_outputs = [helper.make_tensor_value_info(f"out{j}", ONNX_DTYPES[t.dtype], list(t.shape))
                     for j, t in enumerate(outs)]
    graph = helper.make_graph(lw.nodes, f"{op}_node", graph_inputs, graph_outputs,
                              initializer=lw.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=IR_VERSION, producer_name="eqsat-nb")
    if check:
        onnx.checker.check_model(model, full_check=True)
    return model


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every graph input of `model` (as `one_node_model` declares them)."""
    rng = np.random.default_rng(seed)
    rev = {v: k for k, v in ONNX_DTYPES.items()}
    feed = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        ty = TensorType(tuple(d.dim_value for d in tt.shape.dim), rev[tt.elem_type])
        feed[vi.name] = random_array(ty, rng)
    return feed


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The initializers of `model` as arrays, by name."""
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def make_session(model: onnx.ModelProto, threads: int = 1):
    """A CPU onnxruntime session with the settings that measured stable (see `runtime`)."""
    from ..runtime import session

    return session(model, threads)


def run_model(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
              ) -> list[np.ndarray]:
    """Run `model` once on onnxruntime CPU; `inputs` by graph-input name or in graph-input order."""
    sess = make_session(model)
    if not isinstance(inputs, Mapping):
        inputs = {vi.name: v for vi, v in zip(model.graph.input, inputs)}
    return sess.run(None, dict(inputs))
