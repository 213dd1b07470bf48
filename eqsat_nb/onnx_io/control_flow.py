"""If, Loop and Scan: opaque nodes whose output shapes come from their own subgraphs.

onnx shape inference gives an If's outputs the shapes both branches agree on, but it does not fold
the shape computations inside a branch. silero-vad writes its whole model inside one If on the
sample rate, and each branch squeezes a dim through Shape → Gather → Equal → If chains, so the
If's outputs come out unknown, and with them everything after it. Here each subgraph is folded as
a model of its own (fold.py, recursively, so nested control flow folds too): its inputs are the
outer values it reads, at their shapes and, where they are constants, with their values.

- If: the branches' output shapes, where both branches agree.
- Scan (opset 9 on): state outputs as the body gives them; scan outputs are the body's
  per-iteration shapes stacked along the scanned length.
- Loop: a loop-carried value whose shape the body keeps has it at the end; scan outputs are
  stacked along the trip count when the trip count is a constant and no condition can end the loop
  early.

When a subgraph cannot tell (a while loop whose condition the body computes), the model runs in
onnxruntime on random inputs at the analysis sizes, twice with different values, and the shapes
both runs give are taken (a shape that follows the data, such as a trip count read from an input,
stays unknown: the IR holds static shapes). The import's checks (the reference interpreter runs
the node in onnxruntime and refuses another shape; onnxruntime compares the written model with
the input, at another size for symbolic dims) hold the node to them.

The learnt types re-enter shape inference as value_info (`fold.fold_model`'s `learnt`), so the
values computed after the node get shapes too. The node itself stays opaque: the optimizer works
on the rest of the graph.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from . import fold

CONTROL = frozenset({"If", "Loop", "Scan"})
MAX_DEPTH = 4            # nesting of subgraphs folded as models of their own
_ROUNDS = 6              # learn, re-infer: enough for a chain of control-flow nodes

Type = tuple[int, tuple[int, ...]]          # ONNX element type, dims


def fold_with_control_flow(model: Any, input_dims: Mapping[str, tuple[int, ...]],
                           known: Mapping[str, np.ndarray],
                           free_dims: Mapping[str, set[int]] | None = None, small: int = 4096,
                           depth: int = 0) -> fold.Folded:
    """`fold.fold_model`, with the output types of control-flow nodes that inference leaves
    unknown learnt from their subgraphs (or onnxruntime) and fed back (see the module doc)."""
    learnt: dict[str, Any] = {}
    asked_runtime = False
    res = fold.fold_model(model, input_dims, known, free_dims, small)
    for _ in range(_ROUNDS):
        types = known_types(res)
        todo = [n for n in res.model.graph.node if n.op_type in CONTROL
                and n.domain in ("", "ai.onnx") and any(o and o not in types for o in n.output)]
        if not todo:
            break
        new: dict[str, Type] = {}
        if depth < MAX_DEPTH:
            for node in todo:
                found = subgraph_types(res.model, node, res, types, known, small, depth)
                new.update({k: t for k, t in found.items() if k not in types and k not in learnt})
        missing = [o for n in todo for o in n.output if o and o not in types and o not in new]
        if missing and not asked_runtime and depth == 0:
            asked_runtime = True
            new.update({k: t for k, t in runtime_types(res.model, input_dims, missing).items()
                        if k not in learnt})
        if not new:
            break
        learnt.update({k: _value_info(k, t) for k, t in new.items()})
        res = fold.fold_model(model, input_dims, known, free_dims, small, learnt)
    return res


def known_types(res: fold.Folded) -> dict[str, Type]:
    """Every value whose element type and dims are all known after folding."""
    from onnx import helper

    out: dict[str, Type] = {}
    ig = res.inferred.graph
    for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
        t = _type_of(vi)
        if t is not None:
            out.setdefault(vi.name, t)
    for t in ig.initializer:
        out.setdefault(t.name, (t.data_type, tuple(t.dims)))
    for name, v in res.values.items():
        try:
            out[name] = (int(helper.np_dtype_to_tensor_dtype(v.dtype)), tuple(v.shape))
        except Exception:     # noqa: BLE001 - a dtype onnx has no number for: leave it
            pass
    return out


def subgraph_types(model: Any, node: Any, res: fold.Folded, types: Mapping[str, Type],
                   known: Mapping[str, np.ndarray], small: int, depth: int) -> dict[str, Type]:
    """Output types of one If/Loop/Scan node that its subgraphs determine (possibly none)."""
    at = {a.name: a for a in node.attribute}
    consts = {**known, **res.values}
    ins = [types.get(v) if v else None for v in node.input]
    if node.op_type == "If":
        branches = [_body_types(model, at[b].g, [], types, consts, small, depth)
                    for b in ("then_branch", "else_branch") if b in at]
        if len(branches) != 2 or any(b is None for b in branches):
            return {}
        return {o: a for o, a, b in zip(node.output, *branches)
                if o and a is not None and a == b}
    if node.op_type == "Scan":
        return _scan_types(model, node, at, ins, types, consts, small, depth)
    return _loop_types(model, node, at, ins, types, consts, small, depth)


def _scan_types(model: Any, node: Any, at: dict, ins: list, types: Mapping[str, Type],
                consts: Mapping[str, np.ndarray], small: int, depth: int) -> dict[str, Type]:
    from onnx import helper

    opset = {o.domain or "": o.version for o in model.opset_import}.get("", 1)
    if opset < 9 or "body" not in at:
        return {}
    m = helper.get_attribute_value(at["num_scan_inputs"])
    n = len(node.input) - m
    in_axes = list(helper.get_attribute_value(at["scan_input_axes"])) if "scan_input_axes" \
        in at else [0] * m
    if any(t is None for t in ins) or n < 0:
        return {}
    length = None
    formal: list[Type | None] = list(ins[:n])
    for k, t in enumerate(ins[n:]):
        elem, dims = t
        ax = in_axes[k] % len(dims)
        length = dims[ax] if length is None else length
        formal.append((elem, dims[:ax] + dims[ax + 1:]))
    body = _body_types(model, at["body"].g, formal, types, consts, small, depth)
    if body is None:
        return {}
    outs = list(node.output)
    k_out = len(outs) - n
    out_axes = list(helper.get_attribute_value(at["scan_output_axes"])) if "scan_output_axes" \
        in at else [0] * k_out
    found: dict[str, Type] = {}
    for j, o in enumerate(outs):
        t = body[j] if j < len(body) else None
        if not o or t is None:
            continue
        if j < n:
            found[o] = t
        elif length is not None:
            elem, dims = t
            ax = out_axes[j - n] % (len(dims) + 1)
            found[o] = (elem, dims[:ax] + (length,) + dims[ax:])
    return found


def _loop_types(model: Any, node: Any, at: dict, ins: list, types: Mapping[str, Type],
                consts: Mapping[str, np.ndarray], small: int, depth: int) -> dict[str, Type]:
    if "body" not in at:
        return {}
    carried = ins[2:]
    if any(t is None for t in carried):
        return {}
    formal = [(7, ()), (9, ())] + list(carried)
    body = _body_types(model, at["body"].g, formal, types, consts, small, depth)
    if body is None:
        return {}
    trip = None
    m_name = node.input[0] if node.input else ""
    cond_name = node.input[1] if len(node.input) > 1 else ""
    if m_name and m_name in consts and not cond_name and consts[m_name].size == 1:
        trip = int(np.asarray(consts[m_name]).reshape(-1)[0])
    found: dict[str, Type] = {}
    n = len(carried)
    for j, o in enumerate(node.output):
        t = body[j + 1] if j + 1 < len(body) else None
        if not o or t is None:
            continue
        if j < n:
            if t == carried[j]:          # the body keeps the value's shape
                found[o] = t
        elif trip is not None:
            found[o] = (t[0], (trip,) + t[1])
    return found


def _body_types(model: Any, g: Any, formal: list[Type | None], types: Mapping[str, Type],
                consts: Mapping[str, np.ndarray], small: int, depth: int
                ) -> list[Type | None] | None:
    """The types of a subgraph's outputs (see _fold_body); None when it cannot tell, or when a
    value it computes is empty at these sizes (its output shapes then say nothing about sizes
    that run: onnx's inference lets a Conv window longer than its input through)."""
    res = _fold_body(model, g, formal, types, consts, small, depth)
    if res is None:
        return None
    inner = known_types(res)
    if _empty_value(res, inner) is not None:
        return None
    return [inner.get(o.name) for o in g.output]


def empty_in_branches(model: Any, res: fold.Folded, known: Mapping[str, np.ndarray],
                      small: int) -> tuple[Any, str] | None:
    """(an If node, the name of a value one of its branches computes empty) at the sizes `res`
    was folded at, or None. An If whose outputs inference knows hides an empty STFT inside it
    (silero-vad at an audio length of 1); the importer takes that for a degenerate size."""
    types = known_types(res)
    consts = {**known, **res.values}
    for node in res.model.graph.node:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
            continue
        for a in node.attribute:
            if a.name not in ("then_branch", "else_branch"):
                continue
            sub = _fold_body(model, a.g, [], types, consts, small, 0)
            empty = None if sub is None else _empty_value(sub, known_types(sub))
            if empty is not None:
                return node, empty
    return None


def _empty_value(res: fold.Folded, types: Mapping[str, Type]) -> str | None:
    """A value the subgraph computes at run time that is empty at these sizes (constants, such
    as Resize's empty roi, may be empty)."""
    ig = res.inferred.graph
    constants = set(res.values) | {t.name for t in ig.initializer}
    constants |= {n.output[0] for n in res.model.graph.node if n.op_type == "Constant"}
    return next((name for name, t in types.items() if name not in constants and 0 in t[1]), None)


def _fold_body(model: Any, g: Any, formal: list[Type | None], types: Mapping[str, Type],
               consts: Mapping[str, np.ndarray], small: int, depth: int) -> fold.Folded | None:
    """A subgraph folded as a model of its own whose inputs are the subgraph's formal inputs
    (types `formal`) and the outer values it reads; None when an outer value it reads has no
    known type or inference rejects it."""
    import onnx
    from onnx import helper, numpy_helper

    from ..ir.opaque import _graph_reads

    sub = onnx.ModelProto()
    sub.ir_version = max(model.ir_version, 4)
    sub.opset_import.extend(model.opset_import)
    sub.functions.extend(model.functions)
    sg = sub.graph
    sg.name = g.name or "subgraph"
    sg.node.extend(g.node)
    sg.initializer.extend(g.initializer)
    dims: dict[str, tuple[int, ...]] = {}
    for k, inp in enumerate(g.input):
        t = formal[k] if k < len(formal) else _type_of(inp)
        if t is None:
            return None
        sg.input.append(_value_info(inp.name, t))
        dims[inp.name] = t[1]
    known: dict[str, np.ndarray] = {}
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    for v in _graph_reads(g):
        if v in local:
            continue
        c = consts.get(v)
        if c is not None and isinstance(c, np.ndarray) and c.dtype != object and c.size <= small:
            sg.initializer.append(numpy_helper.from_array(c, v))
            known[v] = c
            continue
        t = types.get(v)
        if t is None:
            return None
        sg.input.append(_value_info(v, t))
        dims[v] = t[1]
    for o in g.output:       # the declared types without their shapes: inference gives them
        vi = helper.make_value_info(o.name, onnx.TypeProto())
        if o.type.HasField("tensor_type"):
            vi.type.tensor_type.elem_type = o.type.tensor_type.elem_type
        sg.output.append(vi)
    for t in g.initializer:
        try:
            arr = numpy_helper.to_array(t)
        except Exception:     # noqa: BLE001 - unreadable: left to the node's own run
            continue
        if arr.size <= fold.FOLD_MAX:
            known[t.name] = arr
    try:
        return fold_with_control_flow(sub, dims, known, {}, small, depth + 1)
    except Exception:         # noqa: BLE001 - a subgraph inference rejects: it cannot tell
        return None


def runtime_types(model: Any, input_dims: Mapping[str, tuple[int, ...]],
                  names: list[str]) -> dict[str, Type]:
    """The types onnxruntime gives `names` when it runs `model` on random inputs of the given
    shapes, twice (integers in [0, 2) and in [0, 4), as the checks draw them): only the types
    both runs agree on, since a shape that follows the data (a trip count read from an input)
    is no shape the IR can hold. Empty when onnxruntime cannot run the model; RunStopped at
    the enclosing `stopping.time_limit`."""
    import onnx
    from onnx import helper

    from ..errors import RunStopped
    from ..runtime import session
    from ..stopping import run_until
    from .measure import random_feeds

    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for n in names:
        if n not in have:
            m.graph.output.append(onnx.ValueInfoProto(name=n))
    runs = []
    try:
        sess = session(m)
        for seed, high in ((0, 2), (1, 4)):
            feeds = random_feeds(model, seed=seed, shapes=input_dims)
            rng = np.random.default_rng(seed)
            for k, v in feeds.items():
                if v.dtype.kind in "iu":
                    feeds[k] = rng.integers(0, high, v.shape).astype(v.dtype)
            runs.append(run_until(sess, names, feeds, what="onnxruntime's run of the input "
                                  "model that finds the types of its control-flow outputs"))
    except RunStopped:
        raise
    except Exception:       # noqa: BLE001 - onnxruntime refuses or fails: nothing learnt
        return {}
    found: dict[str, Type] = {}
    for n, a, b in zip(names, *runs):
        if isinstance(a, np.ndarray) and a.dtype != object and isinstance(b, np.ndarray) \
                and a.shape == b.shape:
            found[n] = (int(helper.np_dtype_to_tensor_dtype(a.dtype)), tuple(a.shape))
    return found


def _type_of(vi: Any) -> Type | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tt.elem_type, tuple(dims)


def _value_info(name: str, t: Type) -> Any:
    from onnx import helper
    return helper.make_tensor_value_info(name, t[0], list(t[1]))


def with_constants_inside(node: Any, constant: Any) -> Any:
    """`node` with the constants its subgraphs read from the enclosing graph moved inside them
    (as initializers named `NAME#const`), so that an opaque If/Loop/Scan has only the values it
    computes on as operands: silero-vad's If reads 40 weights, and an e-node holds 8 children.
    `constant(name)` is the value of an enclosing-scope constant, None for anything else."""
    import onnx
    from onnx import numpy_helper

    from ..ir.opaque import _graph_reads, implicit_inputs, subgraphs

    values = {v: constant(v) for v in implicit_inputs(node)}
    values = {v: c for v, c in values.items() if c is not None}
    if not values:
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    rename = {v: f"{v}#const" for v in values}
    for g in subgraphs(copy):
        for v in _graph_reads(g):
            if v in values:
                g.initializer.append(numpy_helper.from_array(values[v], rename[v]))
    fold._rename_subgraphs(copy, rename)
    return copy
