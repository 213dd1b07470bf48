"""Exact DAG extraction by integer programming with HiGHS (DESIGN §6).

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

Primal phase: first the model restricted to each class's 4 candidates of least tree cost (plus
the warm start's) is solved, in at most a quarter of the time; on ViT-Base at 80 000 nodes it
finds in about a second the merged Q/K/V projections the full model does not reach in a minute.
Its answer is the full model's start; its bound is not kept (it holds for the restriction only).

HiGHS was seen to hang ignoring its time limit (DESIGN §6), and it overruns it by seconds on
large models, so by default the solve runs in a spawned subprocess with a hard deadline
(time_limit + kill_margin). The worker reports every improvement as it finds it (and, with
highspy 1.16, HiGHS's improving solutions during a solve), so a killed worker's answer is its
last report, status "killed"; without one, the warm start (or the internal acyclic greedy).

What is reported is checked, not taken from HiGHS's status: every selection is walked (valid,
acyclic, its DAG cost) before it counts; the solution HiGHS returns must have the objective HiGHS
reports or a cost its dual bound proves (highspy 1.16 hands back a MIP start set with setSolution
itself when that start is already optimal in the presolved space, with objective and bound of
another solution; where highspy has the user-solution callback the start goes in that way);
otherwise the solve is repeated without the start, and a second mismatch ends the loop with
status "inconsistent" and the best verified selection. The bound is HiGHS's dual bound on the
full model (never a primal cost); "optimal" means that bound meets the true DAG cost of the
returned selection. The result is never worse than the warm start.

The stall rule (`stall` seconds, 0 off; `optimize` and `run --ilp-stall` default to
STALL_SECONDS): HiGHS's MIP-interrupt callback (highspy 1.7.1 has it) reports its primal and dual
bounds during the full model's solve, and the solve is interrupted, status "stalled", when over
the last max(stall, STALL_SHARE x elapsed) seconds neither the best primal cost (checked or
HiGHS's own) improved nor the bound closed STALL_CLOSE of the gap. Its answer and bound are taken
as at a time limit; the trajectory is kept in the result's stats["trajectory"]. Without the
callback only the time limit stops a solve.

The gap rule (`stop_gap`, a fraction, 0 off; `optimize` and `run --ilp-gap PERCENT` default to
GAP_PERCENT), on the same reports: the full model's solve is interrupted, status "within_gap",
when the checked answer is within `stop_gap` of HiGHS's dual bound, (cost - bound) / cost <=
stop_gap, and the answer (checked, or HiGHS's own incumbent) has not improved for GAP_WAIT seconds
counted from the later of its last improvement and HiGHS's first report on the full model. The
bound proves the answer loses at most `stop_gap` to the optimum; the result's bound and gap are
the ones the rule saw (or better), and it is never called optimal unless the bound meets the
answer. The restricted phases are not affected. With highspy 1.7.1 (improving solutions reported
in the presolved space only) the checked answer changes only when a solve ends, so the rule acts
on the warm start's or the restricted phase's answer and waits while HiGHS holds a better one.

Costs must be non-negative (an unreachable selected part then never pays off, which the cycle cuts
rely on).
"""
from __future__ import annotations

import bisect
import heapq
import math
import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["IlpResult", "extract_ilp"]

RESTRICT = (4,)                 # candidates per class in the restricted primal phases
RESTRICT_SHARE = 0.25           # of the time left, at most, for each restricted phase
RESTRICT_MAX_FRACTION = 0.7     # a restricted model this close to the full one is skipped
# The stall rule (see _Progress), from the trajectories of NasRNN's run and of every reference
# e-graph (README, Extraction): BERT's answer improves 13 % after 2.4 s in which neither its
# answer nor its bound moved (a sub-MIP heuristic at the root), so the window is 8 s, which keeps
# that at 4x this machine's time; stalled solves stop at 17 s (NasRNN), 26 s (cyclic NasRNN).
STALL_SECONDS = 8.0             # the shortest window (optimize's default; 0: off)
STALL_SHARE = 0.25              # ... which grows to this share of the solve's elapsed time
STALL_CLOSE = 0.05              # the share of the gap the bound must close within a window
# The gap rule (see _Progress), from the same trajectories (README, Extraction): every late
# improvement came while the gap was large (BERT: 13 %) or soon after HiGHS's first report on the
# full model (TT at 20 000 nodes: 0.09 % better 2.2-3.3 s after it, with a gap under 2 % from
# 0.9 s after it); replayed on clocks 1-2x slower, a 4 s wait keeps every improvement that comes
# within run's 10 s (3 s loses TT's at 1.25x-2x), and NasRNN's run still stops as soon as its gap
# reaches 2 % (6.1-6.3 s into the ILP).
GAP_PERCENT = 2.0               # the largest gap at which the rule stops (optimize's default)
GAP_WAIT = 4.0                  # seconds without improvement it waits for
TRACE_STEP = 0.1                # seconds between the recorded trajectory's points


@dataclass
class IlpResult:
    choice: np.ndarray      # int64[C]: chosen candidate per class, -1 where unused
    cost: float             # true DAG cost of `choice` (inf when none was found)
    bound: float            # best lower bound on the optimal DAG cost
    gap: float              # (cost - bound) / max(|cost|, 1e-9); 0 when proven optimal
    optimal: bool
    seconds: float
    cuts: int               # class sets whose cycles were cut (2-cycles up front, then lazily)
    status: str             # "optimal" | "time_limit" | "stalled" | "within_gap" | "killed"
    #                         | "infeasible" | "inconsistent" | "error: ..."; "stalled",
    #                         "within_gap": stopped by the stall or the gap rule (see
    #                         _Progress); "inconsistent": HiGHS's answer contradicted
    #                         itself or a checked selection, and the best verified selection is
    #                         returned
    resolves: int = 0       # solves repeated without the MIP start (see _solve)
    stats: dict = field(default_factory=dict)   # presolve and model sizes, solve rounds


# ---------------------------------------------------------------------------------------------
# Plain-array helpers (no numba: the worker process imports this module only)

def _arrays(problem) -> dict[str, Any]:
    return {k: np.asarray(getattr(problem, k)) for k in
            ("node_class", "node_cost", "child_start", "child_class", "class_start",
             "class_nodes", "roots")} | {"n_classes": int(problem.n_classes)}


def _children(P: dict, i: int) -> np.ndarray:
    return P["child_class"][P["child_start"][i]: P["child_start"][i + 1]]


def _dag_walk(P: dict, choice: np.ndarray) -> tuple[float, int, np.ndarray]:
    """(cost, status, reachable mask) as dag._walk: 0 ok, 1 missing, 2 cycle, 3 wrong class."""
    C = P["n_classes"]
    state = np.zeros(C, np.int8)
    ncls, cost_arr, cs, cc = P["node_class"], P["node_cost"], P["child_start"], P["child_class"]
    cost = 0.0
    for r in P["roots"]:
        r = int(r)
        if state[r] == 2:
            continue
        if choice[r] < 0:
            return cost, 1, state
        if ncls[choice[r]] != r:
            return cost, 3, state
        stack = [(r, 0)]
        state[r] = 1
        while stack:
            c, k = stack[-1]
            i = int(choice[c])
            if cs[i] + k >= cs[i + 1]:
                state[c] = 2
                cost += float(cost_arr[i])
                stack.pop()
                continue
            stack[-1] = (c, k + 1)
            kid = int(cc[cs[i] + k])
            if state[kid] == 2:
                continue
            if state[kid] == 1:
                return cost, 2, state
            j = choice[kid]
            if j < 0:
                return cost, 1, state
            if ncls[j] != kid:
                return cost, 3, state
            stack.append((kid, 0))
            state[kid] = 1
    return cost, 0, state


def _valid_walk(P: dict, choice) -> tuple[float, np.ndarray] | None:
    """(DAG cost, the selection with unreachable classes set to -1) of a valid selection, from
    one walk; None for an invalid one."""
    if choice is None:
        return None
    choice = np.asarray(choice, np.int64)
    if choice.shape != (P["n_classes"],):
        return None
    cost, status, state = _dag_walk(P, choice)
    return (cost, np.where(state == 2, choice, -1).astype(np.int64)) if status == 0 else None


def _valid_cost(P: dict, choice) -> float | None:
    walked = _valid_walk(P, choice)
    return None if walked is None else walked[0]


def _trimmed(P: dict, choice: np.ndarray) -> np.ndarray:
    """The selection with unreachable classes set to -1 (valid selections only)."""
    _, _, state = _dag_walk(P, choice)
    out = np.where(state == 2, choice, -1).astype(np.int64)
    return out


def _find_cycles(P: dict, choice: np.ndarray, limit: int = 200) -> list[list[int]]:
    """Cycles (as lists of chosen nodes) of the selection reachable from the roots. After a back
    edge is recorded the walk goes on as if that edge were absent, so several come at once."""
    C = P["n_classes"]
    cs, cc = P["child_start"], P["child_class"]
    state = np.zeros(C, np.int8)
    pos = np.full(C, -1, np.int64)
    cycles: list[list[int]] = []
    for r in P["roots"]:
        r = int(r)
        if state[r] or choice[r] < 0:
            continue
        stack = [[r, 0]]
        state[r] = 1
        pos[r] = 0
        while stack:
            top = stack[-1]
            c, k = top
            i = int(choice[c])
            if cs[i] + k >= cs[i + 1]:
                state[c] = 2
                stack.pop()
                continue
            top[1] = k + 1
            kid = int(cc[cs[i] + k])
            if state[kid] == 2 or choice[kid] < 0:
                continue
            if state[kid] == 1:
                cycles.append([int(choice[s[0]]) for s in stack[pos[kid]:]])
                if len(cycles) >= limit:
                    return cycles
                continue
            state[kid] = 1
            pos[kid] = len(stack)
            stack.append([kid, 0])
    return cycles


def _knuth_greedy(P: dict, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Knuth's generalised Dijkstra over the alive nodes with tree costs: (choice, productive,
    tree cost per class).
    A class is chosen only after all children of its chosen node, so the result is acyclic."""
    C = P["n_classes"]
    N = P["node_class"].size
    cs, cc, ncls, cost = P["child_start"], P["child_class"], P["node_class"], P["node_cost"]
    # parents: class -> nodes that use it (one entry per distinct child class)
    missing = np.zeros(N, np.int64)
    users: list[list[int]] = [[] for _ in range(C)]
    for i in range(N):
        if not alive[i]:
            continue
        kids = set(int(k) for k in cc[cs[i]: cs[i + 1]])
        missing[i] = len(kids)
        for k in kids:
            users[k].append(i)
    acc = cost.astype(np.float64).copy()
    done = np.zeros(C, bool)
    choice = np.full(C, -1, np.int64)
    heap = [(float(acc[i]), i) for i in range(N) if alive[i] and missing[i] == 0]
    heapq.heapify(heap)
    tree = np.full(C, np.inf)
    while heap:
        v, i = heapq.heappop(heap)
        c = int(ncls[i])
        if done[c]:
            continue
        done[c] = True
        choice[c] = i
        tree[c] = v
        for j in users[c]:
            acc[j] += v
            missing[j] -= 1
            if missing[j] == 0 and not done[ncls[j]]:
                heapq.heappush(heap, (float(acc[j]), j))
    return choice, done, tree


# ---------------------------------------------------------------------------------------------
# Presolve

def _scc_labels(n: int, start: np.ndarray, adj: np.ndarray) -> np.ndarray:
    """Tarjan's strongly connected components of the CSR digraph (start, adj), iteratively.
    Labels are in emission order: every edge goes to a component with a label <= its own."""
    index = np.full(n, -1, np.int64)
    low = np.zeros(n, np.int64)
    label = np.full(n, -1, np.int64)
    onstack = np.zeros(n, bool)
    stack: list[int] = []
    counter = 0
    ncomp = 0
    st = start.tolist()
    ad = adj.tolist()
    for r in range(n):
        if index[r] >= 0:
            continue
        work = [(r, st[r])]
        index[r] = low[r] = counter
        counter += 1
        stack.append(r)
        onstack[r] = True
        while work:
            v, e = work[-1]
            if e < st[v + 1]:
                work[-1] = (v, e + 1)
                w = ad[e]
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    onstack[w] = True
                    work.append((w, st[w]))
                elif onstack[w] and index[w] < low[v]:
                    low[v] = index[w]
                continue
            work.pop()
            if work:
                u = work[-1][0]
                if low[v] < low[u]:
                    low[u] = low[v]
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    onstack[w] = False
                    label[w] = ncomp
                    if w == v:
                        break
                ncomp += 1
    return label


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


def _kept(pre: dict, choice: np.ndarray) -> np.ndarray:
    """`choice` with every node presolve dropped as dominated replaced by its dominator (what
    makes a selection of the problem one of the model's; the cost does not rise)."""
    sel = np.array(choice, np.int64)
    on = sel >= 0
    sel[on] = pre["rep"][sel[on]]
    return sel


# ---------------------------------------------------------------------------------------------
# The model

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

        self.h = h = highspy.Highs()
        self.inf = inf = highspy.kHighsInf
        h.setOptionValue("output_flag", bool(opts.get("verbose", False)))
        h.setOptionValue("threads", 1)
        h.setOptionValue("random_seed", int(opts.get("seed", 0)))
        h.setOptionValue("mip_rel_gap", float(opts.get("rel_gap", 0.0)))
        h.setOptionValue("mip_abs_gap", 1e-7)
        for k, v in (opts.get("highs") or {}).items():
            h.setOptionValue(k, v)
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


# ---------------------------------------------------------------------------------------------
# The solve loop (runs in the worker process by default)

class _Incumbent:
    """The best verified selection so far (never taken on trust: each offer is walked by
    `_valid_cost`) and the best proven bound; `emit` (the worker's progress channel) hears of
    every improvement, so a killed worker still hands back what it found."""

    def __init__(self, P: dict, emit: Callable[[dict], None] | None):
        self.P, self.emit = P, emit
        self.choice: np.ndarray | None = None
        self.cost = float("inf")
        self.bound = 0.0

    def offer(self, sel: np.ndarray | None) -> bool:
        walked = _valid_walk(self.P, sel)
        if walked is None or walked[0] >= self.cost - _tol(walked[0]) * (self.choice is not None):
            return False
        self.cost, self.choice = walked
        self._emit()
        return True

    def offer_bound(self, b: float) -> None:
        if np.isfinite(b) and b > self.bound:
            self.bound = b
            self._emit()

    def _emit(self) -> None:
        if self.emit is not None and self.choice is not None:
            self.emit({"choice": self.choice, "cost": self.cost,
                       "bound": min(self.bound, self.cost)})


class _Progress:
    """One model's solve over time, as HiGHS's MIP-interrupt callback reports it: the best
    primal cost (the checked incumbent's or HiGHS's own, the lower) and the best dual bound
    (every round's holds), and the two rules that stop it on them (`stopped` says which, None
    while neither has).

    The stall rule: over the last max(`stall`, STALL_SHARE x elapsed) seconds the primal cost did
    not improve and the bound closed less than STALL_CLOSE of the gap there was at the window's
    start; `stall` 0 never stops.

    The gap rule: the checked cost (what the solve returns, or better) is within `gap` of the
    bound, (cost - bound) <= gap x cost, and the primal cost has not improved (by more than
    _tol) for GAP_WAIT seconds since the later of its last improvement and the first report;
    `gap` 0 never stops.

    Elapsed time counts from `start` (the clock's reading; the clock is injectable so tests can
    drive the rules). `trace` keeps the trajectory (seconds, checked cost, HiGHS's primal bound,
    dual bound), thinned to TRACE_STEP seconds, for the result's stats."""

    def __init__(self, upper: Callable[[], float], stall: float, start: float | None = None,
                 clock: Callable[[], float] | None = None, gap: float = 0.0):
        self.upper, self.stall, self.gap = upper, float(stall), float(gap)
        self.clock = clock or _CLOCK
        self.start = self.clock() if start is None else start
        self.ts: list[float] = []           # change points of (ups, lows)
        self.ups: list[float] = []
        self.lows: list[float] = []
        self.trace: list[tuple[float, float, float, float]] = []
        self.first: float | None = None     # seconds: the first report
        self.best = math.inf                # primal cost at its last improvement ...
        self.improved: float | None = None  # ... and when (seconds)
        self.stopped: str | None = None     # "stalled" | "within_gap" once a rule fired
        self.stopped_at = math.inf          # time.perf_counter() when it fired

    @property
    def stalled(self) -> bool:
        return self.stopped == "stalled"

    @property
    def bound(self) -> float:
        """The best dual bound reported (-inf before the first finite one)."""
        return self.lows[-1] if self.lows else -math.inf

    def observe(self, primal: float, bound: float) -> bool:
        """Record HiGHS's primal and dual bound now; True once a rule has stopped the solve."""
        t = self.clock() - self.start
        checked = self.upper()
        primal = primal if math.isfinite(primal) else math.inf
        low = bound if math.isfinite(bound) else -math.inf
        if self.lows:
            low = max(low, self.lows[-1])
        up = min(checked, primal)
        if not self.ts or up != self.ups[-1] or low != self.lows[-1]:
            self.ts.append(t)
            self.ups.append(up)
            self.lows.append(low)
        if self.first is None:
            self.first = t
        if up < self.best - (_tol(self.best) if math.isfinite(self.best) else 0.0):
            self.best, self.improved = up, t
        self._trace(t, checked, primal, low)
        if self.stopped is None:
            if self.stall > 0 and self._stalled(t):
                self.stopped = "stalled"
            elif self.gap > 0 and self._within_gap(t, checked, low):
                self.stopped = "within_gap"
            if self.stopped is not None:
                self.stopped_at = time.perf_counter()
        return self.stopped is not None

    def _trace(self, t: float, checked: float, primal: float, low: float) -> None:
        """A point every TRACE_STEP seconds, and one at every improvement."""
        if not self.trace or t - self.trace[-1][0] >= TRACE_STEP or \
                checked < self.trace[-1][1] or primal < self.trace[-1][2]:
            self.trace.append((round(t, 3), checked, primal, low))

    def _stalled(self, t: float) -> bool:
        """The stall rule at time t: no primal improvement and too little bound progress over
        the window (never before a full window with a finite gap has been seen)."""
        i = bisect.bisect_right(self.ts, t - max(self.stall, STALL_SHARE * t)) - 1
        if i < 0:
            return False
        up0, low0, up, low = self.ups[i], self.lows[i], self.ups[-1], self.lows[-1]
        gap0 = up0 - low0
        if not math.isfinite(gap0) or gap0 <= _tol(up0) or up < up0 - _tol(up0):
            return False
        return low - low0 < STALL_CLOSE * gap0

    def _within_gap(self, t: float, checked: float, low: float) -> bool:
        """The gap rule at time t on the checked cost and the bound."""
        if not (math.isfinite(checked) and math.isfinite(low)) or \
                checked - low > self.gap * max(abs(checked), 1e-9):
            return False
        since = self.first if self.improved is None else max(self.first, self.improved)
        return t - since >= GAP_WAIT

    def record(self) -> dict:
        """The trajectory for the result's stats, its last point included."""
        points = list(self.trace)
        if points:
            last = (round(self.clock() - self.start, 3), self.upper(), points[-1][2],
                    self.lows[-1])
            if last != points[-1]:
                points.append(last)
        return {"stalled": self.stalled, "stopped": self.stopped, "points": points}


def _solve(P: dict, opts: dict) -> dict:
    t0, c0 = time.perf_counter(), _CLOCK()      # c0: the stall rule's clock at the start
    deadline = t0 + float(opts["time_limit"])
    if "wall_deadline" in opts:         # the caller's clock: the worker's start-up counts too
        deadline = min(deadline, t0 + float(opts["wall_deadline"]) - time.time())
    cost = P["node_cost"]
    if np.any(cost < 0):
        raise ValueError("extract_ilp needs non-negative node costs")
    out: dict[str, Any] = {"choice": None, "cost": float("inf"), "bound": 0.0, "cuts": 0,
                           "status": "infeasible", "optimal": False, "stats": {}}
    inc = _Incumbent(P, opts.get("emit"))
    inc.offer(opts.get("warm_start"))           # the warm start, then the acyclic greedy
    pre = _presolve(P)
    stats: dict[str, Any] = {"presolve": pre["stats"]}
    out["stats"] = stats
    if not pre["feasible"]:
        return out
    inc.offer(pre["greedy"])

    # primal phases: the model over each class's K candidates of least tree cost (and the best
    # selection's), K growing while such a restricted model still solves to optimality in its
    # share of the time; each answer is a valid selection and the next phase's start. Their
    # bounds hold for the restricted model only and are not kept.
    stats["restricted"] = []
    stats["trajectory"] = trajectory = []
    stall, stop_gap = float(opts.get("stall", 0.0)), float(opts.get("stop_gap", 0.0))
    full_nodes = sum(len(x) for x in pre["cand"])
    cut_sets: set[frozenset] = set()            # cycles cut in a phase: cut in the full model too
    for k in opts.get("restrict", RESTRICT):
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        t = time.perf_counter()
        sub = _restricted(P, pre, int(k), inc.choice)
        n_sub = sum(len(x) for x in sub["cand"])
        if n_sub > RESTRICT_MAX_FRACTION * full_nodes:
            break
        ms = _Model(P, sub, opts)
        watch = _Progress(lambda: inc.cost, 0.0, start=c0)     # recorded; its share is capped
        loop = _cut_loop(P, ms, inc, t + RESTRICT_SHARE * left, bounds=False, watch=watch)
        trajectory.append({"phase": f"k{int(k)}", "start": round(t - t0, 3)} | watch.record())
        cut_sets |= ms.seen
        stats["restricted"].append({"k": int(k), "nodes": n_sub, "cost": inc.cost,
                                    "status": loop["status"],
                                    "seconds": round(time.perf_counter() - t, 2)})
        if loop["status"] != "optimal":
            break
    t = time.perf_counter()
    m = _Model(P, pre, opts)
    inherited = sum(m.cycle_cut(sorted(S)) for S in cut_sets)
    stats["model"] = m.stats | {"seconds": round(time.perf_counter() - t, 3),
                                "inherited_cuts": inherited}
    watch = _Progress(lambda: inc.cost, stall, start=c0, gap=stop_gap)
    loop = _cut_loop(P, m, inc, deadline, watch=watch)
    trajectory.append({"phase": "full", "start": round(t - t0, 3)} | watch.record())
    stats["rounds"] = loop["rounds"]
    best, best_cost, bound, status = inc.choice, inc.cost, inc.bound, loop["status"]
    # "optimal" only when the bound proves the returned selection's cost, whatever HiGHS said
    optimal = best is not None and best_cost - bound <= _tol(best_cost) + \
        float(opts.get("rel_gap", 0.0)) * abs(best_cost)
    if best is not None and bound > best_cost + _tol(best_cost):
        status, bound, optimal = "inconsistent", 0.0, False     # a bound a valid selection beats
    elif optimal:
        status = "optimal"
    elif status == "optimal" or (status == "infeasible" and best is not None):
        status = "inconsistent"
    out.update(choice=best, cost=best_cost, bound=bound, cuts=loop["cuts"] + inherited,
               status=status, optimal=optimal, resolves=loop["resolves"])
    return out


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


def _cut_loop(P: dict, m: "_Model", inc: _Incumbent, deadline: float, bounds: bool = True,
              watch: _Progress | None = None) -> dict:
    """Solve `m` until its incumbent is acyclic (lazy cycle cuts), the deadline passes, HiGHS
    stops or one of `watch`'s rules stops it (status "stalled" or "within_gap"), offering every
    acyclic solution it sees to `inc` (and, with `bounds`, HiGHS's dual bounds: only the full
    model's bound the true optimum; when a rule stopped the solve, also the bound it saw).
    Returns the status and counts."""
    import highspy

    status = "time_limit"
    resolves = 0
    cuts = m.stats["two_cycles"]        # class sets cut: the 2-cycles up front, then lazily
    rounds = 0
    seen_cycles: list[list[int]] = []   # cycles of incumbents HiGHS reported during a solve

    def improving(colv: np.ndarray) -> None:
        sel = m.selection(colv)
        cyc = _find_cycles(P, sel, limit=20)
        if cyc:
            seen_cycles.extend(cyc)
        else:
            inc.offer(sel)

    while True:
        if time.perf_counter() >= deadline:
            break
        if m.ncol:
            start = m.start_vector(inc.choice) if inc.choice is not None else None
            kind, ms, colv, db, again = run_checked(
                m.h, m.obj, start, deadline, on_improving=improving,
                on_progress=None if watch is None else watch.observe)
            rounds += 1
            resolves += again
            if bounds:
                inc.offer_bound(db)         # cuts only tighten the model: every bound holds
                if watch is not None and watch.stopped is not None:
                    inc.offer_bound(watch.bound)    # what the rule decided on
            if watch is not None and watch.stopped_at < deadline:
                status = watch.stopped      # (past the deadline the time limit stopped it)
            if kind != "ok":                # "infeasible", "inconsistent", or no incumbent
                status = kind if kind in ("infeasible", "inconsistent") else status
                break
        else:
            ms = highspy.HighsModelStatus.kOptimal
            colv = np.zeros(0)
        sel = m.selection(colv)
        cyc = _find_cycles(P, sel)
        if not cyc:
            v = _valid_cost(P, sel)
            if v is None or (m.ncol and v > float(m.obj @ colv) + _tol(inc.cost)):
                status = "inconsistent"     # an acyclic model solution is a valid selection
                break
            inc.offer(sel)
            if ms == highspy.HighsModelStatus.kOptimal:
                status = "optimal"
            break
        if watch is not None and watch.stopped:     # no new round: it would stop at once
            break
        added = 0
        for cy in cyc + seen_cycles:
            if any(m.x_col[i] < 0 for i in cy):
                raise AssertionError("cycle through a node outside the model")
            added += m.cycle_cut([int(P["node_class"][i]) for i in cy])
        seen_cycles.clear()
        if not added:
            raise AssertionError("a cycle survived its own cut")
        cuts += added
    return {"status": status, "cuts": cuts, "rounds": rounds, "resolves": resolves}


def run_checked(h, obj: np.ndarray, start: np.ndarray | None, deadline: float,
                on_improving: Callable[[np.ndarray], None] | None = None,
                start_callback: bool = True,
                on_progress: Callable[[float, float], bool] | None = None
                ) -> tuple[str, Any, np.ndarray | None, float, int]:
    """`h.run()` (with `start` as the MIP start when given) until `deadline` (perf_counter), and
    check that the solution HiGHS returns is the one its objective describes: highspy 1.16 hands
    back a MIP start set with setSolution itself when the start, mapped into the presolved space,
    is already optimal there, while its objective and bound are those of another solution (of the
    presolved start, sometimes without the presolve offset: then both are too low). Where highspy
    has the user-solution callback (1.16) the start is handed over through it instead, during the
    search, which avoids that path (`start_callback=False`: setSolution always). A returned
    solution whose cost meets the dual bound is accepted (the bound proves it optimal); on any
    other mismatch the solve is repeated once without the start (clearSolver also drops the last
    solution, which HiGHS would otherwise reuse as one).

    Returns (kind, model status, column values, dual bound, repeats): kind "ok" (column values
    checked), "infeasible", "none" (no incumbent, e.g. out of time), "inconsistent" (a mismatch
    without a start as well; values None). The dual bound is the largest HiGHS reported (-inf
    when none), which every run of the same model proves.

    `on_improving(column values)` hears of each improving solution during the run where highspy
    reports it in the model's own columns (1.16 does; 1.7 reports the presolved model's, which
    are ignored) and its objective agrees; what it is given is still to be checked.

    `on_progress(primal bound, dual bound)` hears HiGHS's bounds at each MIP-interrupt callback
    (highspy 1.7.1 has it too); when it returns True the run is interrupted (model status
    kInterrupt; its incumbent is returned and checked like any other)."""
    cbs = _Callbacks(h, obj, on_improving, start_callback and start is not None, on_progress)
    try:
        return _run_checked(h, obj, start, deadline, cbs)
    finally:
        cbs.stop()


class _Callbacks:
    """HiGHS callbacks for one run_checked: improving solutions to `on_improving`, the MIP
    start handed over as a user solution, and the bounds to `on_progress` (which may interrupt
    the run). Each part is used only where highspy has it."""

    def __init__(self, h, obj: np.ndarray, on_improving: Callable[[np.ndarray], None] | None,
                 want_start: bool, on_progress: Callable[[float, float], bool] | None = None):
        import highspy

        self.h, self.obj, self.fn, self.progress = h, obj, on_improving, on_progress
        self.start: list[float] | None = None
        self.kinds: list[Any] = []
        cb = getattr(highspy, "cb", None)
        if cb is None or not hasattr(h, "setCallback"):
            self.user_solution = False
            return
        T = cb.HighsCallbackType
        self.IMPROVING = getattr(T, "kCallbackMipImprovingSolution", None)
        self.USER = getattr(T, "kCallbackMipUserSolution", None)
        self.INTERRUPT = getattr(T, "kCallbackMipInterrupt", None)
        self.user_solution = want_start and self.USER is not None and \
            hasattr(getattr(cb, "HighsCallbackInput", None), "setSolution")
        wanted = ([self.IMPROVING] if on_improving is not None and self.IMPROVING is not None
                  else []) + ([self.USER] if self.user_solution else []) + \
            ([self.INTERRUPT] if on_progress is not None and self.INTERRUPT is not None else [])
        if not wanted:
            return
        try:
            h.setCallback(self._callback, None)
            for k in wanted:
                h.startCallback(k)
                self.kinds.append(k)
        except Exception:       # no usable callbacks: setSolution and no progress reports
            self.stop()
            self.user_solution = False

    def _callback(self, kind, message, data_out, data_in, user_data) -> None:
        try:
            if self.USER is not None and int(kind) == int(self.USER):
                if self.start is not None:
                    data_in.setSolution(self.start)
                    self.start = None
                return
            if self.INTERRUPT is not None and int(kind) == int(self.INTERRUPT):
                if self.progress(float(data_out.mip_primal_bound),
                                 float(data_out.mip_dual_bound)):
                    data_in.user_interrupt = True
                return
            v = np.asarray(data_out.mip_solution, np.float64)
            if v.shape == self.obj.shape and _agree(float(self.obj @ v),
                                                     float(data_out.objective_function_value)):
                self.fn(v)
        except Exception:       # a callback must not raise into HiGHS; the run goes on
            pass

    def stop(self) -> None:
        for k in self.kinds:
            try:
                self.h.stopCallback(k)
            except Exception:
                pass
        self.kinds = []


def _run_checked(h, obj: np.ndarray, start: np.ndarray | None, deadline: float,
                 cbs: _Callbacks) -> tuple[str, Any, np.ndarray | None, float, int]:
    import highspy

    bound = -np.inf
    for repeat in range(2):
        left = deadline - time.perf_counter()
        if left <= 0:
            return "none", None, None, bound, repeat
        h.setOptionValue("time_limit", float(left))
        if start is not None and cbs.user_solution:
            cbs.start = np.asarray(start, np.float64).tolist()
        elif start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = np.asarray(start, np.float64).tolist()
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        cbs.start = None
        ms = h.getModelStatus()
        info = h.getInfo()
        if ms == highspy.HighsModelStatus.kInfeasible:
            return "infeasible", ms, None, bound, repeat
        db = float(info.mip_dual_bound)
        if np.isfinite(db):
            bound = max(bound, db)
        if info.primal_solution_status != 2:        # no feasible incumbent
            return "none", ms, None, bound, repeat
        colv = np.asarray(h.getSolution().col_value, np.float64)
        value = float(np.dot(obj, colv))
        if _agree(value, float(info.objective_function_value)) or value <= bound + _tol(value):
            # what HiGHS returned is what it says it is, or the dual bound proves it optimal
            return "ok", ms, colv, bound, repeat
        if start is None:
            break
        start = None
        h.clearSolver()
    return "inconsistent", ms, None, bound, 1


def _tol(x: float) -> float:
    return 1e-6 * max(1.0, abs(x))


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= _tol(max(abs(a), abs(b)))


def _post_order(P: dict, sel: np.ndarray) -> tuple[bool, list[int]]:
    """Classes reachable under a valid selection, children before parents."""
    cs, cc = P["child_start"], P["child_class"]
    seen = np.zeros(P["n_classes"], bool)
    out: list[int] = []
    for r in P["roots"]:
        r = int(r)
        if seen[r]:
            continue
        seen[r] = True
        stack = [(r, 0)]
        while stack:
            c, k = stack[-1]
            i = int(sel[c])
            if cs[i] + k >= cs[i + 1]:
                out.append(c)
                stack.pop()
                continue
            stack[-1] = (c, k + 1)
            kid = int(cc[cs[i] + k])
            if not seen[kid]:
                seen[kid] = True
                stack.append((kid, 0))
    return True, out


# ---------------------------------------------------------------------------------------------

def extract_ilp(problem, time_limit: float = 60.0, warm_start: np.ndarray | None = None,
                seed: int = 0, *, in_process: bool = False, acyclic: str = "cuts",
                rel_gap: float = 0.0, kill_margin: float = 10.0,
                verbose: bool = False, highs_options: dict[str, Any] | None = None,
                restrict: tuple[int, ...] = RESTRICT, stall: float = 0.0,
                stop_gap: float = 0.0) -> IlpResult:
    """Optimal DAG extraction (see the module docstring). `warm_start` (a valid selection, e.g.
    ocf+switch) is the MIP start and the fallback; with `in_process=False` the solve runs in a
    spawned subprocess killed after `time_limit + kill_margin` seconds. `restrict`: candidates
    per class of the restricted primal phases (() for none); `highs_options`: set on HiGHS;
    `stall`: the stall rule's shortest window in seconds; `stop_gap`: the gap rule's largest
    relative gap (a fraction; 0.02 is 2 %). Both 0, the defaults here: only the time limit (or a
    proof of optimality) stops a solve; `optimize` passes STALL_SECONDS and GAP_PERCENT / 100."""
    from .dag import dag_cost, is_valid

    if acyclic not in ("cuts", "order"):
        raise ValueError(f"acyclic must be 'cuts' or 'order', not {acyclic!r}")
    t0 = time.perf_counter()
    P = _arrays(problem)
    ws = None
    if warm_start is not None:
        ws = np.asarray(warm_start, np.int64)
        if ws.shape != (problem.n_classes,) or not is_valid(problem, ws):
            ws = None
    opts = {"time_limit": time_limit, "wall_deadline": time.time() + time_limit,
            "warm_start": ws, "seed": seed, "acyclic": acyclic,
            "rel_gap": rel_gap, "verbose": verbose, "highs": dict(highs_options or {}),
            "restrict": tuple(int(k) for k in restrict), "stall": float(stall),
            "stop_gap": float(stop_gap)}
    if in_process:
        res = _solve(P, opts)
    else:
        res = _run_subprocess(P, opts, time_limit + kill_margin)
    if res["status"] == "killed" or res["status"].startswith("error"):
        # the worker's last report (checked below like any answer), else the warm start
        fb = res.get("choice")
        if fb is None or _valid_cost(P, fb) is None:
            fb = ws
            res["bound"] = 0.0
        if fb is None:
            greedy, _, _ = _knuth_greedy(P, np.ones(P["node_class"].size, bool))
            fb = greedy if _valid_cost(P, greedy) is not None else None
        res.update(choice=None if fb is None else _trimmed(P, fb), cuts=0, optimal=False,
                   bound=float(res.get("bound", 0.0)))
    if ws is not None and (res["choice"] is None or dag_cost(
            problem, np.asarray(res["choice"], np.int64)) > dag_cost(problem, ws)):
        # never worse than the warm start (_solve starts from it, so this is a safety net)
        res.update(choice=_trimmed(P, ws), optimal=False,
                   status=res["status"] if res["status"] in ("killed", "infeasible")
                   or res["status"].startswith("error") else "inconsistent")
    choice = res["choice"]
    if choice is None:
        choice = np.full(problem.n_classes, -1, np.int64)
        cost = float("inf")
    else:
        choice = np.asarray(choice, np.int64)
        cost = dag_cost(problem, choice)     # the ground truth; raises if something went wrong
    bound = float(res["bound"])
    gap = 0.0 if res["optimal"] else (
        (cost - bound) / max(abs(cost), 1e-9) if np.isfinite(cost) else float("inf"))
    return IlpResult(choice, cost, bound, max(gap, 0.0), bool(res["optimal"]),
                     time.perf_counter() - t0, int(res["cuts"]), res["status"],
                     int(res.get("resolves", 0)), dict(res.get("stats", {})))


_WORKER: list[str] | None = None     # the worker's command line (tests stand in a fake one)
_CLOCK: Callable[[], float] = time.perf_counter     # the rules' (tests drive it in-process)


def _run_subprocess(P: dict, opts: dict, deadline: float) -> dict:
    """Solve in `python -m eqsat_nb.extract.ilp` (pickles over stdin, framed pickles back); kill
    at `deadline` seconds. The worker reports every improvement as it is found, so a killed
    worker's result is its last report (status "killed"), not nothing."""
    import subprocess
    import sys

    proc = subprocess.Popen(_WORKER or [sys.executable, "-m", "eqsat_nb.extract.ilp"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=None if opts.get("verbose") else subprocess.PIPE)
    data = pickle.dumps((P, opts), protocol=pickle.HIGHEST_PROTOCOL)
    try:
        out, err = proc.communicate(data, timeout=deadline)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()         # what the worker wrote before it was killed
        progress = [m for kind, m in _frames(out) if kind == "progress"]
        return dict(progress[-1] if progress else {}, status="killed")
    except BaseException:       # Ctrl-C, MemoryError...: leave no worker behind
        proc.kill()
        proc.wait()
        raise
    frames = _frames(out)
    final = [m for kind, m in frames if kind in ("ok", "error")]
    if proc.returncode != 0 or not final:
        tail = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        progress = [m for kind, m in frames if kind == "progress"]
        return dict(progress[-1] if progress else {},
                    status=f"error: ILP worker exited {proc.returncode}: {tail[0]}")
    kind, payload = frames[-1]
    return payload if kind == "ok" else {"status": f"error: {payload}"}


def _frames(out: bytes) -> list[tuple[str, Any]]:
    """The complete (kind, payload) messages in the worker's output (a cut-off last one is
    dropped)."""
    msgs = []
    pos = 0
    while pos + 8 <= len(out):
        n = int.from_bytes(out[pos: pos + 8], "little")
        if pos + 8 + n > len(out):
            break
        msgs.append(pickle.loads(out[pos + 8: pos + 8 + n]))
        pos += 8 + n
    return msgs


def _main() -> None:
    import os
    import sys

    P, opts = pickle.load(sys.stdin.buffer)
    result_fd = os.dup(1)           # whatever HiGHS prints goes to stderr, not into the pickles
    os.dup2(2, 1)

    def send(kind: str, payload: Any) -> None:
        b = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
        b = len(b).to_bytes(8, "little") + b
        while b:
            b = b[os.write(result_fd, b):]

    opts["emit"] = lambda progress: send("progress", progress)
    try:
        res = ("ok", _solve(P, opts))
    except Exception as e:      # reported to the parent as status "error: ..."
        res = ("error", f"{type(e).__name__}: {e}")
    send(*res)
    os.close(result_fd)


if __name__ == "__main__":
    _main()
