"""The e-graph core: differential tests against a reference e-graph, structural invariants after
every rebuild, unit tests of congruence, types, const analysis, snapshots, fingerprints and growth,
Graph <-> EGraph conversion of every example, and the egraph-serialize JSON reader/writer.

`EQSAT_TEST_PROFILE=quick` shrinks the hypothesis example counts (tests/test_boundscheck.py runs
this file that way under NUMBA_BOUNDSCHECK=1).
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egraph_invariants import check_invariants
from egraph_reference import RefEGraph
from eqsat_nb.egraph import EGraph, EGraphError, egraph_to_graph, graph_to_egraph, original_choice
from eqsat_nb.egraph.hashcons import lookup_or_insert, node_hash, remove
from eqsat_nb.egraph.layout import (EMPTY, F_FILTERED, M_USES, MAXA, N_FLAGS, N_NCH, N_OP,
                                    N_PAYLOAD, NODE_COLS, T_LIT, T_UNKNOWN)
from eqsat_nb.egraph.serialize import from_json, read_json, to_json, write_json
from eqsat_nb.egraph.store import EOP_IDS
from eqsat_nb.errors import TirError
from eqsat_nb.ir.builder import GraphBuilder
from eqsat_nb.ir.cse import cse
from eqsat_nb.ir.graph import Graph, TensorType
from eqsat_nb.ir.ops import OPS
from eqsat_nb.ir.parse import load, parse

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "ir_examples").glob("*.tir"))
QUICK = os.environ.get("EQSAT_TEST_PROFILE") == "quick"


def examples(n: int) -> int:
    """Hypothesis example count: `n`, or a fifth of it in the quick profile."""
    return max(5, n // 5) if QUICK else n


PROPERTY = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ====================================================================== differential tests
OP_ARITY = {"relu": 1, "tanh": 1, "ewadd": 2, "matmul": 2, "concat": None}
IDX = st.integers(0, 10_000)           # an index into the classes added so far (taken modulo)

STEP = st.one_of(
    st.tuples(st.just("lit"), st.integers(0, 4)),
    st.tuples(st.just("strlit"), st.sampled_from(["a", "b", "c"])),
    st.tuples(st.just("weight"), st.integers(0, 2)),
    st.tuples(st.just("input"), st.integers(0, 2)),
    st.tuples(st.just("node"), st.sampled_from(sorted(OP_ARITY)), st.lists(IDX, min_size=4,
                                                                           max_size=4),
              st.integers(1, 4)),
    st.tuples(st.just("node"), st.sampled_from(sorted(OP_ARITY)), st.lists(IDX, min_size=4,
                                                                           max_size=4),
              st.integers(1, 4)),
    st.tuples(st.just("union"), IDX, IDX),
    st.tuples(st.just("unions"), st.lists(st.tuples(IDX, IDX), max_size=4)),
    st.tuples(st.just("rebuild")),
    st.tuples(st.just("compact")),
)


class Twin:
    """The array EGraph and the reference, driven by the same operations. `added[i]` is the pair
    of classes the two returned for the i-th added node."""

    def __init__(self, capacity: int = 16) -> None:
        self.eg = EGraph(capacity=capacity)
        self.ref = RefEGraph()
        self.added: list[tuple[int, int]] = []

    def _record(self, a: int, b: int) -> int:
        self.added.append((a, b))
        return len(self.added) - 1

    def lit(self, value) -> int:
        return self._record(self.eg.add_literal(value),
                            self.ref.add("lit", (), (type(value).__name__, value)))

    def node(self, op: str, kids: list[int]) -> int:
        return self._record(self.eg.add(op, [self.added[i][0] for i in kids]),
                            self.ref.add(op, [self.added[i][1] for i in kids]))

    def leaf(self, op: str, name: str) -> int:
        return self.node(op, [self.lit(name)])

    def union(self, i: int, j: int) -> None:
        self.eg.union(self.added[i][0], self.added[j][0])
        self.ref.union(self.added[i][1], self.added[j][1])

    def union_many(self, pairs: list[tuple[int, int]]) -> None:
        self.eg.union_many(np.array([(self.added[i][0], self.added[j][0]) for i, j in pairs],
                                    np.int32).reshape(-1, 2))
        for i, j in pairs:
            self.ref.union(self.added[i][1], self.added[j][1])

    def rebuild_and_check(self) -> None:
        self.eg.rebuild()
        self.ref.rebuild()
        check_invariants(self.eg)
        assert_same_partition([self.eg.find(a) for a, _ in self.added],
                              [self.ref.find(b) for _, b in self.added])
        assert self.eg.num_classes == self.ref.num_classes
        ref_const = self.ref.const_classes()
        for i, (a, b) in enumerate(self.added):
            assert self.eg.is_const(a) == (self.ref.find(b) in ref_const), f"added node {i}"

    def apply(self, step: tuple) -> None:
        kind = step[0]
        n = len(self.added)
        if kind == "lit":
            self.lit(step[1])
        elif kind == "strlit":
            self.lit(step[1])
        elif kind in ("weight", "input"):
            self.leaf(kind, f"{kind[0]}{step[1]}")
        elif kind == "node" and n:
            _, op, picks, k = step
            arity = OP_ARITY[op] or k
            self.node(op, [p % n for p in picks[:arity]])
        elif kind == "union" and n:
            self.union(step[1] % n, step[2] % n)
        elif kind == "unions" and n:
            self.union_many([(i % n, j % n) for i, j in step[1]])
        elif kind == "rebuild":
            self.rebuild_and_check()
        elif kind == "compact":
            self.compact_and_check()

    def compact_and_check(self) -> None:
        """Rebuild, drop the dead nodes, renumber the classes `added` holds, and check again:
        the compacted e-graph must be the same e-graph (and keep working, as later steps use
        it)."""
        self.eg.rebuild()
        before = (self.eg.num_classes, self.eg.num_unions,
                  len(self.eg.live_nodes()))
        new_class_of = self.eg.compact()
        assert (self.eg.num_classes, self.eg.num_unions, self.eg.num_nodes) == before
        self.added = [(int(new_class_of[a]), b) for a, b in self.added]
        self.rebuild_and_check()


def partition(labels: list[int]) -> list[int]:
    """Labels renamed to the index of their first occurrence (equal iff same partition)."""
    first: dict[int, int] = {}
    return [first.setdefault(x, i) for i, x in enumerate(labels)]


def assert_same_partition(got: list[int], want: list[int]) -> None:
    pg, pw = partition(got), partition(want)
    if pg != pw:
        bad = [i for i in range(len(pg)) if pg[i] != pw[i]]
        raise AssertionError(f"class partitions differ at added nodes {bad[:10]}: "
                             f"egraph {pg}, reference {pw}")


@settings(max_examples=examples(200), **PROPERTY)
@given(st.lists(STEP, min_size=20, max_size=80))
def test_random_operations_match_reference(steps):
    t = Twin(capacity=16)
    for step in steps:
        t.apply(step)
    t.rebuild_and_check()


@settings(max_examples=examples(80), **PROPERTY)
@given(st.integers(0, 2**32 - 1))
def test_dense_unions_match_reference(seed):
    """Many nodes over few leaves and many unions: long congruence cascades in one rebuild."""
    rng = random.Random(seed)
    t = Twin(capacity=16)
    for v in range(4):
        t.lit(v)
    for _ in range(rng.randint(10, 60)):
        op = rng.choice(sorted(OP_ARITY))
        t.node(op, [rng.randrange(len(t.added)) for _ in range(OP_ARITY[op] or rng.randint(1, 3))])
    for _ in range(rng.randint(1, 8)):
        t.union(rng.randrange(len(t.added)), rng.randrange(len(t.added)))
    # adds between union and rebuild see stale (non-canonical) keys in the hash-cons
    for _ in range(rng.randint(0, 10)):
        op = rng.choice(sorted(OP_ARITY))
        t.node(op, [rng.randrange(len(t.added)) for _ in range(OP_ARITY[op] or rng.randint(1, 3))])
    t.rebuild_and_check()


# a batch entry: (op, child picks); a pick < 0 is an earlier batch node, >= 0 an existing class
BATCH = st.lists(st.tuples(st.sampled_from(["lit", "relu", "ewadd", "concat"]),
                           st.lists(st.integers(-1000, 1000), min_size=1, max_size=3),
                           st.integers(0, 3)), min_size=1, max_size=40)


@settings(max_examples=examples(100), **PROPERTY)
@given(BATCH, st.booleans())
def test_add_batch_equals_adding_one_by_one(batch, pending_union):
    def base() -> tuple[EGraph, list[int]]:
        eg = EGraph(capacity=16)
        leaves = [eg.add_literal(i) for i in range(3)]
        leaves.append(eg.add("relu", [leaves[0]]))
        leaves.append(eg.add("relu", [leaves[1]]))
        if pending_union:                 # the batch then meets stale keys in the table
            eg.union(leaves[0], leaves[1])
        return eg, leaves

    eg1, existing = base()
    eg2, _ = base()
    ops = np.empty(len(batch), np.int32)
    payloads = np.full(len(batch), -1, np.int32)
    kids = np.full((len(batch), MAXA), EMPTY, np.int32)
    nkids = np.zeros(len(batch), np.int32)
    one_by_one: list[int] = []
    for i, (op, picks, payload) in enumerate(batch):
        ops[i] = EOP_IDS[op]
        if op == "lit":
            payloads[i] = payload
            refs = []
        else:
            arity = {"relu": 1, "ewadd": 2}.get(op, len(picks))
            picks = (picks * 2)[:arity]
            refs = [-(p % i) - 1 if p < 0 and i else existing[p % len(existing)] for p in picks]
        kids[i, : len(refs)] = refs
        nkids[i] = len(refs)
        resolved = [one_by_one[-r - 1] if r < 0 else r for r in refs]
        one_by_one.append(eg2.add(op, resolved, payload=int(payloads[i]), type_id=T_UNKNOWN))
    out = eg1.add_batch(ops, payloads, kids, nkids, np.full(len(batch), T_UNKNOWN, np.int32))
    assert out.tolist() == one_by_one
    for eg in (eg1, eg2):
        eg.rebuild()
        check_invariants(eg)
    n = eg1.num_nodes
    assert n == eg2.num_nodes and eg1.num_classes == eg2.num_classes
    assert np.array_equal(eg1.nodes[:, :n], eg2.nodes[:, :n])
    assert np.array_equal(eg1.children[:n], eg2.children[:n])
    assert eg1.canonical(out).tolist() == eg2.canonical(np.array(one_by_one)).tolist()
    assert eg1.fingerprint() == eg2.fingerprint()


# ====================================================================== the hash-cons table
def probe(table: np.ndarray, nodes: np.ndarray, children: np.ndarray, n: int) -> bool:
    mask = table.size - 1
    slot = int(node_hash(nodes, children, n)) & mask
    while table[slot] != EMPTY:
        if table[slot] & 0xFFFFFFFF == n:         # an entry is (key hash << 32) | node id
            return True
        slot = (slot + 1) & mask
    return False


@settings(max_examples=examples(150), **PROPERTY)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 3),
                          st.lists(st.integers(0, 5), max_size=2).map(tuple)), min_size=1, max_size=31,
                unique=True), st.randoms(use_true_random=False), st.sampled_from([32, 64]))
def test_backward_shift_deletion(keys, rng, size):
    """Insert up to size-1 distinct keys (long probe clusters that wrap around), delete them in a
    random order; after each deletion every remaining key is still findable, none is lost."""
    keys = keys[: size - 1]
    nodes = np.zeros((NODE_COLS, len(keys)), np.int32)
    children = np.full((len(keys), MAXA), EMPTY, np.int32)
    for n, (op, payload, kids) in enumerate(keys):
        nodes[N_OP, n], nodes[N_PAYLOAD, n], nodes[N_NCH, n] = op, payload, len(kids)
        children[n, : len(kids)] = kids
    table = np.full(size, EMPTY, np.int64)
    for n in range(len(keys)):
        assert lookup_or_insert(table, nodes, children, n) == -1
    for n in range(len(keys)):
        assert lookup_or_insert(table, nodes, children, n) == n     # found, not inserted again
    alive = set(range(len(keys)))
    order = list(alive)
    rng.shuffle(order)
    for n in order:
        assert remove(table, nodes, children, n)
        assert not remove(table, nodes, children, n)
        alive.discard(n)
        assert set((table[table != EMPTY] & 0xFFFFFFFF).tolist()) == alive
        for m in alive:
            assert probe(table, nodes, children, m), f"key {keys[m]} lost after deleting {n}"


# ====================================================================== congruence and adding
def leaf(eg: EGraph, name: str, ty: TensorType | None = None, op: str = "input") -> int:
    return eg.add(op, [eg.add_literal(name)], ty=ty)


def test_congruence_through_several_levels():
    eg = EGraph(capacity=16)
    a, b = leaf(eg, "a"), leaf(eg, "b")
    fa, fb = eg.add("relu", [a]), eg.add("relu", [b])
    gfa, gfb = eg.add("tanh", [fa]), eg.add("tanh", [fb])
    ha, hb = eg.add("ewadd", [gfa, fb]), eg.add("ewadd", [gfb, fa])
    other = eg.add("ewadd", [fa, gfa])
    before = eg.num_classes
    assert len({fa, fb, gfa, gfb, ha, hb}) == 6
    eg.union(a, b)
    assert eg.find(fa) != eg.find(fb)             # congruence waits for rebuild
    assert eg.rebuild() > 0
    assert eg.find(a) == eg.find(b)
    assert eg.find(fa) == eg.find(fb)
    assert eg.find(gfa) == eg.find(gfb)
    assert eg.find(ha) == eg.find(hb)
    assert len({eg.find(c) for c in (a, fa, gfa, ha, other)}) == 5
    assert eg.num_classes == before - 4
    assert eg.rebuild() == 0
    check_invariants(eg)
    dead = [n for n in range(eg.num_nodes) if not eg.is_live(n)]
    assert len(dead) == 3                         # relu(b), tanh(relu b), ewadd(...) duplicates
    # the merged classes have one live node each; adding either form finds the class
    assert eg.add("tanh", [fb]) == eg.find(gfa)
    assert eg.add("ewadd", [gfb, fa]) == eg.find(ha)
    assert len(eg.class_nodes(fa)) == 1


def test_union_makes_a_cycle():
    """a = relu(a): a self-loop class; relu(relu(a)) then collapses into it."""
    eg = EGraph(capacity=16)
    a = leaf(eg, "a")
    ra = eg.add("relu", [a])
    rra = eg.add("relu", [ra])
    eg.union(a, ra)
    eg.rebuild()
    assert eg.find(a) == eg.find(ra) == eg.find(rra)
    assert eg.num_classes == 2                    # the class and the literal "a"
    n = eg.class_nodes(a)
    assert sorted(eg.op_name(m) for m in n) == ["input", "relu"]
    relu = next(m for m in n if eg.op_name(m) == "relu")
    assert eg.node_children(relu) == [eg.find(a)]
    check_invariants(eg)


def test_adding_a_duplicate_returns_the_existing_class():
    eg = EGraph(capacity=16)
    x = leaf(eg, "x")
    assert leaf(eg, "x") == x
    y = eg.add("ewadd", [x, x])
    nodes = eg.num_nodes
    assert eg.add("ewadd", [x, x]) == y
    assert eg.add_literal("x") == eg.add_literal("x")
    assert eg.add_literal(1) != eg.add_literal(True) != eg.add_literal(1.0)
    assert eg.add_literal((1, 2)) == eg.add_literal((1, 2)) != eg.add_literal((2, 1))
    assert eg.num_nodes == nodes + 5             # 1, True, 1.0, (1, 2), (2, 1)
    z = leaf(eg, "z")
    eg.union(x, z)
    eg.rebuild()
    assert eg.add("ewadd", [z, x]) == eg.find(y)   # found through canonical children
    assert eg.add("ewadd", [z, z]) == eg.find(y)
    check_invariants(eg)


def test_add_before_rebuild_is_merged_by_rebuild():
    eg = EGraph(capacity=16)
    a, b = leaf(eg, "a"), leaf(eg, "b")
    fa = eg.add("relu", [a])
    eg.union(a, b)
    fb = eg.add("relu", [b])                       # relu(a) is still stored under a stale key
    eg.rebuild()
    assert eg.find(fa) == eg.find(fb)
    check_invariants(eg)


def test_union_many_counts_merges():
    eg = EGraph(capacity=16)
    xs = [eg.add_literal(i) for i in range(6)]
    pairs = np.array([[xs[0], xs[1]], [xs[1], xs[0]], [xs[2], xs[3]], [xs[0], xs[3]],
                      [xs[4], xs[4]]], np.int32)
    assert eg.union_many(pairs) == 3
    assert eg.num_unions == 3
    eg.rebuild()
    assert eg.num_classes == 3
    assert eg.union(xs[0], xs[2]) == eg.find(xs[3])
    check_invariants(eg)


def test_too_many_children_is_an_egraph_error():
    eg = EGraph(capacity=16)
    x = leaf(eg, "x")
    with pytest.raises(EGraphError, match="exceed"):
        eg.add("concat", [x] * (MAXA + 1))


# ====================================================================== types
T23, T32 = TensorType((2, 3)), TensorType((3, 2))


def test_union_of_different_types_raises_naming_both():
    eg = EGraph(capacity=16)
    x, y = leaf(eg, "x", T23), leaf(eg, "y", T32)
    with pytest.raises(EGraphError) as err:
        eg.union(x, y)
    assert "tensor<2x3xf32>" in str(err.value) and "tensor<3x2xf32>" in str(err.value)
    # nothing was merged and the e-graph is still usable
    assert eg.find(x) != eg.find(y)
    eg.rebuild()
    check_invariants(eg)
    z = leaf(eg, "z", T23)
    eg.union(x, z)
    eg.rebuild()
    assert eg.find(x) == eg.find(z) and eg.class_type(x) == T23
    check_invariants(eg)


def test_union_with_an_untyped_class_takes_the_type():
    eg = EGraph(capacity=16)
    x, u = leaf(eg, "x", T23), leaf(eg, "u")
    assert eg.class_type(u) is None
    eg.union(u, x)
    assert eg.class_type(u) == T23
    lit = eg.add_literal(3)
    with pytest.raises(EGraphError, match="literal"):
        eg.union(lit, x)                          # a literal is not a tensor


def test_adding_an_equal_node_of_another_type_raises():
    eg = EGraph(capacity=16)
    x = leaf(eg, "x")
    r = eg.add("relu", [x], ty=T23)
    assert eg.add("relu", [x], ty=T23) == r
    assert eg.add("relu", [x]) == r               # untyped add of a typed node is fine
    with pytest.raises(EGraphError) as err:
        eg.add("relu", [x], ty=T32)
    assert "tensor<2x3xf32>" in str(err.value) and "tensor<3x2xf32>" in str(err.value)
    assert eg.class_type(r) == T23
    u = eg.add("tanh", [x])
    assert eg.add("tanh", [x], ty=T32) == u       # a typed add types an untyped class
    assert eg.class_type(u) == T32
    eg.rebuild()
    check_invariants(eg)


def test_congruence_of_different_types_raises_in_rebuild():
    eg = EGraph(capacity=16)
    a, b = leaf(eg, "a"), leaf(eg, "b")
    eg.add("relu", [a], ty=T23)
    eg.add("relu", [b], ty=T32)
    eg.union(a, b)
    with pytest.raises(EGraphError) as err:
        eg.rebuild()
    assert "tensor<2x3xf32>" in str(err.value) and "tensor<3x2xf32>" in str(err.value)


# ====================================================================== const analysis
def small_graph() -> tuple[Graph, dict[str, str]]:
    b = GraphBuilder("consts")
    x = b.input((2, 4), name="x")
    w = b.weight((2, 4), "w")
    v = b.weight((2, 4), "v")
    wv = b.op("ewadd", w, v, name="wv")
    rw = b.op("relu", wv, name="rw")
    xw = b.op("ewmul", x, rw, name="xw")
    rx = b.op("relu", x, name="rx")
    out = b.op("ewadd", xw, rx, name="out")
    return b.build(out), dict(x=x, w=w, v=v, wv=wv, rw=rw, xw=xw, rx=rx, out=out)


def class_of(eg: EGraph, value: str) -> int:
    return next(c for c, n in eg.names.items() if n == value)


def test_const_analysis_of_a_graph():
    g, v = small_graph()
    eg = graph_to_egraph(g)
    const = {name: eg.is_const(class_of(eg, val)) for name, val in v.items()}
    assert const == dict(x=False, w=True, v=True, wv=True, rw=True, xw=False, rx=False, out=False)
    check_invariants(eg)


def test_const_analysis_one_node_at_a_time():
    eg = EGraph(capacity=16)
    w1, w2 = leaf(eg, "w1", op="weight"), leaf(eg, "w2", op="weight")
    x = leaf(eg, "x")
    assert eg.is_const(eg.add_literal(7)) and eg.is_const(w1) and not eg.is_const(x)
    s = eg.add("ewadd", [w1, w2])
    assert eg.is_const(s)
    assert eg.is_const(eg.add("relu", [s]))
    assert not eg.is_const(eg.add("ewadd", [s, x]))
    assert not eg.is_const(eg.add("opaque", [], payload=eg.lits.literal("?")))   # unknown leaf
    eg.rebuild()
    check_invariants(eg)


def test_union_with_a_const_class_makes_parents_const():
    g, v = small_graph()
    eg = graph_to_egraph(g)
    x, wv = class_of(eg, v["x"]), class_of(eg, v["wv"])
    eg.union(x, wv)                               # "the input equals w + v"
    assert eg.is_const(x)                         # at once: constness is OR-ed
    assert not eg.is_const(class_of(eg, v["rx"]))
    eg.rebuild()
    assert all(eg.is_const(class_of(eg, val)) for val in v.values())
    check_invariants(eg)


def test_const_propagates_through_a_chain():
    eg = EGraph(capacity=16)
    x, w = leaf(eg, "x"), leaf(eg, "w", op="weight")
    chain = [x]
    for i in range(20):
        chain.append(eg.add("relu" if i % 2 else "tanh", [chain[-1]]))
    top = eg.add("ewadd", [chain[-1], w])
    assert not any(eg.is_const(c) for c in chain + [top])
    eg.union(x, w)
    eg.rebuild()
    assert all(eg.is_const(c) for c in chain + [top])
    check_invariants(eg)


# ====================================================================== snapshots
def built(seed: int = 0, n: int = 40) -> EGraph:
    rng = random.Random(seed)
    eg = EGraph(capacity=16)
    cs = [eg.add_literal(i) for i in range(4)] + [leaf(eg, f"x{i}") for i in range(2)]
    for _ in range(n):
        op = rng.choice(sorted(OP_ARITY))
        cs.append(eg.add(op, [rng.choice(cs) for _ in range(OP_ARITY[op] or rng.randint(1, 3))]))
    eg.rebuild()
    return eg


def state(eg: EGraph) -> tuple:
    n, u = eg.num_nodes, int(eg.meta[M_USES])
    return (eg.nodes[:, :n].tobytes(), eg.children[:n].tobytes(), eg.classes[:, :n].tobytes(),
            eg.uses[:, :u].tobytes(), eg.table.tobytes(), eg.meta.tobytes(), list(eg.roots))


def test_snapshot_is_independent():
    eg = built()
    before = state(eg)
    snap = eg.snapshot()
    assert snap.fingerprint() == eg.fingerprint()
    assert snap.num_nodes == eg.num_nodes and snap.num_classes == eg.num_classes
    # change the snapshot: the original is untouched
    ids = eg.class_ids()
    snap.union(int(ids[4]), int(ids[5]))
    snap.add("relu", [int(ids[-1])])
    for i in range(100):                          # past the snapshot's (trimmed) capacity
        snap.add("tanh", [snap.add_literal(1000 + i)])
    snap.roots.append(int(ids[0]))
    snap.rebuild()
    assert state(eg) == before
    assert snap.fingerprint() != eg.fingerprint()
    check_invariants(eg)
    check_invariants(snap)
    # change the original: the snapshot is untouched
    snap_before = state(snap)
    snap_fp = snap.fingerprint()
    eg.union(int(ids[6]), int(ids[7]))
    eg.rebuild()
    eg.add("relu", [int(ids[8])])
    assert state(snap) == snap_before and snap.fingerprint() == snap_fp
    check_invariants(eg)
    check_invariants(snap)


def test_snapshot_with_pending_unions_rebuilds_alike():
    eg = built(1)
    ids = eg.class_ids()
    eg.union(int(ids[4]), int(ids[5]))
    snap = eg.snapshot()
    eg.rebuild()
    snap.rebuild()
    assert snap.fingerprint() == eg.fingerprint()
    check_invariants(snap)


def test_snapshot_of_an_empty_egraph_can_grow():
    snap = EGraph(capacity=1024).snapshot()
    xs = [snap.add_literal(i) for i in range(300)]
    snap.union_many(np.array([[xs[i], xs[i + 1]] for i in range(0, 299)], np.int32))
    snap.rebuild()
    assert snap.num_classes == 1
    check_invariants(snap)


def test_snapshot_of_a_snapshot():
    eg = built(2)
    s1 = eg.snapshot()
    s2 = s1.snapshot()
    ids = eg.class_ids()
    s2.union(int(ids[4]), int(ids[-1]))
    s2.rebuild()
    assert s1.fingerprint() == eg.fingerprint() != s2.fingerprint()
    for g in (eg, s1, s2):
        check_invariants(g)


# ====================================================================== fingerprints
def test_fingerprint_is_deterministic():
    assert built(3).fingerprint() == built(3).fingerprint()
    assert built(3).fingerprint() != built(4).fingerprint()
    g, _ = small_graph()
    assert graph_to_egraph(g).fingerprint() == graph_to_egraph(g).fingerprint()
    for path in EXAMPLES[:3]:
        graph = load(path)
        assert graph_to_egraph(graph).fingerprint() == graph_to_egraph(graph).fingerprint()


def test_fingerprint_sees_unions_and_new_nodes():
    eg = built(5)
    fps = {eg.fingerprint()}
    ids = eg.class_ids()
    eg.union(int(ids[0]), int(ids[1]))
    eg.rebuild()
    fps.add(eg.fingerprint())
    eg.add_literal("new")
    fps.add(eg.fingerprint())
    assert len(fps) == 3


def test_fingerprint_of_different_graphs_differs():
    fps = {}
    for path in EXAMPLES:
        fps[path.name] = graph_to_egraph(load(path)).fingerprint()
    for g in hand_built_graphs():
        fps[g.name] = graph_to_egraph(g).fingerprint()
    assert len(set(fps.values())) == len(fps), fps


# ====================================================================== growth
def test_growth_past_initial_capacity():
    rng = random.Random(7)
    eg = EGraph(capacity=16)
    assert eg.capacity == 16
    cs = [eg.add_literal(i) for i in range(10)]
    for i in range(2000):
        op = rng.choice(sorted(OP_ARITY))
        cs.append(eg.add(op, [rng.choice(cs[-50:]) for _ in range(OP_ARITY[op] or 3)]))
        if i % 500 == 499:
            for _ in range(20):
                eg.union(rng.choice(cs[10:]), rng.choice(cs[10:]))
            eg.rebuild()
            check_invariants(eg)
    assert eg.capacity >= eg.num_nodes > 1000
    eg.rebuild()
    check_invariants(eg)
    # everything is still found: adding any live node again returns its own class
    for n in eg.live_nodes()[::37]:
        n = int(n)
        assert eg.add(eg.op_name(n), eg.node_children(n),
                      payload=int(eg.nodes[N_PAYLOAD, n])) == eg.node_class(n)


def test_table_growth_with_stale_keys():
    """Growing the table while unions are pending rehashes nodes under stale keys; rebuild must
    still find every congruence, exactly as in a twin e-graph that did not grow."""
    def make() -> EGraph:
        eg = built(11, n=60)
        ids = eg.class_ids()
        eg.union_many(np.array([[ids[0], ids[1]], [ids[2], ids[3]], [ids[6], ids[9]]], np.int32))
        return eg

    grown, plain = make(), make()
    old_table = grown.table.size
    grown.reserve(10_000)
    assert grown.table.size > old_table
    grown.rebuild()
    plain.rebuild()
    check_invariants(grown)
    assert grown.fingerprint() == plain.fingerprint()
    assert grown.canonical(np.arange(grown.num_nodes)).tolist() == \
        plain.canonical(np.arange(plain.num_nodes)).tolist()


def test_table_growth_keeps_filtered_nodes():
    """Nodes flagged F_FILTERED (cycle filtering) are live: they stay in the hash-cons when the
    table is rehashed, so adding them again finds them."""
    eg = EGraph(capacity=16)
    x = leaf(eg, "x")
    r = eg.add("relu", [x])
    eg.nodes[N_FLAGS, r] |= F_FILTERED
    eg.reserve(5000)
    assert eg.add("relu", [x]) == r
    check_invariants(eg)


# ====================================================================== Graph <-> EGraph
def hand_built_graphs() -> list[Graph]:
    out = []
    b = GraphBuilder("split_concat")
    x = b.input((1, 4, 6, 6), name="x")
    w = b.weight((4, 4, 3, 3), "w")
    c = b.op("conv2d", x, w, pad="same", act="relu", name="c")
    a, d = b.op("split", c, axis=1, sizes=(1, 3), names=["a", "d"])
    e = b.op("concat", d, a, axis=1, name="e")
    f = b.op("ewadd", e, x, name="f")
    p, q, r = b.op("split", f, axis=2, sizes=(2, 2, 2), names=["p", "q", "r"])
    g = b.op("concat", r, p, q, r, axis=2, name="g")
    out.append(b.build(g, e, a))

    b = GraphBuilder("unused_split_result")
    x = b.input((2, 8), name="x")
    lo, hi = b.op("split", x, axis=1, sizes=(4, 4), names=["lo", "hi"])
    out.append(b.build(b.op("relu", lo, name="y")))

    b = GraphBuilder("multi_out")
    x = b.input((4, 8), name="x")
    y = b.input((8, 3), name="y")
    b.input((4, 8), name="unused_input")
    w = b.weight((8, 8), "w")
    v = b.weight((8, 8), "v")
    wv = b.op("matmul", w, v, name="wv")            # weight-only subexpression
    h = b.op("matmul", x, wv, act="relu", name="h")
    t = b.op("transpose", h, perm=(1, 0), name="t")
    m = b.op("matmul", h, y, name="m")
    out.append(b.build(m, t, x, m))                 # an input and a repeated output

    b = GraphBuilder("attrs")
    x = b.input((1, 2, 8, 8), name="x")
    p1 = b.op("poolmax", x, kernel=(2, 2), stride=(2, 2), name="p1")
    p2 = b.op("poolavg", x, kernel=(2, 2), stride=(2, 2), name="p2")
    s = b.op("scale", p1, value=0.5, name="s")
    s2 = b.op("scale", p2, value=2.0, name="s2")
    r = b.op("reshape", b.op("ewadd", s, s2, name="sum"), shape=(2, 16), name="r")
    out.append(b.build(b.op("softmax", r, name="sm")))
    return out


def expected_class_count(g: Graph) -> int:
    """One class per distinct value (after hash-consing, i.e. CSE), one tuple class per split,
    one per distinct literal (attributes; input name/shape/dtype; projection indices)."""
    g = cse(g)
    lits = set()

    def lit(v) -> None:
        lits.add((type(v).__name__, v))

    values = len(g.inputs)
    for name, ty in g.inputs:
        lit(name[1:]), lit(ty.shape), lit(ty.dtype)
    for node in g.nodes:
        values += len(node.results)
        for _, v in node.attrs:
            lit(v)
        if OPS[node.op].multi_result:
            values += 1
            for i in range(len(node.results)):
                lit(i)
    return values + len(lits)


def roundtrip_cases() -> list:
    return ([pytest.param(p, id=p.stem) for p in EXAMPLES]
            + [pytest.param(g, id=g.name) for g in hand_built_graphs()])


def as_graph(case) -> Graph:
    return load(case) if isinstance(case, Path) else case


@pytest.mark.parametrize("case", roundtrip_cases())
def test_graph_egraph_graph_roundtrip(case):
    g = as_graph(case)
    eg = graph_to_egraph(g)
    back = egraph_to_graph(eg, original_choice(eg))
    assert back == cse(g)
    if cse(g) == g:
        assert back == g
    assert eg.num_classes == expected_class_count(g)
    assert eg.num_nodes == eg.num_classes            # nothing merged: one node per class
    env = cse(g).types()
    assert [eg.class_type(r) for r in eg.roots] == [env[v] for v in cse(g).outputs]
    assert [name for name, _ in eg.inputs] == [name for name, _ in g.inputs]
    for name, c in eg.inputs:
        assert eg.class_type(c) == dict(g.inputs)[name] and not eg.is_const(c)
    check_invariants(eg)


def test_roundtrip_of_hand_built_graphs_is_exact():
    for g in hand_built_graphs():
        assert cse(g) == g
        eg = graph_to_egraph(g)
        assert egraph_to_graph(eg, original_choice(eg)) == g, g.name


def test_compact_keeps_roots_inputs_and_names_and_leaves_snapshots_alone():
    """Dead nodes beside a real graph: after compaction the original graph still comes back
    (roots, inputs and SSA names renumbered), a snapshot taken before still reads its own ids,
    and only live nodes remain."""
    for g in hand_built_graphs():
        eg = graph_to_egraph(g)
        extra = [eg.add("input", [eg.add_literal(f"extra{i}"), eg.add_literal((3, 3)),
                                  eg.add_literal("f32")]) for i in range(2)]
        for x in extra:
            eg.add("relu", [x])
        eg.union(*extra)
        eg.rebuild()
        assert eg.num_nodes > len(eg.live_nodes())
        before = eg.snapshot()
        new_class_of = eg.compact()
        assert eg.num_nodes == len(eg.live_nodes()) == len(before.live_nodes())
        check_invariants(eg)
        assert egraph_to_graph(eg, original_choice(eg)) == g, g.name
        assert egraph_to_graph(before, original_choice(before)) == g, g.name
        assert eg.roots == [int(new_class_of[r]) for r in before.roots]
        assert eg.find(int(new_class_of[extra[0]])) == eg.find(int(new_class_of[extra[1]]))


def test_compact_needs_a_rebuilt_egraph():
    eg = EGraph()
    a, b = eg.add_literal(1), eg.add_literal(2)
    eg.union(a, b)
    with pytest.raises(EGraphError, match="rebuilt"):
        eg.compact()


def test_roundtrip_merges_repeated_computations():
    text = """\
func @dup(%x: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>) {
  %a = relu(%x)
  %b = relu(%x)
  %c = ewadd(%a, %b)
  %d = ewadd(%b, %a)
  return %c, %d
}
"""
    g = parse(text)
    eg = graph_to_egraph(g)
    assert eg.find(eg.roots[0]) == eg.find(eg.roots[1])
    back = egraph_to_graph(eg, original_choice(eg))
    assert back == cse(g) != g
    assert [n.op for n in back.nodes] == ["relu", "ewadd"]
    assert eg.num_classes == expected_class_count(g)


def test_extracting_a_chosen_variant():
    """After a union, choosing the other node of the class changes the extracted graph."""
    b = GraphBuilder("pick")
    x = b.input((2, 2), name="x")
    y = b.op("relu", b.op("relu", x, name="r1"), name="r2")
    g = b.build(y)
    eg = graph_to_egraph(g)
    r1, r2 = class_of(eg, "%r1"), class_of(eg, "%r2")
    eg.union(r1, r2)                               # relu(relu x) = relu x
    eg.rebuild()
    choice = original_choice(eg)
    nodes = eg.class_nodes(r2)
    assert len(nodes) == 2
    outer = next(n for n in nodes if eg.node_children(n) == [eg.find(r1)])
    choice[eg.find(r2)] = min(set(nodes) - {outer})
    back = egraph_to_graph(eg, choice)
    assert [n.op for n in back.nodes] == ["relu"]
    choice[eg.find(r2)] = outer                    # the self-loop: no graph
    with pytest.raises(EGraphError, match="cycle"):
        egraph_to_graph(eg, choice)


# ====================================================================== JSON (egraph-serialize)
def json_cases() -> list:
    return ([pytest.param(p, id=p.stem) for p in EXAMPLES]
            + [pytest.param(g, id=g.name) for g in hand_built_graphs()])


@pytest.mark.parametrize("case", json_cases())
def test_json_roundtrip_gives_back_the_graph(case):
    g = as_graph(case)
    eg = graph_to_egraph(g)
    data = json.loads(json.dumps(to_json(eg)))
    eg2, costs = from_json(data)
    check_invariants(eg2)
    assert eg2.num_classes == eg.num_classes
    assert egraph_to_graph(eg2, original_choice(eg2)) == cse(g)
    assert costs.shape == (eg2.num_nodes,)


def test_json_has_the_egraph_serialize_shape():
    g = hand_built_graphs()[0]
    eg = graph_to_egraph(g)
    data = to_json(eg)
    assert set(data) >= {"nodes", "root_eclasses", "class_data"}
    nodes = data["nodes"]
    assert len(nodes) == len(eg.live_nodes())
    for nid, nd in nodes.items():
        assert set(nd) >= {"op", "children", "eclass", "cost"}
        n = int(nid)
        assert nd["eclass"] == str(eg.node_class(n))
        assert isinstance(nd["cost"], float)
        kids = eg.node_children(n)
        assert len(nd["children"]) == len(kids)
        for child_id, child_class in zip(nd["children"], kids):
            assert child_id in nodes
            assert nodes[child_id]["eclass"] == str(eg.find(child_class))
        if eg.op_name(n) != "lit":
            assert nd["op"] == eg.op_name(n)
    assert data["root_eclasses"] == [str(eg.find(r)) for r in eg.roots]
    assert {nd["eclass"] for nd in nodes.values()} == {str(c) for c in eg.class_ids()}
    assert all(data["class_data"][str(c)].get("type") == str(eg.class_type(c))
               for _, c in eg.inputs)


def test_json_keeps_merged_classes_and_costs(tmp_path):
    eg = built(21, n=50)
    ids = eg.class_ids()
    eg.union_many(np.array([[ids[6], ids[7]], [ids[8], ids[12]], [ids[0], ids[1]]], np.int32))
    eg.rebuild()
    eg.roots = [int(ids[-1]), int(ids[6])]
    costs = np.arange(eg.num_nodes, dtype=np.float64) + 0.5
    path = tmp_path / "eg.json"
    write_json(eg, path, costs)
    eg2, costs2 = read_json(path)
    check_invariants(eg2)
    assert eg2.num_classes == eg.num_classes
    assert len(eg2.live_nodes()) == len(eg.live_nodes())
    assert class_shapes(eg2) == class_shapes(eg)
    # each node's cost (its id + 0.5 in eg) names its original: same op, same class structure
    orig = {n: int(costs2[n] - 0.5) for n in eg2.live_nodes().tolist()}
    assert sorted(orig.values()) == eg.live_nodes().tolist()
    cls = {eg2.node_class(n): eg.node_class(m) for n, m in orig.items()}
    assert len(set(cls.values())) == len(cls) == eg.num_classes    # a bijection of classes
    for n, m in orig.items():
        assert eg2.op_name(n) == eg.op_name(m)
        assert cls[eg2.node_class(n)] == eg.node_class(m)
        assert [cls[c] for c in eg2.node_children(n)] == eg.node_children(m)
    assert [len(eg2.class_nodes(r)) for r in eg2.roots] == [len(eg.class_nodes(r)) for r in eg.roots]


def class_shapes(eg: EGraph) -> list:
    """The class structure up to renaming: per class, its nodes' ops and child-class sizes."""
    def node_sig(n: int) -> tuple:
        op = eg.op_name(n)
        if op == "lit":
            op = repr(eg.literal_value(n))
        return op, tuple(len(eg.class_nodes(c)) for c in eg.node_children(n))
    return sorted(sorted(node_sig(n) for n in eg.class_nodes(c)) for c in eg.class_ids())


CYCLIC = {
    "nodes": {
        "n0": {"op": "relu", "children": ["n1"], "eclass": "A", "cost": 1.0},
        "n1": {"op": "tanh", "children": ["n0"], "eclass": "B", "cost": 2.0},
        "n2": {"op": "leaf", "children": [], "eclass": "B", "cost": 3.0},
        "n3": {"op": "ewadd", "children": ["n0", "n2"], "eclass": "C", "cost": 4.0},
        "n4": {"op": "ewadd", "children": ["n3", "n3"], "eclass": "C", "cost": 5.0},
    },
    "root_eclasses": ["C"],
}


def test_cyclic_json_reads_and_keeps_its_classes():
    """A class reachable only through a cycle (A = relu B, B = tanh A | leaf)."""
    eg, costs = from_json(json.loads(json.dumps(CYCLIC)))
    check_invariants(eg)
    assert eg.num_classes == 3
    (root,) = eg.roots
    by_op = {eg.op_name(n) if eg.op_name(n) != "opaque" else eg.literal_value(n): n
             for n in eg.live_nodes().tolist()}
    assert set(by_op) == {"relu", "tanh", "leaf", "ewadd"}
    a, b = eg.node_class(by_op["relu"]), eg.node_class(by_op["tanh"])
    assert eg.node_class(by_op["leaf"]) == b and len({a, b, root}) == 3
    assert eg.node_children(by_op["relu"]) == [b]
    assert eg.node_children(by_op["tanh"]) == [a]
    assert sorted(len(eg.class_nodes(c)) for c in (a, b, root)) == [1, 2, 2]
    assert sorted(costs[eg.live_nodes()].tolist()) == [1.0, 2.0, 3.0, 4.0, 5.0]
    # written out and read again: the same structure
    eg2, _ = from_json(to_json(eg))
    check_invariants(eg2)
    assert class_shapes(eg2) == class_shapes(eg)
    # the class without a cycle-free choice in a: relu -> tanh -> relu
    choice = original_choice(eg)
    choice[b] = by_op["tanh"]
    with pytest.raises(EGraphError, match="cycle"):
        eg.roots = [a]
        egraph_to_graph(eg, choice)


PURE_CYCLE = {       # no class has a finite term: the reader needs a placeholder to start
    "nodes": {
        "0": {"op": "relu", "children": ["1"], "eclass": "A", "cost": 1.0},
        "1": {"op": "tanh", "children": ["0"], "eclass": "B", "cost": 2.0},
        "2": {"op": "ewadd", "children": ["0", "1"], "eclass": "C", "cost": 3.0},
        "3": {"op": "relu", "children": ["2"], "eclass": "C", "cost": 4.0},
    },
    "root_eclasses": ["C"],
    "class_data": {"A": {"type": "tensor<2x2xf32>"}},
}


def test_pure_cycle_json_reads_and_keeps_its_classes():
    eg, costs = from_json(PURE_CYCLE)
    check_invariants(eg)                           # the placeholder is dead and out of the table
    live = eg.live_nodes().tolist()
    assert len(live) == 4 and eg.num_classes == 3
    by_cost = {float(costs[n]): n for n in live}
    relu_a, tanh_b, add_c, relu_c = (by_cost[c] for c in (1.0, 2.0, 3.0, 4.0))
    a, b, c = (eg.node_class(n) for n in (relu_a, tanh_b, add_c))
    assert len({a, b, c}) == 3 and eg.node_class(relu_c) == c and eg.roots == [c]
    assert eg.node_children(relu_a) == [b] and eg.node_children(tanh_b) == [a]
    assert eg.node_children(add_c) == [a, b] and eg.node_children(relu_c) == [c]
    assert eg.class_type(a) == TensorType((2, 2)) and eg.class_type(b) is None
    assert all(eg.op_name(n) != "opaque" for n in live)
    eg2, _ = from_json(to_json(eg))
    check_invariants(eg2)
    assert class_shapes(eg2) == class_shapes(eg)
    with pytest.raises(EGraphError, match="cycle"):
        egraph_to_graph(eg, original_choice(eg))


MALFORMED = {
    "list": [1, 2],
    "no_nodes": {"root_eclasses": []},
    "nodes_not_object": {"nodes": 5, "root_eclasses": []},
    "nodes_list": {"nodes": [1, 2], "root_eclasses": []},
    "node_not_object": {"nodes": {"0": "relu"}, "root_eclasses": []},
    "node_without_eclass": {"nodes": {"0": {"op": "relu", "children": []}}, "root_eclasses": []},
    "children_not_list": {"nodes": {"0": {"op": "x", "children": 5, "eclass": "A"}},
                          "root_eclasses": []},
    "dangling_child": {"nodes": {"0": {"op": "relu", "children": ["9"], "eclass": "A"}},
                       "root_eclasses": ["A"]},
    "root_without_nodes": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"}},
                           "root_eclasses": ["B"]},
    "bad_type": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"}},
                 "root_eclasses": ["A"], "class_data": {"A": {"type": "tensor<2xq7>"}}},
    "bad_literal": {"nodes": {"0": {"op": "[1, ", "children": [], "eclass": "A"}},
                    "root_eclasses": ["A"], "class_data": {"A": {"kind": "lit"}}},
    "class_data_not_object": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"}},
                              "root_eclasses": ["A"], "class_data": {"A": "f32"}},
    "inputs_malformed": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"}},
                         "root_eclasses": ["A"], "inputs": ["%x"]},
    "roots_not_list": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"}},
                       "root_eclasses": 7},
    "bad_cost": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A", "cost": "cheap"}},
                 "root_eclasses": ["A"]},
    "too_many_children": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"},
                                    "1": {"op": "concat", "children": ["0"] * (MAXA + 1),
                                          "eclass": "B"}}, "root_eclasses": ["B"]},
    "type_conflict": {"nodes": {"0": {"op": "x", "children": [], "eclass": "A"},
                                "1": {"op": "relu", "children": ["0"], "eclass": "B"},
                                "2": {"op": "relu", "children": ["0"], "eclass": "C"}},
                      "root_eclasses": ["B"],
                      "class_data": {"B": {"type": "tensor<2xf32>"},
                                     "C": {"type": "tensor<3xf32>"}}},
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_json_is_a_tir_error(name, tmp_path):
    with pytest.raises(TirError):
        from_json(MALFORMED[name])
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(MALFORMED[name]))
    with pytest.raises(TirError) as err:
        read_json(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("text", ["", "{", "{\"nodes\": }", "nul", "\x00"])
def test_invalid_json_text_is_a_tir_error(text, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TirError, match="invalid JSON"):
        read_json(path)


def test_missing_json_file_is_a_tir_error(tmp_path):
    with pytest.raises(TirError, match="cannot read"):
        read_json(tmp_path / "absent.json")


@pytest.mark.skipif(os.environ.get("NUMBA_BOUNDSCHECK") != "1", reason="NUMBA_BOUNDSCHECK=1 only")
def test_boundscheck_is_active():
    """Under tests/test_boundscheck.py the kernels really were compiled with bounds checks."""
    from eqsat_nb.egraph.unionfind import find
    with pytest.raises(IndexError):
        find(np.arange(4, dtype=np.int32), 10_000)


def test_describe_type():
    eg = EGraph(capacity=16)
    assert eg.describe_type(T_LIT) == "a literal" and eg.describe_type(T_UNKNOWN) == "untyped"
    assert eg.describe_type(eg.type_id(T23)) == "tensor<2x3xf32>"


def test_literal_classes_match_lookup_literal():
    """The batched literal look-up (validating cached compiled patterns) answers as the
    one-at-a-time one, -1 for a literal the e-graph lacks, after merges too."""
    eg = EGraph()
    values = [3, (1, 2), "same", 2.5]
    for v in values:
        eg.add_literal(v)
    absent = eg.lits.literal("absent")            # interned, but no node in this e-graph
    ids = np.array([eg.lits.literal(v) for v in values] + [absent], np.int64)
    want = [eg.lookup_literal(v) for v in values] + [-1]
    assert eg.literal_classes(ids).tolist() == want
    eg.union(eg.lookup_literal(3), eg.lookup_literal(2.5))
    eg.rebuild()
    assert eg.literal_classes(ids).tolist() == [eg.lookup_literal(v) for v in values] + [-1]
