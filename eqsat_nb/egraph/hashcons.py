"""The hash-cons: an open-addressing (linear probing) table of node ids keyed by the node's
(op, payload, children) columns, with backward-shift deletion (no tombstones); each entry carries
its key's hash (see LOW32); and `add_nodes`,
which looks a node up and creates it (with a new class) only when absent."""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .layout import (C_CONST, C_HEAD, C_PARENT, C_SIZE, C_STAMP, C_TAIL, C_TYPE, C_UHEAD,
                     C_UTAIL, EMPTY, ERR_ADD_TYPE, K_CONST_LEAF, K_INPUT, M_CLASSES,
                     M_EPOCH, M_ERR, M_ERR_A, M_ERR_B, M_NODES, M_USES, MAXA, N_CLS, N_EPOCH, N_FLAGS,
                     N_NCH, N_NEXT, N_OP, N_PAYLOAD, T_UNKNOWN, U_NEXT, U_NODE)
from .unionfind import find_cls


@njit(cache=True, inline="always")
def hash_start(op: int, payload: int) -> np.uint64:
    """The hash of a node key before its children: see key_hash."""
    h = np.uint64(0x9E3779B97F4A7C15) ^ np.uint64(op)
    return (h ^ np.uint64(payload & 0xFFFFFFFF)) * np.uint64(0xBF58476D1CE4E5B9)


@njit(cache=True, inline="always")
def hash_child(h: np.uint64, child: int) -> np.uint64:
    """Mix the next child class into a key hash."""
    h = (h ^ np.uint64(child)) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@njit(cache=True, inline="always")
def hash_end(h: np.uint64) -> np.uint64:
    return h ^ (h >> np.uint64(29))


@njit(cache=True, inline="always")
def key_hash(op: int, payload: int, ch: np.ndarray, nch: int) -> np.uint64:
    """Hash of a node key (op, payload, first nch children)."""
    h = hash_start(op, payload)
    for k in range(nch):
        h = hash_child(h, ch[k])
    return hash_end(h)


@njit(cache=True, inline="always")
def row_key_hash(op: int, payload: int, children: np.ndarray, n: int, nch: int) -> np.uint64:
    """key_hash(op, payload, children[n], nch), reading the row in place."""
    h = hash_start(op, payload)
    for k in range(nch):
        h = hash_child(h, children[n, k])
    return hash_end(h)


@njit(cache=True)
def node_hash(nodes: np.ndarray, children: np.ndarray, n: int) -> np.uint64:
    """Hash of node n's key as it is stored now."""
    return row_key_hash(nodes[N_OP, n], nodes[N_PAYLOAD, n], children, n, nodes[N_NCH, n])


# A table entry packs a node id (low 32 bits) with the low 32 bits of its key hash (high 32 bits):
# probing compares hashes first and reads a node's columns only when they agree, and moving or
# re-inserting an entry (deletion, growth) never reads the node. EMPTY (-1) is no valid entry,
# as node ids are below 2**31.
LOW32 = 0xFFFFFFFF


@njit(cache=True, inline="always")
def _entry_hash(e: np.int64) -> np.int64:
    return (e >> 32) & LOW32


@njit(cache=True, inline="always")
def entry_node(e: np.int64) -> np.int64:
    return e & LOW32


@kernel("i8(i8[::1], i4[:, ::1], i4[:, ::1], i8, i8, i4[::1], i8)")
def find_key(table: np.ndarray, nodes: np.ndarray, children: np.ndarray, op: int, payload: int,
             ch: np.ndarray, nch: int) -> int:
    """The stored node with this (canonical) key, or -1; never inserts."""
    mask = table.size - 1
    h = np.int64(key_hash(op, payload, ch, nch) & np.uint64(LOW32))
    slot = h & mask
    while True:
        e = table[slot]
        if e == EMPTY:
            return -1
        m = entry_node(e)
        if (_entry_hash(e) == h and nodes[N_OP, m] == op and nodes[N_PAYLOAD, m] == payload
                and nodes[N_NCH, m] == nch):
            same = True
            for k in range(nch):
                if children[m, k] != ch[k]:
                    same = False
                    break
            if same:
                return m
        slot = (slot + 1) & mask


@kernel("i8[::1](i8[::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8, i8[::1])")
def leaf_classes(table: np.ndarray, nodes: np.ndarray, children: np.ndarray,
                 classes: np.ndarray, op: int, payloads: np.ndarray) -> np.ndarray:
    """The canonical class of each childless node (op, payload), or -1 where there is none:
    checking many literals at once (a compiled pattern's cache entry is validated per use)."""
    out = np.empty(payloads.size, np.int64)
    ch = np.empty(0, np.int32)
    for i in range(payloads.size):
        m = find_key(table, nodes, children, op, payloads[i], ch, np.int64(0))
        out[i] = -1 if m < 0 else find_cls(classes, nodes[N_CLS, m])
    return out


@njit(cache=True, inline="always")
def _probe(table: np.ndarray, nodes: np.ndarray, children: np.ndarray, op: int, payload: int,
           n: int, h: np.int64) -> tuple[int, int]:
    """Look up the key (op, payload, children row n) whose hash's low 32 bits are h: returns
    (stored node with that key or -1, the slot where the probe stopped: that node's, or the empty
    one where the key belongs). Row n is compared whole (one cache line, unused columns EMPTY)
    and only for entries whose hash agrees."""
    mask = table.size - 1
    slot = h & mask
    while True:
        e = table[slot]
        if e == EMPTY:
            return -1, slot
        if _entry_hash(e) == h:
            m = entry_node(e)
            same = nodes[N_OP, m] == op and nodes[N_PAYLOAD, m] == payload
            for k in range(MAXA):
                if not same:
                    break
                same = children[m, k] == children[n, k]
            if same:
                return m, slot
        slot = (slot + 1) & mask


@njit(cache=True, inline="always")
def lookup_or_insert(table: np.ndarray, nodes: np.ndarray, children: np.ndarray, n: int) -> int:
    """The node with n's key if one is stored; otherwise store n and return -1."""
    h = np.int64(node_hash(nodes, children, np.int64(n)) & np.uint64(LOW32))
    m, slot = _probe(table, nodes, children, nodes[N_OP, n], nodes[N_PAYLOAD, n], n, h)
    if m < 0:
        table[slot] = (h << 32) | n
    return m


@njit(cache=True, inline="always")
def remove(table: np.ndarray, nodes: np.ndarray, children: np.ndarray, n: int) -> bool:
    """Remove node n (hashed by its current columns); shift later entries back to fill the gap."""
    mask = table.size - 1
    want = (np.int64(node_hash(nodes, children, np.int64(n)) & np.uint64(LOW32)) << 32) | n
    i = _entry_hash(want) & mask
    while table[i] != want:
        if table[i] == EMPTY:
            return False
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        e = table[j]
        if e == EMPTY:
            break
        home = _entry_hash(e) & mask
        if (i <= j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        table[i] = e
        i = j
    table[i] = EMPTY
    return True


@kernel("none(i8[::1], i8[::1])")
def rehash(table: np.ndarray, old: np.ndarray) -> None:
    """Move every entry of table `old` into the empty (larger or smaller) `table`: the stored
    hashes give the new slots, so no node is read."""
    mask = table.size - 1
    for i in range(old.size):
        e = old[i]
        if e == EMPTY:
            continue
        slot = _entry_hash(e) & mask
        while table[slot] != EMPTY:
            slot = (slot + 1) & mask
        table[slot] = e


@njit(cache=True, inline="always")
def link_parent(uses: np.ndarray, classes: np.ndarray, children: np.ndarray, n: int, nch: int,
                u: int) -> int:
    """Prepend node n to the parent list of each of its `nch` children (entries from `u` on);
    returns the next free entry."""
    for k in range(nch):
        c = children[n, k]
        uses[U_NODE, u] = n
        uses[U_NEXT, u] = classes[C_UHEAD, c]
        if classes[C_UHEAD, c] == EMPTY:
            classes[C_UTAIL, c] = u
        classes[C_UHEAD, c] = u
        u += 1
    return u


@njit(cache=True, inline="always")
def add_node(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
             table: np.ndarray, meta: np.ndarray, op_kind: np.ndarray, op: int, payload: int,
             kids: np.ndarray, nch: int, tid: int) -> int:
    """Add one node whose children `kids[:nch]` are class ids; returns its canonical class, or
    -1 on a type conflict (meta[M_ERR]). Capacity is the caller's job."""
    n = meta[M_NODES]
    for k in range(nch):                  # n's children row holds the key while it is looked up
        children[n, k] = find_cls(classes, kids[k])
    for k in range(nch, MAXA):
        children[n, k] = EMPTY
    h = np.int64(row_key_hash(op, payload, children, n, nch) & np.uint64(LOW32))
    m, slot = _probe(table, nodes, children, op, payload, n, h)   # the rest of n's row waits
    if m >= 0:
        c = find_cls(classes, nodes[N_CLS, m])
        if tid != T_UNKNOWN and classes[C_TYPE, c] != tid:
            if classes[C_TYPE, c] != T_UNKNOWN:
                meta[M_ERR] = ERR_ADD_TYPE
                meta[M_ERR_A] = c
                meta[M_ERR_B] = tid
                return -1
            classes[C_TYPE, c] = tid
        return c
    # const (only a new node needs it): a const leaf, or an operator over (at least one, all)
    # const children; the same rule as rebuild's _all_children_const
    const = op_kind[op] == K_CONST_LEAF or nch > 0
    for k in range(nch):
        if classes[C_CONST, children[n, k]] == 0:
            const = False
            break
    if op_kind[op] == K_INPUT:
        const = False
    table[slot] = (h << 32) | n
    nodes[N_OP, n] = op
    nodes[N_PAYLOAD, n] = payload
    nodes[N_NCH, n] = nch
    nodes[N_FLAGS, n] = 0
    nodes[N_EPOCH, n] = meta[M_EPOCH]
    nodes[N_CLS, n] = n
    nodes[N_NEXT, n] = EMPTY
    classes[C_PARENT, n] = n
    classes[C_SIZE, n] = 1
    classes[C_HEAD, n] = n
    classes[C_TAIL, n] = n
    classes[C_UHEAD, n] = EMPTY
    classes[C_UTAIL, n] = EMPTY
    classes[C_TYPE, n] = tid
    classes[C_CONST, n] = 1 if const else 0
    classes[C_STAMP, n] = 0
    meta[M_USES] = link_parent(uses, classes, children, n, nch, meta[M_USES])
    meta[M_NODES] = n + 1
    meta[M_CLASSES] += 1
    return n


@kernel(
    "i8(i4[:, ::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1], i8[::1], i1[::1], "
    "i4[::1], i4[::1], i4[:, ::1], i4[::1], i4[::1], i4[::1])")
def add_nodes(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
              table: np.ndarray, meta: np.ndarray, op_kind: np.ndarray, ops: np.ndarray,
              payloads: np.ndarray, kids: np.ndarray, nkids: np.ndarray, types: np.ndarray,
              out: np.ndarray) -> int:
    """Add a batch of nodes; out[i] = canonical class of node i. A child id c < 0 refers to
    out[-c - 1], an earlier node of the same batch, so whole graphs go in one call. Capacity is
    the caller's job. Returns the number of nodes added, or -1 on a type conflict (meta[M_ERR])."""
    before = meta[M_NODES]
    row = np.empty(MAXA, np.int32)
    for i in range(ops.size):
        for k in range(nkids[i]):
            c = kids[i, k]
            row[k] = out[-c - 1] if c < 0 else c
        c = add_node(nodes, children, classes, uses, table, meta, op_kind, ops[i], payloads[i],
                     row, nkids[i], types[i])
        if c < 0:
            return -1
        out[i] = c
    return meta[M_NODES] - before
