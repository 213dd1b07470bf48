"""Circuit simplifications of an extraction problem (Sun, Zhang, Ni 2024, "E-Graphs as
Circuits"): a smaller problem with the same optimum, and the map back.

An e-graph is a circuit of OR gates (classes) over AND gates (nodes). Repeated to a fixpoint:

- nodes that use their own class, or a class with no acyclic derivation, are dropped (no
  acyclic selection can choose them);
- *free* classes, those with an acyclic derivation of total tree cost 0 (weights, literals,
  zero-cost layout over them), are fixed to it and taken out of every child list: they cost
  nothing wherever they are used, and their derivation uses only free classes, so it closes no
  cycle;
- a node is dropped when another node of its class costs no more and uses a subset of its
  child classes (swapping the dominator in never raises the cost nor closes a cycle);
- a non-root class left with one candidate is *inlined* (its class disappears; its node's
  children go into its users' child lists) when the candidate costs 0 (any number of users: a
  free wire) or when exactly one node uses the class (its cost moves into that node, which pays
  it exactly when the class would be reached). A costly class is not inlined through a free
  wire with several users, which would count it once per user. Inlining makes a node that
  reached its own class through a wire a self-loop, dropped in the next round: most cycles of
  TENSAT's cyclic e-graphs (x = proj(split(concat(x, ...)))) go this way;
- classes the roots cannot reach are dropped.

On the TENSAT-schedule e-graphs this leaves a third of the classes (NasRNN at 50 000 nodes:
30 121 classes -> about 9 400). Every extractor can run on the result (`Simplified.problem`);
`Simplified.lift` maps its selection back, and the lifted selection has the same DAG cost (each
absorbed cost is paid once, by the one node that holds it) and is acyclic exactly when the
simplified one is. Callers still check what they return with dag.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..kernels import kernel
from .csr import reverse_csr
from .dag import _walk
from .problem import ExtractionProblem

MAX_EXPANSION = 24          # child classes an inlined wire may bring into each of its users
MAX_DOMINANCE = 256         # candidates of a class above which the dominance test is skipped


@njit(cache=True)
def _sort_segment(a, lo, hi):
    """Insertion sort of a[lo:hi] (child lists are short)."""
    for p in range(lo + 1, hi):
        x = a[p]
        q = p - 1
        while q >= lo and a[q] > x:
            a[q + 1] = a[q]
            q -= 1
        a[q + 1] = x


@njit(cache=True)
def _heap_push(hv, hi, n, v, i):
    j = n
    while j > 0:
        pj = (j - 1) >> 1
        if hv[pj] <= v:
            break
        hv[j] = hv[pj]
        hi[j] = hi[pj]
        j = pj
    hv[j] = v
    hi[j] = i
    return n + 1


@njit(cache=True)
def _heap_pop(hv, hi, n):
    v0 = hv[0]
    i0 = hi[0]
    n -= 1
    v = hv[n]
    x = hi[n]
    j = 0
    while True:
        lc = 2 * j + 1
        if lc >= n:
            break
        if lc + 1 < n and hv[lc + 1] < hv[lc]:
            lc += 1
        if v <= hv[lc]:
            break
        hv[j] = hv[lc]
        hi[j] = hi[lc]
        j = lc
    hv[j] = v
    hi[j] = x
    return v0, i0, n


@njit(cache=True)
def tree_derivation(node_class, cost, kstart, kids, alive, n_classes):
    """Knuth's generalised Dijkstra over the alive nodes: (tree cost per class, inf where it has
    no acyclic derivation; the node of least tree cost, -1 where none). A class is settled only
    after every child of its node, so the chosen nodes form no cycle."""
    N = node_class.size
    ustart, users = reverse_csr(kstart, kids, alive, n_classes)
    missing = np.empty(N, np.int64)
    acc = cost.copy()
    tree = np.full(n_classes, np.inf)
    best = np.full(n_classes, -1, np.int64)
    hv = np.empty(N + 1)
    hi = np.empty(N + 1, np.int64)
    hn = 0
    for i in range(N):
        missing[i] = kstart[i + 1] - kstart[i]
        if alive[i] and missing[i] == 0:
            hn = _heap_push(hv, hi, hn, acc[i], i)
    while hn > 0:
        v, i, hn = _heap_pop(hv, hi, hn)
        c = node_class[i]
        if best[c] >= 0:
            continue
        best[c] = i
        tree[c] = v
        for q in range(ustart[c], ustart[c + 1]):
            j = users[q]
            acc[j] += v
            missing[j] -= 1
            if missing[j] == 0 and best[node_class[j]] < 0:
                hn = _heap_push(hv, hi, hn, acc[j], j)
    return tree, best


@njit(cache=True)
def _subset(kids, a0, a1, b0, b1):
    """Is the sorted list kids[a0:a1] a subset of the sorted list kids[b0:b1]?"""
    if a1 - a0 > b1 - b0:
        return False
    q = b0
    for p in range(a0, a1):
        x = kids[p]
        while q < b1 and kids[q] < x:
            q += 1
        if q == b1 or kids[q] != x:
            return False
        q += 1
    return True


@njit(cache=True)
def _push_new(stack, sp, stamp, sid, free, kids, lo, hi):
    """Push each child class in kids[lo:hi] that is not free and not yet stamped `sid` (stamping
    it); returns the new stack top."""
    for e in range(lo, hi):
        k = kids[e]
        if free[k] or stamp[k] == sid:
            continue
        stamp[k] = sid
        sp += 1
        stack[sp] = k
    return sp


@njit(cache=True)
def _round(node_class, cost, kstart, kids, alive, gone, fixed, rep, is_root, class_start,
           class_nodes, n_classes):
    """One round of the simplifications in place (alive, gone, fixed, rep, cost); returns the
    new child lists (kstart, kids) and how many nodes and classes it removed."""
    N = node_class.size
    C = n_classes
    removed = 0
    # 1. self-loops and underivable children
    for i in range(N):
        if alive[i]:
            for e in range(kstart[i], kstart[i + 1]):
                if kids[e] == node_class[i]:
                    alive[i] = False
                    removed += 1
                    break
    tree, best = tree_derivation(node_class, cost, kstart, kids, alive, C)
    for i in range(N):
        if alive[i]:
            for e in range(kstart[i], kstart[i + 1]):
                if best[kids[e]] < 0:
                    alive[i] = False
                    removed += 1
                    break
    # 2. free classes: fixed to their zero-cost derivation
    free = np.zeros(C, np.bool_)
    for c in range(C):
        if not gone[c] and best[c] >= 0 and tree[c] == 0.0:
            free[c] = True
            gone[c] = True
            fixed[c] = best[c]
            removed += 1
    # 3. inlining: single-candidate classes, as free wires or into their one user
    ncand = np.zeros(C, np.int64)
    one = np.full(C, -1, np.int64)
    for i in range(N):
        if alive[i] and not gone[node_class[i]]:
            c = node_class[i]
            ncand[c] += 1
            one[c] = i
    nusers = np.zeros(C, np.int64)
    user = np.full(C, -1, np.int64)
    for i in range(N):
        if alive[i] and not gone[node_class[i]]:
            for e in range(kstart[i], kstart[i + 1]):
                k = kids[e]
                nusers[k] += 1
                user[k] = i
    wire = np.zeros(C, np.bool_)
    for c in range(C):
        if not gone[c] and not is_root[c] and ncand[c] == 1 and cost[one[c]] == 0.0:
            wire[c] = True
    # a wire's expansion (the non-inlined classes it stands for) must stay small
    stamp = np.zeros(C, np.int64)
    sid = 0
    stack = np.empty(C + 1, np.int64)
    for c in range(C):
        if not wire[c]:
            continue
        sid += 1
        size = 0
        sp = 0
        stack[0] = c
        stamp[c] = sid
        while sp >= 0 and size <= MAX_EXPANSION:
            x = stack[sp]
            sp -= 1
            n = one[x]
            for e in range(kstart[n], kstart[n + 1]):
                k = kids[e]
                if free[k] or stamp[k] == sid:
                    continue
                stamp[k] = sid
                if wire[k]:
                    sp += 1
                    stack[sp] = k
                else:
                    size += 1
        if size > MAX_EXPANSION:
            wire[c] = False
    inline = wire.copy()
    for c in range(C):
        if not gone[c] and not is_root[c] and not wire[c] and ncand[c] == 1 and \
                nusers[c] == 1 and not inline[node_class[user[c]]] and \
                node_class[user[c]] != c:
            inline[c] = True
    # (a chain of costly classes each with one user is paid once, by the node at its top)
    # new child lists: free classes out, inlined ones replaced by what they stand for
    total = 0
    for i in range(N):
        if alive[i]:
            total += kstart[i + 1] - kstart[i]
    nkstart = np.zeros(N + 1, np.int64)
    cap = max(2 * total, 16)
    nkids = np.empty(cap, np.int32)
    used = 0
    for i in range(N):
        nkstart[i] = used
        if not alive[i] or gone[node_class[i]] or inline[node_class[i]]:
            continue
        sid += 1
        sp = _push_new(stack, -1, stamp, sid, free, kids, kstart[i], kstart[i + 1])
        while sp >= 0:
            k = stack[sp]
            sp -= 1
            if inline[k]:
                n = one[k]
                cost[i] += cost[n]
                sp = _push_new(stack, sp, stamp, sid, free, kids, kstart[n], kstart[n + 1])
            else:
                if used >= cap:
                    cap *= 2
                    grown = np.empty(cap, np.int32)
                    grown[:used] = nkids[:used]
                    nkids = grown
                nkids[used] = k
                used += 1
        _sort_segment(nkids, nkstart[i], used)
    nkstart[N] = used
    for c in range(C):
        if inline[c]:
            gone[c] = True
            fixed[c] = one[c]
            removed += 1
    for i in range(N):
        if alive[i] and gone[node_class[i]]:
            alive[i] = False
    # 4. dominance within each class
    order = np.empty(MAX_DOMINANCE, np.int64)
    for c in range(C):
        if gone[c]:
            continue
        m = 0
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            if alive[i]:
                if m == MAX_DOMINANCE:
                    m += 1
                    break
                order[m] = i
                m += 1
        if m < 2 or m > MAX_DOMINANCE:
            continue
        # by (cost, number of children): a dominator comes first
        for p in range(1, m):
            x = order[p]
            q = p - 1
            while q >= 0 and (cost[order[q]] > cost[x] or (
                    cost[order[q]] == cost[x] and
                    nkstart[order[q] + 1] - nkstart[order[q]] > nkstart[x + 1] - nkstart[x])):
                order[q + 1] = order[q]
                q -= 1
            order[q + 1] = x
        for p in range(1, m):
            j = order[p]
            for q in range(p):
                i = order[q]
                if alive[i] and cost[i] <= cost[j] and _subset(
                        nkids, nkstart[i], nkstart[i + 1], nkstart[j], nkstart[j + 1]):
                    alive[j] = False
                    rep[j] = i
                    removed += 1
                    break
    # 5. reachability from the roots
    reach = np.zeros(C, np.bool_)
    sp = -1
    for c in range(C):
        if is_root[c] and not gone[c]:
            reach[c] = True
            sp += 1
            stack[sp] = c
    while sp >= 0:
        c = stack[sp]
        sp -= 1
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            if alive[i]:
                for e in range(nkstart[i], nkstart[i + 1]):
                    k = nkids[e]
                    if not reach[k]:
                        reach[k] = True
                        sp += 1
                        stack[sp] = k
    for i in range(N):
        if alive[i] and not reach[node_class[i]]:
            alive[i] = False
            removed += 1
    return nkstart, nkids[:used].copy(), removed


@kernel("Tuple((b1[::1], f8[::1], i8[::1], i4[::1], i8[::1], i8[::1], i8,))(i4[::1], f8[::1], "
        "i4[::1], i4[::1], i4[::1], i4[::1], i4[::1], b1[::1], i8, i8)")
def _simplify(node_class, node_cost, child_start, child_class, class_start, class_nodes, roots,
              drop, n_classes, max_rounds):
    """The simplifications to a fixpoint: (alive node mask, node costs with absorbed costs,
    child lists (CSR, sorted, without duplicates), fixed node per removed class (-1 for the
    classes kept or dropped), the dominator of each node dropped as dominated (-1 for the
    others), rounds)."""
    N = node_class.size
    C = n_classes
    alive = ~drop
    cost = node_cost.copy()
    kstart = np.zeros(N + 1, np.int64)
    kids = np.empty(child_class.size, np.int32)
    used = 0
    for i in range(N):           # deduplicated, sorted child lists
        kstart[i] = used
        for e in range(child_start[i], child_start[i + 1]):
            k = child_class[e]
            dup = False
            for q in range(kstart[i], used):
                if kids[q] == k:
                    dup = True
                    break
            if not dup:
                kids[used] = k
                used += 1
        _sort_segment(kids, kstart[i], used)
    kstart[N] = used
    kids = kids[:used].copy()
    gone = np.zeros(C, np.bool_)
    fixed = np.full(C, -1, np.int64)
    rep = np.full(N, -1, np.int64)
    is_root = np.zeros(C, np.bool_)
    for r in roots:
        is_root[r] = True
    rounds = 0
    while rounds < max_rounds:
        rounds += 1
        kstart, kids, removed = _round(node_class, cost, kstart, kids, alive, gone, fixed, rep,
                                       is_root, class_start, class_nodes, C)
        if removed == 0:
            break
    return alive, cost, kstart, kids, fixed, rep, rounds


@dataclass(frozen=True)
class Simplified:
    """A simplified problem and the map back to the original one."""
    original: ExtractionProblem
    problem: ExtractionProblem      # classes and candidates renumbered densely
    class_orig: np.ndarray          # int64[C']: original class of each class
    node_orig: np.ndarray           # int64[N']: original candidate of each candidate
    fixed: np.ndarray               # int64[C]: the forced candidate of each removed class, or -1
    rep: np.ndarray                 # int64[N]: a dropped dominated node's dominator, or -1
    rounds: int

    def lift(self, choice: np.ndarray) -> np.ndarray:
        """The original problem's selection for a selection of the simplified one: the forced
        candidates plus the chosen ones, trimmed to the classes the roots reach (a selection
        that is invalid here comes back as one dag.py rejects)."""
        sel = self.fixed.copy()
        choice = np.asarray(choice, np.int64)
        on = choice >= 0
        sel[self.class_orig[on]] = self.node_orig[choice[on]]
        p = self.original
        _, status, state = _walk(p.node_class, p.node_cost, p.child_start, p.child_class,
                                 p.roots, sel, p.n_classes)
        return np.where(state == 2, sel, -1) if status == 0 else sel

    def restrict(self, choice: np.ndarray) -> np.ndarray | None:
        """The simplified problem's selection for an original one: each kept class's candidate,
        a dropped dominated node replaced by its dominator (no dearer, a subset of its
        children); None where a kept class chose a node with no survivor. (Whether the result is
        valid is for the caller to check.)"""
        pos = np.full(self.original.n_nodes, -1, np.int64)
        pos[self.node_orig] = np.arange(self.node_orig.size)
        picked = np.asarray(choice, np.int64)[self.class_orig].copy()
        for _ in range(64):             # dominator chains are short
            on = picked >= 0
            lost = on & (pos[np.maximum(picked, 0)] < 0)
            if not lost.any():
                break
            picked[lost] = self.rep[picked[lost]]
        on = picked >= 0
        out = np.where(on, pos[np.maximum(picked, 0)], -1)
        return None if np.any(on & (out < 0)) else out


def simplify(problem: ExtractionProblem, max_rounds: int = 50,
             drop: np.ndarray | None = None) -> Simplified:
    """The problem after the circuit simplifications (see the module docstring); `drop`: nodes
    known to be in no acyclic selection, dropped first (bool per candidate)."""
    C = problem.n_classes
    drop = np.zeros(problem.n_nodes, np.bool_) if drop is None else \
        np.ascontiguousarray(drop, np.bool_)
    alive, cost, kstart, kids, fixed, rep, rounds = _simplify(
        problem.node_class, problem.node_cost, problem.child_start, problem.child_class,
        problem.class_start, problem.class_nodes, problem.roots, drop, C, max_rounds)
    node_orig = np.flatnonzero(alive).astype(np.int64)
    kept = np.zeros(C, bool)
    kept[problem.node_class[node_orig]] = True
    class_orig = np.flatnonzero(kept).astype(np.int64)
    dense = np.full(C, -1, np.int64)
    dense[class_orig] = np.arange(class_orig.size)
    node_class = dense[problem.node_class[node_orig]].astype(np.int32)
    deg = (kstart[node_orig + 1] - kstart[node_orig]).astype(np.int64)
    child_start = np.zeros(node_orig.size + 1, np.int32)
    np.cumsum(deg, out=child_start[1:])
    idx = np.repeat(kstart[node_orig] - child_start[:-1], deg) + np.arange(int(deg.sum()))
    child_class = dense[kids[idx]].astype(np.int32)
    order = np.argsort(node_class, kind="stable").astype(np.int32)
    class_start = np.zeros(class_orig.size + 1, np.int32)
    np.add.at(class_start, node_class.astype(np.int64) + 1, 1)
    class_start = np.cumsum(class_start).astype(np.int32)
    roots = dense[problem.roots]
    roots = np.unique(roots[roots >= 0]).astype(np.int32)
    small = ExtractionProblem(
        int(class_orig.size), problem.node_ids[node_orig].astype(np.int32), node_class,
        cost[node_orig].astype(np.float64), child_start, child_class, class_start, order, roots,
        problem.class_ids[class_orig].astype(np.int32))
    fixed = np.where(kept, -1, fixed).astype(np.int64)
    return Simplified(problem, small, class_orig, node_orig, fixed, rep, int(rounds))
