"""`check_invariants(eg)`: every structural invariant of the array EGraph after `rebuild`.

Not a test module (no `test_` prefix): the e-graph tests import it. It reads the raw arrays with
plain Python (its own non-compressing `find`), so it does not trust the kernels it checks.

(a) every live (not F_DEAD) node has canonical children and is found in the hash-cons table by
    probing from its hash; the table holds exactly the live nodes;
(b) no two live nodes have equal (op, payload, children) keys (canonical hash-cons, congruence
    closure);
(c) each class member list (C_HEAD / N_NEXT ... C_TAIL, C_SIZE long) holds only nodes whose class
    finds to that class, and every node ever created is on exactly one list;
(d) every live node is on the use (parent) list of the canonical class of each of its children;
(e) the class count (meta M_CLASSES) equals the number of canonical classes;
(f) const analysis is the least fixpoint of: a class is const iff it holds a live node that is a
    `lit`/`weight` leaf with const children, or a non-`input` node with at least one child and all
    children const;
(g) union-find: the parent of a root is itself, find is idempotent, every id finds to a root;
and nothing is left queued for rebuilding.
"""
from __future__ import annotations


from eqsat_nb.egraph.hashcons import node_hash
from eqsat_nb.egraph.layout import (C_CONST, C_HEAD, C_PARENT, C_SIZE, C_TAIL, C_UHEAD, C_UTAIL,
                                    EMPTY, F_DEAD, K_CONST_LEAF, K_INPUT, M_CLASSES, M_NODES,
                                    M_PENDING, M_USES, N_CLS, N_FLAGS, N_NCH, N_NEXT, N_OP,
                                    N_PAYLOAD, U_NEXT, U_NODE)
from eqsat_nb.egraph.store import OP_KIND, EGraph


def _walk(next_of, head: int, limit: int, what: str) -> list[int]:
    """The chain head, next(head), ... up to EMPTY; fails on a cycle or an overlong chain."""
    out = []
    x = head
    while x != EMPTY:
        assert len(out) <= limit, f"{what}: chain longer than {limit} (a cycle?)"
        out.append(x)
        x = int(next_of(x))
    return out


def check_invariants(eg: EGraph) -> None:
    n_nodes = int(eg.meta[M_NODES])
    n_uses = int(eg.meta[M_USES])
    nodes, children, classes, uses, table = eg.nodes, eg.children, eg.classes, eg.uses, eg.table
    parent = classes[C_PARENT]
    assert int(eg.meta[M_PENDING]) == 0, "unions still queued: call rebuild() first"
    assert n_nodes <= nodes.shape[1] and n_uses <= uses.shape[1]

    # (g) union-find
    def find(x: int) -> int:
        seen = 0
        while int(parent[x]) != x:
            x = int(parent[x])
            seen += 1
            assert seen <= n_nodes, "union-find parent chain has a cycle"
        return x

    for x in range(n_nodes):
        assert 0 <= parent[x] < n_nodes, f"class {x}: parent {parent[x]} out of range"
        r = find(x)
        assert int(parent[r]) == r and find(r) == r
        assert eg.find(x) == r, f"EGraph.find({x}) = {eg.find(x)}, want {r}"
        assert eg.find(eg.find(x)) == eg.find(x)
    roots = [x for x in range(n_nodes) if int(parent[x]) == x]

    live = [n for n in range(n_nodes) if not nodes[N_FLAGS, n] & F_DEAD]
    key_of = {}
    for n in live:
        nch = int(nodes[N_NCH, n])
        kids = tuple(int(c) for c in children[n, :nch])
        for c in kids:
            assert 0 <= c < n_nodes, f"node {n}: child {c} out of range"
            # (a) children canonical
            assert find(c) == c, f"live node {n} ({eg.op_name(n)}): child {c} is not canonical"
        assert all(children[n, nch:] == EMPTY), f"node {n}: junk after its {nch} children"
        key_of[n] = (int(nodes[N_OP, n]), int(nodes[N_PAYLOAD, n]), kids)

    # (b) canonical hash-cons: keys of live nodes are unique
    by_key: dict[tuple, int] = {}
    for n, k in key_of.items():
        other = by_key.setdefault(k, n)
        assert other == n, (f"live nodes {other} and {n} have the same key {k} "
                            f"(classes {find(int(nodes[N_CLS, other]))}, "
                            f"{find(int(nodes[N_CLS, n]))}): not congruence closed")

    # (a) hash-cons table: every live node is found by probing from its hash; nothing else is there
    mask = table.size - 1
    assert table.size & mask == 0, "table size is not a power of two"
    occupied = table[table != EMPTY]
    stored = occupied & 0xFFFFFFFF                  # an entry is (key hash << 32) | node id
    for e, n in zip(occupied.tolist(), stored.tolist()):
        assert (e >> 32) & 0xFFFFFFFF == int(node_hash(nodes, children, n)) & 0xFFFFFFFF, (
            f"node {n}: the table entry's hash is not its key's")
    assert len(set(stored.tolist())) == stored.size, "a node is in the table twice"
    assert set(stored.tolist()) == set(live), (
        f"table holds {sorted(set(stored.tolist()) ^ set(live))[:10]}... "
        f"(symmetric difference with the live nodes)")
    for n in live:
        slot = int(node_hash(nodes, children, n)) & mask
        for _ in range(table.size):
            e = int(table[slot])
            assert e != EMPTY, f"live node {n} ({eg.op_name(n)}) is not findable in the table"
            if e & 0xFFFFFFFF == n:
                break
            slot = (slot + 1) & mask
        else:
            raise AssertionError(f"live node {n}: probed the whole table")

    # (c) class member lists
    on_list: dict[int, int] = {}
    for c in roots:
        members = _walk(lambda x: nodes[N_NEXT, x], int(classes[C_HEAD, c]), n_nodes,
                        f"members of class {c}")
        assert members, f"class {c} has an empty member list"
        assert members[-1] == int(classes[C_TAIL, c]), f"class {c}: C_TAIL is not the last member"
        assert len(members) == int(classes[C_SIZE, c]), f"class {c}: C_SIZE != list length"
        for m in members:
            assert m not in on_list, f"node {m} is on the lists of classes {on_list.get(m)} and {c}"
            on_list[m] = c
            assert find(int(nodes[N_CLS, m])) == c, f"node {m} is on class {c}'s list"
        assert any(m in key_of for m in members), f"class {c} has no live node"
    assert sorted(on_list) == list(range(n_nodes)), "some nodes are on no class list"
    for n in live:
        assert on_list[n] == find(int(nodes[N_CLS, n]))
        assert eg.node_class(n) == on_list[n]
        assert n in eg.class_nodes(on_list[n])

    # (d) parent (use) lists
    parents_of: dict[int, set[int]] = {}
    for c in roots:
        entries = _walk(lambda u: uses[U_NEXT, u], int(classes[C_UHEAD, c]), n_uses,
                        f"uses of class {c}")
        if entries:
            assert entries[-1] == int(classes[C_UTAIL, c]), f"class {c}: C_UTAIL is not last"
        parents_of[c] = {int(uses[U_NODE, u]) for u in entries}
    for n, (_, _, kids) in key_of.items():
        for c in kids:
            assert n in parents_of[c], f"live node {n} is missing from the use list of class {c}"

    # (e) class count
    assert int(eg.meta[M_CLASSES]) == len(roots) == eg.num_classes
    assert sorted(eg.class_ids().tolist()) == roots

    # (f) const analysis, recomputed as a least fixpoint over the live nodes
    const: set[int] = set()
    grew = True
    while grew:
        grew = False
        for n, (op, _, kids) in key_of.items():
            c = on_list[n]
            if c in const:
                continue
            kind = OP_KIND[op]
            if kind == K_INPUT or (kind != K_CONST_LEAF and not kids):
                continue
            if all(k in const for k in kids):
                const.add(c)
                grew = True
    for c in roots:
        want = c in const
        assert bool(classes[C_CONST, c]) == want, (
            f"class {c} ({[eg.op_name(m) for m in eg.class_nodes(c)]}): const flag "
            f"{int(classes[C_CONST, c])}, the analysis says {want}")
