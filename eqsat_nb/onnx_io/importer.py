"""ONNX model → IR Graph plus weight values.

Types come from `onnx.shape_inference` (with data propagation) after symbolic input dimensions are
fixed (`input_shapes` by input, `dims` by dim_param, else DEFAULT_DIM, or where that size is
degenerate one symbolic.py finds: reported in `OnnxImport.symbolic`/`defaulted`/`size_note`, never
silently); If/Loop/Scan outputs get theirs from their subgraphs (control_flow.py). Shape
computations are then folded (fold.py): a node whose inputs are all constants, or a Shape of a
known shape, gives a constant, and an If with a constant condition is replaced by its branch.
Initializers, Constant nodes and folded values are constants: one used as a data operand becomes
a `weight` node (placed where the exporter's metadata says, else just before its first user); one
read as a static parameter (a Reshape's shape, a Split's sizes, ...) is only read. Old-format
models that list initializers among the graph inputs import: those are weights, not inputs.

Each ONNX node maps onto the operator table where the semantics match exactly (broadcasting made
explicit with `broadcast`/`reshape`); anything else, including a mappable op with an attribute the
IR cannot express, becomes an `opaque` node carrying the ONNX node verbatim. The exporter's
conventions (see exporter.py) are read back so that `.tir → .onnx → .tir` is the identity.
Exporter forms are canonicalized so rules meet them: explicit pads equal to SAME are "same",
Gemm(transB) of a constant is matmul with the transposed weight, the LayerNorm and GELU
decompositions are one op, unused optional outputs (Dropout masks) are dropped.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ShapeError, TirError
from ..ir.builder import GraphBuilder
from ..ir.graph import Graph, TensorType
from ..ir.opaque import NP_DTYPES, ONNX_TO_DTYPE, encode_node, implicit_inputs
from ..ir.shapes import window_pads
from .exporter import WEIGHTS_KEY
from .names import unique
from .symbolic import DegenerateShape, import_at_working_sizes

DEFAULT_DIM = 1          # size given to a symbolic dimension (e.g. the batch) not named in `dims`
_SMALL = 4096            # constants up to this many elements take part in shape inference
_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.$]")
_TYPE_NAMES = {1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32",
               13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16"}


class _NoMap(Exception):
    """This node does not map exactly onto the table: import it as an opaque node."""


@dataclass
class _Const:
    value: np.ndarray
    from_constant_node: bool      # a Constant node (vs an initializer)
    doc: str = ""


def _dtype(elem: int, what: str) -> str:
    try:
        return ONNX_TO_DTYPE[elem]
    except KeyError:
        name = _TYPE_NAMES.get(elem, f"type {elem}")
        raise TirError(f"{what} has element type {name}, which the IR cannot hold "
                       f"(it holds float16, float, double, int32, int64, bool)") from None


class _Importer:
    def __init__(self, model: Any, source: str, dims: Mapping[str, int],
                 input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                 sizes: Mapping[str, int] | None = None) -> None:
        self.source = source
        self.sizes = dict(sizes or {})     # free symbol → size to analyse it at (symbolic.py)
        self.free_symbols: dict[str, list[tuple[str, int]]] = {}   # symbol → (input, axis)
        self.size_note = ""
        self.model = model
        self.dims = dims
        self.input_shapes = dict(input_shapes or {})
        g = model.graph
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        self.opset = default_opset(model)
        self.consts: dict[str, _Const] = {}
        self.const_alias: dict[str, str] = {}    # Identity of a constant → the constant
        self.types: dict[str, TensorType] = {}
        self.value: dict[str, str] = {}         # ONNX name → SSA value
        self.weights: dict[str, np.ndarray] = {}
        self.weight_ssa: dict[str, str] = {}    # ONNX name of a materialized weight → SSA
        self.folded: set[str] = set()           # node outputs folded into constants
        self.symbolic_values: set[str] = set()  # folded values that read a defaulted dim
        self.symbolic: dict[str, list[int | str]] = {}   # input → its dims as written
        self.defaulted: dict[str, list[int]] = {}        # input → axes given DEFAULT_DIM
        self.inlined: list[str] = []
        self.concrete: dict[str, list[bool]] | None = None
        self.index_nodes(g)
        self.skip: set[int] = set()
        self.b = GraphBuilder(_sanitize(g.name) or "main")
        self.used_names: set[str] = set()
        self.meta_before: dict[str, list[tuple[str, str, str]]] = {}
        self.meta_names: dict[str, tuple[str, str]] = {}  # initializer → (weight name, SSA)
        self.bad_types: dict[str, int] = {}       # values of element types the IR lacks
        self.zero_size: set[str] = set()
        self.not_tensors: dict[str, str] = {}     # value → "sequence", "map", "optional", ...

    def index_nodes(self, g: Any) -> None:
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(g.node):
            for v in node.input:
                if v:
                    self.consumers.setdefault(v, []).append(i)
            if any(a.type in (5, 10) for a in node.attribute):   # what If/Loop bodies read
                for v in implicit_inputs(node):
                    self.consumers.setdefault(v, []).append(i)
        self.graph_outputs = {o.name for o in g.output}

    def fixed_dim(self, v: str, axis: int) -> bool:
        """Whether dim `axis` of `v` is the same whatever the defaulted input dims are."""
        if self.concrete is None:
            return True
        c = self.concrete.get(v)
        return c is not None and axis < len(c) and c[axis]

    def unused(self, v: str) -> bool:
        """An output nothing reads (no consumer, not a graph output)."""
        return not v or (v not in self.consumers and v not in self.graph_outputs)

    # ------------------------------------------------------------------ errors and names
    def err(self, msg: str, node: Any = None, cls: type = TirError) -> TirError:
        if node is not None:
            dom = node.domain if node.domain not in ("", "ai.onnx") else ""
            ver = self.opsets.get(dom) if dom else self.opset
            where = f"{dom} opset {ver}" if dom else f"opset {ver}"
            label = (f"node '{node.name}' ({node.op_type}, {where})" if node.name
                     else f"{node.op_type} node ({where})")
            msg = f"{label}: {msg}"
        return cls(msg, file=self.source)

    def reserve(self, onnx_name: str) -> str:
        return unique("%" + (_sanitize(onnx_name) or "v"), self.used_names)

    def ssa_for(self, onnx_name: str) -> str:
        """The SSA name an ONNX value gets (reserved once, on first request)."""
        if onnx_name not in self.value:
            self.value[onnx_name] = self.reserve(onnx_name)
        return self.value[onnx_name]

    def helper_name(self, base: str) -> str:
        return self.reserve(base.lstrip("%") + "_")

    # ------------------------------------------------------------------ values
    def type_of(self, name: str, node: Any = None) -> TensorType:
        t = self.types.get(name)
        if t is None and name in self.bad_types:
            raise self.err(f"'{name}' has element type "
                           f"{_TYPE_NAMES.get(self.bad_types[name], self.bad_types[name])}, which "
                           f"the IR cannot hold", node)
        if t is None and name in self.not_tensors:
            raise self.err(f"'{name}' is a {self.not_tensors[name]}, which the IR cannot hold (it "
                           f"holds tensors)", node)
        if t is None and name in self.zero_size:
            raise self.err(f"'{name}' has a zero-size dimension, which the IR cannot hold", node,
                           DegenerateShape)
        if t is None:
            hint = ("data-dependent shapes are not supported" if not self.defaulted else
                    "it may depend on the symbolic input dims " + _dims_text(self.symbolic) +
                    ", which took the size " + str(DEFAULT_DIM) + ": give the input shapes "
                    "(--input-shape NAME=1x3x224x224 / --dim SYMBOL=VALUE)")
            raise self.err(f"the shape of '{name}' is unknown (shape inference could not derive "
                           f"it; {hint})", node, DegenerateShape)
        return t

    def const(self, name: str) -> np.ndarray | None:
        c = self.consts.get(name)
        return None if c is None else c.value

    def val(self, name: str, node: Any = None) -> str:
        """The SSA value of an ONNX value used as a data operand (a constant becomes a weight)."""
        if name in self.weight_ssa:
            return self.weight_ssa[name]
        if name in self.const_alias and name not in self.defined:   # Identity of a constant
            ssa = self.val(self.const_alias[name], node)
            self.weight_ssa[name] = ssa
            return ssa
        if name in self.consts and name not in self.defined:
            return self.materialize(name, node)
        if name not in self.defined:
            raise self.err(f"value '{name}' is used before it is defined", node)
        return self.value[name]

    def materialize(self, name: str, node: Any = None) -> str:
        if name in self.meta_weight_inputs:      # exported with weights_as_inputs: no value
            wname, ssa, ty = self.meta_weight_inputs[name]
            self.used_names.add(ssa)
            self.b.weight(ty.shape, wname, ty.dtype, value_name=ssa)
            self.weights[wname] = np.zeros(0)
            self.weight_ssa[name] = ssa
            return ssa
        c = self.consts[name]
        wname, ssa = self.meta_names.get(name, (None, None))
        if wname is None:
            wname = self.weight_name(name)
            ssa = self.reserve(name) if name not in self.value else self.value[name]
        else:
            self.used_names.add(ssa)
        dtype = _dtype(_np_elem(c.value, name, self, node), f"constant '{name}'")
        if c.value.size == 0 or any(d <= 0 for d in c.value.shape):
            raise self.err(f"constant '{name}' has a zero-size dimension {c.value.shape}", node,
                           DegenerateShape)
        self.b.weight(c.value.shape, wname, dtype, value_name=ssa)
        self.weights[wname] = c.value
        self.weight_ssa[name] = ssa
        return ssa

    def weight_name(self, name: str) -> str:
        base = _sanitize(name) or "w"
        wname, k = base, 1
        while wname in self.weights:
            wname = f"{base}_{k}"
            k += 1
        return wname

    # ------------------------------------------------------------------ emitting
    def before(self, ssa: str) -> None:
        """Weight declarations the exporter recorded in front of the node defining `ssa`."""
        for init, _, _ in self.meta_before.pop(ssa, ()):
            if init not in self.weight_ssa:
                self.materialize(init)

    def emit(self, op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        """Add one IR node; `out` is the ONNX output it defines (None: a helper value)."""
        name = self.ssa_for(out) if out is not None else self.helper_name(inputs[0])
        self.before(name)
        ssa = self.b.op(op, *inputs, name=name, **attrs)
        if out is not None:
            self.defined.add(out)
        return ssa

    # ------------------------------------------------------------------ the walk
    def run(self) -> tuple[Graph, dict[str, np.ndarray]]:
        from onnx import numpy_helper

        g = self.model.graph
        self.defined: set[str] = set()
        for t in g.initializer:
            try:
                self.consts[t.name] = _Const(numpy_helper.to_array(t), False)
            except Exception as e:      # noqa: BLE001 - onnx raises assorted types on bad tensors
                raise self.err(f"cannot read initializer '{t.name}': {e}") from None
        self.read_metadata()
        self.infer_types()
        g = self.model.graph             # If nodes with a constant condition may be inlined
        for node in g.node:             # reserve every ONNX value name first: helpers never clash
            for v in node.output:
                if v:
                    self.ssa_for(v)
        for inp in g.input:
            if inp.name in self.consts:
                continue                 # old format: an initializer listed as an input
            if inp.name in self.meta_names:   # exported with weights_as_inputs
                wname, ssa = self.meta_names[inp.name]
                self.consts[inp.name] = _Const(np.zeros(0), False)
                self.meta_weight_inputs[inp.name] = (wname, ssa, self.type_of(inp.name))
                continue
            ty = self.type_of(inp.name)
            ssa = self.ssa_for(inp.name)
            self.b.input(ty.shape, ty.dtype, name=ssa)
            self.defined.add(inp.name)
        for node in g.node:      # constants first: patterns (find_gelu) read their values
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self.constant(node)
            elif node.op_type == "Identity" and node.domain in ("", "ai.onnx") and \
                    node.input[0] in self.consts:     # torch's deduplicated initializers
                self.consts[node.output[0]] = self.consts[node.input[0]]
                self.const_alias[node.output[0]] = node.input[0]
        self.find_gelu()
        self.find_layernorm()
        for i, node in enumerate(g.node):
            if i in self.skip:
                continue
            self.node(i, node)
        for init, *_ in [x for v in self.meta_before.values() for x in v]:
            if init not in self.weight_ssa:       # declared, never used
                self.materialize(init)
        outs = []
        for o in g.output:
            if o.name in self.consts or o.name in self.defined or o.name in self.weight_ssa:
                outs.append(self.val(o.name))
            else:
                raise self.err(f"graph output '{o.name}' is never computed")
        if not outs:
            raise self.err("the graph has no outputs")
        return self.b.build(*outs), self.weights

    meta_weight_inputs: dict[str, tuple[str, str, TensorType]]

    def read_metadata(self) -> None:
        self.meta_weight_inputs = {}
        raw = {p.key: p.value for p in self.model.metadata_props}.get(WEIGHTS_KEY)
        if raw is None:
            return
        try:
            entries = json.loads(raw)
            for init, wname, ssa, nxt in entries:
                if not all(isinstance(x, str) for x in (init, wname, ssa, nxt)):
                    raise ValueError
                self.meta_names[init] = (wname, ssa)
                self.meta_before.setdefault(nxt, []).append((init, wname, ssa))
        except (ValueError, TypeError):
            raise self.err(f"metadata '{WEIGHTS_KEY}' is malformed") from None
        for init, (_, ssa) in self.meta_names.items():
            self.value[init] = ssa
            self.used_names.add(ssa)

    def input_dims(self) -> tuple[dict[str, tuple[int, ...]], dict[str, set[int]]]:
        """The shape each graph input is imported with, and the axes that took DEFAULT_DIM
        because the user named no size for them. A dim that is a dim_param, unnamed, or written
        as -1 or 0 is symbolic."""
        g = self.model.graph
        inits = {t.name for t in g.initializer}
        names = {i.name for i in g.input}
        for name in self.input_shapes:
            if name not in names or name in inits:
                raise self.err(f"input shape given for '{name}', which is not a graph input "
                               f"(inputs: {', '.join(sorted(names - inits)) or 'none'})")
        shapes: dict[str, tuple[int, ...]] = {}
        free: dict[str, set[int]] = {}
        self.free_symbols = {}
        for inp in g.input:
            if inp.name in inits:
                continue
            tt = inp.type.tensor_type
            if not inp.type.HasField("tensor_type") or not tt.HasField("shape"):
                if inp.name in self.input_shapes:
                    shapes[inp.name] = tuple(int(d) for d in self.input_shapes[inp.name])
                    continue
                raise self.err(f"graph input '{inp.name}' has no tensor shape (give it one: "
                               f"--input-shape {inp.name}=...)")
            labels: list[int | str] = []
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value > 0:
                    labels.append(int(d.dim_value))
                else:
                    labels.append(d.dim_param if d.dim_param else "?")
            if any(isinstance(x, str) for x in labels):
                self.symbolic[inp.name] = labels
            given = self.input_shapes.get(inp.name)
            if given is not None:
                given = tuple(int(d) for d in given)
                if len(given) != len(labels) or any(
                        isinstance(x, int) and x != y for x, y in zip(labels, given)) or any(
                        y < 0 for y in given):
                    raise self.err(f"input shape {_dims_text({inp.name: list(given)})} given for "
                                   f"'{inp.name}', whose dims are "
                                   f"{_dims_text({inp.name: labels})}")
                shapes[inp.name] = given
                continue
            dims = []
            for k, x in enumerate(labels):
                if isinstance(x, int):
                    dims.append(x)
                elif x != "?" and x in self.dims:
                    dims.append(int(self.dims[x]))
                else:
                    symbol = x if x != "?" else f"{inp.name}[{k}]"
                    self.free_symbols.setdefault(symbol, []).append((inp.name, k))
                    dims.append(int(self.sizes.get(symbol, DEFAULT_DIM)))
                    free.setdefault(inp.name, set()).add(k)
            shapes[inp.name] = tuple(dims)
        self.defaulted = {k: sorted(v) for k, v in free.items()}
        return shapes, free

    def infer_types(self) -> None:
        from . import fold
        from .control_flow import empty_in_branches, fold_with_control_flow

        shapes, free = self.input_dims()
        known = {k: c.value for k, c in self.consts.items() if c.value.size <= fold.FOLD_MAX}
        try:
            res = fold_with_control_flow(self.model, shapes, known, free, _SMALL)
        except Exception as e:   # noqa: BLE001 - inference errors are of onnx's own types
            raise self.err(f"shape inference failed: {str(e).strip().splitlines()[0]}",
                           cls=DegenerateShape) from None
        empty = empty_in_branches(res.model, res, known, _SMALL) if free else None
        if empty is not None:       # sizes the tool chose, at which a branch computes nothing
            raise self.err(f"'{empty[1]}', computed in a branch, has a zero-size dimension at "
                           f"these sizes", empty[0], DegenerateShape)
        if res.model is not self.model:          # If nodes with a constant condition inlined
            from onnx import numpy_helper
            self.model = res.model
            self.index_nodes(self.model.graph)
            for t in self.model.graph.initializer:
                if t.name not in self.consts:
                    self.consts[t.name] = _Const(numpy_helper.to_array(t), False)
            self.inlined = res.inlined
        for name, v in res.values.items():
            self.consts[name] = _Const(v, True)
            self.folded.add(name)
        self.symbolic_values = res.symbolic
        self.concrete = res.concrete
        g = self.model.graph
        ig = res.inferred.graph
        for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
            kind = vi.type.WhichOneof("value")
            if kind not in (None, "tensor_type"):      # a sequence, map, optional, sparse tensor
                self.not_tensors.setdefault(vi.name, kind.removesuffix("_type").replace("_", " "))
            if vi.name in self.types or kind != "tensor_type":
                continue
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or tt.elem_type == 0:
                continue
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            if tt.elem_type not in ONNX_TO_DTYPE:
                self.bad_types[vi.name] = tt.elem_type
                continue
            if 0 in dims:
                self.zero_size.add(vi.name)
            if any(d <= 0 for d in dims):
                continue                 # unknown or zero-size: left unknown
            self.types[vi.name] = TensorType(tuple(dims), ONNX_TO_DTYPE[tt.elem_type])
        for t in g.initializer:
            if t.data_type in ONNX_TO_DTYPE and all(d > 0 for d in t.dims):
                self.types.setdefault(t.name, TensorType(tuple(t.dims),
                                                         ONNX_TO_DTYPE[t.data_type]))
        for name, v in res.values.items():
            dt = next((k for k, t in NP_DTYPES.items() if v.dtype == np.dtype(t)), None)
            if dt is None:
                self.bad_types.setdefault(name, _np_to_onnx(v.dtype))
            elif v.size == 0:
                self.zero_size.add(name)
            elif name not in self.types:
                self.types[name] = TensorType(tuple(int(d) for d in v.shape), dt)

    def node(self, i: int, node: Any) -> None:
        op = node.op_type
        outs = [o for o in node.output if o]
        if outs and all(o in self.folded for o in outs):
            return                       # a constant once the input shapes are fixed
        if node.domain in ("", "ai.onnx"):
            if op == "Constant":
                self.constant(node)
                return
            if op == "Identity":
                src = node.input[0]
                if node.output[0] in self.const_alias:
                    return
                if src in self.consts and src not in self.defined:
                    self.consts[node.output[0]] = self.consts[src]
                    self.const_alias[node.output[0]] = src
                    return
                self.alias(node.output[0], self.val(src, node))
                return
            if i in self.layernorm_at:
                x, gm, bt, axis, eps = self.layernorm_at[i]
                imp_vals = [self.val(v, node) for v in (x, gm, bt)]
                self.emit("layernorm", imp_vals, node.output[0], axis=axis, eps=eps)
                return
            mapper = _MAPPERS.get(op)
            first = next((o for o in node.output if o), None)
            if first is not None:      # weights declared in front of this node (exporter metadata)
                self.before(self.ssa_for(first[:-len("#act")] if first.endswith("#act")
                                         else first))
            if mapper is not None:
                mark = self.b.checkpoint()
                saved = (set(self.defined), dict(self.weight_ssa), dict(self.weights),
                         set(self.skip))
                try:
                    mapper(self, i, node)
                    return
                except (_NoMap, ShapeError):
                    self.b.rollback(mark)
                    self.defined, self.weight_ssa, self.weights, self.skip = saved
                except TirError as e:
                    if e.file:
                        raise
                    self.b.rollback(mark)
                    self.defined, self.weight_ssa, self.weights, self.skip = saved
        self.opaque(node)

    def alias(self, out: str, ssa: str) -> None:
        self.value[out] = ssa
        self.defined.add(out)

    def constant(self, node: Any) -> None:
        from onnx import helper, numpy_helper

        a = node.attribute[0] if len(node.attribute) == 1 else None
        try:
            if a is None:
                raise ValueError("a Constant has exactly one attribute")
            if a.name == "value":
                arr = numpy_helper.to_array(a.t)
            elif a.name in ("value_float", "value_floats"):
                arr = np.asarray(helper.get_attribute_value(a), np.float32)
            elif a.name in ("value_int", "value_ints"):
                arr = np.asarray(helper.get_attribute_value(a), np.int64)
            else:
                raise ValueError(f"a Constant with '{a.name}' is not supported")
        except Exception as e:   # noqa: BLE001
            raise self.err(f"cannot read the constant: {e}", node) from None
        self.consts[node.output[0]] = _Const(arr, True, node.doc_string)

    def opaque(self, node: Any) -> None:
        from .control_flow import with_constants_inside
        from .opaque_inputs import stored_inputs

        node = with_constants_inside(node, self.outer_const)
        domain = node.domain if node.domain != "ai.onnx" else ""
        opset = self.opsets.get(domain, self.opsets.get("ai.onnx" if not domain else domain, 1))
        flags = stored_inputs(node, self.empty_const, opset)
        ins = [self.val(v, node) for v, f in zip(node.input, flags) if f is True]
        ins += [self.val(v, node) for v in implicit_inputs(node)]   # read by If/Loop bodies
        outs = [v for v in node.output if v]
        types = []
        for v in outs:
            if v in self.bad_types:
                raise self.err(f"output '{v}' has element type "
                               f"{_TYPE_NAMES.get(self.bad_types[v], self.bad_types[v])}, which "
                               f"the IR cannot hold", node)
            types.append(self.type_of(v, node))
        attrs = {"op": node.op_type, "domain": domain, "opset": opset,
                 "onnx": encode_node(node, flags, [bool(v) for v in node.output])}
        names = [self.ssa_for(v) for v in outs]
        if names:
            self.before(names[0])
        try:
            self.b.opaque(ins, attrs, types, names=names)
        except TirError as e:
            raise self.err(e.message, node) from None
        self.defined.update(outs)

    def outer_const(self, v: str) -> np.ndarray | None:
        """The value of `v` if it is a constant a subgraph may carry inside itself."""
        c = self.consts.get(v)
        if c is None or v in self.defined or v in self.meta_weight_inputs:
            return None
        return c.value

    def empty_const(self, v: str) -> np.ndarray | None:
        """The value of `v` if it is a zero-size constant (which the IR cannot hold)."""
        c = self.consts.get(v)
        if c is None or v in self.defined or v in self.meta_weight_inputs or c.value.size:
            return None
        return c.value

    # ------------------------------------------------------------------ patterns
    def single_use(self, v: str) -> bool:
        return len(self.consumers.get(v, ())) == 1 and v not in self.graph_outputs

    def producer_index(self) -> dict[str, int]:
        return {v: i for i, n in enumerate(self.model.graph.node) for v in n.output if v}

    def find_gelu(self) -> None:
        """0.5 * x * (1 + erf(x / sqrt 2)) in its usual spellings → one gelu."""
        nodes = self.model.graph.node
        prod = self.producer_index()
        self.gelu_at: dict[int, str] = {}

        def node_of(v: str) -> tuple[int, Any] | None:
            i = prod.get(v)
            return None if i is None else (i, nodes[i])

        def scalar(v: str, want: float) -> bool:
            c = self.const(v)
            return (c is not None and c.size == 1 and c.dtype.kind == "f"
                    and abs(float(c.reshape(-1)[0]) - want) <= 1e-6 * abs(want))

        def other(n: Any, v: str) -> str | None:
            if len(n.input) == 2 and v in n.input:
                return n.input[1] if n.input[0] == v else n.input[0]
            return None

        for ei, e in enumerate(nodes):
            if e.op_type != "Erf" or e.domain not in ("", "ai.onnx"):
                continue
            d = node_of(e.input[0])
            if d is None or not self.single_use(e.input[0]):
                continue
            di, dn = d
            if dn.op_type == "Div" and scalar(dn.input[1], math.sqrt(2.0)):
                x = dn.input[0]
            elif dn.op_type == "Mul" and (scalar(dn.input[1], 1 / math.sqrt(2.0))
                                          or scalar(dn.input[0], 1 / math.sqrt(2.0))):
                x = dn.input[0] if scalar(dn.input[1], 1 / math.sqrt(2.0)) else dn.input[1]
            else:
                continue
            uses = self.consumers.get(e.output[0], [])
            if len(uses) != 1 or not self.single_use(e.output[0]):
                continue
            ai, an = uses[0], nodes[uses[0]]
            one = other(an, e.output[0])
            if an.op_type != "Add" or one is None or not scalar(one, 1.0):
                continue
            a = an.output[0]
            if not self.single_use(a):
                continue
            mi = self.consumers[a][0]
            mn = nodes[mi]
            if mn.op_type != "Mul":
                continue
            m_other = other(mn, a)
            inner: list[int] = [di, ei, ai, mi]
            last = None
            if m_other == x and self.single_use(mn.output[0]):        # (x * a) * 0.5
                li = self.consumers[mn.output[0]][0]
                ln = nodes[li]
                if ln.op_type == "Mul" and scalar(other(ln, mn.output[0]) or "", 0.5):
                    last = li
            elif m_other is not None and scalar(m_other, 0.5) and self.single_use(mn.output[0]):
                li = self.consumers[mn.output[0]][0]                  # x * (a * 0.5)
                ln = nodes[li]
                if ln.op_type == "Mul" and other(ln, mn.output[0]) == x:
                    last = li
            elif m_other is not None and self.single_use(m_other):     # (x * 0.5) * a
                h = node_of(m_other)
                if h is not None and h[1].op_type == "Mul" and other(h[1], x) is not None \
                        and scalar(other(h[1], x), 0.5):
                    inner.append(h[0])
                    last = mi
                    inner.remove(mi)
            if last is None or any(nodes[k].domain not in ("", "ai.onnx") for k in inner):
                continue
            if last != mi:
                inner.append(mi) if mi not in inner else None
            self.skip.update(k for k in inner if k != last)
            self.gelu_at[last] = x

    def find_layernorm(self) -> None:
        """LayerNorm as torch.onnx writes it below opset 17: m = ReduceMean(x), d = Sub(x, m),
        v = ReduceMean(Pow(d, 2)) (or Mul(d, d)), y = Div(d, Sqrt(Add(v, eps))), then
        Mul(y, gamma) and Add(_, beta) with constant gamma/beta → one layernorm."""
        nodes = self.model.graph.node
        self.layernorm_at: dict[int, tuple[str, str, str, int, float]] = {}
        std = ("", "ai.onnx")

        def only_use(v: str) -> tuple[int, Any] | None:
            if not self.single_use(v):
                return None
            k = self.consumers[v][0]
            return (k, nodes[k]) if nodes[k].domain in std else None

        def axes_of(n: Any) -> tuple[int, ...] | None:
            at = _attrs(n)
            if at.get("keepdims", 1) != 1:
                return None
            ax = at.get("axes")
            if len(n.input) > 1 and n.input[1]:
                c = self.const(n.input[1])
                ax = None if c is None else [int(v) for v in c.reshape(-1)]
            return None if ax is None else tuple(ax)

        def scalar(v: str) -> float | None:
            c = self.const(v)
            if c is None or c.size != 1 or c.dtype.kind != "f":
                return None
            return float(c.reshape(-1)[0])

        def other(n: Any, v: str) -> str | None:
            if len(n.input) == 2 and v in n.input and n.input[0] != n.input[1]:
                return n.input[1] if n.input[0] == v else n.input[0]
            return None

        for mi, mn in enumerate(nodes):
            if mn.op_type != "ReduceMean" or mn.domain not in std:
                continue
            x = mn.input[0]
            tx = self.types.get(x)
            ax = axes_of(mn)
            if tx is None or ax is None or not ax or tx.dtype not in ("f16", "f32", "f64"):
                continue
            r = tx.rank
            norm = sorted(a % r for a in ax)
            if norm != list(range(r - len(norm), r)):
                continue
            u = only_use(mn.output[0])
            if u is None or u[1].op_type != "Sub" or list(u[1].input) != [x, mn.output[0]]:
                continue
            si, sn = u
            d = sn.output[0]
            uses = self.consumers.get(d, [])
            if d in self.graph_outputs or len(uses) not in (2, 3):
                continue
            sq = [k for k in set(uses) if nodes[k].op_type in ("Pow", "Mul")]
            dv = [k for k in set(uses) if nodes[k].op_type == "Div"]
            if len(sq) != 1 or len(dv) != 1:
                continue
            pn = nodes[sq[0]]
            if pn.op_type == "Pow" and not (pn.input[0] == d and scalar(pn.input[1]) == 2.0
                                            and len(uses) == 2):
                continue
            if pn.op_type == "Mul" and not (list(pn.input) == [d, d] and len(uses) == 3):
                continue
            u = only_use(pn.output[0])
            if u is None or u[1].op_type != "ReduceMean" or u[1].input[0] != pn.output[0] \
                    or axes_of(u[1]) is None or sorted(a % r for a in axes_of(u[1])) != norm:
                continue
            vi = u[0]
            u = only_use(nodes[vi].output[0])
            if u is None or u[1].op_type != "Add":
                continue
            ai, an = u
            eps_name = other(an, nodes[vi].output[0])
            eps = scalar(eps_name) if eps_name else None
            if eps is None:
                continue
            u = only_use(an.output[0])
            if u is None or u[1].op_type != "Sqrt":
                continue
            qi = u[0]
            u = only_use(nodes[qi].output[0])
            if u is None or u[0] != dv[0] or list(u[1].input) != [d, nodes[qi].output[0]]:
                continue
            di = dv[0]
            u = only_use(nodes[di].output[0])
            if u is None or u[1].op_type != "Mul":
                continue
            gi, gn = u
            gamma = other(gn, nodes[di].output[0])
            u = only_use(gn.output[0])
            if gamma is None or u is None or u[1].op_type != "Add":
                continue
            bi, bn = u
            beta = other(bn, gn.output[0])
            nshape = tx.shape[r - len(norm):]
            ok = True
            for c in (gamma, beta):
                cv = self.const(c) if c else None
                if cv is None or tuple(cv.shape) != nshape or cv.dtype != np.dtype(
                        NP_DTYPES[tx.dtype]) or c in self.folded:
                    ok = False
            if not ok or any(nodes[k].attribute for k in (si, ai, qi, di, gi, bi)):
                continue
            if self.types.get(bn.output[0]) != tx:
                continue
            self.skip.update((mi, si, sq[0], vi, ai, qi, di, gi))
            self.layernorm_at[bi] = (x, gamma, beta, -len(norm),
                                     _short(np.float32(eps)))

    # fused activations written by the exporter: Conv/MatMul/Pool → "r#act" → Relu → "r"
    def fused_act(self, node: Any) -> tuple[str, str | None]:
        out = node.output[0]
        if not out.endswith("#act") or not self.single_use(out):
            return "none", None
        k = self.consumers[out][0]
        nxt = self.model.graph.node[k]
        act = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}.get(nxt.op_type)
        if act is None or nxt.output[0] != out[:-len("#act")] or nxt.domain not in ("", "ai.onnx"):
            return "none", None
        self.skip.add(k)
        return act, nxt.output[0]


def default_opset(model: Any) -> int:
    """The model's default-domain opset (imported as "" or, equally, "ai.onnx")."""
    opsets = {o.domain or "": o.version for o in model.opset_import}
    return opsets.get("", opsets.get("ai.onnx", 1))


def _np_elem(arr: np.ndarray, name: str, imp: _Importer, node: Any) -> int:
    for k, v in NP_DTYPES.items():
        if arr.dtype == np.dtype(v):
            from ..ir.opaque import DTYPE_TO_ONNX
            return DTYPE_TO_ONNX[k]
    raise imp.err(f"constant '{name}' has element type {arr.dtype}, which the IR cannot hold",
                  node)


def _np_to_onnx(dt: Any) -> int:
    from onnx import helper
    try:
        return int(helper.np_dtype_to_tensor_dtype(np.dtype(dt)))
    except Exception:    # noqa: BLE001
        return 0


def _dims_text(shapes: Mapping[str, list]) -> str:
    return ", ".join(f"'{k}' [{', '.join(str(d) for d in v)}]" for k, v in shapes.items())


def _sanitize(name: str) -> str:
    return _BAD_CHARS.sub("_", name)


# ----------------------------------------------------------------------------------- mappers

def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _need(cond: bool) -> None:
    if not cond:
        raise _NoMap


def _known(attrs: dict, allowed: set[str]) -> None:
    _need(set(attrs) <= allowed)


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _to(imp: _Importer, v: str, ty: TensorType, shape: tuple[int, ...]) -> str:
    """`v` broadcast to `shape` (nothing when it already has it)."""
    if ty.shape == shape:
        return v
    return imp.emit("broadcast", [v], shape=shape)


def _binary(op: str) -> Callable:
    def mapper(imp: _Importer, i: int, node: Any) -> None:
        _need(len(node.input) == 2 and not node.attribute)
        if op == "ewmul" and i in imp.gelu_at:
            imp.emit("gelu", [imp.val(imp.gelu_at[i], node)], node.output[0])
            return
        a, b = node.input
        out = imp.type_of(node.output[0], node)
        ta, tb = imp.type_of(a, node), imp.type_of(b, node)
        if op == "ewmul" and out.dtype in ("f16", "f32", "f64"):
            for x, s, tx in ((a, b, ta), (b, a, tb)):
                c = imp.consts.get(s)
                if (c is not None and c.value.size == 1 and tx.shape == out.shape
                        and (c.from_constant_node or c.value.shape != out.shape)
                        and s not in imp.weight_ssa):
                    imp.emit("scale", [imp.val(x, node)], node.output[0],
                             value=_exact_float(c))
                    return
        va, vb = imp.val(a, node), imp.val(b, node)
        imp.emit(op, [_to(imp, va, ta, out.shape), _to(imp, vb, tb, out.shape)], node.output[0])
    return mapper


def _exact_float(c: _Const) -> float:
    """The float a scalar constant stands for: the exporter's exact repr in doc_string when it
    agrees with the tensor, else the shortest decimal that gives the tensor's value."""
    v = c.value.reshape(-1)[0]
    try:
        exact = float(c.doc)
        if np.asarray(exact, c.value.dtype) == v:
            return exact
    except ValueError:
        pass
    return _short(v)


def _short(v: Any) -> float:
    """float32 attributes read back as the shortest decimal (1e-05, not 9.99999974e-06)."""
    v = np.asarray(v)[()]
    if isinstance(v, (np.float32, np.float16)) and np.isfinite(v):
        return float(str(v))         # NumPy prints the shortest decimal that reads back as v
    return float(v)


def _unary(op: str) -> Callable:
    def mapper(imp: _Importer, i: int, node: Any) -> None:
        _need(len(node.input) == 1 and not node.attribute)
        imp.emit(op, [imp.val(node.input[0], node)], node.output[0])
    return mapper


def _matmul(imp: _Importer, i: int, node: Any) -> None:
    """ONNX MatMul is the IR's matmul (NumPy broadcasting of batch dims, a weight as it is); a
    rank-1 operand is made a matrix and the result reshaped back, as ONNX defines it."""
    _need(len(node.input) == 2 and not node.attribute)
    a, b = node.input
    ta, tb = imp.type_of(a, node), imp.type_of(b, node)
    out = imp.type_of(node.output[0], node)
    act, final = imp.fused_act(node)
    va, vb = imp.val(a, node), imp.val(b, node)
    if ta.rank >= 2 and tb.rank >= 2:
        imp.emit("matmul", [va, vb], final or node.output[0], act=act)
        return
    _need(act == "none")
    if ta.rank == 1:
        va = imp.emit("reshape", [va], shape=(1,) + ta.shape)
    if tb.rank == 1:
        vb = imp.emit("reshape", [vb], shape=tb.shape + (1,))
    y = imp.emit("matmul", [va, vb])
    imp.emit("reshape", [y], node.output[0], shape=out.shape)


def _gemm(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"alpha", "beta", "transA", "transB"})
    _need(len(node.input) in (2, 3))
    a = imp.val(node.input[0], node)
    bname = node.input[1]
    c = imp.consts.get(bname)
    if at.get("transB", 0) and c is not None and bname not in imp.defined \
            and bname not in imp.meta_weight_inputs and c.value.ndim == 2:
        # torch's Linear as Gemm(transB=1): the weight transposed once, so the rules see
        # matmul(x, W) as in the .tir models (the ONNX initializer itself maps to no IR value)
        wt = np.ascontiguousarray(c.value.T)
        wname = imp.weight_name(bname + "_T")
        dtype = _dtype(_np_elem(wt, bname, imp, node), f"constant '{bname}'")
        b = imp.b.weight(wt.shape, wname, dtype, value_name=imp.reserve(wname))
        imp.weights[wname] = wt
        at = {**at, "transB": 0}
    else:
        b = imp.val(bname, node)
    if at.get("transA", 0):
        a = imp.emit("transpose", [a], perm=(1, 0))
    if at.get("transB", 0):
        b = imp.emit("transpose", [b], perm=(1, 0))
    out = imp.type_of(node.output[0], node)
    alpha, beta = _short(np.float32(at.get("alpha", 1.0))), _short(np.float32(at.get("beta", 1.0)))
    has_c = len(node.input) == 3 and node.input[2] and beta != 0.0
    last = not has_c
    y = imp.emit("matmul", [a, b], node.output[0] if last and alpha == 1.0 else None)
    if alpha != 1.0:
        y = imp.emit("scale", [y], node.output[0] if last else None, value=alpha)
    if has_c:
        c = imp.val(node.input[2], node)
        c = _to(imp, c, imp.type_of(node.input[2], node), out.shape)
        if beta != 1.0:
            c = imp.emit("scale", [c], value=beta)
        imp.emit("ewadd", [y, c], node.output[0])


def _padding(imp: _Importer, node: Any, at: dict, hw: tuple[int, int], kernel: tuple[int, int],
             stride: tuple[int, int]) -> Any:
    auto = _s(at.get("auto_pad", "NOTSET"))
    if auto == "SAME_UPPER":
        return "same"
    if auto == "VALID":
        return "valid"
    if auto == "SAME_LOWER":
        (t, b_), (l, r) = [window_pads(hw[k], kernel[k], stride[k], "same") for k in (0, 1)]
        return (b_, r, t, l)               # the odd pixel goes before
    _need(auto == "NOTSET")
    pads = tuple(at.get("pads", (0, 0, 0, 0)))
    _need(len(pads) == 4 and all(p >= 0 for p in pads))
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


def _window_common(imp: _Importer, node: Any, at: dict, kernel: tuple[int, int]) -> tuple:
    x = imp.type_of(node.input[0], node)
    _need(x.rank == 4 and len(kernel) == 2)
    _need(all(d == 1 for d in at.get("dilations", (1, 1))))
    stride = tuple(at.get("strides", (1, 1)))
    _need(len(stride) == 2)
    return x, stride, _padding(imp, node, at, x.shape[2:], kernel, stride)


def _conv(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    _need(len(node.input) in (2, 3))
    w = imp.type_of(node.input[1], node)
    _need(w.rank == 4)
    kernel = tuple(w.shape[2:])
    _need(tuple(at.get("kernel_shape", kernel)) == kernel)
    x, stride, pad = _window_common(imp, node, at, kernel)
    _need(x.shape[1] // w.shape[1] == at.get("group", 1) and x.shape[1] % w.shape[1] == 0)
    ins = [imp.val(node.input[0], node), imp.val(node.input[1], node)]
    if len(node.input) == 3 and node.input[2]:     # B [M], constant or not: conv2d's bias
        _need(imp.type_of(node.input[2], node).shape == (w.shape[0],))
        ins.append(imp.val(node.input[2], node))
    act, final = imp.fused_act(node)
    imp.emit("conv2d", ins, final or node.output[0], stride=stride, pad=pad, act=act)


def _pool(kind: str) -> Callable:
    def mapper(imp: _Importer, i: int, node: Any) -> None:
        at = _attrs(node)
        _known(at, {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape",
                    "pads", "strides", "storage_order"})
        _need(node.output[0] and all(imp.unused(o) for o in node.output[1:]))
        _need(not at.get("ceil_mode", 0) and not at.get("storage_order", 0))
        kernel = tuple(at["kernel_shape"])
        x, stride, pad = _window_common(imp, node, at, kernel)
        if kind == "poolavg" and not at.get("count_include_pad", 0):
            # padding left out of the divisor: exact only where there is no padding at all
            hw = x.shape[2:]
            if isinstance(pad, str):
                _need(all(window_pads(hw[k], kernel[k], stride[k], pad) == (0, 0)
                          for k in (0, 1)))
            else:
                _need(not any(pad))
        act, final = imp.fused_act(node)
        imp.emit(kind, [imp.val(node.input[0], node)], final or node.output[0], kernel=kernel,
                 stride=stride, pad=pad, act=act)
    return mapper


def _global_pool(kind: str) -> Callable:
    def mapper(imp: _Importer, i: int, node: Any) -> None:
        _need(not node.attribute)
        x = imp.type_of(node.input[0], node)
        _need(x.rank == 4)
        imp.emit(kind, [imp.val(node.input[0], node)], node.output[0], kernel=x.shape[2:],
                 pad="valid")
    return mapper


def _concat(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"axis"})
    _need(all(node.input))
    imp.emit("concat", [imp.val(v, node) for v in node.input], node.output[0], axis=at["axis"])


def _split(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"axis", "split", "num_outputs"})
    _need(all(node.output))
    if len(node.input) > 1 and node.input[1]:
        _need(imp.const(node.input[1]) is not None)    # sizes must be static
    axis = at.get("axis", 0)
    x = imp.type_of(node.input[0], node)
    sizes = tuple(imp.type_of(o, node).shape[axis % x.rank] for o in node.output)
    names = [imp.ssa_for(o) for o in node.output]
    imp.before(names[0])
    imp.b.op("split", imp.val(node.input[0], node), names=names, axis=axis, sizes=sizes)
    imp.defined.update(node.output)


def _reshape_like(static_inputs: int, allowed: set[str]) -> Callable:
    """Reshape/Flatten/Squeeze/Unsqueeze with static parameters: a reshape to the inferred shape."""
    def mapper(imp: _Importer, i: int, node: Any) -> None:
        _known(_attrs(node), allowed)
        for v in node.input[1:1 + static_inputs]:
            _need(not v or imp.const(v) is not None)
        _need(len(node.input) <= 1 + static_inputs)
        out = imp.type_of(node.output[0], node)
        imp.emit("reshape", [imp.val(node.input[0], node)], node.output[0], shape=out.shape)
    return mapper


def _transpose(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"perm"})
    x = imp.type_of(node.input[0], node)
    perm = tuple(at.get("perm", range(x.rank - 1, -1, -1)))
    imp.emit("transpose", [imp.val(node.input[0], node)], node.output[0], perm=perm)


def _batchnorm(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"epsilon", "momentum", "training_mode", "spatial", "is_test", "consumed_inputs"})
    _need(not at.get("training_mode", 0) and at.get("spatial", 1) == 1)
    _need(imp.opset >= 7 or at.get("is_test", 0) == 1)
    _need(len(node.input) == 5 and all(node.input))
    _need(all(imp.unused(o) for o in node.output[1:]))     # e.g. a Dropout mask nobody reads
    imp.emit("batchnorm", [imp.val(v, node) for v in node.input], node.output[0],
             eps=_short(np.float32(at.get("epsilon", 1e-5))))


def _softmax(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"axis"})
    x = imp.type_of(node.input[0], node)
    if imp.opset < 13:     # older Softmax flattens from `axis` on: the same only on the last axis
        axis = at.get("axis", 1)
        _need(axis % max(x.rank, 1) == x.rank - 1)
        imp.emit("softmax", [imp.val(node.input[0], node)], node.output[0], axis=-1)
        return
    imp.emit("softmax", [imp.val(node.input[0], node)], node.output[0], axis=at.get("axis", -1))


def _layernorm(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"axis", "epsilon", "stash_type"})
    _need(at.get("stash_type", 1) == 1 and all(imp.unused(o) for o in node.output[1:]))
    _need(len(node.input) >= 2 and node.input[1])
    x = imp.type_of(node.input[0], node)
    axis = at.get("axis", -1)
    norm = x.shape[axis % x.rank:]
    g = imp.val(node.input[1], node)
    g = _to(imp, g, imp.type_of(node.input[1], node), norm)
    if len(node.input) > 2 and node.input[2]:
        b = _to(imp, imp.val(node.input[2], node), imp.type_of(node.input[2], node), norm)
    else:            # no bias: a zero weight (the value travels with the other weights)
        name = imp.weight_name(node.output[0] + "_zero_bias")
        b = imp.b.weight(norm, name, x.dtype, value_name=imp.reserve(name))
        imp.weights[name] = np.zeros(norm, NP_DTYPES[x.dtype])
    imp.emit("layernorm", [imp.val(node.input[0], node), g, b], node.output[0], axis=axis,
             eps=_short(np.float32(at.get("epsilon", 1e-5))))


def _gelu(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"approximate"})
    _need(_s(at.get("approximate", "none")) == "none")
    imp.emit("gelu", [imp.val(node.input[0], node)], node.output[0])


def _dropout(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"ratio", "seed", "is_test"})
    _need(all(imp.unused(o) for o in node.output[1:]))     # e.g. a Dropout mask nobody reads
    ratio = at.get("ratio", 0.5)
    if imp.opset >= 12:
        if len(node.input) > 2 and node.input[2]:
            t = imp.const(node.input[2])
            _need(t is not None and not bool(t.reshape(-1)[0]))
        if len(node.input) > 1 and node.input[1]:
            r = imp.consts.get(node.input[1])
            _need(r is not None and r.value.size == 1)
            ratio = r.value.reshape(-1)[0]
    else:
        _need(imp.opset >= 7)
    imp.emit("dropout", [imp.val(node.input[0], node)], node.output[0], ratio=_short(ratio))


def _reduce_mean(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"axes", "keepdims", "noop_with_empty_axes"})
    x = imp.type_of(node.input[0], node)
    axes = at.get("axes")
    if len(node.input) > 1 and node.input[1]:
        c = imp.const(node.input[1])
        _need(c is not None)
        axes = [int(v) for v in c.reshape(-1)]
    if not axes:
        _need(not at.get("noop_with_empty_axes", 0))
        axes = list(range(x.rank))
    imp.emit("reduce_mean", [imp.val(node.input[0], node)], node.output[0], axes=tuple(axes),
             keepdims=bool(at.get("keepdims", 1)))


def _slice(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    x = imp.type_of(node.input[0], node)
    if imp.opset < 10:
        _known(at, {"starts", "ends", "axes"})
        starts, ends = list(at["starts"]), list(at["ends"])
        axes = list(at.get("axes", range(len(starts))))
    else:
        _need(not at)
        vals = []
        for k in range(1, 5):
            v = node.input[k] if len(node.input) > k and node.input[k] else None
            c = imp.const(v) if v else None
            _need(v is None or c is not None)
            vals.append(None if c is None else [int(t) for t in c.reshape(-1)])
        starts, ends, axes, steps = vals
        axes = axes if axes is not None else list(range(len(starts)))
        _need(steps is None or all(s == 1 for s in steps))
    out_s, out_e, out_a = [], [], []
    for ax, s, e in zip(axes, starts, ends):
        dim = x.shape[ax % x.rank]
        s = min(max(s + dim if s < 0 else s, 0), dim)
        e = min(max(e + dim if e < 0 else e, 0), dim)
        _need(s < e)
        out_a.append(ax)
        out_s.append(s)
        out_e.append(e)
    imp.emit("slice", [imp.val(node.input[0], node)], node.output[0], axes=tuple(out_a),
             starts=tuple(out_s), ends=tuple(out_e))


def _pad(imp: _Importer, i: int, node: Any) -> None:
    at = _attrs(node)
    _known(at, {"mode", "pads", "value"})
    _need(_s(at.get("mode", "constant")) == "constant")
    x = imp.type_of(node.input[0], node)
    value = at.get("value", 0.0)
    doc = ""
    if imp.opset >= 11:
        p = imp.const(node.input[1]) if len(node.input) > 1 else None
        _need(p is not None)
        pads = [int(v) for v in p.reshape(-1)]
        if len(node.input) > 2 and node.input[2]:
            c = imp.consts.get(node.input[2])
            _need(c is not None and c.value.size == 1)
            value, doc = c.value.reshape(-1)[0], c.doc
        if len(node.input) > 3 and node.input[3]:
            a = imp.const(node.input[3])
            _need(a is not None)
            axes = [int(v) % x.rank for v in a.reshape(-1)]
            full = [0] * (2 * x.rank)
            for k, ax in enumerate(axes):
                full[ax], full[ax + x.rank] = pads[k], pads[k + len(axes)]
            pads = full
    else:
        pads = list(at.get("pads", ()))
    _need(len(pads) == 2 * x.rank and all(p >= 0 for p in pads))
    v = _exact_float(_Const(np.asarray(value), False, doc)) if np.ndim(value) == 0 else 0.0
    imp.emit("pad", [imp.val(node.input[0], node)], node.output[0], pads=tuple(pads), value=v)


def _expand(imp: _Importer, i: int, node: Any) -> None:
    _need(not node.attribute and len(node.input) == 2 and imp.const(node.input[1]) is not None)
    out = imp.type_of(node.output[0], node)
    imp.emit("broadcast", [imp.val(node.input[0], node)], node.output[0], shape=out.shape)


def _cast(imp: _Importer, i: int, node: Any) -> None:
    """A Cast to the element type the value already has is the value itself."""
    at = _attrs(node)
    _known(at, {"to", "saturate"})
    x = imp.type_of(node.input[0], node)
    _need(ONNX_TO_DTYPE.get(at["to"]) == x.dtype)
    imp.alias(node.output[0], imp.val(node.input[0], node))


def _sum(imp: _Importer, i: int, node: Any) -> None:
    """Sum of N operands (ONNX broadcasting): a chain of ewadd, left to right."""
    _need(not node.attribute and node.input and all(node.input))
    out = imp.type_of(node.output[0], node)
    if len(node.input) == 1:
        _need(imp.type_of(node.input[0], node).shape == out.shape)
        imp.alias(node.output[0], imp.val(node.input[0], node))
        return
    vals = [_to(imp, imp.val(v, node), imp.type_of(v, node), out.shape) for v in node.input]
    acc = vals[0]
    for k, v in enumerate(vals[1:], 2):
        acc = imp.emit("ewadd", [acc, v], node.output[0] if k == len(vals) else None)


def _div(imp: _Importer, i: int, node: Any) -> None:
    """x / c for a scalar constant c that is a power of two: x * (1/c) exactly (attention's
    division by sqrt(head size) = 8); other divisions stay opaque."""
    _need(len(node.input) == 2 and not node.attribute)
    x, d = node.input
    c = imp.consts.get(d)
    out = imp.type_of(node.output[0], node)
    _need(c is not None and c.value.size == 1 and out.dtype in ("f16", "f32", "f64")
          and d not in imp.defined and imp.type_of(x, node).shape == out.shape)
    v = float(c.value.reshape(-1)[0])
    _need(v != 0 and np.isfinite(v))
    m, _ = math.frexp(abs(v))
    _need(m == 0.5)                  # a power of two: the reciprocal is exact
    imp.emit("scale", [imp.val(x, node)], node.output[0], value=1.0 / v)


def _activation(op: str) -> Callable:
    return _unary(op)


_MAPPERS: dict[str, Callable[[_Importer, int, Any], None]] = {
    "Add": _binary("ewadd"), "Mul": _binary("ewmul"),
    "Relu": _activation("relu"), "Sigmoid": _activation("sigmoid"), "Tanh": _activation("tanh"),
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv,
    "MaxPool": _pool("poolmax"), "AveragePool": _pool("poolavg"),
    "GlobalAveragePool": _global_pool("poolavg"), "GlobalMaxPool": _global_pool("poolmax"),
    "Concat": _concat, "Split": _split,
    "Reshape": _reshape_like(1, {"allowzero"}), "Flatten": _reshape_like(0, {"axis"}),
    "Squeeze": _reshape_like(1, {"axes"}), "Unsqueeze": _reshape_like(1, {"axes"}),
    "Transpose": _transpose, "BatchNormalization": _batchnorm, "Softmax": _softmax,
    "LayerNormalization": _layernorm, "Gelu": _gelu, "Dropout": _dropout,
    "ReduceMean": _reduce_mean, "Slice": _slice, "Pad": _pad, "Expand": _expand,
    "Cast": _cast, "Sum": _sum, "Div": _div,
}
MAPPED_OPS: frozenset[str] = frozenset(_MAPPERS) | {"Constant", "Identity"}


@dataclass
class OnnxImport:
    """What an import gives the exporter besides the graph: the model it came from and, for every
    ONNX value that became an IR value, its SSA name (several ONNX names may share one SSA value,
    e.g. through Identity). The splicing exporter writes the original nodes back for every value
    the optimizer left alone.

    `model` is the model as imported: the input itself, except that an `If` whose condition is a
    constant once the input shapes are fixed is replaced by the nodes of the branch it takes
    (`inlined` names those If nodes). Nodes whose outputs were folded into constants (shape
    computations, `folded`) stay in `model`; their outputs map to SSA values only where the IR
    reads them as data (they became weights).

    Symbolic input dims: `symbolic[input]` lists the dims of every graph input that has any
    symbolic dim as written in the file (ints, dim_param names, "?" for unnamed/-1/0 dims);
    `defaulted[input]` the axes that took DEFAULT_DIM because neither `input_shapes` nor `dims`
    gave a size (empty when the user fixed everything); `size_note` says which other sizes they
    took where 1 was degenerate (symbolic.py; empty when all took 1). `dim_dependent` are the
    folded values that read a defaulted dim (e.g. a Reshape target computed from the batch
    size): a graph that uses any of them is only valid for that size."""

    graph: Graph
    weights: dict[str, np.ndarray]
    model: Any
    ssa_of: dict[str, str]          # ONNX value name → SSA value of `graph`
    symbolic: dict[str, list[int | str]] = field(default_factory=dict)
    defaulted: dict[str, list[int]] = field(default_factory=dict)
    folded: frozenset[str] = frozenset()
    dim_dependent: frozenset[str] = frozenset()
    inlined: tuple[str, ...] = ()
    size_note: str = ""


def from_onnx(model: Any, source: str = "<model>", dims: Mapping[str, int] | None = None,
              check: bool = True, constants: Mapping[str, np.ndarray] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None
              ) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import an in-memory onnx.ModelProto (see `load_onnx`). `constants` freezes graph inputs
    to known values (e.g. a Reshape's target shape fed as an input), which lets ops whose
    parameters are inputs map onto the table."""
    r = import_onnx(model, source, dims, check, constants, input_shapes)
    return r.graph, r.weights


def import_onnx(model: Any, source: str = "<model>", dims: Mapping[str, int] | None = None,
                check: bool = True, constants: Mapping[str, np.ndarray] | None = None,
                input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> OnnxImport:
    """`from_onnx` with the provenance the splicing exporter needs (see OnnxImport).
    `input_shapes[input]` fixes a graph input's whole shape; `dims[symbol]` fixes a dim_param
    wherever it occurs; other symbolic dims take DEFAULT_DIM (reported in `defaulted`)."""
    import onnx
    from onnx import numpy_helper

    if constants:
        frozen = onnx.ModelProto()
        frozen.CopyFrom(model)
        names = {i.name for i in frozen.graph.input}
        for name, value in constants.items():
            if name not in names:
                raise TirError(f"constant '{name}' is not a graph input", file=source)
            frozen.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        keep = [i for i in frozen.graph.input if i.name not in constants]
        del frozen.graph.input[:]
        frozen.graph.input.extend(keep)
        model = frozen

    if check:
        try:
            onnx.checker.check_model(model)
        except (onnx.checker.ValidationError, ValueError) as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TirError(f"not a valid ONNX model: {msg}", file=source) from None
    try:
        imp, (graph, weights) = import_at_working_sizes(
            lambda sizes: _Importer(model, source, dict(dims or {}), input_shapes, sizes), model)
    except TirError as e:
        raise e if e.file else TirError(e.message, file=source) from None
    # the exported weights_as_inputs form: weights without values (drawn at random when run)
    for name in imp.meta_weight_inputs:
        imp.weights.pop(imp.meta_names[name][0], None)
    present = graph.types()
    ssa_of = {k: v for k, v in {**imp.value, **imp.weight_ssa}.items() if v in present}
    return OnnxImport(graph, weights, imp.model, ssa_of, dict(imp.symbolic), dict(imp.defaulted),
                      frozenset(imp.folded), frozenset(imp.symbolic_values), tuple(imp.inlined),
                      imp.size_note)


def load_onnx(path: str | Path, dims: Mapping[str, int] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None
              ) -> tuple[Graph, dict[str, np.ndarray]]:
    """Read an ONNX file: the IR graph and the weight values by weight name. Symbolic input
    dimensions take `input_shapes[input]` / `dims[name]`, else DEFAULT_DIM (1). Any problem is
    a TirError naming the file (and the node)."""
    r = read_onnx(path, dims, input_shapes)
    return r.graph, r.weights


def read_onnx(path: str | Path, dims: Mapping[str, int] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> OnnxImport:
    """`load_onnx` with the provenance the splicing exporter needs (see OnnxImport)."""
    import onnx
    from google.protobuf.message import DecodeError

    path = Path(path)
    try:
        model = onnx.load(str(path))
    except FileNotFoundError as e:
        if path.is_file():      # the model is there: a file its external data names is not
            raise TirError(f"cannot read the model's external data: {e.strerror or e}"
                           + (f" ({e.filename})" if e.filename else ""), file=str(path)) from None
        raise TirError("cannot read file: No such file or directory", file=str(path)) from None
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror or e}", file=str(path)) from None
    except (DecodeError, RuntimeError, ValueError) as e:
        raise TirError(f"not an ONNX model ({type(e).__name__})", file=str(path)) from None
    except onnx.checker.ValidationError as e:
        # onnx refuses the file itself, e.g. external data that points outside the model's folder
        raise TirError(f"onnx refuses to load this model: {_first_line(e)}",
                       file=str(path)) from None
    except MemoryError:
        raise TirError("not enough memory to load this model", file=str(path)) from None
    except Exception as e:      # anything else onnx or protobuf raise on a malformed file
        raise TirError(f"cannot load this ONNX model: {type(e).__name__}: {_first_line(e)}",
                       file=str(path)) from None
    if not model.HasField("graph"):
        raise TirError("not an ONNX model (no graph)", file=str(path))
    check = True
    if sum(len(t.raw_data) for t in model.graph.initializer) > 1_500_000_000:
        check = False       # the in-memory checker cannot serialize a model over 2 GB
        try:
            onnx.checker.check_model(str(path))
        except (onnx.checker.ValidationError, ValueError) as e:
            raise TirError(f"not a valid ONNX model: {_first_line(e)}", file=str(path)) from None
    return import_onnx(model, str(path), dims, check=check, input_shapes=input_shapes)


def _first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
