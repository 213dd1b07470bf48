"""The glue-contracted model: the full model with the zero-cost glue folded into reachability.

A merged op leaves its parts as zero-cost single-child candidates (proj of a merged matmul, of a
proj of it, ...): TENSAT's BERT after simplification is 7 433 candidates, half of them such glue,
over a dozen projections of one input that two- and three-way merges cover in thousands of
orders and nestings. The full model gives each of those nodes and classes a column, and HiGHS's
tree search drowns in the copies (600 s leave a 2.35 % gap).

Here a class c is *covered* by a non-glue candidate j when c reaches j's class through glue
candidates alone (class(j) in R(c)); the glue disappears, and a column per non-glue candidate
remains: minimise Σ cost_j y_j such that each root is covered and each child class of a chosen
candidate is covered (y_i ≤ Σ_{j covers c} y_j). Candidates equal in cost, children and what
they cover are one column; one that another covers more than, with the same children and no
higher cost, is dropped. On an acyclic problem this is exact: each valid selection's non-glue
nodes are a solution of the same cost, and each solution gives a selection (each needed class
takes the glue path to its nearest class with a chosen candidate) whose cost is no higher. On
TENSAT's BERT the model has 1 236 columns and HiGHS proves the best known answer (398.44)
optimal in 6-8 s. On cyclic problems it is a relaxation whose answers may be cyclic, and weaker
than the full model's (TENSAT's NasRNN: 318.9 against the full LP's 325.5), so `applies` keeps it
to acyclic ones.

It offers `_cut_loop` what `model._Model` does: h, obj, ncol, stats, start_vector, selection.
"""
from __future__ import annotations

import numpy as np

from .model import _kept
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
    if pre["cyclic"].any():
        return False
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
        order = _topo(C, below, model)                      # children before parents
        for c in order:
            if not free[c] and any(free[k] for k in below[c]):
                free[c] = True
        self.free, self.below = free, below
        # needed classes: the roots and the model children of the non-glue candidates
        solid = [int(i) for c in np.flatnonzero(model) for i in cand[c] if not glue[i]]
        needed = np.zeros(C, bool)
        needed[P["roots"]] = True
        for i in solid:
            for k in kids[i]:
                needed[k] = True
        needed &= ~free
        # up[k]: the needed classes that reach k through glue (k itself included)
        up: list[frozenset] = [frozenset()] * C
        for c in reversed(order):                           # parents before children
            s = set().union(*(up[p] for p in above[c])) if above[c] else set()
            if needed[c]:
                s.add(int(c))
            up[c] = frozenset(s)
        # columns: one per (cost, children, coverage), dominated ones dropped
        groups: dict[tuple, list[int]] = {}
        for i in solid:
            cov = up[int(ncls[i])]
            if not cov:
                continue
            need = frozenset(k for k in kids[i] if not free[k])
            groups.setdefault((float(cost[i]), need, cov), []).append(i)
        by_need: dict[frozenset, list[tuple[float, frozenset, int]]] = {}
        for (c_, need, cov), members in groups.items():
            by_need.setdefault(need, []).append((c_, cov, members[0]))
        cols: list[int] = []
        self.rep: dict[int, int] = {}                       # candidate -> its column's node
        for need, entries in by_need.items():
            entries.sort(key=lambda e: (e[0], -len(e[1]), e[2]))
            kept: list[tuple[float, frozenset, int]] = []
            for e in entries:
                for k_ in kept:
                    if k_[0] <= e[0] and k_[1] >= e[1]:
                        self.rep[e[2]] = k_[2]
                        break
                else:
                    kept.append(e)
                    cols.append(e[2])
        for key, members in groups.items():
            head = self.rep.get(members[0], members[0])
            for i in members:
                self.rep[i] = head
        self.nodes = nodes = np.array(sorted(cols), np.int64)
        self.ncol = n = nodes.size
        col = {int(i): q for q, i in enumerate(nodes.tolist())}
        covers: dict[int, list[int]] = {}
        for q, i in enumerate(nodes.tolist()):
            for c in up[int(ncls[i])]:
                covers.setdefault(c, []).append(q)
        self.covers = covers

        self.h = h = highspy.Highs()
        inf = highspy.kHighsInf
        h.setOptionValue("output_flag", bool(opts.get("verbose", False)))
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", int(opts.get("seed", 0)))
        h.setOptionValue("mip_rel_gap", float(opts.get("rel_gap", 0.0)))
        h.setOptionValue("mip_abs_gap", 1e-7)
        for k, v in (opts.get("highs") or {}).items():
            h.setOptionValue(k, v)
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
        users: dict[tuple[int, int], list[int]] = {}    # (class, child) -> its columns
        for q, i in enumerate(nodes.tolist()):
            for k in kids[i]:
                if not free[k]:
                    users.setdefault((int(ncls[i]), int(k)), []).append(q)
        for (_, k), us in users.items():
            cv = covers.get(k, [])
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
        """The selection a solution stands for: every class reached from the roots takes its
        chosen candidate, else the glue path to its nearest class with one (or a free class)."""
        P, pre = self.P, self.pre
        C = P["n_classes"]
        fixed, kids = pre["fixed"], pre["kids"]
        chosen = np.full(C, -1, np.int64)
        for i in self.nodes[colv > 0.5].tolist():
            chosen[int(P["node_class"][i])] = i
        sel = np.full(C, -1, np.int64)
        sel[fixed >= 0] = fixed[fixed >= 0]
        todo = [int(r) for r in P["roots"]]
        while todo:
            c = todo.pop()
            if sel[c] >= 0 and fixed[c] < 0:
                continue
            if fixed[c] >= 0:
                continue
            path = self._glue_path(c, chosen, sel)
            for a, i in path:
                if sel[a] < 0:
                    sel[a] = i
                    todo.extend(int(k) for k in kids[i])
        return sel

    def _glue_path(self, c: int, chosen: np.ndarray, sel: np.ndarray) -> list[tuple[int, int]]:
        """(class, candidate) steps from c: its chosen candidate, or the glue candidates along
        a shortest glue path to a class with a chosen candidate, a selected one or a free one
        (empty when none: the selection is then incomplete and fails its check)."""
        if chosen[c] >= 0:
            return [(c, int(chosen[c]))]
        cand, kids, glue = self.pre["cand"], self.pre["kids"], self.glue
        back: dict[int, tuple[int, int]] = {c: (-1, -1)}
        front = [c]
        while front:
            nxt = []
            for a in front:
                for i in cand[a]:
                    if not glue[i]:
                        continue
                    (k,) = kids[i]
                    if k in back:
                        continue
                    back[k] = (a, i)
                    if chosen[k] >= 0 or sel[k] >= 0 or self.free[k]:
                        steps = [(k, int(chosen[k]))] if chosen[k] >= 0 and sel[k] < 0 else []
                        while k != c:
                            a_, i_ = back[k]
                            steps.append((a_, i_))
                            k = a_
                        return steps[::-1]
                    nxt.append(k)
            front = nxt
        return []


def _topo(C: int, below: list[list[int]], model: np.ndarray) -> list[int]:
    """All classes, each after the classes it reaches through glue (the glue graph of an acyclic
    model is acyclic)."""
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
