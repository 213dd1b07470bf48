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

Each op is written by its own `OpDef.to_onnx` (ir/ops/, one module per operator family), the
form the exporter writes too, with this module's writer: static operands (shapes, sizes, scalars)
as initializers, padding as explicit `pads`, and nothing folded (enlarge's reference operand only
lends its shape and is not part of the model). Leaves (`input`, `weight`) and `noop` have no
one-node model (`OpDef.unmeasured` says why): `one_node_model` raises NotImplementedError.

Models are written in opset `OPSET` (17) unless the caller asks for a later one (`opset`) or the
op's usual form needs one (`OpDef.measure_opset`: Gelu from 20); the `ort` backend uses the
exporter's, so onnxruntime runs the kernel versions of an exported model.

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
from ..ir.tensors import as_dtype, from_array, to_array
from ..ir.ops import OPS, infer_types, normalize_attrs, op_def
from ..ir.ops.onnx_map import ACT_ONNX, OnnxNode
from ..ir.shapes import spatial_pads

OPSET = 17
IR_VERSION = 9          # what onnxruntime 1.31 accepts

ONNX_DTYPES = DTYPE_TO_ONNX     # IR dtype -> ONNX element type (the IR's one table)

#: Operators without an ONNX lowering, and why.
UNSUPPORTED = {op: d.unmeasured for op, d in OPS.items() if d.unmeasured or d.to_onnx is None}
SUPPORTED = tuple(op for op, d in OPS.items() if op not in UNSUPPORTED)


class _Lowering:
    """Collects nodes and initializers for one model: the writer of ir/ops/onnx_map.py."""

    def __init__(self, input_types: Sequence[TensorType], weights: set[int], seed: int,
                 positive: set[int], opset: int) -> None:
        self.types = list(input_types)
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)
        self.positive = positive
        self.opset = opset
        self._n = 0

    def const(self, value: Any, dtype: Any = np.int64, name: str | None = None) -> str:
        name = name or f"c{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def constant(self, n: OnnxNode, hint: str, arr: np.ndarray, doc: str = "",
                 dtype: str | None = None) -> str:
        name = f"c{len(self.inits)}"
        self.inits.append(from_array(arr, name, dtype))
        return name

    def ints(self, n: OnnxNode, hint: str, values: Any) -> str:
        return self.const(list(values))

    def tmp(self, n: OnnxNode | None = None, hint: str = "") -> str:
        self._n += 1
        return f"t{self._n}"

    def padding(self, a: dict, hw: tuple[int, int], kernel: Sequence[int]) -> dict[str, Any]:
        (t, b), (l, r) = spatial_pads(tuple(hw), tuple(kernel), tuple(a["stride"]), a["pad"])
        return {"pads": [int(t), int(l), int(b), int(r)]}

    def weight_value(self, n: OnnxNode, i: int) -> None:
        return None              # nothing is folded: the op itself is measured

    def fold(self, n: OnnxNode, arr: np.ndarray) -> None:    # pragma: no cover - never called
        raise AssertionError("a one-node model folds nothing")

    def add(self, op_type: str, inputs: list[str], outputs: list[str], **attrs: Any) -> None:
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
        return as_dtype(rng.uniform(0.5, 1.5, ty.shape), ty.dtype)
    return as_dtype(rng.standard_normal(ty.shape), ty.dtype)


def _lower(lw: _Lowering, op: str, a: dict, outs: list[TensorType]) -> list[str]:
    """Emit the nodes of `op`; returns the operand names the model reads."""
    ins = [lw.operand(i) for i in range(len(lw.types))]
    act = a.get("act", "none")
    names = [f"out{j}" for j in range(len(outs))]
    n = OnnxNode(op, a, ins, names, lw.tmp() if act != "none" else names[0], list(lw.types),
                 list(outs))
    OPS[op].to_onnx(lw, n)
    if act != "none":
        lw.add(ACT_ONNX[act], [n.main], names[:1])
    read = {v for node in lw.nodes for v in node.input}
    return [v for v in ins if v in read]


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
    opset = max(opset, opdef.measure_opset)
    lw = _Lowering(input_types, weights, seed, set(opdef.positive), opset)
    used = _lower(lw, op, dict(norm), outs)
    graph_inputs = []
    for i, ty in enumerate(input_types):
        name = lw.operand(i)
        if name not in used:
            continue
        if i in weights:
            lw.inits.append(from_array(lw.random(i, ty), name, ty.dtype))
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
    return {t.name: to_array(t) for t in model.graph.initializer}


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
