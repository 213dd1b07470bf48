"""A read-only index of a rebuilt e-graph for matching: each class's live, unfiltered nodes sorted
by op, and for each op the classes that contain it. Built once per saturation iteration in
O(N log N)."""
from __future__ import annotations

import numpy as np

from ..kernels import kernel
from .layout import C_PARENT, F_DEAD, F_FILTERED, N_CLS, N_EPOCH, N_FLAGS, N_OP
from .sort import stable_order
from .unionfind import find


@kernel("UniTuple(i4[::1], 4)(i4[:, ::1], i4[:, ::1], i8, i8, i8)")
def build_index(nodes: np.ndarray, classes: np.ndarray, n_nodes: int, n_ops: int,
                since: int):
    """Returns (cstart, cnodes, ostart, oclasses):
    cnodes[cstart[c]:cstart[c + 1]] are the live nodes of canonical class c, sorted by op, and
    within an op those with N_EPOCH >= since (all when since <= 0) first, then by id;
    oclasses[ostart[o]:ostart[o + 1]] are the classes holding at least one node of op o."""
    parent = classes[C_PARENT]
    keys = np.empty(n_nodes, np.int64)
    live = np.int64(0)
    for n in range(n_nodes):
        if nodes[N_FLAGS, n] & (F_DEAD | F_FILTERED):
            continue
        c = find(parent, nodes[N_CLS, n])
        old = 1 if since > 0 and nodes[N_EPOCH, n] < since else 0
        keys[live] = ((np.int64(c) * n_ops + nodes[N_OP, n]) * 2 + old) * (n_nodes + 1) + n
        live += 1
    order = stable_order(keys, live)
    unsorted = keys
    keys = np.empty(live, np.int64)
    for i in range(live):                 # sorted, without the freshness bit: (group, node)
        k = unsorted[order[i]]
        keys[i] = (k // (2 * (n_nodes + 1))) * (n_nodes + 1) + k % (n_nodes + 1)
    cnodes = np.empty(live, np.int32)
    cstart = np.zeros(n_nodes + 1, np.int32)
    ocount = np.zeros(n_ops + 1, np.int32)
    prev_group = np.int64(-1)
    for i in range(live):
        group = keys[i] // (n_nodes + 1)
        cnodes[i] = keys[i] % (n_nodes + 1)
        c = group // n_ops
        cstart[c + 1] += 1
        if group != prev_group:
            ocount[group % n_ops + 1] += 1
            prev_group = group
    for c in range(n_nodes):
        cstart[c + 1] += cstart[c]
    for o in range(n_ops):
        ocount[o + 1] += ocount[o]
    ostart = ocount.copy()
    oclasses = np.empty(ocount[n_ops], np.int32)
    fill = ocount[:n_ops].copy()
    prev_group = -1
    for i in range(live):
        group = keys[i] // (n_nodes + 1)
        if group != prev_group:
            o = group % n_ops
            oclasses[fill[o]] = group // n_ops
            fill[o] += 1
            prev_group = group
    return cstart, cnodes, ostart, oclasses
