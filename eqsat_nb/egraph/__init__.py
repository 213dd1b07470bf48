"""The e-graph engine: struct-of-arrays storage with Numba kernels."""
from __future__ import annotations

from .convert import egraph_to_graph, graph_to_egraph, original_choice
from .store import EGraph, EGraphError

__all__ = ["EGraph", "EGraphError", "egraph_to_graph", "graph_to_egraph", "original_choice",
           "warm_up"]


def warm_up() -> None:
    """Compile (or load from Numba's cache) every e-graph kernel by using each once."""
    from ..ir.graph import TensorType

    eg = EGraph(capacity=16)
    t = TensorType((2, 2))
    leaves = [eg.add("input", [eg.add_literal(n), eg.add_literal((2, 2)), eg.add_literal("f32")],
                     ty=t) for n in ("a", "b")]
    eg.add("relu", [leaves[0]], ty=t)
    eg.add("relu", [leaves[1]], ty=t)
    eg.union(*leaves)
    eg.rebuild()
    eg.reserve(64)                      # table rehash path
    eg.compact()                        # drops the relu made dead by the union
    eg.snapshot().fingerprint()
    eg.canonical(eg.class_ids())
