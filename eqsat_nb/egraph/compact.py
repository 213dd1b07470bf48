"""Compaction: drop the dead nodes (congruent duplicates that rebuild marked F_DEAD) and renumber.

A saturation iteration that merges much creates many nodes that die in the next rebuild (mm_chain
80 ends with 4.4 M nodes of which 85 k live). Dead rows still cost in every column scan, in the
index spread of random accesses (cache misses in apply and rebuild) and in array growth, so the
saturation loop compacts when most nodes are dead.

Live nodes keep their relative order (new id = rank among live nodes), so "older" and "newer" mean
what they meant before. A class is named by one of its live nodes: its old name if that node is
live, else its oldest live member. Member lists, parent (use) lists and the hash-cons are rebuilt
from the live nodes; every other column is copied.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .hashcons import link_parent, lookup_or_insert
from .layout import (C_HEAD, C_PARENT, C_SIZE, C_TAIL, C_UHEAD, C_UTAIL, CLASS_COLS, EMPTY, F_DEAD,
                     M_DEAD, M_NODES, M_USES, MAXA, N_CLS, N_EPOCH, N_FLAGS, N_NCH, N_NEXT, N_OP,
                     N_PAYLOAD)
from .unionfind import find


@kernel(
    "i4[::1](i4[:, ::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1], "
        "i8[::1])")
def compact(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, new_classes: np.ndarray,
            uses: np.ndarray, table: np.ndarray, meta: np.ndarray) -> np.ndarray:
    """Compact a rebuilt e-graph in place (classes into `new_classes`, same shape, whose rows
    past the live count are left as given; `table` must be all EMPTY). Returns `new_class_of`:
    for every old id (node or class, canonical or not) the new id of its class."""
    n = meta[M_NODES]
    new_class_of = np.empty(n, np.int32)
    _compact(nodes, children, classes, new_classes, uses, table, meta,
             np.full(n, EMPTY, np.int32), np.full(n, EMPTY, np.int32), new_class_of)
    return new_class_of


@njit(cache=True, _nrt=False)
def _compact(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray,
             new_classes: np.ndarray, uses: np.ndarray, table: np.ndarray, meta: np.ndarray,
             new_id: np.ndarray, rep: np.ndarray, new_class_of: np.ndarray) -> None:
    """compact over its workspace (new_id and rep all EMPTY), without reference counting (see
    rules/apply._apply_rows): rep maps an old canonical class to the live node naming it."""
    n = meta[M_NODES]
    parent = classes[C_PARENT]
    live = 0
    for x in range(n):
        if nodes[N_FLAGS, x] & F_DEAD:
            continue
        new_id[x] = live
        live += 1
        c = find(parent, nodes[N_CLS, x])
        if rep[c] == EMPTY or x == c:
            rep[c] = x
    for x in range(n):
        new_class_of[x] = new_id[rep[find(parent, x)]]
    # class rows: analysis columns copied, lists rebuilt below
    for c in range(n):
        if parent[c] == c:
            k = new_class_of[c]
            for col in range(CLASS_COLS):
                new_classes[col, k] = classes[col, c]
            new_classes[C_SIZE, k] = 0
            new_classes[C_HEAD, k] = EMPTY
            new_classes[C_TAIL, k] = EMPTY
            new_classes[C_UHEAD, k] = EMPTY
            new_classes[C_UTAIL, k] = EMPTY
    # node rows, moved down in order (the target index never passes the source)
    for x in range(n):
        y = new_id[x]
        if y == EMPTY:
            continue
        k = new_class_of[x]                   # x's own id names its class (see the module doc)
        for col in (N_OP, N_PAYLOAD, N_NCH, N_FLAGS, N_EPOCH):
            nodes[col, y] = nodes[col, x]
        nodes[N_CLS, y] = k
        nodes[N_NEXT, y] = EMPTY
        for j in range(nodes[N_NCH, x]):
            children[y, j] = new_class_of[children[x, j]]
        for j in range(nodes[N_NCH, x], MAXA):
            children[y, j] = EMPTY
        new_classes[C_PARENT, y] = k          # a node id that names no class finds its class
        if new_classes[C_HEAD, k] == EMPTY:
            new_classes[C_HEAD, k] = y
        else:
            nodes[N_NEXT, new_classes[C_TAIL, k]] = y
        new_classes[C_TAIL, k] = y
        new_classes[C_SIZE, k] += 1
    # parent lists (each live node prepended to its children's lists, as add_node does) and the
    # hash-cons
    u = 0
    for y in range(live):
        u = link_parent(uses, new_classes, children, y, nodes[N_NCH, y], u)
        lookup_or_insert(table, nodes, children, y)
    meta[M_NODES] = live
    meta[M_USES] = u
    meta[M_DEAD] = 0
