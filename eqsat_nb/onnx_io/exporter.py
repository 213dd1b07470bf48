"""IR Graph → ONNX model.

Every IR op becomes the ONNX node(s) with the same semantics, written by its `OpDef.to_onnx`
(ir/ops/, one module per operator family) through the writer below; what one IR node needs
several ONNX nodes for is written so that the importer can put it back together, which makes
`.tir → .onnx → .tir` the identity:

- value names are the SSA names without `%`; helper values get a `#` in their name (never valid in
  `.tir`): a fused activation is `Conv → "r#act" → Relu → "r"`, a scale's factor is the Constant
  `"r#value"` whose doc_string holds the exact (float64) factor, shape/axes/size operands are
  Constants `"r#shape"` etc. (Constants, not initializers, so they never look like weights);
- weights are initializers named by their weight name (`@name` when that clashes with a value
  name); the model's metadata `eqsat-nb.weights` lists [initializer, weight name, SSA name, SSA name
  of the node the declaration precedes] so declarations keep their place and names;
- an output that is an input, a weight or returned twice goes through an Identity;
- `enlarge`/`merge` (weight transforms ONNX has no op for) are folded into initializers when their
  operands are weights, else written as Pad / Split+Pad+Concat;
- opaque nodes are written back as stored, with value_info for their results.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import TirError
from ..ir.graph import Graph, Node
from ..ir.interp import positive_weights, random_tensor
from ..ir.opaque import (DEFAULT_OPSET, DTYPE_TO_ONNX, EMPTY, IR_VERSION, NP_DTYPES, decode_node,
                         empty_tensor)
from ..ir.ops import OPS
from ..ir.ops.onnx_map import ACT_ONNX, OnnxNode
from ..ir.tensors import as_dtype, from_array, to_array

WEIGHTS_KEY = "eqsat-nb.weights"
# the opset from which each op's usual ONNX form exists (Softmax: the last-axis-only semantics
# before 13 differ; Split takes sizes as an input from 13; ...): `OpDef.onnx_opset[1]`
OPSET_NEEDED = {n: d.onnx_opset[1] for n, d in OPS.items() if d.onnx_opset[1] > 1}
# the oldest opset each op can be written in at all (older forms: Split's sizes, Slice's and
# Pad's parameters as attributes, Dropout's ratio attribute, Softmax on the last axis): what a
# model's own opset allows when new nodes are written into it (splice.py); `OpDef.onnx_opset[0]`
OPSET_MIN = {n: d.onnx_opset[0] for n, d in OPS.items() if d.onnx_opset[0] > 1}


def _target_opset(graph: Graph, opset: int | None) -> tuple[int, dict[str, int]]:
    """Default-domain opset to write and the other domains' versions (from opaque nodes)."""
    import onnx.defs

    need = [n.attr["opset"] for n in graph.nodes
            if n.op == "opaque" and n.attr["domain"] in ("", "ai.onnx")]
    required = max([OPSET_NEEDED.get(n.op, 1) for n in graph.nodes], default=1)
    if opset is not None:
        target = opset
    elif need:                      # write opaque nodes in the opset they came from
        target = max(need + [required])
    else:
        target = DEFAULT_OPSET
    least = OPSET_NEEDED if opset is None else OPSET_MIN    # an asked-for opset: older forms
    for n in graph.nodes:
        if least.get(n.op, 1) > target:
            raise TirError(f"{n.op} ({', '.join(n.results)}) needs opset "
                           f"{least[n.op]} or later, not {target}")
    others: dict[str, int] = {}
    for n in graph.nodes:
        if n.op != "opaque":
            continue
        a = n.attr
        if a["domain"] not in ("", "ai.onnx"):
            others[a["domain"]] = max(others.get(a["domain"], 0), a["opset"])
            continue
        try:
            then = onnx.defs.get_schema(a["op"], a["opset"], "").since_version
            now = onnx.defs.get_schema(a["op"], target, "").since_version
        except onnx.defs.SchemaError:
            continue        # unknown to this onnx: written as is, onnxruntime decides
        if then != now:
            raise TirError(f"opaque {a['op']} ({', '.join(n.results)}) was written for opset "
                           f"{a['opset']} and changed in opset {now}; cannot write it into an "
                           f"opset {target} model")
    return target, others


class _Writer:
    def __init__(self, graph: Graph, weights: Mapping[str, np.ndarray], seed: int,
                 opset: int, as_inputs: bool) -> None:
        from onnx import helper

        self.h = helper
        self.graph = graph
        self.opset = opset
        self.types = graph.types()
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.value_info: list[Any] = []
        self.as_inputs = as_inputs
        self.weight_inputs: list[Any] = []
        self.weight_meta: list[list[str]] = []
        self.values: dict[str, np.ndarray] = {}      # SSA name → value, for weights
        weight_values = {n.results[0] for n in graph.nodes if n.op == "weight"}
        plain = {v[1:] for v in self.types if v not in weight_values}
        self.name: dict[str, str] = {}
        for node in graph.nodes:
            if node.op == "weight":
                w = node.attr["name"]
                self.name[node.results[0]] = w if w not in plain else "@" + w
        for v in self.types:
            self.name.setdefault(v, v[1:])
        self.given = weights
        self.seed = seed
        self.positive = positive_weights(graph)

    # ------------------------------------------------------------------ the writer protocol
    # (ir/ops/onnx_map.py): what the ops' `to_onnx` hooks call
    def const(self, out: str, arr: np.ndarray, doc: str = "", dtype: str | None = None) -> str:
        """A Constant node (static operand: shapes, axes, sizes, scalars) of IR element type
        `dtype` (default: the array's)."""
        node = self.h.make_node("Constant", [], [out], value=from_array(arr, out, dtype))
        if doc:
            node.doc_string = doc
        self.nodes.append(node)
        return out

    def constant(self, n: OnnxNode, hint: str, arr: np.ndarray, doc: str = "",
                 dtype: str | None = None) -> str:
        return self.const(f"{n.r}#{hint}", arr, doc, dtype)

    def ints(self, n: OnnxNode, hint: str, values: Any) -> str:
        return self.named_ints(f"{n.r}#{hint}", values)

    def named_ints(self, out: str, values: Any) -> str:
        """An int64 Constant named `out`."""
        return self.const(out, np.asarray(list(values), np.int64))

    def tmp(self, n: OnnxNode, hint: str) -> str:
        return f"{n.r}#{hint}"

    def weight_value(self, n: OnnxNode, i: int) -> np.ndarray | None:
        return self.values.get(n.inputs[i])

    def fold(self, n: OnnxNode, arr: np.ndarray) -> None:
        dtype = n.out_types[0].dtype
        arr = np.ascontiguousarray(as_dtype(arr, dtype))
        self.values[n.results[0]] = arr
        self.inits.append(from_array(arr, n.r, dtype))

    def add(self, op: str, ins: list[str], outs: list[str], **attrs: Any) -> None:
        self.nodes.append(self.h.make_node(op, ins, outs, **attrs))

    def weight_input(self, node: Node, r: str) -> None:
        ty = node.types[0]
        self.weight_inputs.append(self.h.make_tensor_value_info(r, DTYPE_TO_ONNX[ty.dtype],
                                                                list(ty.shape)))

    def weight_value_of(self, node: Node) -> np.ndarray:
        w = node.attr["name"]
        ty = node.types[0]
        if w in self.given:
            arr = np.asarray(self.given[w])
            if tuple(arr.shape) != ty.shape:
                raise TirError(f"value given for weight @{w} has shape {tuple(arr.shape)}, the "
                               f"graph declares {ty}")
            return as_dtype(arr, ty.dtype)
        return as_dtype(random_tensor("@" + w, ty, self.seed, NP_DTYPES[ty.dtype],
                                      positive=node.results[0] in self.positive), ty.dtype)

    def padding(self, a: dict, hw: tuple[int, int], kernel: tuple[int, int]) -> dict[str, Any]:
        if a["pad"] == "same":
            return {"auto_pad": "SAME_UPPER"}
        if a["pad"] == "valid":
            return {"auto_pad": "VALID"}
        return {"pads": list(a["pad"])}

    # ------------------------------------------------------------------ nodes
    def node(self, node: Node, next_name: str) -> None:
        op, a = node.op, node.attr
        r = self.name[node.results[0]]
        ins = [self.name[v] for v in node.inputs]
        if op == "weight":
            if self.as_inputs:
                self.weight_input(node, r)
            else:
                arr = self.weight_value_of(node)
                self.values[node.results[0]] = arr
                self.inits.append(from_array(arr, r, node.types[0].dtype))
            self.weight_meta.append([r, a["name"], node.results[0], next_name])
            return
        if op == "opaque":
            self.opaque(node, ins)
            return
        d = OPS.get(op)
        if d is None or d.to_onnx is None:
            raise TirError(f"the ONNX exporter does not know op '{op}'")
        act = a.get("act", "none")
        outs = [self.name[v] for v in node.results]
        n = OnnxNode(op, a, ins, outs, f"{r}#act" if act != "none" else r,
                     [self.types[v] for v in node.inputs], list(node.types), node.inputs,
                     node.results)
        d.to_onnx(self, n)
        if act != "none":
            self.add(ACT_ONNX[act], [n.main], [r])

    def empty(self, out: str, placeholder: str) -> str:
        """A Constant for a zero-size input an opaque node carries (see ir/opaque.py)."""
        self.nodes.append(self.h.make_node("Constant", [], [out],
                                           value=empty_tensor(out, placeholder)))
        return out

    def opaque(self, node: Node, ins: list[str]) -> None:
        proto = decode_node(node.attr)
        it = iter(ins)
        ot = iter(node.results)
        outs = [self.name[next(ot)] if o else "" for o in proto.output]
        base = next((o for o in outs if o), "opaque")
        names = [self.empty(f"{base}#in{k}", i) if i.startswith(EMPTY) else next(it) if i else ""
                 for k, i in enumerate(proto.input)]
        del proto.input[:]
        del proto.output[:]
        proto.input.extend(names)
        proto.output.extend(outs)
        proto.name = self.name[node.results[0]] if node.results else ""
        self.nodes.append(proto)
        for v, t in zip(node.results, node.types):
            self.value_info.append(self.h.make_tensor_value_info(
                self.name[v], DTYPE_TO_ONNX[t.dtype], list(t.shape)))


def to_onnx(graph: Graph, weights: Mapping[str, np.ndarray] | None = None, seed: int = 0,
            opset: int | None = None, weights_as_inputs: bool = False) -> Any:
    """A valid ONNX model (onnx.ModelProto) computing `graph`: weights take the values in
    `weights` (by weight name) and otherwise the interpreter's random values for `seed`, so
    onnxruntime and `interp.run(graph, seed=seed)` see the same numbers.

    `opset`: the default domain's version (default 21, or higher if opaque nodes need it).
    `weights_as_inputs`: weights become extra graph inputs (fed at run time) instead of
    initializers: the model's structure without gigabytes of weight data."""
    from onnx import helper

    for name, ty in graph.types().items():
        if ty.dtype not in DTYPE_TO_ONNX:
            raise TirError(f"value {name} has element type {ty.dtype}, which ONNX cannot hold")
    target, others = _target_opset(graph, opset)
    w = _Writer(graph, weights or {}, seed, target, weights_as_inputs)
    nodes = graph.nodes
    for i, node in enumerate(nodes):
        nxt = ""
        if node.op == "weight":
            nxt = next((n.results[0] for n in nodes[i + 1:] if n.op != "weight"), "")
        w.node(node, nxt)
    produced = {name for name, _ in graph.inputs} | {n.results[0] for n in graph.weights()}
    outputs = []
    seen: set[str] = set()
    for i, v in enumerate(graph.outputs):
        name = w.name[v]
        if v in produced or name in seen:      # ONNX outputs must be node results, once each
            alias = f"{name}#out{i}"
            w.add("Identity", [name], [alias])
            name = alias
        seen.add(name)
        outputs.append(name)
    out_types = graph.output_types()
    g = helper.make_graph(
        w.nodes, graph.name,
        [helper.make_tensor_value_info(w.name[v], DTYPE_TO_ONNX[t.dtype], list(t.shape))
         for v, t in graph.inputs] + w.weight_inputs,
        [helper.make_tensor_value_info(n, DTYPE_TO_ONNX[t.dtype], list(t.shape))
         for n, t in zip(outputs, out_types)],
        initializer=w.inits, value_info=w.value_info)
    model = helper.make_model(g, producer_name="eqsat-nb", opset_imports=(
        [helper.make_opsetid("", target)]
        + [helper.make_opsetid(d, v) for d, v in sorted(others.items())]))
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {WEIGHTS_KEY: json.dumps(w.weight_meta)})
    return model


def written_weights(model: Any) -> dict[str, np.ndarray]:
    """The weight values a model written by `to_onnx` holds, by weight name (as the host holds
    them: bf16 ones as float32 arrays, ir/bfloat16.py)."""
    raw = {p.key: p.value for p in model.metadata_props}.get(WEIGHTS_KEY, "[]")
    inits = {t.name: t for t in model.graph.initializer}
    return {w: to_array(inits[r]) for r, w, *_ in json.loads(raw) if r in inits}


def save_onnx(graph: Graph, path: str | Path, weights: Mapping[str, np.ndarray] | None = None,
              seed: int = 0) -> None:
    """Write `to_onnx(graph, weights, seed)` to `path` (external.write_model: whole, checked,
    weights in `PATH.data` when the model passes protobuf's 2 GB)."""
    from .external import write_model

    write_model(str(path), to_onnx(graph, weights, seed))
