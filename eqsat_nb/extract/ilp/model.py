"""The ILP's formulation: the presolve that shrinks a problem before it becomes a model, and the
HiGHS model itself (DESIGN §6).

Model (on the presolved problem): a binary x_i per candidate node and an activity a_c per class,
Σ_{i∈c} x_i = a_c, a_r = 1 for the roots, and per class c and child class k of its candidates
Σ_{i∈c uses k} x_i ≤ a_k (a_c ≤ a_k when every candidate uses k): one row per class pair, at least
as strong as one per node since at most one candidate of c is chosen; minimise Σ cost_i x_i.

Acyclicity only where cycles can be: the class graph's strongly connected components are computed
after presolve, and an e-graph whose components are all single classes (what the search's cycle
filter leaves) gets no acyclicity rows at all. On cyclic components: every 2-cycle up front as
x_{c→k} + x_{k→c} ≤ a_c and ≤ a_k, then lazily, for each cycle in an incumbent (also those HiGHS
reports during a solve), the cut-set rows of its class set S: a_c ≤ Σ x over the candidates of S
that use no class of S, for each c in S (an acyclic selection's active part of S has a sink), and
re-solve from the best valid selection until the incumbent is acyclic. `acyclic="order"` instead
puts ordering variables t_c (big-M = the component's size) on the cyclic components only.

Presolve (numpy/Python, before HiGHS): nodes whose own class is a child are dropped (never
acyclic); classes without any acyclic derivation ("unproductive") and nodes using them are dropped;
classes with a zero-cost leaf are fixed to it; within a class a node dominated by another (cost ≥,
child-class set ⊇) is dropped — the dominator uses a subset of the edges, so swapping it in never
creates a cycle or raises the cost; only classes reachable from the roots are modelled. (Fixing
the classes every selection must use was tried: HiGHS's own presolve finds the same root bound,
and fixed bounds blocked its reductions.)

Restricted models (`restricted`): each class cut down to its k candidates of least tree cost, for
the solve's primal phases.
"""
from __future__ import annotations

import time
from typing import Any, Iterator

import numpy as np

from .selection import _knuth_greedy, _post_order, _scc_labels, _valid_cost

def _class_graph(C: int, cand: list[list[int]], kids: list[frozenset], model: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """CSR class -> distinct child classes over the candidates, model classes only."""
    start = np.zeros(C + 1, np.int64)
    adj: list[int] = []
    for c in range(C):
        if model[c]:
            ks: set[int] = set()
            for i in cand[c]:
                ks.update(k for k in kids[i] if model[k])
            adj.extend(sorted(ks))
        start[c + 1] = len(adj)
    return start, np.array(adj, np.int64)


def _presolve(P: dict) -> dict:
    """Reduce the problem before it becomes a model (see the module docstring)."""
    t0 = time.perf_counter()
    C = P["n_classes"]
    N = P["node_class"].size
    cs, cc, ncls, cost = P["child_start"], P["child_class"], P["node_class"], P["node_cost"]
    kids = [frozenset(cc[cs[i]: cs[i + 1]].tolist()) for i in range(N)]
    alive = np.array([int(ncls[i]) not in kids[i] for i in range(N)], bool)
    greedy, productive, tree = _knuth_greedy(P, alive)
    stats: dict[str, Any] = {"self_loops": int(N - alive.sum()), "unproductive": 0}
    for i in np.nonzero(alive)[0]:
        if not all(productive[k] for k in kids[i]):
            alive[i] = False
            stats["unproductive"] += 1
    class_nodes = [P["class_nodes"][P["class_start"][c]: P["class_start"][c + 1]].tolist()
                   for c in range(C)]
    rep = np.arange(N, dtype=np.int64)          # dropped dominated node -> kept dominator
    # (one step: each class is visited once and a node is mapped only to one its visit keeps)
    fixed = np.full(C, -1, np.int64)            # class fixed to a zero-cost leaf
    dominated = 0
    for c in range(C):
        cand = [i for i in class_nodes[c] if alive[i]]
        leaves = [i for i in cand if not kids[i] and cost[i] <= 0.0]
        if leaves:
            fixed[c] = leaves[0]
            for i in cand:
                if i != leaves[0]:
                    alive[i] = False
                    rep[i] = leaves[0]
            continue
        if 1 < len(cand) <= 256:
            cand.sort(key=lambda i: (cost[i], len(kids[i]), i))
            kept: list[int] = []
            for j in cand:               # j is dominated by an earlier kept i?
                for i in kept:
                    if cost[i] <= cost[j] and kids[i] <= kids[j]:
                        alive[j] = False
                        rep[j] = i
                        dominated += 1
                        break
                else:
                    kept.append(j)
    stats["dominated"] = dominated
    feasible = bool(all(productive[int(r)] for r in P["roots"]))
    # reachability from the roots over the alive nodes
    reach = np.zeros(C, bool)
    todo = [int(r) for r in P["roots"]]
    reach[todo] = True
    while todo:
        c = todo.pop()
        for i in class_nodes[c]:
            if alive[i]:
                for k in kids[i]:
                    if not reach[k]:
                        reach[k] = True
                        todo.append(k)
    model = reach & (fixed < 0)
    cand = [[i for i in class_nodes[c] if alive[i]] if model[c] else [] for c in range(C)]
    gstart, gadj = _class_graph(C, cand, kids, model)
    comp = _scc_labels(C, gstart, gadj)
    sizes = np.bincount(comp[model], minlength=int(comp.max(initial=0)) + 1)   # classes each
    cyclic = model & (sizes[comp] > 1)
    stats.update(classes=int(model.sum()),
                 nodes=int(sum(len(x) for x in cand)), fixed=int((fixed >= 0).sum()),
                 cyclic_classes=int(cyclic.sum()),
                 cyclic_components=int(np.unique(comp[cyclic]).size),
                 seconds=round(time.perf_counter() - t0, 3))
    return {"alive": alive, "rep": rep, "fixed": fixed, "reach": reach, "kids": kids,
            "greedy": greedy, "tree": tree, "feasible": feasible, "model": model, "cand": cand,
            "comp": comp, "comp_size": sizes, "cyclic": cyclic, "stats": stats}


def _neighbourhoods(P: dict, pre: dict, max_share: float, glue_depth: int
                    ) -> Iterator[np.ndarray]:
    """The neighbourhoods of the large-neighbourhood phase, largest first (made as they are
    asked for: a phase uses a few): per model class k read by candidates of at least three model
    classes (and of at most `max_share` of them, which leaves out attribute literals every op
    reads), those classes plus the zero-cost classes (proj, split, concat: the glue of a merged
    op) within `glue_depth` levels below their candidates. Freeing them all at once lets an
    exact solve re-partition every op that reads k, e.g. the projections of one input into two-
    and three-way merges, which no move of one or two groups reaches."""
    kids, cand, cost = pre["kids"], pre["cand"], P["node_cost"]
    model = pre["model"]
    nodes = np.array([i for cs in cand for i in cs], np.int64)
    if nodes.size == 0:
        return
    ncls = P["node_class"][nodes].astype(np.int64)
    nkids = np.array([len(kids[i]) for i in nodes], np.int64)
    reader = np.repeat(ncls, nkids)
    read = np.fromiter((k for i in nodes for k in kids[i]), np.int64, int(nkids.sum()))
    pairs = np.unique(read * model.size + reader)           # (read class, reader class) once
    read, reader = pairs // model.size, pairs % model.size
    first = np.flatnonzero(np.r_[True, read[1:] != read[:-1]]) if read.size else read
    size = np.diff(np.r_[first, read.size])
    ok = (size >= 3) & (size <= max_share * int(model.sum()))
    glue = np.zeros(model.size, bool)
    glue[ncls[cost[nodes] <= 0.0]] = True
    for g in sorted(np.flatnonzero(ok), key=lambda g: (-size[g], read[first[g]])):
        group = reader[first[g]: first[g] + size[g]].tolist()
        inside = set(group)
        front = group
        for _ in range(glue_depth):
            nxt = []
            for c in front:
                for i in cand[c]:
                    for j in kids[i]:
                        if glue[j] and j not in inside:
                            inside.add(j)
                            nxt.append(j)
            front = nxt
        yield np.array(sorted(inside), np.int64)


def _freed(pre: dict, free: np.ndarray, keep: np.ndarray) -> dict:
    """`pre` with the classes in `free` keeping all their candidates and every other model
    class only the one `keep` selects (mapped to its dominator), or none where `keep` has none
    there: the neighbourhood of `keep` a large-neighbourhood move solves exactly."""
    keep = _kept(pre, keep)
    is_free = np.zeros(len(pre["cand"]), bool)
    is_free[free] = True
    cand = [cs if is_free[c] or not cs else ([int(keep[c])] if keep[c] in cs else [])
            for c, cs in enumerate(pre["cand"])]
    return dict(pre, cand=cand)


def _kept(pre: dict, choice: np.ndarray) -> np.ndarray:
    """`choice` with every node presolve dropped as dominated replaced by its dominator (what
    makes a selection of the problem one of the model's; the cost does not rise)."""
    sel = np.array(choice, np.int64)
    on = sel >= 0
    sel[on] = pre["rep"][sel[on]]
    return sel


# ---------------------------------------------------------------------------------------------
# The model

def new_highs(opts: dict) -> Any:
    """A HiGHS instance set up as every model of a solve is: quiet unless `verbose`, one
    thread, the seed, the relative gap, and the caller's own options last."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(opts.get("verbose", False)))
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", int(opts.get("seed", 0)))
    h.setOptionValue("mip_rel_gap", float(opts.get("rel_gap", 0.0)))
    h.setOptionValue("mip_abs_gap", 1e-7)
    for k, v in (opts.get("highs") or {}).items():
        h.setOptionValue(k, v)
    return h


class _Model:
    """The HiGHS model of a presolved problem: columns a_c (model classes), x_i (their
    candidates), t_c (classes of cyclic components, acyclic="order" only)."""

    def __init__(self, P: dict, pre: dict, opts: dict):
        import highspy

        self.P, self.pre = P, pre
        C = P["n_classes"]
        cost = P["node_cost"]
        kids, cand, cyclic, comp = pre["kids"], pre["cand"], pre["cyclic"], pre["comp"]
        sizes_c = pre["comp_size"]
        mclasses = np.nonzero(pre["model"])[0]
        self.a_col = a_col = np.full(C, -1, np.int64)
        a_col[mclasses] = np.arange(mclasses.size)
        self.nodes = nodes = np.array([i for c in mclasses for i in cand[c]], np.int64)
        self.nA = nA = mclasses.size
        self.x_col = x_col = np.full(P["node_class"].size, -1, np.int64)
        x_col[nodes] = nA + np.arange(nodes.size)
        self.ncol = ncol = nA + nodes.size
        self.order = order = opts.get("acyclic", "cuts") == "order"
        tclasses = np.nonzero(cyclic)[0] if order else np.zeros(0, np.int64)
        self.t_col = t_col = np.full(C, -1, np.int64)
        t_col[tclasses] = ncol + np.arange(tclasses.size)
        self.ntotal = ntotal = ncol + tclasses.size

        self.h = h = new_highs(opts)
        self.inf = inf = highspy.kHighsInf
        lower = np.zeros(ntotal)
        upper = np.ones(ntotal)
        for r in P["roots"]:
            if a_col[r] >= 0:
                lower[a_col[r]] = 1.0
        for c in tclasses:
            upper[t_col[c]] = max(int(sizes_c[comp[c]]) - 1, 0)
        self.obj = obj = np.zeros(ntotal)
        obj[nA: ncol] = cost[nodes]
        h.addVars(ntotal, lower, upper)
        h.changeColsCost(ntotal, np.arange(ntotal, dtype=np.int32), obj)
        h.changeColsIntegrality(ncol, np.arange(ncol, dtype=np.int32),
                                np.full(ncol, 1, np.uint8))   # kInteger
        # per class: Σ x - a = 0
        ncand = np.array([len(cand[c]) for c in mclasses], np.int64)
        node_cls = P["node_class"][nodes].astype(np.int64)
        ends = np.cumsum(ncand + 1) - 1
        cols = np.empty(int(ncand.sum()) + nA, np.int64)
        vals = np.ones(cols.size)
        cols[ends], vals[ends] = a_col[mclasses], -1.0
        member = np.ones(cols.size, bool)
        member[ends] = False
        cols[member] = x_col[nodes]             # `nodes` lists each class's candidates in turn
        blocks = [(np.zeros(nA), np.zeros(nA), np.repeat(np.arange(nA), ncand + 1), cols, vals)]
        # per (class c, child class k): Σ_{i in c uses k} x_i - a_k <= 0, or a_c - a_k <= 0 when
        # every candidate of c uses k: one row per class pair, not one per node, and no weaker
        owner = np.repeat(np.arange(nodes.size), [len(kids[i]) for i in nodes])
        child = np.fromiter((k for i in nodes for k in kids[i]), np.int64, owner.size)
        keep = a_col[child] >= 0 if child.size else np.zeros(0, bool)
        owner, child = owner[keep], child[keep]
        pc = node_cls[owner]
        key = pc * C + child
        order_ = np.argsort(key, kind="stable")
        owner, child, pc, key = owner[order_], child[order_], pc[order_], key[order_]
        first = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, bool)
        gid = np.cumsum(first) - 1
        gstart = np.flatnonzero(first)
        gsize = np.diff(np.r_[gstart, key.size])
        gc, gk = pc[gstart], child[gstart]
        whole = gsize == ncand[a_col[gc]] if gc.size else np.zeros(0, bool)
        nrow = gstart.size
        # rows: whole groups [a_c, a_k] (1, -1); others [x_i..., a_k] (1..., -1)
        sizes = np.where(whole, 2, gsize + 1)
        row_of_entry = np.repeat(np.arange(nrow), sizes)
        pos = np.zeros(sizes.sum(), np.int64)
        val = np.ones(sizes.sum())
        ends = np.cumsum(sizes) - 1
        val[ends] = -1.0
        pos[ends] = a_col[gk]
        wr = np.flatnonzero(whole)
        pos[ends[wr] - 1] = a_col[gc[wr]]
        part = ~whole[gid]
        slot = np.cumsum(sizes)[gid] - sizes[gid] + (np.arange(key.size) - gstart[gid])
        pos[slot[part]] = x_col[nodes[owner[part]]]
        blocks.append((np.full(nrow, -inf), np.zeros(nrow), row_of_entry, pos, val))
        # dominator rows a_c - a_k <= 0 (k in every derivation of c; dominators.py), where not
        # already a whole-class child row
        dom = np.asarray(P.get("dominators", np.zeros((0, 2), np.int64)), np.int64)
        if dom.size:
            dc, dk = dom[:, 0], dom[:, 1]
            dkeep = (a_col[dc] >= 0) & (a_col[dk] >= 0) & ~np.isin(dc * C + dk, gc[whole] * C
                                                                   + gk[whole])
            dc, dk = dc[dkeep], dk[dkeep]
            nd = dc.size
            dcols = np.empty(2 * nd, np.int64)
            dcols[0::2], dcols[1::2] = a_col[dc], a_col[dk]
            dvals = np.tile([1.0, -1.0], nd)
            blocks.append((np.full(nd, -inf), np.zeros(nd), np.repeat(np.arange(nd), 2), dcols,
                           dvals))
        else:
            nd = 0
        # closure rows Σ_{i in c, k in D(i)} x_i - a_k <= 0 (dominators.py)
        ck = np.asarray(P.get("closure", np.zeros((0, 2), np.int64)), np.int64)
        nq = 0
        if ck.size:
            cstart = np.asarray(P["closure_start"], np.int64)
            cnodes = np.asarray(P["closure_nodes"], np.int64)
            sizes_q = np.diff(cstart)
            row_q = np.repeat(np.arange(ck.shape[0]), sizes_q)
            xc = x_col[cnodes]
            ok = (a_col[ck[:, 1]] >= 0) & (a_col[ck[:, 0]] >= 0)
            ok &= np.bincount(row_q, weights=(xc >= 0), minlength=ck.shape[0]) >= 2
            sel = np.flatnonzero(ok)
            if sel.size:
                take = ok[row_q] & (xc >= 0)
                rq = row_q[take]
                renum = np.full(ck.shape[0], -1, np.int64)
                renum[sel] = np.arange(sel.size)
                # per kept row: its x entries, then -a_k
                cnt = np.bincount(renum[rq], minlength=sel.size)
                ends = np.cumsum(cnt + 1) - 1
                qcols = np.empty(int(cnt.sum()) + sel.size, np.int64)
                qvals = np.ones(qcols.size)
                qcols[ends], qvals[ends] = a_col[ck[sel, 1]], -1.0
                member = np.ones(qcols.size, bool)
                member[ends] = False
                qcols[member] = xc[take]        # rows come in order, members in order
                nq = sel.size
                blocks.append((np.full(nq, -inf), np.zeros(nq), np.repeat(np.arange(nq),
                                                                          cnt + 1), qcols,
                               qvals))
        self.nrows = 0
        for lo, hi, rows_, cols_, vals_ in blocks:
            self._add_rows(lo, hi, rows_, cols_, vals_)
        pairs = int(nrow)

        # in-component class edges (c, k) and the candidates of c using k
        self.uses: dict[tuple[int, int], list[int]] = {}
        cyc_e = cyclic[gc] & (comp[gk] == comp[gc]) if gc.size else np.zeros(0, bool)
        for g in np.flatnonzero(cyc_e):
            us = nodes[owner[gstart[g]: gstart[g] + gsize[g]]]
            self.uses[(int(gc[g]), int(gk[g]))] = [int(i) for i in us]
        # cyclic components: 2-cycles up front (x_{c->k} + x_{k->c} <= a_c and <= a_k); with
        # acyclic="order" also t_c >= t_k + 1 when c uses k (big-M = the component's size)
        self.seen: set[frozenset] = set()
        rl: list[float] = []
        ru: list[float] = []
        starts: list[int] = []
        idx: list[int] = []
        val_: list[float] = []

        def row(lo: float, hi: float, cols: list[int], coefs: list[float]) -> None:
            rl.append(lo)
            ru.append(hi)
            starts.append(len(idx))
            idx.extend(cols)
            val_.extend(coefs)

        two = 0
        for (c, k), us in self.uses.items():
            if order:
                M = float(sizes_c[comp[c]])
                row(1.0 - M, inf, [int(t_col[c]), int(t_col[k])] + [int(x_col[i]) for i in us],
                    [1.0, -1.0] + [-M] * len(us))
            if c < k and (k, c) in self.uses:
                back = self.uses[(k, c)]
                cols = [int(x_col[i]) for i in us + back]
                for end in (c, k):
                    row(-inf, 0.0, cols + [int(a_col[end])], [1.0] * len(cols) + [-1.0])
                self.seen.add(frozenset((c, k)))
                two += 1
        if rl:
            h.addRows(len(rl), np.array(rl), np.array(ru), len(idx), np.array(starts, np.int32),
                      np.array(idx, np.int32), np.array(val_, np.float64))
            self.nrows += len(rl)
        self.stats = {"columns": int(ntotal), "rows": self.nrows, "child_rows": pairs,
                      "dominator_rows": int(nd), "closure_rows": int(nq),
                      "two_cycles": two}

    def _add_rows(self, lo: np.ndarray, hi: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                  vals: np.ndarray) -> None:
        """Rows given as (row index, column, value) triples sorted by row."""
        n = lo.size
        if not n:
            return
        starts = np.searchsorted(rows, np.arange(n)).astype(np.int32)
        self.h.addRows(n, np.asarray(lo, np.float64), np.asarray(hi, np.float64), cols.size,
                       starts, np.asarray(cols, np.int32), np.asarray(vals, np.float64))
        self.nrows += n

    def cycle_cut(self, classes: list[int]) -> int:
        """Rows for the class set S of a cycle: each c in S is active only if some candidate of S
        uses no class of S (in an acyclic selection the active part of S has a sink). Returns
        1, or 0 when S was cut before."""
        S = frozenset(classes)
        if S in self.seen:
            return 0
        self.seen.add(S)
        cand, kids = self.pre["cand"], self.pre["kids"]
        entry = [int(self.x_col[i]) for c in S for i in cand[c] if not (kids[i] & S)]
        for c in S:
            cols = entry + [int(self.a_col[c])]
            self.h.addRow(-self.inf, 0.0, len(cols), np.array(cols, np.int32),
                          np.array([-1.0] * len(entry) + [1.0]))
        return 1

    def start_vector(self, choice: np.ndarray) -> np.ndarray | None:
        """Column values of a valid selection (dominated nodes mapped to their dominators), or
        None when it does not fit the model."""
        P, pre = self.P, self.pre
        fixed = pre["fixed"]
        sel = _kept(pre, choice)
        if _valid_cost(P, sel) is None:
            return None
        _, topo = _post_order(P, sel)
        v = np.zeros(self.ntotal)
        rank: dict[int, int] = {}
        for c in topo:
            if fixed[c] >= 0:
                continue
            if self.a_col[c] < 0 or self.x_col[sel[c]] < 0:
                return None
            v[self.a_col[c]] = 1.0
            v[self.x_col[sel[c]]] = 1.0
            if self.t_col[c] >= 0:      # position among its component's selected classes
                lab = int(pre["comp"][c])
                v[self.t_col[c]] = rank.get(lab, 0)
                rank[lab] = rank.get(lab, 0) + 1
        return v

    def selection(self, colv: np.ndarray) -> np.ndarray:
        C = self.P["n_classes"]
        fixed = self.pre["fixed"]
        sel = np.full(C, -1, np.int64)
        sel[fixed >= 0] = fixed[fixed >= 0]
        xs = colv[self.nA: self.ncol] > 0.5
        sel[self.P["node_class"][self.nodes[xs]]] = self.nodes[xs]
        return sel



def _restricted(P: dict, pre: dict, k: int, keep: np.ndarray | None) -> dict:
    """`pre` with each model class cut down to its k candidates of least tree cost (own cost
    plus the children's Knuth tree costs; ties by node index), plus the one `keep` selects there
    (mapped to its dominator), so `keep` stays a valid start."""
    if "score" not in pre:
        tree, kids, cost = pre["tree"], pre["kids"], P["node_cost"]
        pre["score"] = {i: float(cost[i]) + sum(float(tree[j]) for j in kids[i])
                        for cs in pre["cand"] for i in cs}
    score = pre["score"]
    keep = None if keep is None else _kept(pre, keep)
    cand = []
    for c, cs in enumerate(pre["cand"]):
        if len(cs) <= k:
            cand.append(cs)
            continue
        sel = sorted(cs, key=lambda i: (score[i], i))[:k]
        if keep is not None and keep[c] >= 0:
            j = int(keep[c])
            if j not in sel and j in cs:
                sel.append(j)
        cand.append(sel)
    return dict(pre, cand=cand)


