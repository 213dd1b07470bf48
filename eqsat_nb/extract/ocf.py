"""Constituent-cost greedy extraction ("OCF", Hartmann et al. 2024, Algorithm 2).

Bottom-up fixpoint over a worklist of classes. Each resolved class keeps its best candidate and
the SET of classes that make up its cost (its constituents): itself plus the union of its chosen
children's constituent sets. A candidate's cost is its own cost plus the sum, over the DISTINCT
classes of the union of its children's sets, of each class's chosen node cost — a shared
subexpression is counted once, unlike the tree cost of `greedy`. A candidate one of whose
children's sets contains the candidate's own class would close a cycle and is skipped. A class is
updated only when its best cost strictly improves; its parents are then re-queued.

Sets are exact. With C classes: bitsets of ceil(C/64) uint64 words per class while C*C/8 bytes
stays under `BITSET_BYTES`; otherwise int32 member lists in a pool (union by stamping, the pool
compacted when full). The cost of a set is the sum of `node_cost[best[k]]` over its members k.
With bitsets a candidate's cost starts from its largest child set's cached sum (recomputed only
when some class switched to a node of another cost since it was cached) and adds the members each
other child contributes (word-level AND-NOT, zero words skipped). With the pool it is recomputed.

The worklist is a min-heap keyed by (strongly connected component of the class graph in Tarjan's
emission order, position in a Kahn pass), seeded with every derivable class: children's
components come first, so on acyclic parts each class is evaluated about once with its children
settled.

Sets of parents are snapshots: when a class later switches node, a parent's stored set can miss
the new grandchildren, so the final selection is checked by a DFS from the roots; a class on a
cycle (or a reachable class left without a choice) is switched to the node that first made it
derivable in a topological (Kahn) order, whose children all come earlier — at most C such
repairs, after which the selection is acyclic. A root with no acyclic derivation at all raises
`NoAcyclicSelection`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel
from .bits import pop_lowest, popcount
from .csr import class_graph
from .problem import ExtractionProblem

BITSET_BYTES = 64 * 1024 * 1024


class NoAcyclicSelection(ValueError):
    pass


@njit(cache=True)
def _parents(node_class, child_start, child_class, n_classes):
    """CSR class → candidate nodes that use it as a child (one entry per child slot)."""
    n = node_class.size
    pstart = np.zeros(n_classes + 1, np.int64)
    for e in range(child_class.size):
        pstart[np.int64(child_class[e]) + 1] += 1
    for c in range(n_classes):
        pstart[c + 1] += pstart[c]
    fill = pstart[:-1].copy()
    pnodes = np.empty(child_class.size, np.int64)
    for i in range(n):
        for e in range(child_start[i], child_start[i + 1]):
            k = np.int64(child_class[e])
            pnodes[fill[k]] = i
            fill[k] += 1
    return pstart, pnodes


@njit(cache=True, inline="always")
def _bitsum(x, w, own):
    """sum of own[w * 64 + b] over the set bits b of word x."""
    u = 0.0
    base = w * 64
    while x:
        x, b = pop_lowest(x)
        u += own[base + b]
    return u


@njit(cache=True)
def _kahn_order(node_class, child_start, child_class, n_classes, pstart, pnodes):
    """(order, n, resolver): the derivable classes in the order a Kahn pass first derives them,
    how many there are, and for each class the node that first derived it (-1: no acyclic
    derivation)."""
    C = np.int64(n_classes)
    n = node_class.size
    resolver = np.full(C, -1, np.int64)
    cnt = np.empty(n, np.int64)
    order = np.empty(C, np.int64)
    qt = np.int64(0)
    for i in range(n):
        cnt[i] = child_start[i + 1] - child_start[i]
        if cnt[i] == 0:
            c = node_class[i]
            if resolver[c] < 0:
                resolver[c] = i
                order[qt] = c
                qt += 1
    qh = np.int64(0)
    while qh < qt:
        k = order[qh]
        qh += 1
        for q in range(pstart[k], pstart[k + 1]):
            i = pnodes[q]
            cnt[i] -= 1
            if cnt[i] == 0:
                c = node_class[i]
                if resolver[c] < 0:
                    resolver[c] = i
                    order[qt] = c
                    qt += 1
    return order, qt, resolver


@njit(cache=True)
def _scc_rank(child_start, child_class, class_start, class_nodes, n_classes):
    """rank[c]: index of c's strongly connected component (class → child-class edges over all
    candidates) in Tarjan's emission order, which puts every component after those it reaches."""
    C = np.int64(n_classes)
    astart, adj = class_graph(child_start, child_class, class_start, class_nodes, C,
                              class_nodes[:0])      # no virtual root: row C stays empty
    index = np.full(C, -1, np.int64)
    low = np.zeros(C, np.int64)
    onst = np.zeros(C, np.bool_)
    st = np.empty(C, np.int64)
    sp = np.int64(0)
    cs = np.empty(C, np.int64)
    ce = np.empty(C, np.int64)
    rank = np.empty(C, np.int64)
    nxt = np.int64(0)
    ncomp = np.int64(0)
    for r in range(C):
        if index[r] >= 0:
            continue
        d = np.int64(0)
        cs[0] = r
        ce[0] = astart[r]
        index[r] = nxt
        low[r] = nxt
        nxt += 1
        st[sp] = r
        sp += 1
        onst[r] = True
        while d >= 0:
            v = cs[d]
            if ce[d] < astart[v + 1]:
                w = adj[ce[d]]
                ce[d] += 1
                if index[w] < 0:
                    index[w] = nxt
                    low[w] = nxt
                    nxt += 1
                    st[sp] = w
                    sp += 1
                    onst[w] = True
                    d += 1
                    cs[d] = w
                    ce[d] = astart[w]
                elif onst[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                if low[v] == index[v]:
                    while True:
                        sp -= 1
                        w = st[sp]
                        onst[w] = False
                        rank[w] = ncomp
                        if w == v:
                            break
                    ncomp += 1
                d -= 1
                if d >= 0 and low[v] < low[cs[d]]:
                    low[cs[d]] = low[v]
    return rank


@njit(cache=True, inline="always")
def _heap_push(heap, hn, key, x):
    j = hn
    while j > 0:
        pj = (j - 1) >> 1
        if key[heap[pj]] <= key[x]:
            break
        heap[j] = heap[pj]
        j = pj
    heap[j] = x
    return hn + 1


@njit(cache=True, inline="always")
def _heap_pop(heap, hn, key):
    top = heap[0]
    hn -= 1
    x = heap[hn]
    j = np.int64(0)
    while True:
        l = 2 * j + 1
        if l >= hn:
            break
        if l + 1 < hn and key[heap[l + 1]] < key[heap[l]]:
            l += 1
        if key[x] <= key[heap[l]]:
            break
        heap[j] = heap[l]
        j = l
    heap[j] = x
    return top, hn


@kernel(
    "Tuple((i8[::1], f8[::1], i8,))(i4[::1], f8[::1], i4[::1], i4[::1], i4[::1], "
    "i4[::1], i8, b1, i8)")
def _ocf(node_class, node_cost, child_start, child_class, class_start, class_nodes, n_classes,
         use_bits, max_evals):
    """(best[C], cost[C], evals): the fixpoint of the constituent-cost greedy."""
    C = np.int64(n_classes)
    pstart, pnodes = _parents(node_class, child_start, child_class, n_classes)
    best = np.full(C, -1, np.int64)
    cost = np.full(C, np.inf)
    own = np.zeros(C)
    # bitset storage
    W = (C + 63) // 64 if use_bits else np.int64(1)
    bits = np.zeros((C if use_bits else 1, W), np.uint64)
    tmp = np.zeros(W, np.uint64)
    btmp = np.zeros(W, np.uint64)
    # pool storage
    set_start = np.zeros(C, np.int64)
    set_len = np.zeros(C, np.int64)
    pool = np.empty(1 if use_bits else max(4 * C, 1024), np.int32)
    pool_used = np.int64(0)
    stamp = np.zeros(C, np.int64)
    sid = np.int64(0)
    tmpl = np.empty(C, np.int32)
    bestl = np.empty(C, np.int32)
    best_len = np.int64(0)
    best_cnt = np.int64(0)
    queue = np.empty(C + 1, np.int64)       # the worklist heap (see below)
    inq = np.zeros(C, np.bool_)
    qn = np.int64(0)
    # seed: every derivable class once, in Kahn (first-derivable) order, so that on first visit
    # all children of its resolver are resolved and acyclic parts settle in one evaluation
    order, n_order, _ = _kahn_order(node_class, child_start, child_class, n_classes, pstart, pnodes)
    # worklist: a min-heap on (component rank, Kahn position): children's components first
    srank = _scc_rank(child_start, child_class, class_start, class_nodes, n_classes)
    key = np.empty(C, np.int64)
    for c in range(C):
        key[c] = srank[c] * (C + 1) + C
    for t in range(n_order):
        key[order[t]] = srank[order[t]] * (C + 1) + t
    for t in range(n_order):
        c = order[t]
        qn = _heap_push(queue, qn, key, c)
        inq[c] = True
    # bitsets: tot[k] = sum of own over bits[k], valid while tep[k] == epoch (epoch bumps
    # whenever some class's own cost changes); cnt[k] = popcount of bits[k]
    tot = np.zeros(C)
    tep = np.full(C, -1, np.int64)
    cnt = np.zeros(C, np.int64)
    epoch = np.int64(0)
    evals = np.int64(0)
    one = np.uint64(1)
    while qn > 0 and evals < max_evals:
        c, qn = _heap_pop(queue, qn, key)
        inq[c] = False
        evals += 1
        cw = c >> 6
        cb = np.uint64(c & 63)
        bc = np.inf
        bi = np.int64(-1)
        cur = np.inf            # the kept choice's cost now (inf: no longer acyclic/feasible)
        for p in range(class_start[c], class_start[c + 1]):
            i = np.int64(class_nodes[p])
            ok = True
            for e in range(child_start[i], child_start[i + 1]):
                k = child_class[e]
                if best[k] < 0:
                    ok = False
                    break
                if use_bits and (bits[k, cw] >> cb) & one:
                    ok = False          # the child's constituents hold c: a cycle
                    break
            if not ok:
                continue
            u = 0.0
            if use_bits:
                # largest child set as the base; add the members the other children contribute
                k0 = np.int64(-1)
                for e in range(child_start[i], child_start[i + 1]):
                    k = np.int64(child_class[e])
                    if k0 < 0 or cnt[k] > cnt[k0]:
                        k0 = k
                n_add = np.int64(0)
                if k0 >= 0:
                    if tep[k0] != epoch:
                        t0 = 0.0
                        for w in range(W):
                            t0 += _bitsum(bits[k0, w], w, own)
                        tot[k0] = t0
                        tep[k0] = epoch
                    u = tot[k0]
                    n_add = cnt[k0]
                    for w in range(W):
                        tmp[w] = bits[k0, w]
                    for e in range(child_start[i], child_start[i + 1]):
                        k = np.int64(child_class[e])
                        if k == k0:
                            continue
                        for w in range(W):
                            x = bits[k, w]
                            if x:
                                nx = x & ~tmp[w]
                                if nx:
                                    tmp[w] |= nx
                                    u += _bitsum(nx, w, own)
                                    n_add += popcount(nx)
                else:
                    tmp[:] = 0
            else:
                sid += 1
                ln = np.int64(0)
                for e in range(child_start[i], child_start[i + 1]):
                    k = child_class[e]
                    for q in range(set_start[k], set_start[k] + set_len[k]):
                        m = pool[q]
                        if stamp[m] != sid:
                            stamp[m] = sid
                            tmpl[ln] = m
                            ln += 1
                            u += own[m]
                if stamp[c] == sid:
                    continue                # the union holds c: a cycle
            total = node_cost[i] + u
            if i == best[c]:
                cur = total
            if total < bc:
                bc = total
                bi = i
                if use_bits:
                    for w in range(W):
                        btmp[w] = tmp[w]
                    best_cnt = n_add
                else:
                    best_len = ln
                    for q in range(ln):
                        bestl[q] = tmpl[q]
        if bi < 0:
            continue
        tol = 1e-9 * max(1.0, abs(cost[c]))
        if best[c] >= 0 and not (bc < cost[c] - tol) and abs(cur - cost[c]) <= tol:
            continue            # no strict improvement, and the kept choice's cost is current
        if best[c] >= 0 and own[c] != node_cost[bi]:
            epoch += 1          # sets holding c change sum (none hold c before it resolves)
        best[c] = bi
        cost[c] = bc
        own[c] = node_cost[bi]
        if use_bits:
            btmp[cw] |= one << cb
            for w in range(W):
                bits[c, w] = btmp[w]
            cnt[c] = best_cnt + 1
            tot[c] = bc         # node_cost[bi] + the union's sum (which does not hold c)
            tep[c] = epoch
        else:
            need = best_len + 1
            if pool_used + need > pool.size:
                live = np.int64(0)
                for k in range(C):
                    if k != c:
                        live += set_len[k]
                npool = np.empty(max(2 * (live + need), pool.size), np.int32)
                used = np.int64(0)
                for k in range(C):
                    if k != c and set_len[k] > 0:
                        s = set_start[k]
                        for q in range(set_len[k]):
                            npool[used + q] = pool[s + q]
                        set_start[k] = used
                        used += set_len[k]
                pool = npool
                pool_used = used
            set_start[c] = pool_used
            for q in range(best_len):
                pool[pool_used + q] = bestl[q]
            pool[pool_used + best_len] = c
            set_len[c] = need
            pool_used += need
        for q in range(pstart[c], pstart[c + 1]):
            pc = node_class[pnodes[q]]
            if not inq[pc]:
                inq[pc] = True
                qn = _heap_push(queue, qn, key, pc)
    return best, cost, evals


@kernel("i8[::1](i4[::1], i4[::1], i4[::1], i8)")
def _resolvers(node_class, child_start, child_class, n_classes):
    """resolver[c]: the node that first makes class c derivable in Kahn order (its children were
    all derived before c), or -1 when c has no acyclic derivation."""
    pstart, pnodes = _parents(node_class, child_start, child_class, n_classes)
    return _kahn_order(node_class, child_start, child_class, n_classes, pstart, pnodes)[2]


@kernel("i8(i4[::1], i4[::1], i4[::1], i8[::1], i8[::1], b1[::1], i8[::1], i8)")
def _first_defect(node_class, child_start, child_class, roots, choice, locked, resolver,
                  n_classes):
    """-1 when `choice` is complete and acyclic from the roots; else an unlocked class to switch to
    its resolver: a class on a cycle, a reachable class with no choice, or — when that class has
    no acyclic derivation at all — the nearest class on the DFS path that needs it and has one;
    -2 - c when no such class exists (c, reachable from a root, cannot be derived)."""
    C = np.int64(n_classes)
    state = np.zeros(C, np.int8)
    stack_c = np.empty(C + 1, np.int64)
    stack_k = np.empty(C + 1, np.int64)
    for r in roots:
        if state[r] == 2:
            continue
        sp = 0
        stack_c[0] = r
        stack_k[0] = 0
        state[r] = 1
        while sp >= 0:
            c = stack_c[sp]
            i = choice[c]
            if i < 0:
                if resolver[c] >= 0:
                    return c
                for j in range(sp - 1, -1, -1):
                    if resolver[stack_c[j]] >= 0 and not locked[stack_c[j]]:
                        return stack_c[j]
                return -2 - c
            k = stack_k[sp]
            if child_start[i] + k >= child_start[i + 1]:
                state[c] = 2
                sp -= 1
                continue
            stack_k[sp] = k + 1
            kid = child_class[child_start[i] + k]
            if state[kid] == 2:
                continue
            if state[kid] == 1:
                # the cycle is stack_c[j..sp] with stack_c[j] == kid: repair an unlocked class
                for j in range(sp, -1, -1):
                    if not locked[stack_c[j]]:
                        return stack_c[j]
                    if stack_c[j] == kid:
                        break
                return -2 - kid          # unreachable: locked classes form no cycle
            sp += 1
            stack_c[sp] = kid
            stack_k[sp] = 0
            state[kid] = 1
    return np.int64(-1)


def ocf_fixpoint(problem: ExtractionProblem, max_evals: int | None = None):
    """(best, cost, evals) before the acyclicity repair (diagnostics and tests)."""
    C = problem.n_classes
    use_bits = C * ((C + 63) // 64) * 8 <= BITSET_BYTES
    if max_evals is None:
        max_evals = 64 * (C + problem.n_nodes) + 1024
    return _ocf(problem.node_class, problem.node_cost, problem.child_start, problem.child_class,
                problem.class_start, problem.class_nodes, C, use_bits, int(max_evals))


def extract_ocf(problem: ExtractionProblem, max_evals: int | None = None) -> np.ndarray:
    """choice (int64[C], -1 for classes not chosen): a valid acyclic selection for the roots."""
    C = problem.n_classes
    if C == 0:
        return np.zeros(0, np.int64)
    choice, _, _ = ocf_fixpoint(problem, max_evals)
    locked = np.zeros(C, np.bool_)
    resolver = None
    roots = np.asarray(problem.roots, np.int64)
    for _ in range(C + 1):
        if resolver is None:
            bad = int(_first_defect(problem.node_class, problem.child_start, problem.child_class,
                                    roots, choice, locked, np.zeros(C, np.int64), C))
            if bad == -1:
                return choice
            resolver = _resolvers(problem.node_class, problem.child_start, problem.child_class, C)
        bad = int(_first_defect(problem.node_class, problem.child_start, problem.child_class,
                                roots, choice, locked, resolver, C))
        if bad == -1:
            return choice
        if bad <= -2:
            c = -2 - bad
            raise NoAcyclicSelection(
                f"e-class {int(problem.class_ids[c])} (dense {c}), needed by the roots, has no "
                f"acyclic choice of nodes")
        choice[bad] = resolver[bad]
        locked[bad] = True
    raise AssertionError("OCF repair did not converge")        # pragma: no cover
