"""The glue-contracted model: the full model with the zero-cost glue folded into reachability.

A merged op leaves its parts as zero-cost single-child candidates (proj of a merged matmul, of a
proj of it, ...): TENSAT's BERT after simplification is 7 433 candidates, half of them such glue,
over two dozen projections of one input that two- and three-way merges cover in thousands of
orders and nestings. The full model gives each of those nodes and classes a column, and HiGHS's
tree search drowns in the copies (600 s left a 2.35 % gap).

Here a class c is *covered* by a non-glue candidate j when c reaches j's class through glue
candidates alone; the glue disappears and a column per non-glue candidate remains: minimise
Σ cost_j y_j such that each root is covered and, per class and child class, the class's columns
that use the child sum to no more than the columns covering it (per column on a cyclic model).
Candidates equal in cost, children and what they cover are one column; one that another costs
no less than, needs no fewer children than and covers no more than is dropped (`_undominated`).
A valid selection's non-glue nodes, each as its column and with the columns that cover no more
than another chosen one dropped, are a solution of no higher cost, so the model's optimum is a
lower bound.

On an acyclic model it is exact: a solution gives a selection (each covered class takes the glue
path to its nearest chosen candidate) of no higher cost. TENSAT's BERT: 1 236 columns, its best
known answer (398.44) proven optimal in 8 s. On a cyclic one a solution may cover a class only
through itself; a candidate never covers a class that every derivation of one of its children
contains (dominators.py's D, closed transitively), which removes the short ones (a merged
matmul covering a gate whose own input it reads), and `selection` grounds the chosen candidates
bottom-up and derives only what grounds. There it is a relaxation, solved as a phase before the
full model (solve._contracted_phase) for its answers and its bound: on TENSAT's NasRNN, 1 983
columns (3 443 before the gates merged with another cell's were dropped as dominated), its answer
353.03 at 6-8 s, which the full model had not found in 600 s (356.40), proven optimal at 5-15 s
(seeds 0-3; 143 s with the 3 443 columns), where the full model's bound stops at 346.2. Where
glue is rare (ViT, TT) it lacks the full model's dominator and closure rows and the full model is
better, so both uses need MIN_GLUE_SHARE glue.

It offers `_cut_loop` what `model._Model` does: h, obj, ncol, stats, start_vector, selection.
"""
from __future__ import annotations

import numpy as np

from .model import _kept, new_highs
from .selection import _post_order, _valid_cost

MIN_GLUE_SHARE = 0.25       # of the model's candidates: with less glue the full model is kept


def glue_nodes(P: dict, pre: dict) -> np.ndarray:
    """Bool per candidate: a zero-cost candidate of a model class with exactly one child class."""
    cost, kids = P["node_cost"], pre["kids"]
    out = np.zeros(P["node_class"].size, bool)
    for cs in pre["cand"]:
        for i in cs:
            if cost[i] == 0.0 and len(kids[i]) == 1:
                out[i] = True
    return out


def applies(P: dict, pre: dict, min_share: float = MIN_GLUE_SHARE) -> bool:
    """Whether the contracted model replaces the full one: an acyclic model (where it is exact)
    with at least `min_share` of its candidates glue."""
    return not pre["cyclic"].any() and _enough_glue(P, pre, min_share)


def relaxes(P: dict, pre: dict, min_share: float = MIN_GLUE_SHARE) -> bool:
    """Whether a cyclic model gets the contracted model as a phase before the full one (a
    relaxation there: its bound holds, its acyclic answers are offered): at least `min_share` of
    its candidates glue."""
    return bool(pre["cyclic"].any()) and _enough_glue(P, pre, min_share)


def _enough_glue(P: dict, pre: dict, min_share: float) -> bool:
    n = sum(len(cs) for cs in pre["cand"])
    return n > 0 and int(glue_nodes(P, pre).sum()) >= min_share * n


class _Contracted:
    """The HiGHS model over the non-glue candidates (see the module docstring)."""

    def __init__(self, P: dict, pre: dict, opts: dict):
        import highspy

        self.P, self.pre = P, pre
        cost, ncls = P["node_cost"], P["node_class"]
        kids, cand, model = pre["kids"], pre["cand"], pre["model"]
        C = P["n_classes"]
        glue = glue_nodes(P, pre)
        self.glue = glue
        # free: a class derived at no cost and with no needs (outside the model: fixed to a
        # zero-cost leaf), or reaching such a class through glue
        below: list[list[int]] = [[] for _ in range(C)]     # glue edges c -> k
        above: list[list[int]] = [[] for _ in range(C)]     # reversed
        for c in np.flatnonzero(model):
            for i in cand[c]:
                if glue[i]:
                    (k,) = kids[i]
                    below[c].append(k)
                    above[k].append(int(c))
        free = ~model
        order = _topo(C, below)         # children before parents (on a glue cycle, some order)
        changed = True
        while changed:                  # one pass unless the glue has cycles
            changed = False
            for c in order:
                if not free[c] and any(free[k] for k in below[c]):
                    free[c] = changed = True
        self.free = free
        # needed classes: the roots and the model children of the non-glue candidates
        solid = [int(i) for c in np.flatnonzero(model) for i in cand[c] if not glue[i]]
        needed = np.zeros(C, bool)
        needed[P["roots"]] = True
        for i in solid:
            for k in kids[i]:
                needed[k] = True
        needed &= ~free
        # up[k]: the needed classes that reach k through glue (k itself included): all of them,
        # or a valid selection's image could break a row
        grow: list[set[int]] = [{int(c)} if needed[c] else set() for c in range(C)]
        changed = True
        while changed:                  # parents before children: one pass on acyclic glue
            changed = False
            for c in reversed(order):
                for p in above[c]:
                    if not grow[p] <= grow[c]:
                        grow[c] |= grow[p]
                        changed = True
        up = [frozenset(x) for x in grow]
        # on a cyclic model: a candidate never covers a class that every derivation of one of
        # its children contains (that class would stand on itself); on an acyclic one there is
        # no such class
        self.exact = not pre["cyclic"].any()
        dstar = {} if self.exact else _dominator_closure(P)
        # columns: one per (cost, children, coverage), dominated ones dropped
        groups: dict[tuple, list[int]] = {}
        for i in solid:
            cov = up[int(ncls[i])]
            if not self.exact:
                cov = cov - frozenset(kids[i]).union(*(dstar.get(int(k), ()) for k in kids[i]))
            if not cov:
                continue
            need = frozenset(k for k in kids[i] if not free[k])
            groups.setdefault((float(cost[i]), need, cov), []).append(i)
        cols, self.rep = _undominated(groups)       # rep: candidate -> its column's node
        for key, members in groups.items():
            head = self.rep.get(members[0], members[0])
            for i in members:
                self.rep[i] = head
        self.nodes = nodes = np.array(sorted(cols), np.int64)
        self.ncol = n = nodes.size
        col = {int(i): q for q, i in enumerate(nodes.tolist())}
        covers: dict[int, list[int]] = {}
        self._cover_of: dict[int, frozenset] = {}
        for key, members in groups.items():
            q = col.get(members[0])
            if q is not None:
                self._cover_of[members[0]] = key[2]
                for c in key[2]:
                    covers.setdefault(c, []).append(q)

        self.h = h = new_highs(opts)
        inf = highspy.kHighsInf
        self.obj = obj = cost[nodes].astype(np.float64)
        h.addVars(n, np.zeros(n), np.ones(n))
        if n:
            h.changeColsCost(n, np.arange(n, dtype=np.int32), obj)
            h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.ones(n, np.uint8))
        lo: list[float] = []
        starts: list[int] = []
        idx: list[int] = []
        val: list[float] = []
        for r in np.unique(P["roots"]):
            if not free[r]:             # Σ_{j covers r} y_j >= 1
                lo.append(1.0)
                starts.append(len(idx))
                cv = covers.get(int(r), [])
                idx.extend(cv)
                val.extend([1.0] * len(cv))
        n_roots = len(lo)
        # rows per (class, child): a column stands for candidates of other classes with its
        # coverage too, and a valid selection's image keeps at most one column a class once
        # columns covering no more than another chosen one are dropped; that holds where the
        # coverage is the class's (acyclic). On a cyclic model two columns of a class can
        # cover differently, so there a row per column.
        users: dict[tuple[int, int], list[int]] = {}
        for q, i in enumerate(nodes.tolist()):
            for k in kids[i]:
                if not free[k]:
                    users.setdefault((int(ncls[i]) if self.exact else -1 - q, int(k)),
                                     []).append(q)
        for (_, k), us in users.items():     # (a column never covers its own child: its
            cv = covers.get(k, [])              # coverage leaves out its children)
            lo.append(-inf)         # Σ_{i in c uses k} y_i - Σ_{j covers k} y_j <= 0
            starts.append(len(idx))
            idx.extend(us)
            val.extend([1.0] * len(us))
            idx.extend(cv)
            val.extend([-1.0] * len(cv))
        hi = np.r_[np.full(n_roots, inf), np.zeros(len(lo) - n_roots)]
        if lo:
            h.addRows(len(lo), np.array(lo, np.float64), hi, len(idx),
                      np.array(starts, np.int32), np.array(idx, np.int32),
                      np.array(val, np.float64))
        self.col = col
        self.stats = {"contracted": True, "columns": int(n), "rows": len(lo),
                      "glue": int(glue.sum()), "needed_classes": int(needed.sum()),
                      "two_cycles": 0}

    def start_vector(self, choice: np.ndarray) -> np.ndarray | None:
        """The columns of a valid selection's non-glue candidates (each through the column that
        stands for it), or None when it does not fit."""
        sel = _kept(self.pre, choice)
        if _valid_cost(self.P, sel) is None:
            return None
        _, topo = _post_order(self.P, sel)
        v = np.zeros(self.ncol)
        for c in topo:
            i = int(sel[c])
            if i < 0 or self.glue[i] or self.pre["fixed"][c] >= 0:
                continue
            q = self.col.get(self.rep.get(i, -1), -1)
            if q < 0:
                if self.free[c]:
                    continue
                return None
            v[q] = 1.0
        return v

    def selection(self, colv: np.ndarray) -> np.ndarray:
        """The selection a solution stands for, built bottom-up: the chosen candidates are
        grounded in rounds (a candidate is ready once each of its children is free or covered by
        one ready before); each covered class, in the order of its earliest covering round,
        takes the glue path to its nearest class that is already derived, free, or has a chosen
        candidate of a round no later than that. So every class stands on earlier rounds only
        and the selection is acyclic. What no round grounds (on a cyclic model, a class covered
        only through itself) stays underived, and the selection then fails its check."""
        P, pre = self.P, self.pre
        C = P["n_classes"]
        fixed, kids, ncls = pre["fixed"], pre["kids"], P["node_class"]
        rounds = self._grounded(self.nodes[colv > 0.5].tolist())
        chosen = np.full(C, -1, np.int64)      # per class: its chosen candidate, earliest round
        level = np.full(C, np.iinfo(np.int64).max, np.int64)
        first: dict[int, int] = {}              # covered class -> its earliest covering round
        for i, r in rounds.items():
            c = int(ncls[i])
            if r < level[c]:
                chosen[c], level[c] = i, r
            for k in self._cover_of[i]:
                if r < first.get(k, r + 1):
                    first[k] = r
        sel = np.full(C, -1, np.int64)
        sel[fixed >= 0] = fixed[fixed >= 0]
        for c in sorted(first, key=lambda k: (first[k], k)):
            if sel[c] < 0:
                self._derive(c, first[c], chosen, level, sel)
        todo = [int(r) for r in P["roots"]]     # free classes on the way: their glue path
        seen = np.zeros(C, bool)
        while todo:
            c = todo.pop()
            if seen[c]:
                continue
            seen[c] = True
            if sel[c] < 0 and self.free[c]:
                self._derive(c, -1, chosen, level, sel)
            if sel[c] >= 0:
                todo.extend(int(k) for k in kids[int(sel[c])])
        return sel

    def _grounded(self, picked: list[int]) -> dict[int, int]:
        """Round per chosen candidate that grounds (see `selection`)."""
        kids, free = self.pre["kids"], self.free
        covered: set[int] = set()
        out: dict[int, int] = {}
        left = list(picked)
        r = 0
        while left:
            ready = [i for i in left if all(free[k] or k in covered for k in kids[i])]
            if not ready:
                break
            for i in ready:
                out[i] = r
                covered |= self._cover_of[i]
            left = [i for i in left if i not in out]
            r += 1
        return out

    def _derive(self, c: int, r: int, chosen: np.ndarray, level: np.ndarray,
                sel: np.ndarray) -> None:
        """Derive class c (breadth first over glue) up to the nearest class already derived or,
        for r >= 0, free or with a chosen candidate of round <= r; sets `sel` on the way.
        Nothing when there is none."""
        cand, kids, glue, free = self.pre["cand"], self.pre["kids"], self.glue, self.free

        def end(k: int) -> bool:
            return sel[k] >= 0 or (r >= 0 and (bool(free[k]) or level[k] <= r))

        back: dict[int, tuple[int, int]] = {c: (-1, -1)}
        front = [c]
        found = c if end(c) and sel[c] < 0 else -1
        while front and found < 0:
            nxt = []
            for a in front:
                for i in cand[a]:
                    if glue[i]:
                        (k,) = kids[i]
                        if k not in back:
                            back[k] = (a, i)
                            if end(k):
                                found = k
                                break
                            nxt.append(k)
                if found >= 0:
                    break
            front = nxt
        if found < 0:
            return
        if sel[found] < 0 and r >= 0 and level[found] <= r:
            sel[found] = chosen[found]          # (a free class without one: derived later)
        k = found
        while k != c:
            a, i = back[k]
            if sel[a] < 0:
                sel[a] = i
            k = a


def _undominated(groups: dict[tuple, list[int]]) -> tuple[list[int], dict[int, int]]:
    """The columns kept of the (cost, needed children, coverage) groups, and for each dropped
    group's head the kept column standing for it. A group is dropped when a kept one costs no
    more, needs a subset of its children and covers a superset: a solution using the dropped
    column stays feasible and no dearer with the kept one instead (its children are covered
    since the dropped one's were; what it covered still is). On TENSAT's NasRNN this removes the
    candidates that compute a gate through a merge with another cell's (relu of a concatenation,
    the same cost as the gate's own relu but needing the other cell's value too): 3 443 -> 1 983
    columns, and HiGHS proves the optimum in 10-14 s instead of 143 s."""
    entries = sorted(((c_, need, cov, members[0]) for (c_, need, cov), members in groups.items()),
                     key=lambda e: (e[0], len(e[1]), -len(e[2]), e[3]))
    # a dominating entry sorts first: no dearer, no more children, and where both tie, a larger
    # coverage
    kept: list[tuple[float, frozenset, frozenset, int]] = []
    by_class: dict[int, list[int]] = {}     # covered class -> kept entries covering it
    rep: dict[int, int] = {}
    for c_, need, cov, head in entries:
        pool = min((by_class.get(c, ()) for c in cov), key=len)
        for q in pool:
            k_cost, k_need, k_cov, k_head = kept[q]
            if k_cost <= c_ and k_need <= need and k_cov >= cov:
                rep[head] = k_head
                break
        else:
            for c in cov:
                by_class.setdefault(c, []).append(len(kept))
            kept.append((c_, need, cov, head))
    return [e[3] for e in kept], rep


def _dominator_closure(P: dict) -> dict[int, frozenset]:
    """D*(c): every class each derivation of c contains, from the covering pairs (c, k) of
    dominators.py (k in D(c)) closed transitively; none where the pairs were not built."""
    pairs = np.asarray(P.get("dominators", np.zeros((0, 2), np.int64)), np.int64)
    nxt: dict[int, list[int]] = {}
    for c, k in pairs.tolist():
        if c != k:
            nxt.setdefault(c, []).append(k)
    out: dict[int, frozenset] = {}
    for s in nxt:
        if s in out:
            continue
        stack = [s]
        busy = {s}
        while stack:            # depth first, each class after what it reaches
            c = stack[-1]
            todo = [k for k in nxt.get(c, ()) if k not in out and k not in busy]
            if todo:
                busy.update(todo)
                stack.extend(todo)
                continue
            stack.pop()
            busy.discard(c)
            acc: set[int] = set()
            for k in nxt.get(c, ()):
                acc.add(k)
                acc |= out.get(k, frozenset())
            out[c] = frozenset(acc)
    return out


def _topo(C: int, below: list[list[int]]) -> list[int]:
    """All classes, each after the classes it reaches through glue where the glue has no cycle
    through them."""
    state = np.zeros(C, np.int8)
    out: list[int] = []
    for s in range(C):
        if state[s]:
            continue
        stack = [(s, 0)]
        state[s] = 1
        while stack:
            c, j = stack[-1]
            if j < len(below[c]):
                stack[-1] = (c, j + 1)
                k = below[c][j]
                if not state[k]:
                    state[k] = 1
                    stack.append((k, 0))
            else:
                stack.pop()
                state[c] = 2
                out.append(c)
    return out
