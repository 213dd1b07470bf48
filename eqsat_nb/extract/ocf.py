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
compacted when full). The cost of a set is recomputed from scratch at every evaluation: the sum of
`node_cost[best[k]]` over its members k.

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


@njit(cache=True)
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
    # worklist: circular FIFO of classes
    queue = np.empty(C + 1, np.int64)
    inq = np.zeros(C, np.bool_)
    qh = np.int64(0)
    qn = np.int64(0)
    for c in range(C):
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            if child_start[i] == child_start[i + 1]:
                queue[(qh + qn) % (C + 1)] = c
                qn += 1
                inq[c] = True
                break
    evals = np.int64(0)
    one = np.uint64(1)
    while qn > 0 and evals < max_evals:
        c = queue[qh]
        qh = (qh + 1) % (C + 1)
        qn -= 1
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
                tmp[:] = 0
                for e in range(child_start[i], child_start[i + 1]):
                    k = child_class[e]
                    for w in range(W):
                        tmp[w] |= bits[k, w]
                for w in range(W):
                    x = tmp[w]
                    while x:
                        low = x & (~x + one)
                        b = np.int64(0)
                        # index of the lowest set bit
                        y = low
                        if y >> np.uint64(32):
                            b += 32
                            y >>= np.uint64(32)
                        if y >> np.uint64(16):
                            b += 16
                            y >>= np.uint64(16)
                        if y >> np.uint64(8):
                            b += 8
                            y >>= np.uint64(8)
                        if y >> np.uint64(4):
                            b += 4
                            y >>= np.uint64(4)
                        if y >> np.uint64(2):
                            b += 2
                            y >>= np.uint64(2)
                        if y >> one:
                            b += 1
                        u += own[w * 64 + b]
                        x ^= low
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
                    btmp[:] = tmp
                else:
                    best_len = ln
                    bestl[:ln] = tmpl[:ln]
        if bi < 0:
            continue
        tol = 1e-9 * max(1.0, abs(cost[c]))
        if best[c] >= 0 and not (bc < cost[c] - tol) and abs(cur - cost[c]) <= tol:
            continue            # no strict improvement, and the kept choice's cost is current
        best[c] = bi
        cost[c] = bc
        own[c] = node_cost[bi]
        if use_bits:
            btmp[cw] |= one << cb
            bits[c, :] = btmp
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
                        npool[used:used + set_len[k]] = pool[s:s + set_len[k]]
                        set_start[k] = used
                        used += set_len[k]
                pool = npool
                pool_used = used
            set_start[c] = pool_used
            pool[pool_used:pool_used + best_len] = bestl[:best_len]
            pool[pool_used + best_len] = c
            set_len[c] = need
            pool_used += need
        for q in range(pstart[c], pstart[c + 1]):
            pc = node_class[pnodes[q]]
            if not inq[pc]:
                inq[pc] = True
                queue[(qh + qn) % (C + 1)] = pc
                qn += 1
    return best, cost, evals


@njit(cache=True)
def _resolvers(node_class, child_start, child_class, n_classes):
    """resolver[c]: the node that first makes class c derivable in Kahn order (its children were
    all derived before c), or -1 when c has no acyclic derivation."""
    C = np.int64(n_classes)
    n = node_class.size
    pstart, pnodes = _parents(node_class, child_start, child_class, n_classes)
    resolver = np.full(C, -1, np.int64)
    cnt = np.empty(n, np.int64)
    queue = np.empty(C, np.int64)
    qt = np.int64(0)
    for i in range(n):
        cnt[i] = child_start[i + 1] - child_start[i]
        if cnt[i] == 0:
            c = node_class[i]
            if resolver[c] < 0:
                resolver[c] = i
                queue[qt] = c
                qt += 1
    qh = np.int64(0)
    while qh < qt:
        k = queue[qh]
        qh += 1
        for q in range(pstart[k], pstart[k + 1]):
            i = pnodes[q]
            cnt[i] -= 1
            if cnt[i] == 0:
                c = node_class[i]
                if resolver[c] < 0:
                    resolver[c] = i
                    queue[qt] = c
                    qt += 1
    return resolver


@njit(cache=True)
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
