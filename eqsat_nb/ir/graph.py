"""The tensor graph: immutable, typed, SSA.

A `Graph` is a function: typed inputs, a topologically ordered tuple of `Node`s (each defines one or
more SSA values), and the values it returns. Weights are nodes of op `weight` (constant at
inference); inputs are the function's arguments. Equality is structural and ignores source
locations, so `parse(print(g)) == g` is a meaningful test.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any, Iterator, Mapping

from ..errors import Loc

# element types; a type's index is stored in the e-graph's literal tables (egraph/literals.py):
# the order is fixed, a type is added at the end. bf16 values are held as float32 arrays of
# bfloat16 numbers (ir/bfloat16.py)
DTYPES = ("f16", "f32", "f64", "i32", "i64", "bool", "bf16")


@dataclass(frozen=True)
class TensorType:
    """Shape and element type of a tensor value."""

    shape: tuple[int, ...]
    dtype: str = "f32"

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return prod(self.shape)

    def with_shape(self, shape: tuple[int, ...] | list[int]) -> "TensorType":
        return TensorType(tuple(int(d) for d in shape), self.dtype)

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tensor<{dims}{self.dtype}>"


Attrs = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class Node:
    """One operation: `results = op(inputs) {attrs} : types`.

    `attrs` holds every attribute of the op's schema (defaults filled in), in schema order, with
    lists stored as tuples, so two nodes that mean the same compare equal.
    """

    op: str
    inputs: tuple[str, ...]
    attrs: Attrs
    results: tuple[str, ...]
    types: tuple[TensorType, ...]
    loc: Loc | None = field(default=None, compare=False, repr=False)

    @property
    def attr(self) -> dict[str, Any]:
        return dict(self.attrs)


@dataclass(frozen=True)
class Graph:
    """A function over tensors. Nodes are in a valid topological order."""

    name: str
    inputs: tuple[tuple[str, TensorType], ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]

    def types(self) -> dict[str, TensorType]:
        """The type of every value (inputs and node results)."""
        env = dict(self.inputs)
        for node in self.nodes:
            env.update(zip(node.results, node.types))
        return env

    def output_types(self) -> tuple[TensorType, ...]:
        env = self.types()
        return tuple(env[v] for v in self.outputs)

    def weights(self) -> Iterator[Node]:
        return (n for n in self.nodes if n.op == "weight")

    def compute_nodes(self) -> Iterator[Node]:
        """Every node that is not a weight (MODELS.md's 'compute ops')."""
        return (n for n in self.nodes if n.op != "weight")

    def producers(self) -> Mapping[str, Node]:
        return {r: n for n in self.nodes for r in n.results}

    def consumers(self) -> dict[str, list[tuple[Node, int]]]:
        """For every value, the (node, input position) pairs that read it."""
        uses: dict[str, list[tuple[Node, int]]] = {}
        for node in self.nodes:
            for i, v in enumerate(node.inputs):
                uses.setdefault(v, []).append((node, i))
        return uses
