"""IR Graph → ONNX model.

Every IR op becomes the ONNX node(s) with the same semantics; what one IR node needs several ONNX
nodes for is written so that the importer can put it back together, which makes
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
from ..ir.graph import Graph, Node, TensorType
from ..ir.interp import _positive_weights, enlarge, merge, random_tensor
from ..ir.opaque import (DEFAULT_OPSET, DTYPE_TO_ONNX, EMPTY, IR_VERSION, NP_DTYPES, decode_node,
                         empty_tensor)

WEIGHTS_KEY = "eqsat-nb.weights"
EXTERNAL_BYTES = 1_500_000_000
# the opset from which each op's ONNX form below exists (Softmax: the last-axis-only semantics
# before 13 differ; Split takes sizes as an input from 13; ...)
OPSET_NEEDED = {"split": 13, "softmax": 13, "layernorm": 17, "slice": 10, "pad": 11,
                "dropout": 12, "enlarge": 13, "merge": 13, "gelu": 9, "broadcast": 8,
                "reshape": 5, "reduce_mean": 1, "batchnorm": 9}
# the oldest opset each op can be written in at all (older forms below: Split's sizes, Slice's and
# Pad's parameters as attributes, Dropout's ratio attribute, Softmax on the last axis): what a
# model's own opset allows when new nodes are written into it (splice.py)
OPSET_MIN = {"split": 2, "slice": 1, "pad": 2, "dropout": 7, "softmax": 1, "layernorm": 17,
             "gelu": 9, "broadcast": 8, "reshape": 5, "batchnorm": 7, "enlarge": 11, "merge": 11,
             "reduce_mean": 1}
_ACT_OPS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}
_SIMPLE = {"ewadd": "Add", "ewmul": "Mul", "relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}


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
        from onnx import helper, numpy_helper

        self.h, self.nph = helper, numpy_helper
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
        self.positive = _positive_weights(graph)

    # ------------------------------------------------------------------ helpers
    def const(self, out: str, arr: np.ndarray, doc: str = "") -> str:
        """A Constant node (static operand: shapes, axes, sizes, scalars)."""
        node = self.h.make_node("Constant", [], [out], value=self.nph.from_array(arr, out))
        if doc:
            node.doc_string = doc
        self.nodes.append(node)
        return out

    def ints(self, out: str, values: Any) -> str:
        return self.const(out, np.asarray(list(values), np.int64))

    def add(self, op: str, ins: list[str], outs: list[str], **attrs: Any) -> None:
        self.nodes.append(self.h.make_node(op, ins, outs, **attrs))

    def weight_input(self, node: Node, r: str) -> None:
        ty = node.types[0]
        self.weight_inputs.append(self.h.make_tensor_value_info(r, DTYPE_TO_ONNX[ty.dtype],
                                                                list(ty.shape)))

    def weight_value(self, node: Node) -> np.ndarray:
        w = node.attr["name"]
        ty = node.types[0]
        if w in self.given:
            arr = np.asarray(self.given[w])
            if tuple(arr.shape) != ty.shape:
                raise TirError(f"value given for weight @{w} has shape {tuple(arr.shape)}, the "
                               f"graph declares {ty}")
            return arr.astype(NP_DTYPES[ty.dtype], copy=False)
        return random_tensor("@" + w, ty, self.seed, NP_DTYPES[ty.dtype],
                             positive=node.results[0] in self.positive)

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
                arr = self.weight_value(node)
                self.values[node.results[0]] = arr
                self.inits.append(self.nph.from_array(arr, r))
            self.weight_meta.append([r, a["name"], node.results[0], next_name])
            return
        act = a.get("act", "none")
        main = f"{r}#act" if act != "none" else r
        in_t = [self.types[v] for v in node.inputs]
        if op in _SIMPLE:
            self.add(_SIMPLE[op], ins, [main])
        elif op == "matmul":
            self.add("MatMul", ins, [main])
        elif op == "conv2d":      # an optional bias is Conv's third input B
            x, w = in_t[:2]
            self.add("Conv", ins, [main], kernel_shape=list(w.shape[2:]), strides=list(a["stride"]),
                     group=x.shape[1] // w.shape[1],
                     **self.padding(a, x.shape[2:], w.shape[2:]))
        elif op in ("poolmax", "poolavg"):
            extra = {"count_include_pad": 1} if op == "poolavg" else {}
            self.add("MaxPool" if op == "poolmax" else "AveragePool", ins, [main],
                     kernel_shape=list(a["kernel"]), strides=list(a["stride"]),
                     **self.padding(a, in_t[0].shape[2:], a["kernel"]), **extra)
        elif op == "transpose":
            self.add("Transpose", ins, [r], perm=list(a["perm"]))
        elif op == "concat":
            self.add("Concat", ins, [r], axis=a["axis"])
        elif op == "split" and self.opset < 13:
            self.add("Split", [ins[0]], [self.name[v] for v in node.results], axis=a["axis"],
                     split=list(a["sizes"]))
        elif op == "split":
            self.add("Split", [ins[0], self.ints(f"{r}#sizes", a["sizes"])],
                     [self.name[v] for v in node.results], axis=a["axis"])
        elif op == "reshape":
            self.add("Reshape", [ins[0], self.ints(f"{r}#shape", a["shape"])], [r])
        elif op == "broadcast":
            self.add("Expand", [ins[0], self.ints(f"{r}#shape", a["shape"])], [r])
        elif op == "noop":     # computes nothing: a zero scalar, as the interpreter gives
            self.const(r, np.zeros((), NP_DTYPES[node.types[0].dtype]))
        elif op == "batchnorm":
            self.add("BatchNormalization", ins, [r], epsilon=a["eps"])
        elif op == "softmax":
            rank = in_t[0].rank
            if self.opset < 13 and a["axis"] % rank != rank - 1:
                raise TirError(f"softmax ({r}) over axis {a['axis']} of a rank-{rank} tensor "
                               f"cannot be written in opset {self.opset} (only the last axis)")
            self.add("Softmax", ins, [r], axis=a["axis"] % rank if self.opset < 13 else a["axis"])
        elif op == "layernorm":
            self.add("LayerNormalization", ins, [r], axis=a["axis"], epsilon=a["eps"])
        elif op == "gelu":
            self.gelu(ins[0], r, in_t[0])
        elif op == "reduce_mean":
            if self.opset >= 18:
                self.add("ReduceMean", [ins[0], self.ints(f"{r}#axes", a["axes"])], [r],
                         keepdims=int(a["keepdims"]))
            else:
                self.add("ReduceMean", ins, [r], axes=list(a["axes"]), keepdims=int(a["keepdims"]))
        elif op == "slice" and self.opset < 10:
            self.add("Slice", ins, [r], starts=list(a["starts"]), ends=list(a["ends"]),
                     axes=list(a["axes"]))
        elif op == "slice":
            self.add("Slice", [ins[0], self.ints(f"{r}#starts", a["starts"]),
                               self.ints(f"{r}#ends", a["ends"]),
                               self.ints(f"{r}#axes", a["axes"])], [r])
        elif op == "pad" and self.opset < 11:
            self.add("Pad", ins, [r], mode="constant", pads=list(a["pads"]),
                     value=float(a["value"]))
        elif op == "pad":
            dt = NP_DTYPES[in_t[0].dtype]
            self.add("Pad", [ins[0], self.ints(f"{r}#pads", a["pads"]),
                             self.const(f"{r}#value", np.asarray(a["value"], dt),
                                        doc=repr(a["value"]))], [r], mode="constant")
        elif op == "dropout" and self.opset < 12:
            self.add("Dropout", ins, [r], ratio=float(a["ratio"]))
        elif op == "dropout":   # the ratio as a double keeps its exact value (T1 may differ from T)
            self.add("Dropout", [ins[0], self.const(f"{r}#ratio", np.asarray(a["ratio"],
                                                                            np.float64))], [r])
        elif op == "scale":
            dt = NP_DTYPES[in_t[0].dtype]
            self.add("Mul", [ins[0], self.const(f"{r}#value", np.asarray(a["value"], dt),
                                                doc=repr(a["value"]))], [r])
        elif op == "enlarge":
            self.enlarge(node, ins, r)
        elif op == "merge":
            self.merge(node, ins, r)
        elif op == "opaque":
            self.opaque(node, ins)
        else:
            raise TirError(f"the ONNX exporter does not know op '{op}'")
        if act != "none":
            self.add(_ACT_OPS[act], [main], [r])

    def gelu(self, x: str, r: str, ty: TensorType) -> None:
        if self.opset >= 20:
            self.add("Gelu", [x], [r])
            return
        dt = NP_DTYPES[ty.dtype]       # 0.5 * x * (1 + erf(x / sqrt 2)), the form the importer reads
        self.add("Div", [x, self.const(f"{r}#sqrt2", np.asarray(np.sqrt(2.0), dt))], [f"{r}#div"])
        self.add("Erf", [f"{r}#div"], [f"{r}#erf"])
        self.add("Add", [f"{r}#erf", self.const(f"{r}#one", np.asarray(1.0, dt))], [f"{r}#add"])
        self.add("Mul", [x, f"{r}#add"], [f"{r}#mul"])
        self.add("Mul", [f"{r}#mul", self.const(f"{r}#half", np.asarray(0.5, dt))], [r])

    def enlarge(self, node: Node, ins: list[str], r: str) -> None:
        w, ref = (self.types[v] for v in node.inputs)
        if node.inputs[0] in self.values:                # a weight: fold
            self.fold(node, enlarge(self.values[node.inputs[0]], np.empty(ref.shape)), r)
            return
        kh, kw = w.shape[2:]
        rh, rw = ref.shape[2:]
        ph, pw = (rh - kh) // 2, (rw - kw) // 2
        self.add("Pad", [ins[0], self.ints(f"{r}#pads", [0, 0, ph, pw, 0, 0, rh - kh - ph,
                                                         rw - kw - pw])], [r], mode="constant")

    def merge(self, node: Node, ins: list[str], r: str) -> None:
        a = node.attr
        if node.inputs[0] in self.values:
            self.fold(node, merge(self.values[node.inputs[0]], a), r)
            return
        w = self.types[node.inputs[0]]
        o, cg = w.shape[:2]
        count, groups = a["count"], a["groups"]
        pieces = [f"{r}#g{j}" for j in range(groups)]
        self.add("Split", [ins[0], self.ints(f"{r}#sizes", [o // groups] * groups)], pieces, axis=0)
        padded = []
        for j, p in enumerate(pieces):      # old group j sits at slot j % count of its new group
            slot = j % count
            padded.append(f"{p}#pad")
            self.add("Pad", [p, self.ints(f"{p}#pads", [0, slot * cg, 0, 0,
                                                        0, (count - 1 - slot) * cg, 0, 0])],
                     [padded[-1]], mode="constant")
        self.add("Concat", padded, [r], axis=0)

    def empty(self, out: str, placeholder: str) -> str:
        """A Constant for a zero-size input an opaque node carries (see ir/opaque.py)."""
        self.nodes.append(self.h.make_node("Constant", [], [out],
                                           value=empty_tensor(out, placeholder)))
        return out

    def fold(self, node: Node, arr: np.ndarray, r: str) -> None:
        arr = np.ascontiguousarray(arr.astype(NP_DTYPES[node.types[0].dtype], copy=False))
        self.values[node.results[0]] = arr
        self.inits.append(self.nph.from_array(arr, r))

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


def save_onnx(graph: Graph, path: str | Path, weights: Mapping[str, np.ndarray] | None = None,
              seed: int = 0) -> None:
    """Write `to_onnx(graph, weights, seed)` to `path`; models whose weights exceed
    EXTERNAL_BYTES keep them in `PATH.data` (ONNX external data), as protobuf caps a file at 2 GB."""
    import onnx

    model = to_onnx(graph, weights, seed)
    big = sum(t.ByteSize() for t in model.graph.initializer) > EXTERNAL_BYTES
    try:
        if big:      # protobuf cannot serialize 2 GB: weights go to PATH.data next to the model
            onnx.save_model(model, str(path), save_as_external_data=True,
                            all_tensors_to_one_file=True, location=Path(path).name + ".data",
                            size_threshold=1024)
        else:
            onnx.save(model, str(path))
    except OSError as e:
        raise TirError(f"cannot write file: {e.strerror}", file=str(path)) from None
