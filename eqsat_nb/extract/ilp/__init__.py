"""Exact DAG extraction by integer programming with HiGHS (DESIGN §6).

One concern a module: `selection.py` (plain-array walks: validity, DAG cost, cycles), `model.py`
(presolve and the HiGHS model), `solve.py` (the solve loop: restricted phases, lazy cycle cuts,
checking what HiGHS returns), `stop.py` (the stall and gap rules), `worker.py` (the killable
worker process). This module is the entry point: `extract_ilp`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .selection import _arrays, _knuth_greedy, _trimmed, _valid_cost
from .solve import RESTRICT, _solve, run_checked
from .stop import GAP_PERCENT, GAP_WAIT, STALL_SECONDS
from . import worker
from .worker import _run_subprocess

__all__ = ["GAP_PERCENT", "GAP_WAIT", "STALL_SECONDS", "IlpResult", "extract_ilp", "run_checked"]


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
    #                         stop._Progress); "inconsistent": HiGHS's answer contradicted
    #                         itself or a checked selection, and the best verified selection is
    #                         returned
    resolves: int = 0       # solves repeated without the MIP start (see solve._solve)
    stats: dict = field(default_factory=dict)   # presolve and model sizes, solve rounds


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
    from ..dag import dag_cost, is_valid, reachable
    from ..decompose import layers
    from ..dominators import dominator_rows
    from ..simplify import simplify

    if acyclic not in ("cuts", "order"):
        raise ValueError(f"acyclic must be 'cuts' or 'order', not {acyclic!r}")
    t0, wall0 = time.perf_counter(), time.time()
    proc = None if in_process else worker.start(verbose)     # its imports overlap what follows
    try:
        ws = None
        if warm_start is not None:
            ws = np.asarray(warm_start, np.int64)
            if ws.shape != (problem.n_classes,) or not is_valid(problem, ws):
                ws = None
        # the solve works on the simplified problem (simplify.py; same optimum), with the dominator
        # rows (dominators.py); its answer is mapped back and checked on the problem itself
        simp = simplify(problem)
        small = simp.problem
        P = _arrays(small)
        dom = dominator_rows(small)
        P.update(dominators=dom.pairs, closure=dom.closure, closure_start=dom.closure_start,
                 closure_nodes=dom.closure_nodes)
        prep = {"simplify": {"classes": small.n_classes, "nodes": small.n_nodes,
                             "rounds": simp.rounds, "dominator_pairs": int(len(dom.pairs)),
                             "closure_rows": int(len(dom.closure)),
                             "seconds": round(time.perf_counter() - t0, 3)}}
        ws_small = None if ws is None else simp.restrict(ws)
        if ws_small is not None and _valid_cost(P, ws_small) is None:
            ws_small = None
        parts = layers(small, dom.mandatory)
        send = P if not parts else {"layers": _layer_parts(parts, ws_small),
                                    "n_classes": small.n_classes}
        prep["simplify"]["layers"] = [int(part.problem.n_classes) for part in parts]
        opts = {"time_limit": time_limit, "wall_deadline": time.time() + time_limit,
                "warm_start": ws_small, "seed": seed, "acyclic": acyclic,
                "rel_gap": rel_gap, "verbose": verbose, "highs": dict(highs_options or {}),
                "restrict": tuple(int(k) for k in restrict), "stall": float(stall),
                "stop_gap": float(stop_gap)}
        roots_kept = all(simp.fixed[r] >= 0 for r in problem.roots
                         if r not in set(simp.class_orig[small.roots].tolist())) \
            if problem.n_classes else True
        if not roots_kept:          # a root has no acyclic derivation
            res = {"choice": None, "bound": 0.0, "cuts": 0, "status": "infeasible",
                   "optimal": False}
            if proc is not None:
                proc.kill()
                proc.communicate()
        elif in_process:
            res = _solve(send, opts)
        else:
            res = _run_subprocess(send, opts, time_limit + kill_margin, proc)
    except BaseException:      # leave no worker behind
        if proc is not None:
            proc.kill()
            proc.communicate()
        raise
    if res["status"] == "killed" or res["status"].startswith("error"):
        # the worker's last report (checked below like any answer), else the warm start
        fb = res.get("choice")
        if fb is None or _valid_cost(P, fb) is None:
            fb = ws_small
            res["bound"] = 0.0
        if fb is None:
            greedy, _, _ = _knuth_greedy(P, np.ones(P["node_class"].size, bool))
            fb = greedy if _valid_cost(P, greedy) is not None else None
        res.update(choice=None if fb is None else _trimmed(P, fb), cuts=0, optimal=False,
                   bound=float(res.get("bound", 0.0)))
    choice = None if res["choice"] is None else simp.lift(res["choice"])
    if ws is not None and (choice is None or dag_cost(problem, choice) > dag_cost(problem, ws)):
        # never worse than the warm start (_solve starts from it, so this is a safety net)
        choice = np.where(reachable(problem, ws), ws, -1)
        res.update(optimal=False, status=res["status"] if res["status"] in (
            "killed", "infeasible") or res["status"].startswith("error") else "inconsistent")
    if choice is None:
        choice = np.full(problem.n_classes, -1, np.int64)
        cost = float("inf")
    else:
        cost = dag_cost(problem, choice)     # the ground truth; raises if something went wrong
    bound = float(res["bound"])
    optimal = bool(res["optimal"]) and cost - bound <= 1e-6 * max(1.0, abs(cost)) + \
        rel_gap * abs(cost)
    if res["optimal"] and not optimal:
        res["status"] = "inconsistent"
    gap = 0.0 if optimal else (
        (cost - bound) / max(abs(cost), 1e-9) if np.isfinite(cost) else float("inf"))
    res["optimal"] = optimal
    stats = prep | dict(res.get("stats", {}))
    if res.get("timeline"):     # (seconds since the call, cost, bound) at each improvement
        stats["timeline"] = [(round(t - wall0, 3), c, min(b, c)) for t, c, b in res["timeline"]]
    return IlpResult(choice, cost, bound, max(gap, 0.0), bool(res["optimal"]),
                     time.perf_counter() - t0, int(res["cuts"]), res["status"],
                     int(res.get("resolves", 0)), stats)


def _with_rows(problem) -> dict[str, Any]:
    """The problem's arrays for the solve, with its dominator and closure rows."""
    from ..dominators import dominator_rows

    P = _arrays(problem)
    dom = dominator_rows(problem)
    P.update(dominators=dom.pairs, closure=dom.closure, closure_start=dom.closure_start,
             closure_nodes=dom.closure_nodes)
    return P


def _layer_parts(parts: list, ws: np.ndarray | None) -> list[dict[str, Any]]:
    """What the solve needs of each layer (decompose.Layer): its arrays and rows (a layer
    identical to an earlier one, its `twin`: its arrays only), its maps, its canonical labelling,
    and the warm start's selection on it."""
    from ..decompose import canonical

    out: list[dict[str, Any]] = []
    seen: dict[bytes, int] = {}
    for j, layer in enumerate(parts):
        key, rank, order = canonical(layer.problem)
        part = _layer_part(layer, ws, rows=key not in seen)
        part.update(class_rank=rank, node_order=order, twin=seen.get(key, -1))
        seen.setdefault(key, j)
        out.append(part)
    return out


def _layer_part(layer, ws: np.ndarray | None, rows: bool = True) -> dict[str, Any]:
    """One layer's arrays (with its dominator and closure rows unless `rows` is False), its
    maps, and the warm start's selection on it (the separators below it: their zero-cost
    leaf)."""
    warm = None
    if ws is not None:
        pos = np.full(int(layer.node_map.max(initial=-1)) + 2, -1, np.int64)
        real = layer.node_map >= 0
        pos[layer.node_map[real]] = np.flatnonzero(real)
        picked = ws[layer.class_map]
        warm = np.where(picked >= 0, pos[np.clip(picked, -1, pos.size - 1)], -1)
        leaf = ~real
        warm[layer.problem.node_class[leaf]] = np.flatnonzero(leaf)
    return {"P": _with_rows(layer.problem) if rows else _arrays(layer.problem),
            "class_map": layer.class_map,
            "node_map": layer.node_map, "warm_start": warm}
