"""Serialized e-graphs in the egraph-serialize / extraction-gym JSON format.

    {"nodes": {"<node id>": {"op": "conv2d", "children": ["<node id>", ...],
                             "eclass": "<class id>", "cost": 1.0}, ...},
     "root_eclasses": ["<class id>", ...],
     "class_data": {"<class id>": {"type": "tensor<...>"}, ...}}

A child names *a node* of the child class. Literal leaves are written with their value as the op
(`[1, 1]`, `"same"`) and `"kind": "lit"` in class_data, so our own files read back exactly;
operators we do not know (other tools' e-graphs) become `opaque` nodes named by their op string,
and cyclic e-graphs read fine.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..errors import TirError
from ..ir.graph import DTYPES, TensorType
from ..ir.printer import format_value
from .hashcons import remove
from .layout import C_TYPE, EMPTY, F_DEAD, F_FILTERED, MAXA, N_FLAGS, N_OP, T_LIT, T_UNKNOWN
from .store import EOP_IDS, LIT, OPAQUE, EGraph, EGraphError


def to_json(eg: EGraph, costs: np.ndarray | None = None) -> dict[str, Any]:
    """The e-graph as an egraph-serialize dict (dead and filtered nodes left out)."""
    eg.rebuild()
    flags = eg.nodes[N_FLAGS, : eg.num_nodes]
    live = [int(n) for n in np.nonzero((flags & (F_DEAD | F_FILTERED)) == 0)[0]]
    rep: dict[int, int] = {}
    for n in live:
        rep.setdefault(eg.node_class(n), n)
    nodes: dict[str, Any] = {}
    class_data: dict[str, Any] = {}
    for n in live:
        c = eg.node_class(n)
        op = eg.op_name(n)
        if op == "lit":
            op = format_value(eg.literal_value(n))
        elif op == "opaque":
            op = eg.literal_value(n)
        cost = float(costs[n]) if costs is not None else (0.0 if op in ("input", "weight")
                                                          or eg.nodes[N_OP, n] == LIT else 1.0)
        nodes[str(n)] = {"op": op, "children": [str(rep[eg.find(k)]) for k in eg.node_children(n)],
                         "eclass": str(c), "cost": cost}
        if str(c) not in class_data:
            tid = int(eg.classes[C_TYPE, c])
            data: dict[str, Any] = {}
            if tid == T_LIT:
                data["kind"] = "lit"
            elif tid >= 0:
                data["type"] = str(eg.lits.value(tid))
            if eg.is_const(c):
                data["const"] = True
            if c in eg.names:
                data["name"] = eg.names[c]
            class_data[str(c)] = data
    return {"nodes": nodes, "root_eclasses": [str(eg.find(r)) for r in eg.roots],
            "class_data": class_data, "name": eg.graph_name,
            "inputs": [[name, str(eg.find(c))] for name, c in eg.inputs]}


def write_json(eg: EGraph, out: str | Path | TextIO, costs: np.ndarray | None = None) -> None:
    data = to_json(eg, costs)
    if isinstance(out, (str, Path)):
        Path(out).write_text(json.dumps(data))
    else:
        json.dump(data, out)


def _parse_type(text: str) -> TensorType:
    if not (text.startswith("tensor<") and text.endswith(">")):
        raise ValueError(text)
    *dims, dtype = text[len("tensor<"):-1].split("x")
    if dtype not in DTYPES:
        raise ValueError(text)
    return TensorType(tuple(int(d) for d in dims), dtype)


def _parse_literal(op: str) -> Any:
    value = json.loads(op)
    return tuple(value) if isinstance(value, list) else value


def from_json(data: dict[str, Any], source: str = "<json>") -> tuple[EGraph, np.ndarray]:
    """An e-graph and its per-node cost array (indexed by our node ids) from a serialized dict."""
    _check_format(data, source)
    raw_nodes: dict[str, dict] = data["nodes"]
    roots = [str(r) for r in data.get("root_eclasses", [])]
    class_data: dict[str, dict] = data.get("class_data") or {}
    eclass_of = {nid: str(nd["eclass"]) for nid, nd in raw_nodes.items()}
    members: dict[str, list[str]] = {}
    for nid, ec in eclass_of.items():
        members.setdefault(ec, []).append(nid)

    eg = EGraph(capacity=2 * len(raw_nodes) + 16)
    types = {ec: _class_type(eg, class_data.get(ec, {}), source) for ec in members}

    # Order nodes so every child class exists first; a placeholder breaks each cycle.
    entries: list[tuple[int, int, list[int], int]] = []     # op, payload, child refs, type id
    ref_of_node: dict[str, int] = {}
    class_ref: dict[str, int] = {}
    placeholders: list[int] = []
    pending = sorted(raw_nodes, key=_natural)
    for nid in pending:
        for k in raw_nodes[nid].get("children", []):
            if str(k) not in eclass_of:
                raise TirError(f"node {nid}: child {k} is not a node", file=source)
    remaining = list(pending)
    while remaining:
        progressed = False
        still = []
        for nid in remaining:
            kids = [eclass_of[str(k)] for k in raw_nodes[nid].get("children", [])]
            if all(ec in class_ref for ec in kids):
                entries.append(_entry(eg, raw_nodes[nid], [class_ref[ec] for ec in kids],
                                      types[eclass_of[nid]], source, nid))
                ref = -len(entries)
                ref_of_node[nid] = ref
                class_ref.setdefault(eclass_of[nid], ref)
                progressed = True
            else:
                still.append(nid)
        remaining = still
        if remaining and not progressed:     # a cycle: stand in for one missing class
            missing = next(ec for nid in remaining for ec in
                           (eclass_of[str(k)] for k in raw_nodes[nid].get("children", []))
                           if ec not in class_ref)
            entries.append((OPAQUE, eg.lits.literal(f"placeholder:{missing}"), [], types[missing]))
            class_ref[missing] = -len(entries)
            placeholders.append(len(entries) - 1)

    kids = np.full((len(entries), MAXA), EMPTY, np.int32)
    for i, (_, _, ch, _) in enumerate(entries):
        if len(ch) > MAXA:
            raise TirError(f"a node has {len(ch)} children; the e-graph holds at most {MAXA}",
                           file=source)
        kids[i, : len(ch)] = ch
    try:      # a type conflict (equal nodes or one class of two types) names the file
        out = eg.add_batch(np.array([e[0] for e in entries]), np.array([e[1] for e in entries]),
                           kids, np.array([len(e[2]) for e in entries]),
                           np.array([e[3] for e in entries]))
        # before any union every class holds exactly one node, so out[i] is entry i's node id
        node_of_entry = out.copy()
        pairs = [(out[-class_ref[ec] - 1], out[-ref_of_node[nid] - 1])
                 for nid, ec in eclass_of.items()]
        if pairs:
            eg.union_many(np.array(pairs, np.int32))
        for i in placeholders:           # out of the hash-cons too: it holds only live nodes
            remove(eg.table, eg.nodes, eg.children, int(node_of_entry[i]))
            eg.nodes[N_FLAGS, node_of_entry[i]] |= F_DEAD
        eg.rebuild()
    except EGraphError as e:
        raise e.located(source, None) from None

    costs = np.zeros(eg.num_nodes, np.float64)
    for nid, ref in ref_of_node.items():
        costs[node_of_entry[-ref - 1]] = float(raw_nodes[nid].get("cost", 1.0))
    for r in roots:
        if r not in class_ref:
            raise TirError(f"root e-class {r} has no nodes", file=source)
    eg.roots = [eg.find(int(out[-class_ref[r] - 1])) for r in roots]
    cls = {ec: eg.find(int(out[-ref - 1])) for ec, ref in class_ref.items()}
    eg.names = {cls[ec]: str(d["name"]) for ec, d in class_data.items()
                if isinstance(d, dict) and "name" in d and ec in cls}
    eg.inputs = [(str(name), cls[str(ec)]) for name, ec in data.get("inputs", []) if str(ec) in cls]
    eg.graph_name = str(data.get("name", "main"))
    return eg, costs


def _check_format(data: Any, source: str) -> None:
    """TirError unless `data` has the shape from_json reads (so a bad file is no traceback)."""
    def bad(what: str) -> TirError:
        return TirError(f"not a serialized e-graph: {what}", file=source)

    if not isinstance(data, dict) or not isinstance(data.get("nodes"), dict):
        raise bad("expected an object with 'nodes' and 'root_eclasses'")
    if not isinstance(data.get("root_eclasses", []), list):
        raise bad("'root_eclasses' is not a list")
    for nid, nd in data["nodes"].items():
        if not isinstance(nd, dict) or "eclass" not in nd:
            raise bad(f"node {nid} is not an object with an 'eclass'")
        if not isinstance(nd.get("children", []), list):
            raise bad(f"node {nid}: 'children' is not a list")
        cost = nd.get("cost", 1.0)
        if not isinstance(cost, (int, float)):
            raise bad(f"node {nid}: cost {cost!r} is not a number")
    class_data = data.get("class_data") or {}
    if not isinstance(class_data, dict) or not all(isinstance(d, dict)
                                                   for d in class_data.values()):
        raise bad("'class_data' is not an object of objects")
    inputs = data.get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(x, list) and len(x) == 2
                                               for x in inputs):
        raise bad("'inputs' is not a list of [name, e-class] pairs")


def _class_type(eg: EGraph, data: dict, source: str) -> int:
    if data.get("kind") == "lit":
        return T_LIT
    if "type" in data:
        try:
            return eg.type_id(_parse_type(str(data["type"])))
        except ValueError:
            raise TirError(f"bad class type {data['type']!r}", file=source) from None
    return T_UNKNOWN


def _entry(eg: EGraph, node: dict, kids: list[int], tid: int, source: str,
           nid: str) -> tuple[int, int, list[int], int]:
    op = str(node.get("op", ""))
    if tid == T_LIT and not kids:
        try:
            return LIT, eg.lits.literal(_parse_literal(op)), kids, tid
        except (ValueError, TypeError):
            raise TirError(f"node {nid}: bad literal {op!r}", file=source) from None
    if op in EOP_IDS and op not in ("lit", "opaque"):
        return EOP_IDS[op], -1, kids, tid
    return OPAQUE, eg.lits.literal(op), kids, tid


def read_json(path: str | Path) -> tuple[EGraph, np.ndarray]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror}", file=str(path)) from None
    except json.JSONDecodeError as e:
        raise TirError(f"invalid JSON: {e.msg}", file=str(path)) from None
    return from_json(data, str(path))


def _natural(s: str) -> tuple:
    """Sort key that puts '10' after '9' (ids are often numbers)."""
    return (0, int(s), "") if s.isdigit() else (1, 0, s)
