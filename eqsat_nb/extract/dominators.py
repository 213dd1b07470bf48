"""Which classes every derivation of a class uses: rows that lift the ILP's LP bound.

D(c), the classes every acyclic derivation of class c contains: any fixpoint G of
G(c) = {c} ∪ ⋂_{i ∈ c} ⋃_{k ∈ kids(i)} G(k) satisfies G(c) ⊆ T(c) for every acyclic derivation T
of c (by induction over T, children first: G(x) ⊆ {x} ∪ ⋃ G(kids of the node T chose) ⊆ T(x)),
so the greatest fixpoint, computed here from G = every class downwards (bitsets, a worklist that
revisits the users of a class whose set shrank), is the exact D, on cyclic e-graphs too: a cycle
that only leads back to itself adds nothing to the intersection. (The least fixpoint from
G(c) = {c} is valid as well but blind behind cycles: on TENSAT's cyclic VGG-19 e-graph, where
x = proj(split(concat(y, x))) lets a value stand on itself, only the greatest one sees that every
derivation of the classifier's input needs the convolutions.) Every k ∈ D(c) is needed whenever c
is used, so a_c ≤ a_k is valid for the ILP.

The LP relaxation of the ILP (DESIGN §6) spreads a class over many candidates that use different
children, paying a fraction of each: on NasNet-A's TENSAT-schedule e-graph its bound is 560
against an optimum of 3 891. The rows a_c ≤ a_k for k ∈ D(c) forbid that wherever the
alternatives all lead to the same classes (every re-association of a sum needs every addend):
with them the LP bound is 3 656. Only the covering pairs are returned (k ∈ D(c) not already in
D(k') for another k' ∈ D(c)); the others follow from them by transitivity.

The same holds per candidate: D(i) = ⋃_{k ∈ kids(i)} D(k) is needed whenever node i is chosen,
so Σ_{i ∈ c, k ∈ D(i)} x_i ≤ a_k (at most one candidate of c is chosen). These closure rows are
stronger than the class rows where several candidates reach k by different children (a merged
matmul's outputs each reach the concatenated input through their own merged matmul: the class
rows leave that concat at the largest fraction of any one of them, the closure row at their
sum). Kept: k reached by at least two candidates, not by all of them (that is a class row), not
implied by another row (a child that all of them use and whose D holds k; a k' with the same
candidates whose D holds k). On NasRNN's e-graph they raise the LP bound from 524 to 544.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..kernels import kernel
from .bits import pop_lowest, popcount
from .ocf import _scc_rank
from .problem import ExtractionProblem

MAX_BYTES = 128 * 1024 * 1024      # bitsets larger than this are not built (no rows)
MAX_CLOSURE_ENTRIES = 400_000       # candidates in all closure rows, at most


@njit(cache=True)
def _dominated(node_class, child_start, child_class, class_start, class_nodes, n_classes):
    """(D, lo, hi): the greatest fixpoint as bitsets, D[c] nonzero only in words [lo[c], hi[c])
    (see the module docstring). Classes are first evaluated children first (strongly connected
    components in Tarjan's order), then their users again whenever their set shrank."""
    C = np.int64(n_classes)
    W = (C + 63) // 64
    one = np.uint64(1)
    full = ~np.uint64(0)
    D = np.full((C, W), full, np.uint64)
    if C % 64:
        D[:, W - 1] = (one << np.uint64(C % 64)) - one
    lo = np.zeros(C, np.int64)          # nonzero words of D[c] lie in [lo, hi)
    hi = np.full(C, W, np.int64)
    # users: class -> classes of the nodes that use it
    ustart = np.zeros(C + 1, np.int64)
    for e in range(child_class.size):
        ustart[child_class[e] + 1] += 1
    for c in range(C):
        ustart[c + 1] += ustart[c]
    fill = ustart[:-1].copy()
    users = np.empty(child_class.size, np.int64)
    for i in range(node_class.size):
        for e in range(child_start[i], child_start[i + 1]):
            k = child_class[e]
            users[fill[k]] = node_class[i]
            fill[k] += 1
    inter = np.zeros(W, np.uint64)
    uni = np.zeros(W, np.uint64)
    queue = np.empty(C, np.int64)
    inq = np.ones(C, np.bool_)
    order = np.argsort(_scc_rank(child_start, child_class, class_start, class_nodes, C))
    for t in range(C):
        queue[t] = order[t]
    head = np.int64(0)
    size = C
    while size > 0:
        c = queue[head]
        head = (head + 1) % C
        size -= 1
        inq[c] = False
        if class_start[c] == class_start[c + 1]:
            continue
        ilo = np.int64(0)
        ihi = W
        first = True
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            ulo = W
            uhi = np.int64(0)
            for e in range(child_start[i], child_start[i + 1]):
                k = child_class[e]
                if lo[k] < ulo:
                    ulo = lo[k]
                if hi[k] > uhi:
                    uhi = hi[k]
            if first:
                ilo, ihi = ulo, uhi
            else:
                ilo = max(ilo, ulo)
                ihi = min(ihi, uhi)
            if ilo >= ihi:
                ihi = ilo
                break
            for w in range(ilo, ihi):
                uni[w] = 0
            for e in range(child_start[i], child_start[i + 1]):
                k = child_class[e]
                for w in range(max(ilo, lo[k]), min(ihi, hi[k])):
                    uni[w] |= D[k, w]
            if first:
                for w in range(ilo, ihi):
                    inter[w] = uni[w]
                first = False
            else:
                for w in range(ilo, ihi):
                    inter[w] &= uni[w]
        cw = c >> 6
        cb = one << np.uint64(c & 63)
        # the new set: inter over [ilo, ihi) (empty elsewhere) plus c; it only ever shrinks
        changed = False
        nlo = W
        nhi = np.int64(0)
        for w in range(lo[c], hi[c]):
            x = inter[w] if ilo <= w < ihi else np.uint64(0)
            if w == cw:
                x |= cb
            if x != D[c, w]:
                D[c, w] = x
                changed = True
            if x:
                if w < nlo:
                    nlo = w
                nhi = w + 1
        lo[c] = nlo
        hi[c] = nhi
        if changed:
            for q in range(ustart[c], ustart[c + 1]):
                u = users[q]
                if not inq[u]:
                    inq[u] = True
                    queue[(head + size) % C] = u
                    size += 1
    return D, lo, hi


@njit(cache=True)
def _covers(D, lo, hi, n_classes):
    """(c, k) rows: k ∈ D(c), k ≠ c, not in D(k') \\ {k'} of another member k'."""
    C = np.int64(n_classes)
    W = D.shape[1]
    one = np.uint64(1)
    # members of D[c] \ {c} not dominated through another member
    out = np.empty((16, 2), np.int64)
    n = 0
    cov = np.zeros(W, np.uint64)
    for c in range(C):
        for w in range(lo[c], hi[c]):
            cov[w] = D[c, w]
        cw = c >> 6
        cov[cw] &= ~(one << np.uint64(c & 63))
        for w in range(lo[c], hi[c]):
            x = D[c, w]
            while x:
                x, b = pop_lowest(x)
                k = w * 64 + b
                if k == c:
                    continue
                for v in range(max(lo[c], lo[k]), min(hi[c], hi[k])):
                    m = D[k, v]
                    if v == (k >> 6):
                        m &= ~(one << np.uint64(k & 63))
                    cov[v] &= ~m
        for w in range(lo[c], hi[c]):
            x = cov[w]
            while x:
                x, b = pop_lowest(x)
                if n == out.shape[0]:
                    grown = np.empty((2 * n, 2), np.int64)
                    grown[:n] = out[:n]
                    out = grown
                out[n, 0] = c
                out[n, 1] = w * 64 + b
                n += 1
    return out[:n].copy()




@njit(cache=True)
def _closure(D, lo, hi, node_class, child_start, child_class, class_start, class_nodes,
             n_classes, max_entries):
    """Closure rows (c, k, the candidates of c whose D holds k), CSR: (ck[R, 2], start[R + 1],
    nodes). Stops adding rows at `max_entries` entries."""
    C = np.int64(n_classes)
    W = D.shape[1]
    one = np.uint64(1)
    ck = np.empty((16, 2), np.int64)
    start = np.zeros(17, np.int64)
    members = np.empty(64, np.int64)
    R = 0
    used = 0
    allu = np.zeros(W, np.uint64)
    cov = np.zeros(W, np.uint64)
    # random signatures of candidate positions: a set of candidates hashes to their sum
    rng_state = np.uint64(0x9E3779B97F4A7C15)
    for c in range(C):
        m = class_start[c + 1] - class_start[c]
        if m < 2 or used >= max_entries:
            continue
        # U[j] = D(candidate j) over the words [ulo, uhi)
        ulo = W
        uhi = np.int64(0)
        for p in range(class_start[c], class_start[c + 1]):
            i = class_nodes[p]
            for e in range(child_start[i], child_start[i + 1]):
                k = child_class[e]
                ulo = min(ulo, lo[k])
                uhi = max(uhi, hi[k])
        if ulo >= uhi:
            continue
        U = np.zeros((m, uhi - ulo), np.uint64)
        for j in range(m):
            i = class_nodes[class_start[c] + j]
            for e in range(child_start[i], child_start[i + 1]):
                k = child_class[e]
                for w in range(lo[k], hi[k]):
                    U[j, w - ulo] |= D[k, w]
        for w in range(ulo, uhi):
            x = np.uint64(0)
            for j in range(m):
                x |= U[j, w - ulo]
            allu[w] = x
        # candidate-set signature per reached class k
        nk = 0
        for w in range(ulo, uhi):
            nk += popcount(allu[w])
        ks = np.empty(nk, np.int64)
        sig = np.empty(nk, np.uint64)
        cnt = np.empty(nk, np.int64)
        sigs = np.empty(m, np.uint64)
        for j in range(m):
            rng_state ^= rng_state << np.uint64(13)
            rng_state ^= rng_state >> np.uint64(7)
            rng_state ^= rng_state << np.uint64(17)
            sigs[j] = rng_state
        t = 0
        for w in range(ulo, uhi):
            x = allu[w]
            while x:
                x, b = pop_lowest(x)
                k = w * 64 + b
                low = one << np.uint64(b)
                h = np.uint64(0)
                n = 0
                for j in range(m):
                    if U[j, w - ulo] & low:
                        h += sigs[j]
                        n += 1
                ks[t] = k
                sig[t] = h
                cnt[t] = n
                t += 1
        order = np.argsort(sig)
        g0 = 0
        while g0 < nk:
            g1 = g0 + 1
            while g1 < nk and sig[order[g1]] == sig[order[g0]]:
                g1 += 1
            n = cnt[order[g0]]
            if 2 <= n < m:
                # covers within the group: members not in D(k2) \ {k2} of another member
                for w in range(ulo, uhi):
                    cov[w] = 0
                for q in range(g0, g1):
                    k = ks[order[q]]
                    cov[k >> 6] |= one << np.uint64(k & 63)
                for q in range(g0, g1):
                    k2 = ks[order[q]]
                    for w in range(max(ulo, lo[k2]), min(uhi, hi[k2])):
                        mk = D[k2, w]
                        if w == (k2 >> 6):
                            mk &= ~(one << np.uint64(k2 & 63))
                        cov[w] &= ~mk
                for q in range(g0, g1):
                    k = ks[order[q]]
                    if not (cov[k >> 6] >> np.uint64(k & 63)) & one:
                        continue
                    wk = k >> 6
                    bk = one << np.uint64(k & 63)
                    # implied: a child used by all of these candidates whose D holds k
                    implied = False
                    jf = -1
                    for j in range(m):
                        if U[j, wk - ulo] & bk:
                            jf = j
                            break
                    i0 = class_nodes[class_start[c] + jf]
                    for e in range(child_start[i0], child_start[i0 + 1]):
                        kid = child_class[e]
                        if not D[kid, wk] & bk:
                            continue
                        everywhere = True
                        for j in range(m):
                            if not (U[j, wk - ulo] & bk):
                                continue
                            i = class_nodes[class_start[c] + j]
                            has = False
                            for e2 in range(child_start[i], child_start[i + 1]):
                                if child_class[e2] == kid:
                                    has = True
                                    break
                            if not has:
                                everywhere = False
                                break
                        if everywhere:
                            implied = True
                            break
                    if implied:
                        continue
                    if R + 1 >= ck.shape[0]:
                        grown = np.empty((2 * ck.shape[0], 2), np.int64)
                        grown[:R] = ck[:R]
                        ck = grown
                        gs = np.zeros(2 * ck.shape[0] + 1, np.int64)
                        gs[:R + 1] = start[:R + 1]
                        start = gs
                    while used + m > members.size:
                        grown_m = np.empty(2 * members.size, np.int64)
                        grown_m[:used] = members[:used]
                        members = grown_m
                    ck[R, 0] = c
                    ck[R, 1] = k
                    for j in range(m):
                        if U[j, wk - ulo] & bk:
                            members[used] = class_nodes[class_start[c] + j]
                            used += 1
                    R += 1
                    start[R] = used
            g0 = g1
    return ck[:R].copy(), start[:R + 1].copy(), members[:used].copy()


@kernel("Tuple((i8[:, ::1], i8[:, ::1], i8[::1], i8[::1], b1[::1], b1[::1],))(i4[::1], "
        "i4[::1], i4[::1], i4[::1], i4[::1], i4[::1], i8, i8)")
def _rows(node_class, child_start, child_class, class_start, class_nodes, roots, n_classes,
          max_entries):
    """The class rows (pairs), the closure rows (pairs, CSR start, candidates), the classes
    every selection uses (in D(r) of a root r) and the candidates that need their own class
    (c ∈ D(k) for a child k: in no acyclic selection)."""
    D, lo, hi = _dominated(node_class, child_start, child_class, class_start, class_nodes,
                           n_classes)
    circular = np.zeros(node_class.size, np.bool_)
    one = np.uint64(1)
    for i in range(node_class.size):
        c = node_class[i]
        for e in range(child_start[i], child_start[i + 1]):
            if (D[child_class[e], c >> 6] >> np.uint64(c & 63)) & one:
                circular[i] = True
                break
    mandatory = np.zeros(n_classes, np.bool_)
    for r in roots:
        for w in range(lo[r], hi[r]):
            x = D[r, w]
            while x:
                x, b = pop_lowest(x)
                mandatory[w * 64 + b] = True
    pairs = _covers(D, lo, hi, n_classes)
    ck, start, members = _closure(D, lo, hi, node_class, child_start, child_class, class_start,
                                  class_nodes, n_classes, max_entries)
    return pairs, ck, start, members, mandatory, circular


@dataclass(frozen=True)
class DominatorRows:
    """Rows a_c ≤ a_k (`pairs`) and Σ_{i ∈ closure_nodes[closure_start[r]:closure_start[r + 1]]}
    x_i ≤ a_k for (c, k) = closure[r]; classes and candidates numbered as in the problem."""
    pairs: np.ndarray           # int64[R, 2]
    closure: np.ndarray         # int64[Q, 2]
    closure_start: np.ndarray   # int64[Q + 1]
    closure_nodes: np.ndarray   # int64[...]
    mandatory: np.ndarray       # bool[C]: classes every selection uses
    circular: np.ndarray        # bool[N]: candidates that need their own class (never usable)


def dominator_rows(problem: ExtractionProblem, max_entries: int = MAX_CLOSURE_ENTRIES
                   ) -> DominatorRows:
    """The class rows (covering pairs only) and the closure rows (at most `max_entries`
    candidates in all) of the problem; none when the bitsets would exceed MAX_BYTES."""
    C = problem.n_classes
    if C == 0 or C * ((C + 63) // 64) * 8 > MAX_BYTES:
        e = np.zeros((0, 2), np.int64)
        mandatory = np.zeros(C, bool)
        mandatory[problem.roots] = True
        return DominatorRows(e, e, np.zeros(1, np.int64), np.zeros(0, np.int64), mandatory,
                             np.zeros(problem.n_nodes, bool))
    pairs, ck, start, nodes, mandatory, circular = _rows(
        problem.node_class, problem.child_start, problem.child_class, problem.class_start,
        problem.class_nodes, problem.roots, C, int(max_entries))
    return DominatorRows(pairs, ck, start, nodes, mandatory, circular)
