"""Exact DAG extraction by integer programming with HiGHS (DESIGN §6).

Model (on the presolved problem): a binary x_i per candidate node and an activity a_c per class,
Σ_{i∈c} x_i = a_c, a_r = 1 for the roots, x_i ≤ a_k for every child class k of i; minimise
Σ cost_i x_i. Acyclicity is enforced lazily: solve, walk the selection from the roots, and for
every cycle found add the cut Σ_{i∈cycle} x_i ≤ |cycle| − 1, then re-solve (with the best known
valid selection as MIP start) until the incumbent is acyclic. `acyclic="order"` instead adds
per-class ordering variables with big-M rows (slower; kept for comparison).

Presolve (numpy/Python, before HiGHS): nodes whose own class is a child are dropped (never
acyclic); classes without any acyclic derivation ("unproductive") and nodes using them are dropped;
classes with a zero-cost leaf are fixed to it; within a class a node dominated by another (cost ≥,
child-class set ⊇) is dropped — the dominator uses a subset of the edges, so swapping it in never
creates a cycle or raises the cost; only classes reachable from the roots are modelled.

HiGHS was seen to hang ignoring its time limit (DESIGN §6), so by default the solve runs in a
spawned subprocess with a hard deadline (time_limit + kill_margin); when it is killed the result
is the warm start (or the internal acyclic greedy fallback) with status "killed".

What is reported is checked, not taken from HiGHS's status: the solution HiGHS returns must have
the objective HiGHS reports (highspy 1.16 hands back the MIP start itself when that start is
already optimal in the presolved space — the objective and bound are then those of a better
solution it did not return); when it does not, the solve is repeated without the start, and a
second mismatch ends the loop with status "inconsistent" and the best verified selection. The
bound is HiGHS's dual bound (never a primal cost); "optimal" means that bound meets the true DAG
cost of the returned selection. The result is never worse than the warm start.

Costs must be non-negative (an unreachable selected part then never pays off, which the cycle cuts
rely on).
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["IlpResult", "extract_ilp"]


@dataclass
class IlpResult:
    choice: np.ndarray      # int64[C]: chosen candidate per class, -1 where unused
    cost: float             # true DAG cost of `choice` (inf when none was found)
    bound: float            # best lower bound on the optimal DAG cost
    gap: float              # (cost - bound) / max(|cost|, 1e-9); 0 when proven optimal
    optimal: bool
    seconds: float
    cuts: int               # cycle cuts added
    status: str             # "optimal" | "time_limit" | "killed" | "infeasible" | "inconsistent"
    #                         | "error: ..."; "inconsistent": HiGHS's answer contradicted itself
    #                         or a checked selection, and the best verified selection is returned
    resolves: int = 0       # solves repeated without the MIP start (see _solve)


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


def _valid_cost(P: dict, choice) -> float | None:
    if choice is None:
        return None
    choice = np.asarray(choice, np.int64)
    if choice.shape != (P["n_classes"],):
        return None
    cost, status, _ = _dag_walk(P, choice)
    return cost if status == 0 else None


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


def _knuth_greedy(P: dict, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's generalised Dijkstra over the alive nodes with tree costs: (choice, productive).
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
    return choice, done


# ---------------------------------------------------------------------------------------------
# Presolve

def _presolve(P: dict) -> dict:
    C = P["n_classes"]
    N = P["node_class"].size
    cs, cc, ncls, cost = P["child_start"], P["child_class"], P["node_class"], P["node_cost"]
    kids = [frozenset(int(k) for k in cc[cs[i]: cs[i + 1]]) for i in range(N)]
    alive = np.array([int(ncls[i]) not in kids[i] for i in range(N)], bool)
    greedy, productive = _knuth_greedy(P, alive)
    for i in range(N):
        if alive[i] and not all(productive[k] for k in kids[i]):
            alive[i] = False
    rep = np.arange(N, dtype=np.int64)          # dropped dominated node -> kept dominator
    fixed = np.full(C, -1, np.int64)            # class fixed to a zero-cost leaf
    for c in range(C):
        cand = [int(i) for i in P["class_nodes"][P["class_start"][c]: P["class_start"][c + 1]]
                if alive[i]]
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
                        break
                else:
                    kept.append(j)
    # reachability from the roots over the alive nodes
    reach = np.zeros(C, bool)
    todo = [int(r) for r in P["roots"]]
    for r in todo:
        reach[r] = True
    while todo:
        c = todo.pop()
        for i in P["class_nodes"][P["class_start"][c]: P["class_start"][c + 1]]:
            if alive[i]:
                for k in kids[int(i)]:
                    if not reach[k]:
                        reach[k] = True
                        todo.append(k)
    feasible = bool(all(productive[int(r)] for r in P["roots"]))
    return {"alive": alive, "rep": rep, "fixed": fixed, "reach": reach, "kids": kids,
            "greedy": greedy, "feasible": feasible}


# ---------------------------------------------------------------------------------------------
# The solve loop (runs in the worker process by default)

def _solve(P: dict, opts: dict) -> dict:
    import highspy

    t0 = time.perf_counter()
    time_limit = float(opts["time_limit"])
    C = P["n_classes"]
    cost = P["node_cost"]
    if np.any(cost < 0):
        raise ValueError("extract_ilp needs non-negative node costs")
    pre = _presolve(P)
    out = {"choice": None, "cost": float("inf"), "bound": 0.0, "cuts": 0, "status": "infeasible",
           "optimal": False}
    if not pre["feasible"]:
        return out
    alive, fixed, reach, kids, rep = (pre["alive"], pre["fixed"], pre["reach"], pre["kids"],
                                      pre["rep"])

    # best known valid selection: the given warm start or the acyclic greedy
    best, best_cost = None, float("inf")
    for cand in (opts.get("warm_start"), pre["greedy"]):
        v = _valid_cost(P, cand)
        if v is not None and v < best_cost:
            best, best_cost = _trimmed(P, np.asarray(cand, np.int64)), v

    # model columns: x for alive nodes in reachable, unfixed classes; a for those classes
    mclasses = np.nonzero(reach & (fixed < 0))[0]
    a_col = np.full(C, -1, np.int64)
    a_col[mclasses] = np.arange(mclasses.size)
    nodes = np.array([i for c in mclasses
                      for i in P["class_nodes"][P["class_start"][c]: P["class_start"][c + 1]]
                      if alive[i]], np.int64)
    nA = mclasses.size
    x_col = np.full(P["node_class"].size, -1, np.int64)
    x_col[nodes] = nA + np.arange(nodes.size)
    ncol = nA + nodes.size
    order = opts.get("acyclic", "cuts") == "order"
    ncol_total = ncol + (nA if order else 0)

    h = highspy.Highs()
    h.setOptionValue("output_flag", bool(opts.get("verbose", False)))
    h.setOptionValue("threads", 1)
    h.setOptionValue("random_seed", int(opts.get("seed", 0)))
    h.setOptionValue("mip_rel_gap", float(opts.get("rel_gap", 0.0)))
    h.setOptionValue("mip_abs_gap", 1e-7)
    inf = highspy.kHighsInf
    lower = np.zeros(ncol_total)
    upper = np.ones(ncol_total)
    for r in P["roots"]:
        if a_col[r] >= 0:
            lower[a_col[r]] = 1.0
    obj = np.zeros(ncol_total)
    obj[nA: ncol] = cost[nodes]
    if order:
        upper[ncol:] = max(nA - 1, 0)
    h.addVars(ncol_total, lower, upper)
    h.changeColsCost(ncol_total, np.arange(ncol_total, dtype=np.int32), obj)
    h.changeColsIntegrality(ncol, np.arange(ncol, dtype=np.int32),
                            np.full(ncol, 1, np.uint8))   # kInteger
    rl, ru, starts, idx, val = [], [], [], [], []

    def row(lo, hi, cols, coefs):
        rl.append(lo)
        ru.append(hi)
        starts.append(len(idx))
        idx.extend(cols)
        val.extend(coefs)

    for c in mclasses:
        xs = [int(x_col[i]) for i in P["class_nodes"][P["class_start"][c]: P["class_start"][c + 1]]
              if alive[i]]
        row(0.0, 0.0, xs + [int(a_col[c])], [1.0] * len(xs) + [-1.0])
    M = float(nA)
    for i in nodes:
        ci = int(a_col[P["node_class"][i]])
        for k in kids[int(i)]:
            if a_col[k] >= 0:
                row(-inf, 0.0, [int(x_col[i]), int(a_col[k])], [1.0, -1.0])
                if order:  # t_c - t_k - M x_i >= 1 - M
                    row(1.0 - M, inf, [ncol + ci, ncol + int(a_col[k]), int(x_col[i])],
                        [1.0, -1.0, -M])
    if rl:
        h.addRows(len(rl), np.array(rl), np.array(ru), len(idx), np.array(starts, np.int32),
                  np.array(idx, np.int32), np.array(val, np.float64))

    def start_vector(choice: np.ndarray) -> np.ndarray | None:
        sel = np.array(choice, np.int64)
        for c in range(C):                       # dominated / non-leaf -> representative
            if sel[c] >= 0:
                j = int(sel[c])
                while rep[j] != j:
                    j = int(rep[j])
                sel[c] = j
        if _valid_cost(P, sel) is None:
            return None
        _, _, state = _dag_walk(P, sel)
        v = np.zeros(ncol_total)
        for c in np.nonzero(state == 2)[0]:
            if fixed[c] >= 0:
                continue
            if a_col[c] < 0 or x_col[sel[c]] < 0:
                return None
            v[a_col[c]] = 1.0
            v[x_col[sel[c]]] = 1.0
        if order:   # topological positions: a class after all of its children
            _, topo = _post_order(P, sel)
            for pos_, c in enumerate(topo):
                if a_col[c] >= 0:
                    v[ncol + a_col[c]] = min(pos_, max(nA - 1, 0))
        return v

    # class-cycle cuts: for classes c_1 -> ... -> c_k -> c_1, at most k-1 of the node sets
    # S_j = {model nodes of c_j using c_{j+1}} may be selected (one node per class at most)
    by_class: dict[int, list[int]] = {}
    for i in nodes:
        by_class.setdefault(int(P["node_class"][i]), []).append(int(i))
    seen_cuts: set[tuple[int, ...]] = set()

    def class_cycle_cut(classes: list[int]) -> bool:
        cols: list[int] = []
        k = len(classes)
        for j, c in enumerate(classes):
            nxt = classes[(j + 1) % k]
            cols += [int(x_col[i]) for i in by_class.get(c, ()) if nxt in kids[i]]
        key = tuple(sorted(cols))
        if key in seen_cuts or not cols:
            return False
        seen_cuts.add(key)
        h.addRow(-inf, float(k - 1), len(key), np.array(key, np.int32), np.ones(len(key)))
        return True

    cuts = 0
    if not order:           # every 2-cycle of classes up front (inverse rewrites make many)
        uses = {c: set().union(*(kids[i] for i in by_class[c])) for c in by_class}
        for c, ks in uses.items():
            for k in ks:
                if k > c and k in uses and c in uses[k]:
                    cuts += class_cycle_cut([c, k])
    bound = 0.0             # HiGHS's dual bound (fixed classes cost 0: the model's bound is ours)
    status = "time_limit"
    resolves = 0
    deadline = t0 + time_limit
    while True:
        if time.perf_counter() >= deadline:
            break
        if ncol:
            v = start_vector(best) if best is not None else None
            kind, ms, colv, db, again = run_checked(h, obj, v, deadline)
            resolves += again
            if np.isfinite(db):
                bound = max(bound, db)      # cuts only tighten the model: every bound holds
            if kind != "ok":                # "infeasible", "inconsistent", or no incumbent
                status = kind if kind in ("infeasible", "inconsistent") else status
                break
        else:
            ms = highspy.HighsModelStatus.kOptimal
            colv = np.zeros(0)
        sel = np.full(C, -1, np.int64)
        sel[fixed >= 0] = fixed[fixed >= 0]
        if ncol:
            xs = colv[nA: ncol] > 0.5
            sel[P["node_class"][nodes[xs]]] = nodes[xs]
        cyc = _find_cycles(P, sel)
        if not cyc:
            v = _valid_cost(P, sel)
            if v is None or (ncol and v > float(obj @ colv) + _tol(v)):
                status = "inconsistent"     # an acyclic model solution is a valid selection
                break
            if v < best_cost:
                best, best_cost = _trimmed(P, sel), v
            if ms == highspy.HighsModelStatus.kOptimal:
                status = "optimal"
            break
        added = 0
        for cy in cyc:
            if any(x_col[i] < 0 for i in cy):
                raise AssertionError("cycle through a node outside the model")
            added += class_cycle_cut([int(P["node_class"][i]) for i in cy])
        if not added:
            raise AssertionError("a cycle survived its own cut")
        cuts += added
    # "optimal" only when the bound proves the returned selection's cost, whatever HiGHS said
    optimal = best is not None and best_cost - bound <= _tol(best_cost) + \
        float(opts.get("rel_gap", 0.0)) * abs(best_cost)
    if best is not None and bound > best_cost + _tol(best_cost):
        status, bound, optimal = "inconsistent", 0.0, False     # a bound a valid selection beats
    elif optimal:
        status = "optimal"
    elif status == "optimal" or (status == "infeasible" and best is not None):
        status = "inconsistent"
    out.update(choice=best, cost=best_cost, bound=bound, cuts=cuts, status=status,
               optimal=optimal, resolves=resolves)
    return out


def run_checked(h, obj: np.ndarray, start: np.ndarray | None, deadline: float
                ) -> tuple[str, Any, np.ndarray | None, float, int]:
    """`h.run()` (with `start` as the MIP start when given) until `deadline` (perf_counter), and
    check that the solution HiGHS returns is the one its objective describes: highspy 1.16 hands
    back the MIP start itself when the start, mapped into the presolved space, is already optimal
    there, while its objective and bound are those of another solution (of the presolved start,
    sometimes without the presolve offset). On a mismatch the solve is repeated once without the
    start (clearSolver also drops the last solution, which HiGHS would otherwise reuse as one).

    Returns (kind, model status, column values, dual bound, repeats): kind "ok" (column values
    checked), "infeasible", "none" (no incumbent, e.g. out of time), "inconsistent" (a mismatch
    without a start as well; values None). The dual bound is the largest HiGHS reported (-inf
    when none), which every run of the same model proves."""
    import highspy

    bound = -np.inf
    for repeat in range(2):
        left = deadline - time.perf_counter()
        if left <= 0:
            return "none", None, None, bound, repeat
        h.setOptionValue("time_limit", float(left))
        if start is not None:
            sol = highspy.HighsSolution()
            sol.col_value = np.asarray(start, np.float64).tolist()
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
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
        if _agree(float(np.dot(obj, colv)), float(info.objective_function_value)):
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
                verbose: bool = False) -> IlpResult:
    """Optimal DAG extraction (see the module docstring). `warm_start` (a valid selection, e.g.
    the greedy result) is the MIP start and the fallback; with `in_process=False` the solve runs
    in a spawned subprocess killed after `time_limit + kill_margin` seconds."""
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
    opts = {"time_limit": time_limit, "warm_start": ws, "seed": seed, "acyclic": acyclic,
            "rel_gap": rel_gap, "verbose": verbose}
    if in_process:
        res = _solve(P, opts)
    else:
        res = _run_subprocess(P, opts, time_limit + kill_margin)
    if res["status"] in ("killed",) or res["status"].startswith("error"):
        fb = ws
        if fb is None:
            greedy, _ = _knuth_greedy(P, np.ones(P["node_class"].size, bool))
            fb = greedy if _valid_cost(P, greedy) is not None else None
        res.update(choice=None if fb is None else _trimmed(P, fb), bound=0.0, cuts=0,
                   optimal=False)
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
                     int(res.get("resolves", 0)))


def _run_subprocess(P: dict, opts: dict, deadline: float) -> dict:
    """Solve in `python -m eqsat_nb.extract.ilp` (pickles over stdin/stdout); kill at deadline."""
    import pickle
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "eqsat_nb.extract.ilp"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=None if opts.get("verbose") else subprocess.PIPE)
    try:
        out, err = proc.communicate(pickle.dumps((P, opts), protocol=pickle.HIGHEST_PROTOCOL),
                                    timeout=deadline)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"status": "killed"}
    except BaseException:       # Ctrl-C, MemoryError...: leave no worker behind
        proc.kill()
        proc.wait()
        raise
    if proc.returncode != 0 or not out:
        tail = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return {"status": f"error: ILP worker exited {proc.returncode}: {tail[0]}"}
    kind, payload = pickle.loads(out)
    return payload if kind == "ok" else {"status": f"error: {payload}"}


def _main() -> None:
    import os
    import pickle
    import sys

    P, opts = pickle.load(sys.stdin.buffer)
    result_fd = os.dup(1)           # whatever HiGHS prints goes to stderr, not into the pickle
    os.dup2(2, 1)
    try:
        res = ("ok", _solve(P, opts))
    except Exception as e:      # reported to the parent as status "error: ..."
        res = ("error", f"{type(e).__name__}: {e}")
    with os.fdopen(result_fd, "wb") as f:
        f.write(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    _main()
