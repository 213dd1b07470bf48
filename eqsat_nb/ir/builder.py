"""Programmatic graph construction with shape checking at every step (used by the model
generator, the ONNX importer and e-graph extraction)."""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import TirError
from .graph import Graph, Node, TensorType
from .ops import infer_types, normalize_attrs, op_def


class GraphBuilder:
    """Append nodes one at a time; every call checks arity, attributes and shapes.

    >>> b = GraphBuilder("f")
    >>> x = b.input((2, 3))
    >>> y = b.op("relu", x)
    >>> g = b.build(y)
    """

    def __init__(self, name: str = "main") -> None:
        self.name = name
        self._inputs: list[tuple[str, TensorType]] = []
        self._nodes: list[Node] = []
        self._types: dict[str, TensorType] = {}
        self._weights: set[str] = set()
        self._counter = 0

    def _fresh(self, hint: str | None, reserved: frozenset[str] = frozenset()) -> str:
        if hint is not None:
            name = hint if hint.startswith("%") else f"%{hint}"
            if name in self._types:
                raise TirError(f"value {name} is defined twice")
            return name
        while f"%{self._counter}" in self._types or f"%{self._counter}" in reserved:
            self._counter += 1
        name = f"%{self._counter}"
        self._counter += 1
        return name

    def defines(self, value: str) -> bool:
        """Whether SSA value `value` (e.g. '%3') already exists."""
        return value in self._types

    def type_of(self, value: str) -> TensorType:
        return self._types[value]

    def shape(self, value: str) -> tuple[int, ...]:
        return self._types[value].shape

    def input(self, shape: Sequence[int], dtype: str = "f32", name: str | None = None) -> str:
        v = self._fresh(name or f"x{len(self._inputs)}")
        ty = TensorType(tuple(int(d) for d in shape), dtype)
        self._inputs.append((v, ty))
        self._types[v] = ty
        return v

    def weight(self, shape: Sequence[int], name: str | None = None, dtype: str = "f32",
               value_name: str | None = None) -> str:
        """Declare weight @name; its SSA value is %name unless `value_name` says otherwise."""
        name = name or f"w{len(self._weights)}"
        if name in self._weights:
            raise TirError(f"weight @{name} is declared twice")
        self._weights.add(name)
        attrs = normalize_attrs(op_def("weight"), {"name": name, "shape": tuple(shape),
                                                   "dtype": dtype})
        ty = TensorType(tuple(int(d) for d in shape), dtype)
        v = self._fresh(value_name or name)
        self._nodes.append(Node("weight", (), attrs, (v,), (ty,)))
        self._types[v] = ty
        return v

    def op(self, op: str, *inputs: str, name: str | None = None,
           names: Sequence[str | None] | None = None, **attrs: Any) -> Any:
        """Add `op(inputs) {attrs}`; returns the result name, or a tuple for multi-result ops.
        `name` names the (first) result, `names` every result (None entries are numbered)."""
        opdef = op_def(op)
        if opdef.leaf:
            raise TirError(f"use input() or weight() for '{op}'")
        norm = normalize_attrs(opdef, attrs)
        types = infer_types(op, [self._types[v] for v in inputs], norm)
        wanted = list(names) if names is not None else [name]
        wanted += [None] * (len(types) - len(wanted))
        reserved = frozenset(w if w.startswith("%") else f"%{w}" for w in wanted if w)
        results = []
        for want, ty in zip(wanted, types):      # claim each name before making the next
            results.append(self._fresh(want, reserved))
            self._types[results[-1]] = ty
        results = tuple(results)
        self._nodes.append(Node(op, tuple(inputs), norm, results, tuple(types)))
        return results if opdef.multi_result else results[0]

    def opaque(self, inputs: Sequence[str], attrs: dict[str, Any], types: Sequence[TensorType],
               names: Sequence[str | None] | None = None) -> tuple[str, ...]:
        """Add an opaque node (an operator the IR does not model) with its declared result types;
        returns the result names."""
        opdef = op_def("opaque")
        norm = normalize_attrs(opdef, attrs)
        types = infer_types("opaque", [self._types[v] for v in inputs], norm, list(types))
        wanted = list(names) if names is not None else []
        wanted += [None] * (len(types) - len(wanted))
        reserved = frozenset(w if w.startswith("%") else f"%{w}" for w in wanted if w)
        results = []
        for want, ty in zip(wanted, types):
            results.append(self._fresh(want, reserved))
            self._types[results[-1]] = ty
        self._nodes.append(Node("opaque", tuple(inputs), norm, tuple(results), tuple(types)))
        return tuple(results)

    def checkpoint(self) -> tuple[int, int, int]:
        """A mark to `rollback` to (the ONNX importer undoes a node it cannot map exactly)."""
        return len(self._inputs), len(self._nodes), self._counter

    def rollback(self, mark: tuple[int, int, int]) -> None:
        n_in, n_nodes, counter = mark
        for node in self._nodes[n_nodes:]:
            for r in node.results:
                self._types.pop(r, None)
            if node.op == "weight":
                self._weights.discard(node.attr["name"])
        for v, _ in self._inputs[n_in:]:
            self._types.pop(v, None)
        del self._nodes[n_nodes:]
        del self._inputs[n_in:]
        self._counter = counter

    def build(self, *outputs: str) -> Graph:
        if not outputs:
            raise TirError("a graph needs at least one output")
        return Graph(self.name, tuple(self._inputs), tuple(self._nodes), tuple(outputs))


def check_graph(graph: Graph) -> None:
    """Re-validate a Graph built by other means: SSA, arity, attributes, re-inferred types."""
    env = dict(graph.inputs)
    for node in graph.nodes:
        for v in node.inputs:
            if v not in env:
                raise TirError(f"{node.op}: value {v} is used before it is defined", node.loc)
        opdef = op_def(node.op)
        if normalize_attrs(opdef, dict(node.attrs)) != node.attrs:
            raise TirError(f"{node.op}: attributes are not in canonical form", node.loc)
        types = (infer_types(node.op, [], node.attrs) if opdef.leaf
                 else infer_types(node.op, [env[v] for v in node.inputs], node.attrs,
                                  node.types if node.op == "opaque" else None))
        if tuple(types) != node.types or len(node.results) != len(types):
            raise TirError(f"{node.op}: stored types {node.types} differ from inferred {types}",
                           node.loc)
        for r, t in zip(node.results, types):
            if r in env:
                raise TirError(f"value {r} is defined twice", node.loc)
            env[r] = t
    for v in graph.outputs:
        if v not in env:
            raise TirError(f"output {v} is not defined")
