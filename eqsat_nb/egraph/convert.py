"""Graph ⇄ EGraph.

Graph → EGraph: one class per value; attributes become `lit` leaf children (schema order, before
the operands), inputs and weights are `input`/`weight` nodes over (name, shape, dtype) literals, a
split is a tuple class read by `proj(lit i, split)`. The whole graph goes in with one kernel call.

EGraph + a choice of one node per class → Graph: the chosen nodes reachable from the roots, in
the topological order that prefers older nodes (so the original choice gives back the original
graph), with every shape re-derived by the GraphBuilder.
"""
from __future__ import annotations

import heapq
import json
from typing import Any

import numpy as np

from ..errors import TirError
from ..ir.builder import GraphBuilder
from ..ir.graph import Graph, Node, TensorType
from ..ir.ops import OPS
from .layout import (C_HEAD, C_UHEAD, EMPTY, F_DEAD, MAXA, N_FLAGS, N_NEXT, N_OP, T_LIT, T_TUPLE,
                     U_NEXT, U_NODE)
from .store import EOP_IDS, LIT, OPAQUE, PROJ, EGraph, EGraphError


def graph_to_egraph(graph: Graph, eg: EGraph | None = None) -> EGraph:
    """Load `graph` into a (new) e-graph; its outputs become the roots."""
    eg = eg if eg is not None else EGraph(capacity=4 * len(graph.nodes) + 64)
    ops: list[int] = []
    payloads: list[int] = []
    kids: list[list[int]] = []
    types: list[int] = []
    lit_ref: dict[tuple[str, Any], int] = {}
    value_ref: dict[str, int] = {}

    def emit(op: int, children: list[int], tid: int, payload: int = -1) -> int:
        ops.append(op)
        payloads.append(payload)
        kids.append(children)
        types.append(tid)
        return -len(ops)           # batch reference

    def lit(value: Any) -> int:
        key = (type(value).__name__, value)
        if key not in lit_ref:
            lit_ref[key] = emit(LIT, [], T_LIT, eg.lits.literal(value))
        return lit_ref[key]

    def operands(op: str, attrs: tuple, inputs: tuple[str, ...]) -> list[int]:
        children = [lit(v) for _, v in attrs] + [value_ref[v] for v in inputs]
        if len(children) > MAXA:
            raise EGraphError(f"{op} with {len(inputs)} operands has {len(children)} e-node "
                              f"children; the e-graph holds at most {MAXA}")
        return children

    for name, ty in graph.inputs:
        value_ref[name] = emit(EOP_IDS["input"], [lit(name[1:]), lit(ty.shape), lit(ty.dtype)],
                               eg.type_id(ty))
    for node in graph.nodes:
        if node.op == "opaque":
            # attributes and result types travel in the payload string, operands are children
            children = [value_ref[v] for v in node.inputs]
            if len(children) > MAXA:
                raise EGraphError(f"opaque {node.attr['op']} with {len(children)} operands; the "
                                  f"e-graph holds at most {MAXA}")
            payload = eg.lits.literal(opaque_key(node))
            if len(node.results) == 1:
                value_ref[node.results[0]] = emit(OPAQUE, children, eg.type_id(node.types[0]),
                                                  payload)
            else:
                tup = emit(OPAQUE, children, T_TUPLE, payload)
                for i, (r, ty) in enumerate(zip(node.results, node.types)):
                    value_ref[r] = emit(PROJ, [lit(i), tup], eg.type_id(ty))
        elif node.op == "weight":
            value_ref[node.results[0]] = emit(EOP_IDS["weight"], operands("weight", node.attrs, ()),
                                              eg.type_id(node.types[0]))
        elif OPS[node.op].multi_result:
            tup = emit(EOP_IDS[node.op], operands(node.op, node.attrs, node.inputs), T_TUPLE)
            for i, (r, ty) in enumerate(zip(node.results, node.types)):
                value_ref[r] = emit(PROJ, [lit(i), tup], eg.type_id(ty))
        else:
            value_ref[node.results[0]] = emit(EOP_IDS[node.op],
                                              operands(node.op, node.attrs, node.inputs),
                                              eg.type_id(node.types[0]))

    kid_arr = np.full((len(ops), MAXA), EMPTY, np.int32)
    for i, ch in enumerate(kids):
        kid_arr[i, : len(ch)] = ch
    out = eg.add_batch(np.array(ops), np.array(payloads), kid_arr,
                       np.array([len(c) for c in kids]), np.array(types))

    def cls(ref: int) -> int:
        return int(out[-ref - 1])

    eg.roots = [cls(value_ref[v]) for v in graph.outputs]
    eg.inputs = [(name, cls(value_ref[name])) for name, _ in graph.inputs]
    eg.names = {}
    for name, ref in value_ref.items():
        eg.names.setdefault(cls(ref), name)
    eg.graph_name = graph.name
    return eg


def opaque_key(node: Node) -> str:
    """The e-graph payload of an opaque node: its attributes and result types as one string, so
    equal nodes on equal operands hash-cons together (random ops also carry their result names:
    two draws are different values)."""
    from ..ir.opaque import NONDETERMINISTIC

    a = node.attr
    key: dict[str, Any] = {"opaque": a["op"], "domain": a["domain"], "opset": a["opset"],
                           "onnx": a["onnx"], "types": [str(t) for t in node.types]}
    if a["op"] in NONDETERMINISTIC:
        key["results"] = list(node.results)
    return json.dumps(key, sort_keys=True)


def decode_opaque_key(key: str) -> tuple[dict[str, Any], list[TensorType]]:
    """(attributes, result types) from an `opaque_key` payload; EGraphError for other strings
    (e-graphs read from other tools name unknown operators that way)."""
    from ..ir.parse import parse_type
    from lark import Token

    try:
        d = json.loads(key)
        attrs = {"op": d["opaque"], "domain": d["domain"], "opset": d["opset"], "onnx": d["onnx"]}
        types = [parse_type(Token("TYPE", t)) for t in d["types"]]
    except (ValueError, KeyError, TypeError, TirError):
        raise EGraphError(f"opaque node {key[:60]!r} does not describe an operator this tool can "
                          f"write back into a graph") from None
    return attrs, types


def original_choice(eg: EGraph) -> np.ndarray:
    """choice[c] = the first live node of class c (for an unsaturated e-graph: its own node)."""
    n = eg.num_nodes
    choice = np.full(n, EMPTY, np.int64)
    for c in eg.class_ids():
        node = int(eg.classes[C_HEAD, c])
        while node != EMPTY and eg.nodes[N_FLAGS, node] & F_DEAD:
            node = int(eg.nodes[N_NEXT, node])
        choice[c] = node
    return choice


def egraph_to_graph(eg: EGraph, choice: np.ndarray, name: str | None = None) -> Graph:
    """The graph that `choice` (node id per canonical class) selects from the roots."""
    def chosen(c: int) -> int:
        c = eg.find(c)
        n = int(choice[c]) if c < len(choice) else EMPTY
        if n == EMPTY:
            raise TirError(f"extraction chose no node for e-class {c}")
        return n

    # operand classes of every reachable chosen node (attributes are literal leaves, not operands)
    deps: dict[int, list[int]] = {}      # chosen node → operand nodes it waits for
    stack = [chosen(r) for r in eg.roots]
    while stack:
        n = stack.pop()
        if n in deps:
            continue
        deps[n] = [chosen(c) for c in _operand_classes(eg, n)]
        stack.extend(deps[n])

    order = _topological(deps)
    b = GraphBuilder(name or getattr(eg, "graph_name", "main"))
    value: dict[int, str] = {}           # class → SSA name in the new graph
    used_names: set[str] = set()

    def fresh(c: int) -> str | None:
        want = eg.names.get(c)
        if want is None or want in used_names or b.defines(want):
            return None
        used_names.add(want)
        return want

    for in_name, c in eg.inputs:
        value[eg.find(c)] = b.input(eg.class_type(c).shape, eg.class_type(c).dtype, name=in_name)
        used_names.add(in_name)
    projs = _projections(eg, set(deps))
    for n in order:
        c = eg.node_class(n)
        op = eg.op_name(n)
        if op == "proj":
            continue                      # named when its split is emitted
        attrs, operands = node_attrs_and_operands(eg, n)
        if op == "input":
            if c not in value:            # e-graphs read from files carry no input order
                value[c] = b.input(attrs["shape"], attrs["dtype"], name=attrs["name"])
            continue
        if op == "weight":
            value[c] = b.weight(attrs["shape"], attrs["name"], attrs["dtype"], value_name=fresh(c))
            continue
        args = [value[eg.find(x)] for x in operands]
        if op == "opaque":
            types = attrs.pop("__types__")
            outs = projs.get(n, {})
            if len(types) == 1:           # a one-result opaque node is its value's class
                value[c] = b.opaque(args, attrs, types, names=[fresh(c)])[0]
                continue
            unused = _unused_projections(eg, c, outs) if len(outs) < len(types) else {}
            names = [fresh(outs[i]) if i in outs else fresh(unused[i]) if i in unused else None
                     for i in range(len(types))]
            results = b.opaque(args, attrs, types, names=names)
            for i, pc in outs.items():
                value[pc] = results[i]
        elif OPS[op].multi_result:
            outs = projs.get(n, {})
            unused = (_unused_projections(eg, c, outs)   # results nothing chosen reads
                      if len(outs) < len(attrs["sizes"]) else {})
            names = [fresh(outs[i]) if i in outs else fresh(unused[i]) if i in unused else None
                     for i in range(len(attrs["sizes"]))]
            results = b.op(op, *args, names=names, **attrs)
            for i, pc in outs.items():
                value[pc] = results[i]
        else:
            value[c] = b.op(op, *args, name=fresh(c), **attrs)
    return b.build(*(value[eg.find(r)] for r in eg.roots))


def node_attrs_and_operands(eg: EGraph, n: int) -> tuple[dict[str, Any], list[int]]:
    """(attributes decoded from the literal children, operand classes) of node n. For an opaque
    node: its attributes plus `__types__`, the declared result types (see `opaque_key`)."""
    op = eg.op_name(n)
    ch = eg.node_children(n)
    if op == "opaque":      # attributes live in the payload (see opaque_key); all children operands
        attrs, types = decode_opaque_key(eg.literal_value(n))
        return {**attrs, "__types__": types}, ch
    specs = OPS[op].attrs
    attrs = {}
    for spec, c in zip(specs, ch):
        lit_nodes = [m for m in eg.class_nodes(c) if eg.nodes[N_OP, m] == LIT]
        if not lit_nodes:
            raise EGraphError(f"{op}: attribute child e-class {c} holds no literal")
        attrs[spec.name] = eg.literal_value(lit_nodes[0])
    return attrs, ch[len(specs):]


def _operand_classes(eg: EGraph, n: int) -> list[int]:
    op = eg.op_name(n)
    if op in ("lit", "input", "weight"):
        return []
    if op == "proj":
        return [eg.node_children(n)[1]]
    return node_attrs_and_operands(eg, n)[1]


def _projections(eg: EGraph, chosen: set[int]) -> dict[int, dict[int, int]]:
    """split node → {result index: class} over the chosen proj nodes."""
    by_class = {eg.node_class(m): m for m in chosen}
    out: dict[int, dict[int, int]] = {}
    for n in chosen:
        if eg.nodes[N_OP, n] == PROJ:
            idx_class, tup = eg.node_children(n)
            i = eg.literal_value(eg.class_nodes(idx_class)[0])
            out.setdefault(by_class[eg.find(tup)], {})[i] = eg.node_class(n)
    return out


def _unused_projections(eg: EGraph, tup: int, used: dict[int, int]) -> dict[int, int]:
    """{result index: class} of the live proj nodes over tuple class `tup` whose index is not in
    `used`, so a split keeps the names of results that nothing reads."""
    out: dict[int, int] = {}
    u = int(eg.classes[C_UHEAD, tup])
    while u != EMPTY:
        p = int(eg.uses[U_NODE, u])
        u = int(eg.uses[U_NEXT, u])
        if eg.is_live(p) and eg.nodes[N_OP, p] == PROJ:
            idx_class, of = eg.node_children(p)
            lits = [m for m in eg.class_nodes(idx_class) if eg.nodes[N_OP, m] == LIT]
            if eg.find(of) == tup and lits:
                i = eg.literal_value(lits[0])
                if i not in used:
                    out.setdefault(i, eg.node_class(p))
    return out


def _topological(deps: dict[int, list[int]]) -> list[int]:
    """Kahn's algorithm taking the smallest ready node id first; error on a cycle."""
    waiting = {n: len(set(d)) for n, d in deps.items()}
    users: dict[int, list[int]] = {}
    for n, d in deps.items():
        for m in set(d):
            users.setdefault(m, []).append(n)
    ready = [n for n, k in waiting.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for u in users.get(n, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(deps):
        raise EGraphError("the chosen nodes form a cycle; no graph can be extracted")
    return order
