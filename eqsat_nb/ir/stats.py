"""Graph summaries: operator mix, parameter count, FLOPs (what `eqsat-nb check` prints)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .graph import Graph
from .ops import flops


@dataclass(frozen=True)
class GraphStats:
    op_counts: dict[str, int]   # compute ops (everything but weights), most frequent first
    params: int                 # elements in all weights
    flops: int                  # floating-point operations of one inference

    @property
    def compute_ops(self) -> int:
        return sum(self.op_counts.values())


def graph_stats(graph: Graph) -> GraphStats:
    env = graph.types()
    counts = Counter(n.op for n in graph.compute_nodes())
    params = sum(n.types[0].numel for n in graph.weights())
    total = sum(flops(n.op, [env[v] for v in n.inputs], list(n.types), n.attrs)
                for n in graph.compute_nodes())
    ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return GraphStats(ordered, params, total)


def human(n: float) -> str:
    """1234567 → '1.23 M'."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:g}"
