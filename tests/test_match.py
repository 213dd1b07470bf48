"""The Numba matcher VM against a brute-force Python matcher on random e-graphs."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from eqsat_nb.egraph import EGraph
from eqsat_nb.rules.compile import compile_pattern
from eqsat_nb.rules.match import MatchIndex, search
from eqsat_nb.rules.pattern import Lit, PNode, Var

ACT = (("act", Lit("none")),)


def brute_force(eg: EGraph, pat) -> set[tuple]:
    """Every (root class, substitution) by direct recursion over class members."""
    def match(p, c, subst):
        c = eg.find(c)
        if isinstance(p, Var):
            if p.name in subst:
                return [subst] if subst[p.name] == c else []
            return [{**subst, p.name: c}]
        if isinstance(p, Lit):
            lc = eg.lookup_literal(p.value)
            return [subst] if lc == c else []
        results = []
        kids = [a for _, a in p.attrs] + list(p.operands)
        for n in eg.class_nodes(c):
            if eg.op_name(n) != p.op or len(eg.node_children(n)) != len(kids):
                continue
            partial = [subst]
            for kid, ch in zip(kids, eg.node_children(n)):
                partial = [s2 for s in partial for s2 in match(kid, ch, s)]
            results.extend(partial)
        return results

    out = set()
    for c in eg.class_ids():
        for s in match(pat, int(c), {}):
            out.add((int(c),) + tuple(sorted(s.items())))
    return out


def vm(eg: EGraph, pat) -> set[tuple]:
    prog = compile_pattern(pat, eg.lookup_literal)
    rows = search(prog, MatchIndex(eg))
    return {(int(r[0]),) + tuple(sorted(zip(prog.var_names, (int(x) for x in r[1:]))))
            for r in rows}


def random_egraph(seed: int, n_leaves: int = 6, n_ops: int = 60, n_unions: int = 25) -> EGraph:
    rng = np.random.default_rng(seed)
    eg = EGraph(capacity=16)
    act = eg.add_literal("none")
    relu_act = eg.add_literal("relu")
    classes = [eg.add("input", [eg.add_literal(f"x{i}")]) for i in range(n_leaves)]
    for _ in range(n_ops):
        kind = rng.integers(0, 4)
        a, b = (classes[i] for i in rng.integers(0, len(classes), 2))
        if kind == 0:
            classes.append(eg.add("relu", [a]))
        elif kind == 1:
            classes.append(eg.add("ewadd", [a, b]))
        elif kind == 2:
            classes.append(eg.add("matmul", [act if rng.random() < 0.8 else relu_act, a, b]))
        else:
            classes.append(eg.add("ewmul", [a, b]))
    for _ in range(n_unions):
        a, b = rng.integers(0, len(classes), 2)
        eg.union(classes[a], classes[b])
    eg.rebuild()
    return eg


PATTERNS = [
    PNode("relu", (), (Var("a"),)),
    PNode("ewadd", (), (Var("a"), Var("a"))),
    PNode("ewadd", (), (PNode("relu", (), (Var("a"),)), Var("b"))),
    PNode("matmul", ACT, (PNode("matmul", ACT, (Var("a"), Var("b"))), Var("c"))),
    PNode("matmul", (("act", Var("f")),), (Var("a"), Var("b"))),
    PNode("ewadd", (), (PNode("matmul", ACT, (Var("x"), Var("a"))),
                        PNode("matmul", ACT, (Var("x"), Var("b"))))),
    PNode("ewmul", (), (PNode("ewadd", (), (Var("a"), Var("b"))),
                        PNode("ewadd", (), (Var("b"), Var("a"))))),
    PNode("matmul", (("act", Lit("tanh")),), (Var("a"), Var("b"))),   # literal absent
]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("pi", range(len(PATTERNS)))
def test_vm_equals_brute_force(seed, pi):
    eg = random_egraph(seed)
    assert vm(eg, PATTERNS[pi]) == brute_force(eg, PATTERNS[pi])


def test_matches_found_on_model():
    from eqsat_nb import load
    from eqsat_nb.egraph import graph_to_egraph
    from pathlib import Path
    path = Path(__file__).resolve().parent.parent / "ir_examples" / "nasrnn.tir"
    if not path.exists():
        pytest.skip("examples not generated")
    eg = graph_to_egraph(load(path))
    pat = PNode("ewadd", (), (PNode("matmul", ACT, (Var("x"), Var("a"))),
                              PNode("matmul", ACT, (Var("h"), Var("b")))))
    assert len(vm(eg, pat)) == 40          # 8 combines x 5 cells: ewadd(matmul, matmul)
    assert vm(eg, pat) == brute_force(eg, pat)
    assert vm(eg, PATTERNS[5]) == set()    # x·a + x·b: NasRNN always mixes x and h


def test_output_buffer_growth_and_limit():
    eg = random_egraph(3, n_ops=200, n_unions=0)
    prog = compile_pattern(PATTERNS[0], eg.lookup_literal)
    index = MatchIndex(eg)
    everything = search(prog, index)
    assert len(everything) > 1
    assert len(search(prog, index, limit=1)) == 1
    assert {tuple(r) for r in search(prog, index)} == {tuple(r) for r in everything}


def test_many_nodes_per_class_all_combinations():
    eg = EGraph()
    leaves = [eg.add("input", [eg.add_literal(f"x{i}")]) for i in range(3)]
    relus = [eg.add("relu", [c]) for c in leaves]
    for a, b in itertools.combinations(relus, 2):
        eg.union(a, b)
    top = eg.add("ewadd", [relus[0], relus[1]])
    eg.rebuild()
    got = vm(eg, PNode("ewadd", (), (PNode("relu", (), (Var("a"),)),
                                     PNode("relu", (), (Var("b"),)))))
    assert len(got) == 9 and all(t[0] == eg.find(top) for t in got)
