"""Plain-array walks over a selection (no numba: the ILP's worker process imports only numpy and
highspy): validity and DAG cost as dag.py computes them, the cycles of a selection, its classes
in post order, the class graph's strongly connected components, Knuth's acyclic tree-cost greedy,
and the tolerance every comparison of costs uses."""
from __future__ import annotations

import heapq
from typing import Any

import numpy as np

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

