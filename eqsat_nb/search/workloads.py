"""The side-by-side e-graph workloads of shared/reference/EGGLOG_WORKLOADS.md, built in eqsat-nb.

The terms and rules are those of the egglog anchor (shared/tools/egglog_anchor.py): left-deep
matmul chains, right-deep sums, and residual MLPs, over N x N tensors, with egglog's schedule (no
node limit, no cycle filtering, stop when nothing changes or after K iterations). Literal
attribute leaves are not counted, as egglog keeps such values outside its e-graph.
"""
from __future__ import annotations

import numpy as np

from ..egraph.layout import F_DEAD, N_FLAGS, N_OP, T_LIT
from ..egraph.store import LIT, EGraph
from ..ir.graph import TensorType
from ..rules.parse import parse_rules
from .saturate import Limits, Report, saturate

ITERATION_CAP = {"mm_chain": 100, "add_ac": 100, "mlp": 100, "mlp2": 5}

N = 4
T = TensorType((N, N))

WORKLOAD_RULES = {
    "mm": """
rule assoc_r: (matmul (matmul ?x ?y) ?z) => (matmul ?x (matmul ?y ?z))
rule assoc_l: (matmul ?x (matmul ?y ?z)) => (matmul (matmul ?x ?y) ?z)
""",
    "ac": """
rule comm: (ewadd ?x ?y) => (ewadd ?y ?x)
rule assoc: (ewadd ?x (ewadd ?y ?z)) => (ewadd (ewadd ?x ?y) ?z)
""",
}
WORKLOAD_RULES["mlp"] = WORKLOAD_RULES["mm"] + WORKLOAD_RULES["ac"] + """
rule dist_l: (matmul ?x (ewadd ?y ?z)) => (ewadd (matmul ?x ?y) (matmul ?x ?z))
rule dist_r: (matmul (ewadd ?x ?y) ?z) => (ewadd (matmul ?x ?z) (matmul ?y ?z))
rule factor_l: (ewadd (matmul ?x ?y) (matmul ?x ?z)) => (matmul ?x (ewadd ?y ?z))
rule factor_r: (ewadd (matmul ?x ?z) (matmul ?y ?z)) => (matmul (ewadd ?x ?y) ?z)
rule relu_relu: (relu (relu ?x)) => (relu ?x)
"""


def _leaf(eg: EGraph, name: str) -> int:
    return eg.add("weight", [eg.add_literal(name), eg.add_literal((N, N)), eg.add_literal("f32")],
                  ty=T)


def build_workload(kind: str, size: int) -> EGraph:
    """The egglog anchor's terms (shared/tools/egglog_anchor.py) over N x N tensors."""
    eg = EGraph(capacity=1024)
    act = eg.add_literal("none")
    if kind == "mm_chain":
        e = _leaf(eg, "w0")
        for i in range(1, size):
            e = eg.add("matmul", [act, e, _leaf(eg, f"w{i}")], ty=T)
    elif kind == "add_ac":
        e = _leaf(eg, f"w{size - 1}")
        for i in range(size - 2, -1, -1):
            e = eg.add("ewadd", [_leaf(eg, f"w{i}"), e], ty=T)
    else:
        branches, every = (3, 1) if kind == "mlp" else (2, 2)
        e = eg.add("input", [eg.add_literal("x"), eg.add_literal((N, N)), eg.add_literal("f32")],
                   ty=T)
        for i in range(1, size + 1):
            acc = eg.add("matmul", [act, e, _leaf(eg, f"w{branches * i}")], ty=T)
            for j in range(1, branches):
                mm = eg.add("matmul", [act, e, _leaf(eg, f"w{branches * i + j}")], ty=T)
                acc = eg.add("ewadd", [acc, mm], ty=T)
            r = eg.add("ewadd", [acc, e], ty=T)
            e = eg.add("relu", [r], ty=T) if (i - 1) % every == 0 else r
    eg.roots = [e]
    return eg


def tensor_counts(eg: EGraph) -> tuple[int, int]:
    """(e-nodes, e-classes) without literal leaves, which egglog keeps as plain values."""
    n = eg.num_nodes
    live = (eg.nodes[N_FLAGS, :n] & F_DEAD) == 0
    nodes = int(np.sum(live & (eg.nodes[N_OP, :n] != LIT)))
    lit_classes = sum(1 for c in eg.class_ids() if eg.classes[6, c] == T_LIT)
    return nodes, eg.num_classes - lit_classes


def workload_rules(kind: str):
    key = "mlp" if kind.startswith("mlp") else {"mm_chain": "mm", "add_ac": "ac"}[kind]
    return parse_rules(WORKLOAD_RULES[key], f"<{kind} rules>")


def egglog_limits(kind: str, iters: int | None = None, incremental: bool = True) -> Limits:
    """egglog's schedule: every rule in every iteration (no backoff), no node limit, no cycle
    filter; stop at saturation or the iteration cap."""
    return Limits(node_limit=10**12, iter_limit=iters or ITERATION_CAP[kind], k_multi=0,
                  filter_cycles=False, incremental=incremental, chunked_node_limit=False,
                  match_limit=None, budget_share=None)


def run_workload(kind: str, size: int, iters: int | None = None,
                 incremental: bool = True) -> tuple[EGraph, Report]:
    """Build and saturate one workload with egglog's semantics."""
    eg = build_workload(kind, size)
    return eg, saturate(eg, workload_rules(kind), egglog_limits(kind, iters, incremental))
