"""Exact DAG extraction by integer programming with HiGHS (DESIGN §6).

One concern a module: `prepare.py` (in the calling process: the simplified problem, its
dominator and closure rows, its independent layers), `selection.py` (plain-array walks:
validity, DAG cost, cycles), `model.py` (presolve and the HiGHS model), `solve.py` (the solve
loop: layers, restricted phases, lazy cycle cuts, checking what HiGHS returns), `stop.py` (the
stall and gap rules), `worker.py` (the killable worker process). This module is the entry point,
`extract_ilp`: it prepares, solves (in the worker), maps the answer back and checks it on the
problem itself.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .selection import _knuth_greedy, _trimmed, _valid_cost
from .solve import _solve, run_checked
from .stop import GAP_PERCENT, GAP_WAIT, STALL_SECONDS
from . import worker
from .worker import _run_subprocess

__all__ = ["GAP_PERCENT", "GAP_WAIT", "STALL_SECONDS", "IlpResult", "extract_ilp", "run_checked"]

# With a `deadline` (extract_ilp): HiGHS's own time limit ends this long before it, so that it
# usually stops by itself and hands back its bound (on models of 80 000 candidates its presolve
# overruns its limit by up to 2.5 s: there the worker is killed) ...
DEADLINE_GRACE = 1.0
# ... and the worker is killed this long before it: killing, lifting the answer and checking it
# on the problem take the rest (0.1 s on ViT-Base's 80 000 candidates)
DEADLINE_RETURN = 0.25


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
                restrict: tuple[int, ...] | None = None, stall: float = 0.0,
                stop_gap: float = 0.0, neighbourhoods: bool | None = None,
                deadline: float | None = None, contract: bool | None = None) -> IlpResult:
    """Optimal DAG extraction (see the module docstring). `warm_start` (a valid selection, e.g.
    ocf+switch) is the MIP start and the fallback; with `in_process=False` the solve runs in a
    spawned subprocess killed after `time_limit + kill_margin` seconds. `restrict`: candidates
    per class of the restricted primal phases (() for none; None: RESTRICT on a model of at least
    RESTRICT_MIN_NODES candidates, none on a smaller one); `neighbourhoods`: the
    large-neighbourhood phase (solve._neighbourhood_phase; None: on a model of at least
    NEIGHBOURHOOD_MIN_NODES candidates); `highs_options`: set on HiGHS;
    `stall`: the stall rule's shortest window in seconds; `stop_gap`: the gap rule's largest
    relative gap (a fraction; 0.02 is 2 %). Both 0, the defaults here: only the time limit (or a
    proof of optimality) stops a solve; `optimize` passes STALL_SECONDS and GAP_PERCENT / 100.
    `deadline` (a time.perf_counter() reading): the call returns by then, preparation and HiGHS's
    overruns included (`time_limit` shrinks to what is left less DEADLINE_GRACE, and the worker
    is killed DEADLINE_RETURN before it, its last report kept), so a limit the user set holds as
    wall time; in process only the time limit shrinks. `contract`: the glue-contracted model
    (contracted.py) instead of the full one; None: where it applies (an acyclic model with at
    least MIN_GLUE_SHARE glue), True: on any acyclic model, False: never."""
    from ..dag import dag_cost, is_valid, reachable
    from .prepare import prepare

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
        prep = prepare(problem, ws)
        P, simp, ws_small = prep.P, prep.simplified, prep.warm_start
        kill_after = time_limit + kill_margin
        if deadline is not None:
            left = deadline - time.perf_counter()
            time_limit = max(min(time_limit, left - DEADLINE_GRACE), 0.0)
            kill_after = max(min(kill_after, left - DEADLINE_RETURN), 0.0)
        opts = {"time_limit": time_limit, "wall_deadline": time.time() + time_limit,
                "warm_start": ws_small, "seed": seed, "acyclic": acyclic,
                "rel_gap": rel_gap, "verbose": verbose, "highs": dict(highs_options or {}),
                "restrict": None if restrict is None else tuple(int(k) for k in restrict),
                "neighbourhoods": neighbourhoods,
                "stall": float(stall),
                "stop_gap": float(stop_gap), "contract": contract}
        if not prep.feasible:          # a root has no acyclic derivation
            res = {"choice": None, "bound": 0.0, "cuts": 0, "status": "infeasible",
                   "optimal": False}
            if proc is not None:
                proc.kill()
                proc.communicate()
        elif in_process:
            res = _solve(prep.send, opts)
        else:
            res = _run_subprocess(prep.send, opts, kill_after, proc)
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
    stats = prep.stats | dict(res.get("stats", {}))
    if res.get("timeline"):     # (seconds since the call, cost, bound) at each improvement
        stats["timeline"] = [(round(t - wall0, 3), c, min(b, c)) for t, c, b in res["timeline"]]
    return IlpResult(choice, cost, bound, max(gap, 0.0), bool(res["optimal"]),
                     time.perf_counter() - t0, int(res["cuts"]), res["status"],
                     int(res.get("resolves", 0)), stats)
