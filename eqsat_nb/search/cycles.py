"""Keeping the e-graph acyclic, as TENSAT does, so that every choice of nodes is a DAG.

Before applying: a match is skipped when a class its right-hand side reads (a variable) can reach
the class it would be merged into — that union would close a cycle. TENSAT keeps a descendant
set per class; we keep a height per class (longest path to a leaf) and search down from the
variable only through classes higher than the root, which answers the same question exactly.
After applying and rebuilding: a DFS finds the cycles the iteration's unions still made, and the
newest node on each is filtered (excluded from matching and extraction).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..egraph.layout import C_PARENT, F_FILTERED, MAXA, N_FLAGS, N_NCH
from ..egraph.sort import stable_order
from ..egraph.unionfind import find
from ..kernels import kernel


@kernel("i8[::1](i4[::1], i4[::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1])")
def heights(cstart: np.ndarray, cnodes: np.ndarray, nodes: np.ndarray, children: np.ndarray,
            classes: np.ndarray, filtered_out: np.ndarray) -> np.ndarray:
    """height[c] = 1 + max height of the classes c's unfiltered nodes point to (0 for leaves),
    over canonical classes. On a cycle, writes one filtered node id per found cycle into
    `filtered_out` (the newest node on the cycle, which is also flagged F_FILTERED) and returns
    the heights computed without it; filtered_out[0] = -1 when the graph was acyclic."""
    n = cstart.size - 1
    parent = classes[C_PARENT]
    height = np.full(n, -1, np.int64)
    state = np.zeros(n, np.int8)            # 0 new, 1 on the stack, 2 done
    st_class = np.empty(n, np.int64)
    st_pos = np.empty(n, np.int64)          # index into cnodes of the node being walked
    st_kid = np.empty(n, np.int64)          # child index within that node
    found = 0
    filtered_out[0] = -1
    restart = True
    while restart:
        restart = False
        state[:] = 0
        for root in range(n):
            if cstart[root] == cstart[root + 1] or state[root] != 0:
                continue
            sp = 0
            st_class[0], st_pos[0], st_kid[0] = root, cstart[root], 0
            state[root] = 1
            height[root] = 0
            while sp >= 0:
                c = st_class[sp]
                p = st_pos[sp]
                if p >= cstart[c + 1]:
                    state[c] = 2
                    sp -= 1
                    if sp >= 0:
                        up = st_class[sp]
                        if height[c] + 1 > height[up]:
                            height[up] = height[c] + 1
                    continue
                node = cnodes[p]
                if nodes[N_FLAGS, node] & F_FILTERED or st_kid[sp] >= nodes[N_NCH, node]:
                    st_pos[sp] = p + 1
                    st_kid[sp] = 0
                    continue
                kid = find(parent, children[node, st_kid[sp]])
                st_kid[sp] += 1
                if state[kid] == 2:
                    if height[kid] + 1 > height[c]:
                        height[c] = height[kid] + 1
                elif state[kid] == 0:
                    sp += 1
                    st_class[sp], st_pos[sp], st_kid[sp] = kid, cstart[kid], 0
                    state[kid] = 1
                    height[kid] = 0
                else:                               # back edge: a cycle kid → ... → c → kid
                    newest = node
                    for f in range(sp, -1, -1):
                        m = cnodes[st_pos[f]]
                        if m > newest:
                            newest = m
                        if st_class[f] == kid:
                            break
                    nodes[N_FLAGS, newest] |= F_FILTERED
                    if found < filtered_out.size:
                        filtered_out[found] = newest
                        if found + 1 < filtered_out.size:
                            filtered_out[found + 1] = -1
                    found += 1
                    restart = True
                    break
            if restart:
                break
    return height


@njit(cache=True)
def would_cycle(root: int, var: int, height: np.ndarray, cstart: np.ndarray, cnodes: np.ndarray,
                nodes: np.ndarray, children: np.ndarray, classes: np.ndarray,
                mark: np.ndarray, stamp: int, stack: np.ndarray) -> bool:
    """Can class `root` be reached from class `var` through unfiltered nodes? (Then merging a
    node that reads `var` into `root` closes a cycle.) Searches only classes higher than root."""
    parent = classes[C_PARENT]
    if var == root:
        return True
    if height[var] <= height[root]:
        return False
    sp = 0
    stack[0] = var
    mark[var] = stamp
    while sp >= 0:
        c = stack[sp]
        sp -= 1
        for p in range(cstart[c], cstart[c + 1]):
            node = cnodes[p]
            if nodes[N_FLAGS, node] & F_FILTERED:
                continue
            for k in range(nodes[N_NCH, node]):
                kid = find(parent, children[node, k])
                if kid == root:
                    return True
                if mark[kid] != stamp and height[kid] > height[root]:
                    mark[kid] = stamp
                    sp += 1
                    stack[sp] = kid
    return False


@njit(cache=True)
def _parent_classes(cstart: np.ndarray, cnodes: np.ndarray, nodes: np.ndarray,
                    children: np.ndarray, classes: np.ndarray):
    """(pstart, pcls): pcls[pstart[c]:pstart[c + 1]] are the classes whose unfiltered indexed
    nodes point to class c (the edges `would_cycle` walks, reversed)."""
    parent = classes[C_PARENT]
    n = cstart.size - 1
    kids = np.empty(cnodes.size * MAXA, np.int64)
    owners = np.empty(cnodes.size * MAXA, np.int64)
    m = 0
    for c in range(n):
        for p in range(cstart[c], cstart[c + 1]):
            node = cnodes[p]
            if nodes[N_FLAGS, node] & F_FILTERED:
                continue
            for k in range(nodes[N_NCH, node]):
                kids[m] = find(parent, children[node, k])
                owners[m] = c
                m += 1
    order = stable_order(kids, np.int64(m))
    pcls = np.empty(m, np.int64)
    for i in range(m):
        pcls[i] = owners[order[i]]
    pstart = np.zeros(n + 1, np.int64)
    for i in range(m):
        pstart[kids[i] + 1] += 1
    for c in range(n):
        pstart[c + 1] += pstart[c]
    return pstart, pcls


@kernel(
    "Tuple((b1[::1], i8[::1], i8[::1],))(i4[:, ::1], i8, i8[::1], i8[::1], i4[::1], "
    "i4[::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1], i8[::1])")
def cycle_mask(matches: np.ndarray, n_roots: int, var_cols: np.ndarray, height: np.ndarray,
               cstart: np.ndarray, cnodes: np.ndarray, nodes: np.ndarray, children: np.ndarray,
               classes: np.ndarray, pstart: np.ndarray, pcls: np.ndarray):
    """(keep, pstart, pcls): keep[m] is False when applying match m would merge a class its
    targets read into one of its roots' ancestors-or-self (a cycle).

    A variable no higher than the root cannot reach it (the common case: it sits below the
    root). Otherwise the root's ancestors are marked once, walking the reversed edges, and
    shared by every match with that root (a multi-pattern join pairs each root with thousands
    of unrelated variables); `would_cycle` is the per-pair search this replaces. The reversed
    edges (`_parent_classes`) are built on first need unless given (`pstart` not empty): pass
    back the ones returned while the index is the same (an iteration checks its rows in
    blocks)."""
    parent = classes[C_PARENT]
    n = cstart.size - 1
    m = matches.shape[0]
    keep = np.ones(m, np.bool_)
    mark = np.zeros(n, np.int64)
    stack = np.empty(n + 1, np.int64)
    have_parents = pstart.size > 0
    stamp = 0
    roots = np.empty(m, np.int64)
    for r in range(n_roots):
        for i in range(m):
            roots[i] = find(parent, matches[i, r])
        order = stable_order(roots, m)
        current = -1
        marked = False
        for j in range(m):
            i = order[j]
            if not keep[i]:
                continue
            root = roots[i]
            if root != current:
                current = root
                marked = False
                # heights rise strictly along edges, so a variable is an ancestor of the root
                # through classes lower than itself: the walk up stops above the group's highest
                top = height[root]
                for j2 in range(j, m):
                    i2 = order[j2]
                    if roots[i2] != root:
                        break
                    for v in var_cols:
                        h = height[find(parent, matches[i2, v])]
                        if h > top:
                            top = h
            for v in var_cols:
                var = find(parent, matches[i, v])
                if var == root:
                    keep[i] = False
                    break
                if height[var] <= height[root]:
                    continue
                if not marked:
                    if not have_parents:
                        pstart, pcls = _parent_classes(cstart, cnodes, nodes, children, classes)
                        have_parents = True
                    stamp += 1
                    mark[root] = stamp
                    sp = 0
                    stack[0] = root
                    while sp >= 0:
                        c = stack[sp]
                        sp -= 1
                        for q in range(pstart[c], pstart[c + 1]):
                            pc = pcls[q]
                            if mark[pc] != stamp and height[pc] <= top:
                                mark[pc] = stamp
                                sp += 1
                                stack[sp] = pc
                    marked = True
                if mark[var] == stamp:
                    keep[i] = False
                    break
    return keep, pstart, pcls
