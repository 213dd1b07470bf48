"""Constant folding of an ONNX model once its input shapes are fixed (what onnxsim does).

Exporters compute shapes inside the graph: torch's TorchScript exporter writes
`Shape → Gather → Unsqueeze → Concat → Reshape/Expand/Slice/ConstantOfShape` for every
transformer, tf2onnx and paddle2onnx write similar chains, and `If` nodes whose condition is a
comparison of such values. With the input shapes fixed, every one of those values is a constant.

`fold_model` alternates onnx shape inference (data propagation on) with one pass over the nodes
that evaluates each node whose inputs are all known small constants (`onnx.reference`, one node
at a time) and each `Shape`/`Size` of a value whose shape inference knows; an `If` whose
condition became a constant is replaced by the branch it takes. It stops when a pass learns
nothing new. The model's nodes are left in place (only `If`s with a constant condition are
inlined): the importer treats the folded values as constants, and an exporter that writes the
original nodes back still finds them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..ir.opaque import subgraphs

FOLD_MAX = 1 << 16        # elements: larger inputs/outputs are left to the graph
_ROUNDS = 12
_NEVER = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "Multinomial", "Bernoulli", "Constant", "Identity", "If", "Loop", "Scan",
                    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceAt",
                    "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
                    "OptionalHasElement", "Dropout"})


@dataclass
class Folded:
    model: Any                                      # the model (If nodes with a constant
    #                                                 condition inlined; else the input itself)
    inferred: Any                                   # shape-inferred light copy (types)
    values: dict[str, np.ndarray] = field(default_factory=dict)   # folded node outputs
    symbolic: set[str] = field(default_factory=set)  # folded values that read a free dim
    inlined: list[str] = field(default_factory=list)  # names of the If nodes inlined
    concrete: dict[str, list[bool]] | None = None   # with free dims: which dims of each value
    #                                                 are numbers whatever the free dims are


def _shape_of(vi: Any) -> tuple[int, ...] | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(d.dim_value)
    return tuple(dims)


def _evaluate(node: Any, args: list[np.ndarray | None], opsets: Mapping[str, int]) -> list:
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(args)]
    n = helper.make_node(node.op_type, names, [f"o{k}" if o else "" for k, o in
                                                enumerate(node.output)], domain=node.domain)
    n.attribute.extend(node.attribute)
    g = helper.make_graph([n], "fold", [helper.make_tensor_value_info(x, 0, None)
                                        for x in names if x],
                          [helper.make_tensor_value_info(f"o{k}", 0, None)
                           for k, o in enumerate(node.output) if o])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v)
                                            for d, v in opsets.items()])
    feeds = {x: a for x, a in zip(names, args) if x}
    return ReferenceEvaluator(m).run(None, feeds)


def _light(model: Any, input_dims: Mapping[str, tuple[int, ...]], values: Mapping[str, Any],
           small: int, learnt: Mapping[str, Any] | None = None) -> Any:
    """A copy for shape inference: input dims fixed, big initializers as typed inputs, the
    folded values as initializers in place of the nodes that computed them, and the types in
    `learnt` (ValueInfoProtos by name, e.g. an If's outputs, control_flow.py) as value_info."""
    import onnx
    from onnx import helper, numpy_helper

    learnt = learnt or {}
    src = model.graph
    dst = onnx.ModelProto()
    dst.ir_version = max(model.ir_version, 4)     # initializers need not be listed as inputs
    dst.opset_import.extend(model.opset_import)
    dst.functions.extend(model.functions)
    g = dst.graph
    g.name = src.name
    for n in src.node:
        outs = [o for o in n.output if o]
        if outs and all(o in values for o in outs):
            continue
        g.node.append(n)
    inits = {t.name for t in src.initializer}
    for inp in src.input:
        if inp.name in inits:
            continue
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(inp)
        if inp.name in input_dims and vi.type.HasField("tensor_type"):
            shp = vi.type.tensor_type.shape
            shp.ClearField("dim")
            for d in input_dims[inp.name]:
                shp.dim.add().dim_value = int(d)
        g.input.append(vi)
    g.output.extend(src.output)
    g.value_info.extend(v for v in src.value_info if v.name not in values and v.name not in learnt)
    g.value_info.extend(v for k, v in learnt.items() if k not in values)
    for t in src.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        if n <= small:
            g.initializer.append(t)
        else:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for name, v in values.items():
        if isinstance(v, np.ndarray) and v.dtype != object:
            g.initializer.append(numpy_helper.from_array(v, name))
    return dst


def infer(model: Any) -> Any:
    from onnx import shape_inference
    return shape_inference.infer_shapes(model, check_type=False, strict_mode=False,
                                        data_prop=True)


def fold_model(model: Any, input_dims: Mapping[str, tuple[int, ...]],
               known: Mapping[str, np.ndarray], free_dims: Mapping[str, set[int]] | None = None,
               small: int = 4096, learnt: Mapping[str, Any] | None = None) -> Folded:
    """Fold `model` (see the module doc). `input_dims` fixes the shape of each graph input;
    `known` holds the constants (initializers, Constant nodes) by name; `free_dims[input]` are
    the axes of an input whose size was not given by the user (values read from them are
    reported in `Folded.symbolic`); `learnt` types that inference cannot derive (see _light)."""
    learnt = learnt or {}
    free_dims = free_dims or {}
    opsets = {o.domain or "": o.version for o in model.opset_import}
    opsets.setdefault("", 1)
    values: dict[str, np.ndarray] = {}
    env: dict[str, np.ndarray] = {k: v for k, v in known.items() if v.size <= FOLD_MAX}
    symbolic: set[str] = set()
    inlined: list[str] = []
    # which dims of each value derive from a free input dim: only exact for inputs; anything
    # else that a free dim reaches is tainted as a whole (conservative)
    tainted: set[str] = {name for name, axes in free_dims.items() if axes}
    sym_shapes = _symbolic_shapes(model, input_dims, free_dims, small) if tainted else {}
    failed: set[int] = set()
    cur = model
    inferred = None
    for _ in range(_ROUNDS):
        inferred = infer(_light(cur, input_dims, values, small, learnt))
        shapes: dict[str, tuple[int, ...]] = {}
        ig = inferred.graph
        for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
            s = _shape_of(vi)
            if s is not None:
                shapes.setdefault(vi.name, s)
        for t in ig.initializer:
            shapes.setdefault(t.name, tuple(t.dims))
        new = False
        inline_at: list[tuple[int, Any]] = []
        for i, node in enumerate(cur.graph.node):
            outs = [o for o in node.output if o]
            if node.domain not in ("", "ai.onnx"):
                _taint(node, tainted)
                continue
            if node.op_type == "Constant":
                if node.output[0] not in env and i not in failed:
                    try:
                        (v,) = _evaluate(node, [], opsets)
                    except Exception:     # noqa: BLE001 - an unreadable Constant: the importer says
                        failed.add(i)
                        continue
                    if isinstance(v, np.ndarray) and v.dtype != object and v.size <= FOLD_MAX:
                        env[node.output[0]] = v
                continue
            if node.op_type == "Identity":
                if node.input[0] in env and node.output[0] not in env:
                    env[node.output[0]] = env[node.input[0]]
                if node.input[0] in tainted:
                    tainted.add(node.output[0])
                continue
            if node.op_type == "If":
                c = env.get(node.input[0])
                if c is not None and c.size == 1:
                    inline_at.append((i, node))
                _taint(node, tainted)
                continue
            if not outs or all(o in values for o in outs) or i in failed:
                _taint(node, tainted)
                continue
            if node.op_type in ("Shape", "Size"):
                s = shapes.get(node.input[0])
                if s is None:
                    continue
                if node.op_type == "Size":
                    v = np.asarray(int(np.prod(s)), np.int64)
                    sl = range(len(s))
                else:
                    at = {a.name: a.i for a in node.attribute}
                    r = len(s)
                    start, end = at.get("start", 0), at.get("end", r)
                    start = min(max(start + r if start < 0 else start, 0), r)
                    end = min(max(end + r if end < 0 else end, 0), r)
                    sl = range(start, end)
                    v = np.asarray(s[start:end], np.int64)
                values[node.output[0]] = env[node.output[0]] = v
                new = True
                src = node.input[0]
                concrete = sym_shapes.get(src)
                if (src in tainted if concrete is None or len(concrete) != len(s)
                        else not all(concrete[k] for k in sl)):
                    symbolic.add(node.output[0])
                continue
            if node.op_type in _NEVER or any(a.type in (5, 10, 11, 13) for a in node.attribute):
                _taint(node, tainted)        # random, control flow, subgraph or tensor attrs
                continue
            ins = list(node.input)
            if not all((not v) or v in env for v in ins):
                _taint(node, tainted)
                continue
            args = [env[v] if v else None for v in ins]
            if sum(a.size for a in args if a is not None) > FOLD_MAX:
                _taint(node, tainted)
                continue
            if not _shape_like(node, ins, args, values):
                continue          # arithmetic on weights: left as the model writes it
            if _result_size(node, args, shapes) > FOLD_MAX:
                _taint(node, tainted)      # would be dropped after evaluation: not evaluated
                continue
            try:
                res = _evaluate(node, args, opsets)
            except Exception:    # noqa: BLE001 - the reference runtime lacks it or rejects it
                failed.add(i)
                _taint(node, tainted)
                continue
            res_by = [o for o in node.output if o]
            if len(res) != len(res_by) or any(not isinstance(r, np.ndarray) or r.dtype == object
                                              or r.size > FOLD_MAX for r in res):
                failed.add(i)
                _taint(node, tainted)
                continue
            dep = any(v in symbolic for v in ins if v)
            for o, r in zip(res_by, res):
                values[o] = env[o] = np.asarray(r)
                if dep:
                    symbolic.add(o)
            new = True
        if inline_at:
            cur = _inline_ifs(cur, inline_at, env)
            inlined.extend(n.name or n.output[0] for _, n in inline_at)
            new = True
        if not new:
            break
    return Folded(cur, inferred, values, symbolic, inlined, sym_shapes if tainted else None)


def _symbolic_shapes(model: Any, input_dims: Mapping[str, tuple[int, ...]],
                     free_dims: Mapping[str, set[int]], small: int) -> dict[str, list[bool]]:
    """For each value shape inference reaches with the free dims left symbolic: which of its
    dims are concrete numbers."""
    light = _light(model, input_dims, {}, small)
    for inp in light.graph.input:
        axes = free_dims.get(inp.name)
        if not axes:
            continue
        orig = next(i for i in model.graph.input if i.name == inp.name)
        odims = orig.type.tensor_type.shape.dim
        for k in axes:
            d = inp.type.tensor_type.shape.dim[k]
            label = odims[k].dim_param if k < len(odims) and odims[k].dim_param else \
                f"?{inp.name}:{k}"
            d.Clear()
            d.dim_param = label
    try:
        ig = infer(light).graph
    except Exception:    # noqa: BLE001 - no symbolic view: every read of a free value is symbolic
        return {}
    out: dict[str, list[bool]] = {}
    for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out.setdefault(vi.name, [d.HasField("dim_value") and d.dim_value >= 0
                                     for d in vi.type.tensor_type.shape.dim])
    for t in ig.initializer:
        out.setdefault(t.name, [True] * len(t.dims))
    return out


_ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal",
                          "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where", "Max",
                          "Min", "Sum", "Mean", "BitShift", "BitwiseAnd", "BitwiseOr",
                          "BitwiseXor"})


def _result_size(node: Any, args: list, shapes: Mapping[str, tuple[int, ...]]) -> int:
    """The element count of `node`'s largest result, known before evaluating it (0 when it is
    not known): from shape inference, else from the operands of the ops whose result size
    follows from their values (a Range of 2^31 steps has three scalar operands, and
    onnx.reference would build it in full before its size could be checked)."""
    outs = [o for o in node.output if o]
    if outs and all(o in shapes for o in outs):
        return max(int(np.prod(shapes[o], dtype=object)) for o in outs)
    op = node.op_type
    try:
        if op == "Range" and len(args) == 3 and all(a is not None for a in args):
            start, limit, delta = (np.asarray(a).reshape(-1)[0].item() for a in args)
            return max(0, int(np.ceil((limit - start) / delta))) if delta else 0
        if op == "ConstantOfShape" and args and args[0] is not None:
            return int(np.prod([max(int(d), 0) for d in args[0].reshape(-1)], dtype=object))
        if op == "Expand" and len(args) == 2 and all(a is not None for a in args):
            dims = [int(d) for d in args[1].reshape(-1)]
            return int(np.prod(np.broadcast_shapes(args[0].shape, tuple(dims)), dtype=object))
        if op == "Tile" and len(args) >= 2 and all(a is not None for a in args[:2]):
            reps = [max(int(r), 0) for r in args[1].reshape(-1)]
            return int(np.prod(reps, dtype=object)) * args[0].size
        if op == "OneHot" and len(args) >= 2 and all(a is not None for a in args[:2]):
            return args[0].size * max(int(np.asarray(args[1]).reshape(-1)[0]), 0)
        if op in _ELEMENTWISE:
            return int(np.prod(np.broadcast_shapes(*(a.shape for a in args if a is not None)),
                               dtype=object))
    except (ValueError, TypeError, OverflowError, IndexError, ZeroDivisionError):
        return 0            # operands onnx.reference rejects: it says so when evaluating
    return 0


def _shape_like(node: Any, ins: list[str], args: list, values: Mapping[str, Any]) -> bool:
    """Whether to fold a node whose inputs are all constants: a shape computation (an input is
    itself folded, e.g. from a Shape), integer/bool arithmetic (index and shape tensors), or
    scalar arithmetic. Float ops on weights (a Concat of two kernels, a Transpose of a weight)
    stay as written: the importer maps them, and a model's own weight preparation is kept."""
    if any(v in values for v in ins if v):
        return True
    present = [a for a in args if a is not None]
    if all(a.size <= 1 for a in present):
        return True
    if node.op_type == "ConstantOfShape":
        return True
    return all(a.dtype.kind in "biu" for a in present)


def _taint(node: Any, tainted: set[str]) -> None:
    if any(v in tainted for v in node.input if v):
        tainted.update(o for o in node.output if o)


def _inline_ifs(model: Any, at: list[tuple[int, Any]], env: Mapping[str, np.ndarray]) -> Any:
    """A copy of `model` with each If in `at` replaced by the nodes of the branch it takes; the
    branch's internal values get the If node's name as a prefix and its outputs become
    Identity nodes onto the If's outputs (names outside the If are unchanged)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = list(out.graph.node)
    taken = {i: n for i, n in at}
    used = {v for n in nodes for v in list(n.input) + list(n.output)}
    used |= {t.name for t in out.graph.initializer} | {i.name for i in out.graph.input}
    new_nodes = []
    for i, n in enumerate(nodes):
        if i not in taken:
            new_nodes.append(n)
            continue
        cond = bool(np.asarray(env[n.input[0]]).reshape(-1)[0])
        branch = next(a.g for a in n.attribute if a.name == ("then_branch" if cond
                                                              else "else_branch"))
        prefix = (n.name or n.output[0]) + "/"
        rename: dict[str, str] = {}

        def fresh(v: str) -> str:
            name, k = prefix + v, 1
            while name in used:
                name, k = f"{prefix}{v}_{k}", k + 1
            used.add(name)
            return name

        for t in branch.initializer:
            rename[t.name] = fresh(t.name)
            c = onnx.TensorProto()
            c.CopyFrom(t)
            c.name = rename[t.name]
            out.graph.initializer.append(c)
        for bn in branch.node:
            for o in bn.output:
                if o:
                    rename[o] = fresh(o)
        for bn in branch.node:
            c = onnx.NodeProto()
            c.CopyFrom(bn)
            del c.input[:]
            del c.output[:]
            c.input.extend(rename.get(v, v) if v else "" for v in bn.input)
            c.output.extend(rename.get(v, v) if v else "" for v in bn.output)
            if c.name:
                c.name = prefix + c.name
            _rename_subgraphs(c, rename)
            new_nodes.append(c)
        for bo, o in zip(branch.output, n.output):
            if o:
                new_nodes.append(onnx.helper.make_node(
                    "Identity", [rename.get(bo.name, bo.name)], [o], name=prefix + "out_" + o))
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    return out


def _rename_subgraphs(node: Any, rename: Mapping[str, str]) -> None:
    """Outer-scope references inside `node`'s subgraphs follow `rename`."""
    for g in subgraphs(node):
        local = {i.name for i in g.input} | {t.name for t in g.initializer}
        local |= {o for n in g.node for o in n.output}
        inner = {k: v for k, v in rename.items() if k not in local}
        for n in g.node:
            for k, v in enumerate(n.input):
                if v in inner:
                    n.input[k] = inner[v]
            _rename_subgraphs(n, inner)
            for o in g.output:
                if o.name in inner:
                    o.name = inner[o.name]
