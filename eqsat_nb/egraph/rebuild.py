"""Union and egg-style deferred rebuilding.

`union` merges two classes at once in the union-find (by size), splices their member and parent
lists, merges the analysis (types must agree, constness is OR-ed) and queues the new root.
`rebuild` then restores the invariants round by round: every parent of a queued class is taken out
of the hash-cons, re-canonicalized and put back; a collision is a congruence, so the two classes are
merged (queued for the next round) and the duplicate node is marked dead.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .hashcons import LOW32, hash_child, hash_end, hash_start, lookup_or_insert, remove
from .layout import (C_CONST, C_HEAD, C_PARENT, C_SIZE, C_STAMP, C_TAIL, C_TYPE, C_UHEAD,
                     C_UTAIL, EMPTY, ERR_TYPE_MISMATCH, F_DEAD, K_INPUT, M_CLASSES, M_ERR,
                     M_DEAD, M_NODES, M_EPOCH, M_ERR_A, M_ERR_B, M_PENDING, M_STAMP, M_UNIONS, N_CLS,
                     N_EPOCH, N_FLAGS,
                     N_NCH, N_NEXT, N_OP, N_PAYLOAD, T_UNKNOWN, U_NEXT, U_NODE)
from .prefetch import prefetch
from .unionfind import find, find_cls, root

PF_AHEAD = 16             # nodes the one-pass rebuild prefetches its hash-cons look-ups ahead


@njit(cache=True, inline="always")
def union(nodes: np.ndarray, classes: np.ndarray, uses: np.ndarray, pending: np.ndarray,
          meta: np.ndarray, a: int, b: int) -> int:
    """Merge the classes of a and b; returns the new root, or -1 on a type conflict."""
    a = find_cls(classes, a)
    b = find_cls(classes, b)
    if a == b:
        return a
    ta, tb = classes[C_TYPE, a], classes[C_TYPE, b]
    if ta != tb and ta != T_UNKNOWN and tb != T_UNKNOWN:
        meta[M_ERR] = ERR_TYPE_MISMATCH
        meta[M_ERR_A] = a
        meta[M_ERR_B] = b
        return -1
    if classes[C_SIZE, a] < classes[C_SIZE, b]:
        a, b = b, a
    classes[C_PARENT, b] = a
    classes[C_SIZE, a] += classes[C_SIZE, b]
    x = classes[C_HEAD, b]                # b's nodes now belong to a: their rows changed
    while x != EMPTY:
        nodes[N_EPOCH, x] = meta[M_EPOCH]
        x = nodes[N_NEXT, x]
    nodes[N_NEXT, classes[C_TAIL, a]] = classes[C_HEAD, b]
    classes[C_TAIL, a] = classes[C_TAIL, b]
    if classes[C_UHEAD, b] != EMPTY:
        if classes[C_UHEAD, a] == EMPTY:
            classes[C_UHEAD, a] = classes[C_UHEAD, b]
        else:
            uses[U_NEXT, classes[C_UTAIL, a]] = classes[C_UHEAD, b]
        classes[C_UTAIL, a] = classes[C_UTAIL, b]
    if classes[C_TYPE, a] == T_UNKNOWN:
        classes[C_TYPE, a] = tb if ta == T_UNKNOWN else ta
    classes[C_CONST, a] = classes[C_CONST, a] | classes[C_CONST, b]
    pending[meta[M_PENDING]] = a
    meta[M_PENDING] += 1
    meta[M_CLASSES] -= 1
    meta[M_UNIONS] += 1
    return a


@kernel("i8(i4[:, ::1], i4[:, ::1], i4[:, ::1], i4[::1], i8[::1], i4[:, ::1])", _nrt=False)
def union_pairs(nodes: np.ndarray, classes: np.ndarray, uses: np.ndarray, pending: np.ndarray,
                meta: np.ndarray, pairs: np.ndarray) -> int:
    """Union every row (a, b) of `pairs`; returns how many merged, -1 on a type conflict."""
    merged = 0
    parent = classes[C_PARENT]
    for i in range(pairs.shape[0]):
        if find(parent, pairs[i, 0]) == find(parent, pairs[i, 1]):
            continue
        if union(nodes, classes, uses, pending, meta, pairs[i, 0], pairs[i, 1]) < 0:
            return -1
        merged += 1
    return merged


@njit(cache=True, _nrt=False)
def _all_children_const(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray,
                        op_kind: np.ndarray, p: int) -> bool:
    if op_kind[nodes[N_OP, p]] == K_INPUT or nodes[N_NCH, p] == 0:
        return False
    for k in range(nodes[N_NCH, p]):
        if classes[C_CONST, find_cls(classes, children[p, k])] == 0:
            return False
    return True


@njit(cache=True, inline="always")
def _settle(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
            table: np.ndarray, pending: np.ndarray, meta: np.ndarray, op_kind: np.ndarray,
            p: int, rehash: bool) -> bool:
    """After p's children were re-canonicalized: (if `rehash`) put p back in the hash-cons, where
    a congruent node kills p and merges the two classes; then queue p's class if p makes it
    constant. False on a type conflict."""
    if rehash:
        m = lookup_or_insert(table, nodes, children, p)
        if m >= 0:
            nodes[N_FLAGS, p] |= F_DEAD
            meta[M_DEAD] += 1
            if union(nodes, classes, uses, pending, meta, nodes[N_CLS, m], nodes[N_CLS, p]) < 0:
                return False
    pc = find_cls(classes, nodes[N_CLS, p])
    if classes[C_CONST, pc] == 0 and _all_children_const(nodes, children, classes, op_kind, np.int64(p)):
        classes[C_CONST, pc] = 1
        pending[meta[M_PENDING]] = pc
        meta[M_PENDING] += 1
    return True


@njit(cache=True, _nrt=False)
def _repair(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
            table: np.ndarray, pending: np.ndarray, meta: np.ndarray, op_kind: np.ndarray,
            c: int) -> bool:
    parent = classes[C_PARENT]
    u = classes[C_UHEAD, c]
    prev = EMPTY
    while u != EMPTY:
        p = uses[U_NODE, u]
        if nodes[N_FLAGS, p] & F_DEAD:
            # unlink the dead parent's entry so later repairs do not walk it again. A tail entry
            # stays (a class's C_UTAIL may name it); an entry with a predecessor is no class's
            # head, and the first entry is unlinked only while it is still c's head
            nxt = uses[U_NEXT, u]
            if nxt != EMPTY:
                if prev != EMPTY:
                    uses[U_NEXT, prev] = nxt
                    u = nxt
                    continue
                if parent[c] == c and classes[C_UHEAD, c] == u:
                    classes[C_UHEAD, c] = nxt
                    u = nxt
                    continue
            prev = u
            u = nxt
            continue
        prev = u
        u = uses[U_NEXT, u]
        nch = nodes[N_NCH, p]
        stale = False
        for k in range(nch):
            if parent[children[p, k]] != children[p, k]:
                stale = True
                break
        if stale:
            # only a node whose key changed moves in the hash-cons; an unchanged one is still
            # stored under its key, and a changed node congruent to it finds it there
            remove(table, nodes, children, p)
            for k in range(nch):
                kid = find(parent, children[p, k])
                if kid != children[p, k]:
                    children[p, k] = kid
            nodes[N_EPOCH, p] = meta[M_EPOCH]
        if not _settle(nodes, children, classes, uses, table, pending, meta, op_kind, p, stale):
            return False
    return True


@njit(cache=True, _nrt=False)
def _recanonicalize_all(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray,
                        uses: np.ndarray, table: np.ndarray, pending: np.ndarray, meta: np.ndarray,
                        op_kind: np.ndarray) -> bool:
    """Re-canonicalize every live node in one pass over a cleared hash-cons (what `_repair` does
    to the parents of queued classes, for all nodes at once). When a large part of the e-graph
    was merged this is cheaper than walking parent lists: one sequential scan, no deletions.
    Unions found here are queued for the worklist as usual."""
    parent = classes[C_PARENT]
    table[:] = EMPTY
    mask = table.size - 1
    n = meta[M_NODES]
    for p in range(n):
        q = p + PF_AHEAD              # prefetch the slot where node q's look-up will start
        if q < n and not nodes[N_FLAGS, q] & F_DEAD:
            h = hash_start(nodes[N_OP, q], nodes[N_PAYLOAD, q])
            for k in range(nodes[N_NCH, q]):
                h = hash_child(h, root(parent, children[q, k]))
            h = np.int64(hash_end(h) & np.uint64(LOW32))
            prefetch(table, h & mask)
        if nodes[N_FLAGS, p] & F_DEAD:
            continue
        stale = False
        for k in range(nodes[N_NCH, p]):
            kid = find(parent, children[p, k])
            if kid != children[p, k]:
                children[p, k] = kid
                stale = True
        if stale:
            nodes[N_EPOCH, p] = meta[M_EPOCH]
        if not _settle(nodes, children, classes, uses, table, pending, meta, op_kind, p, True):
            return False
    return True


@kernel(
    "i8(i4[:, ::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1], i4[::1], i8[::1], "
        "i1[::1])",
        _nrt=False)
def rebuild(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
            table: np.ndarray, pending: np.ndarray, meta: np.ndarray, op_kind: np.ndarray) -> int:
    """Restore congruence closure and a canonical hash-cons; returns the number of repairs,
    or -1 on a type conflict (meta[M_ERR] says which classes)."""
    parent = classes[C_PARENT]
    start = 0
    repairs = 0
    if 2 * meta[M_PENDING] >= meta[M_NODES] - meta[M_DEAD]:
        # the pass costs a scan of every live node, the worklist the parents of every merged
        # class: with unions queued for half as many classes as there are live nodes, the pass
        # is cheaper (measured: it loses below about a third, as on mlp, where merged classes
        # have few parents). After it every node is canonical for the unions queued so far:
        # only those the pass queues are left for the worklist
        start = meta[M_PENDING]
        if not _recanonicalize_all(nodes, children, classes, uses, table, pending, meta, op_kind):
            return -1
    while start < meta[M_PENDING]:
        end = meta[M_PENDING]
        meta[M_STAMP] += 1
        stamp = meta[M_STAMP]
        for i in range(start, end):
            c = find(parent, pending[i])
            if classes[C_STAMP, c] == stamp:
                continue
            classes[C_STAMP, c] = stamp
            if not _repair(nodes, children, classes, uses, table, pending, meta, op_kind, c):
                return -1
            repairs += 1
        start = end
    meta[M_PENDING] = 0
    return repairs
