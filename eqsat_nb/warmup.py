"""Load (or compile, the first time) every Numba kernel of the engine by using each once."""
from __future__ import annotations


def warm_up() -> None:
    """Graph → e-graph, a short saturation with a single and a multi-pattern rule (matching,
    joining, application, shape inference, cycle filtering, rebuild), snapshot, fingerprint,
    and extraction of the original graph back out."""
    from .egraph import egraph_to_graph, graph_to_egraph, original_choice, warm_up as warm_core
    from .ir.builder import GraphBuilder
    from .rules.parse import parse_rules
    from .search.saturate import Limits, saturate

    warm_core()
    b = GraphBuilder("warm")
    x = b.input((2, 2))
    w1, w2 = b.weight((2, 2), "w1"), b.weight((2, 2), "w2")
    y = b.op("ewadd", b.op("matmul", x, w1), b.op("matmul", x, w2))
    graph = b.build(b.op("relu", y))
    rules = parse_rules("""
rule comm: (ewadd ?a ?b) => (ewadd ?b ?a)
rule merge: (matmul ?x ?a), (matmul ?x ?b)
    => (split_0 (split (matmul ?x (concat ?a ?b {axis = 1})) {axis = 1, sizes = [dim(?a, 1), dim(?b, 1)]})),
       (split_1 (split (matmul ?x (concat ?a ?b {axis = 1})) {axis = 1, sizes = [dim(?a, 1), dim(?b, 1)]}))
""", "<warm-up>")
    eg = graph_to_egraph(graph)
    saturate(eg, rules, Limits(iter_limit=2))
    eg.snapshot().fingerprint()
    egraph_to_graph(eg, original_choice(eg))
