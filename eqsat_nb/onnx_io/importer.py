"""The ONNX import's walk: an onnx.ModelProto → IR Graph plus weight values, node by node.

Value types come first (input_types.py: symbolic input dims fixed, at other sizes where 1 is
degenerate (symbolic.py), shape inference, If/Loop/Scan outputs typed from their subgraphs
(control_flow.py), shape computations folded by fold.py: a node whose inputs are all constants,
or a Shape of a known shape, gives a constant, and an If with a constant condition is replaced by
its branch). Initializers,
Constant nodes and folded values are constants: one used as a data operand becomes a `weight` node
(placed where the exporter's metadata says, else just before its first user); one read as a static
parameter (a Reshape's shape, a Split's sizes, ...) is only read. Old-format models that list
initializers among the graph inputs import: those are weights, not inputs.

Each ONNX node maps one to one onto the operator table through its op type's mapper, which lives
with the operator's family (ir/ops/, `ONNX_IMPORT`) and maps where the semantics match exactly
(broadcasting made explicit with `broadcast`/`reshape`); anything else, including a mappable op
with an attribute the IR cannot express, becomes an `opaque` node carrying the ONNX node verbatim.
Exporter forms are canonicalized so rules meet them (explicit pads equal to SAME are "same",
Gemm(transB) of a constant is matmul with the transposed weight, unused optional outputs such as
Dropout masks are dropped), and the idioms exporters spell out (GELU, LayerNorm below opset 17,
RMSNorm, SiLU) are raised to their fused ops by rules/idioms/idioms.rules (rules/graph_rewrite.py).
The exporter's conventions (exporter.py) are read back, so `.tir → .onnx → .tir` is the identity.
read.py is the entry point (files, checks, OnnxImport).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ShapeError, TirError
from ..ir.builder import GraphBuilder
from ..ir.graph import Graph, TensorType
from ..ir.opaque import ONNX_TO_DTYPE, encode_node, implicit_inputs
from ..ir.tensors import BFLOAT16, to_array
from ..ir.ops import ONNX_IMPORT
from ..ir.ops.onnx_map import Const, NoMap, attrs_of, known, need
from ..rules.graph_rewrite import raise_idioms
from .elem_types import TYPE_NAMES, ir_dtype, onnx_elem
from .exporter import WEIGHTS_KEY
from .input_types import (DEFAULT_DIM, DegenerateShape, dims_text, infer_types,  # noqa: F401
                          initializer_const)
from ..ir.names import unique

_BAD_CHARS = re.compile(r"[^A-Za-z0-9_.$]")
_WEIGHT_NAME = re.compile(r"[A-Za-z0-9_.$]+")        # a .tir weight name, without its '@'
_SSA_NAME = re.compile(r"%[A-Za-z0-9_.$]+")          # a .tir value name



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
        self.consts: dict[str, Const] = {}
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
                           f"{TYPE_NAMES.get(self.bad_types[name], self.bad_types[name])}, which "
                           f"the IR cannot hold", node)
        if t is None and name in self.not_tensors:
            raise self.err(f"'{name}' is a {self.not_tensors[name]}, which the IR cannot hold (it "
                           f"holds tensors)", node)
        if t is None and name in self.zero_size:
            raise self.err(f"'{name}' has a zero-size dimension, which the IR cannot hold", node,
                           DegenerateShape)
        if t is None:
            hint = ("data-dependent shapes are not supported" if not self.defaulted else
                    "it may depend on the symbolic input dims " + dims_text(self.symbolic) +
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
        held = c.held()             # (a mapped bf16 weight: its bits, never widened here)
        dtype = c.dtype or ir_dtype(onnx_elem(held, name, self, node), f"constant '{name}'")
        if held.size == 0 or any(d <= 0 for d in held.shape):
            raise self.err(f"constant '{name}' has a zero-size dimension {held.shape}", node,
                           DegenerateShape)
        self.b.weight(held.shape, wname, dtype, value_name=ssa)
        self.weights[wname] = held
        self.weight_ssa[name] = ssa
        return ssa

    def weight_name(self, name: str) -> str:
        base = _sanitize(name) or "w"
        wname, k = base, 1
        while wname in self.weights:
            wname = f"{base}_{k}"
            k += 1
        return wname

    def new_weight(self, hint: str, value: np.ndarray, source: str, node: Any,
                   dtype: str | None = None) -> str:
        """A weight the model has under no name (a transposed or zero constant): its SSA value.
        `dtype`: its IR element type (default: its array's; a bf16 value is a float32 array)."""
        wname = self.weight_name(hint)
        dtype = dtype or ir_dtype(onnx_elem(value, source, self, node), f"constant '{source}'")
        ssa = self.b.weight(value.shape, wname, dtype, value_name=self.reserve(wname))
        self.weights[wname] = value
        return ssa

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
        g = self.model.graph
        self.defined: set[str] = set()
        for t in g.initializer:
            try:
                self.consts[t.name] = initializer_const(t)
            except Exception as e:      # noqa: BLE001 - onnx raises assorted types on bad tensors
                raise self.err(f"cannot read initializer '{t.name}': {e}") from None
        self.read_metadata()
        infer_types(self)
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
                self.consts[inp.name] = Const(np.zeros(0), False)
                self.meta_weight_inputs[inp.name] = (wname, ssa, self.type_of(inp.name))
                continue
            ty = self.type_of(inp.name)
            ssa = self.ssa_for(inp.name)
            self.b.input(ty.shape, ty.dtype, name=ssa)
            self.defined.add(inp.name)
        for node in g.node:      # constants first: mappers read values defined further on
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self.constant(node)
            elif node.op_type == "Identity" and node.domain in ("", "ai.onnx") and \
                    node.input[0] in self.consts:     # torch's deduplicated initializers
                self.consts[node.output[0]] = self.consts[node.input[0]]
                self.const_alias[node.output[0]] = node.input[0]
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
        return raise_idioms(self.b.build(*outs)), self.weights

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
        except (ValueError, TypeError):
            raise self.err(f"metadata '{WEIGHTS_KEY}' is malformed") from None
        g = self.model.graph
        held = {t.name for t in g.initializer} | {i.name for i in g.input}
        names: set[str] = set()
        values: set[str] = set()
        for k, (init, wname, ssa, nxt) in enumerate(entries):
            why = None
            if init not in held:
                why = (f"names initializer '{init}', which the model has neither as an "
                       f"initializer nor as a graph input")
            elif init in self.meta_names:
                why = f"names initializer '{init}' a second time"
            elif not _WEIGHT_NAME.fullmatch(wname):
                why = (f"gives '{init}' the weight name {wname!r}, expected letters, digits, "
                       f"'_', '.' or '$'")
            elif not _SSA_NAME.fullmatch(ssa):
                why = f"gives '{init}' the value name {ssa!r}, expected '%' and a name"
            elif wname in names:
                why = f"gives weight name '{wname}' a second time"
            elif ssa in values:
                why = f"gives value name '{ssa}' a second time"
            if why is not None:
                raise self.err(f"metadata '{WEIGHTS_KEY}' (this tool's record of weight names) "
                               f"entry {k} {why}")
            names.add(wname)
            values.add(ssa)
            self.meta_names[init] = (wname, ssa)
            self.meta_before.setdefault(nxt, []).append((init, wname, ssa))
        for init, (_, ssa) in self.meta_names.items():
            self.value[init] = ssa
            self.used_names.add(ssa)

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
                except (NoMap, ShapeError):
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
        from onnx import helper

        a = node.attribute[0] if len(node.attribute) == 1 else None
        bf16 = False
        try:
            if a is None:
                raise ValueError("a Constant has exactly one attribute")
            if a.name == "value":
                arr, bf16 = to_array(a.t), a.t.data_type == BFLOAT16
            elif a.name in ("value_float", "value_floats"):
                arr = np.asarray(helper.get_attribute_value(a), np.float32)
            elif a.name in ("value_int", "value_ints"):
                arr = np.asarray(helper.get_attribute_value(a), np.int64)
            else:
                raise ValueError(f"a Constant with '{a.name}' is not supported")
        except Exception as e:   # noqa: BLE001
            raise self.err(f"cannot read the constant: {e}", node) from None
        self.consts[node.output[0]] = Const(arr, True, node.doc_string, bf16)

    def opaque(self, node: Any) -> None:
        from .control_flow import with_constants_inside
        from .opaque_inputs import stored_inputs

        node = with_constants_inside(node, self.outer_constant)
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
                               f"{TYPE_NAMES.get(self.bad_types[v], self.bad_types[v])}, which "
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

    def outer_constant(self, v: str) -> Const | None:
        """`v` if it is a constant a subgraph may carry inside itself."""
        c = self.consts.get(v)
        if c is None or v in self.defined or v in self.meta_weight_inputs:
            return None
        return c

    def outer_const(self, v: str) -> np.ndarray | None:
        """The value of `v` if it is a constant a subgraph may carry inside itself."""
        c = self.outer_constant(v)
        return None if c is None else c.value

    def empty_const(self, v: str) -> np.ndarray | None:
        """The value of `v` if it is a zero-size constant (which the IR cannot hold)."""
        value = self.outer_const(v)
        return value if value is not None and not value.size else None

    # ------------------------------------------------------------------ patterns
    def single_use(self, v: str) -> bool:
        return len(self.consumers.get(v, ())) == 1 and v not in self.graph_outputs

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


def _sanitize(name: str) -> str:
    return _BAD_CHARS.sub("_", name)


# ----------------------------------------------------------------------------------- mappers
# Each ONNX op type maps through its operator family's mapper (ir/ops/, ONNX_IMPORT); Cast to the
# type a value already has is that value.

def _cast(imp: _Importer, i: int, node: Any) -> None:
    """A Cast to the element type the value already has is the value itself."""
    at = attrs_of(node)
    known(at, {"to", "saturate"})
    x = imp.type_of(node.input[0], node)
    need(ONNX_TO_DTYPE.get(at["to"]) == x.dtype)
    imp.alias(node.output[0], imp.val(node.input[0], node))


_MAPPERS: dict[str, Callable[[_Importer, int, Any], None]] = {**ONNX_IMPORT, "Cast": _cast}
MAPPED_OPS: frozenset[str] = frozenset(_MAPPERS) | {"Constant", "Identity"}
