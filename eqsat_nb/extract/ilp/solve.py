"""The solve loop (run in the worker process by default): restricted primal phases, then the full
model, lazy cycle cuts, the stop rules (stop.py), and a check of everything HiGHS hands back.

Primal phase: on a model of at least RESTRICT_MIN_NODES candidates, first the model restricted
to each class's 4 cheapest candidates (plus the warm start's) is solved, in at most a quarter of
the time; on ViT-Base at 80 000 nodes it finds in about a second the merged Q/K/V projections the
full model does not reach in a minute. Its answer is the full model's start; its bound is not
kept (it holds for the restriction only). On smaller models the full model finds the same answers
sooner (measured: the benchmark runs' layers of 3 300-6 600 candidates, e.g. TT's ILP 3.4 -> 2.8 s
and ViT-Large's 2.5 -> 1.9 s, none worse), while the reference e-graphs of 14 700-71 000
candidates (tt_20k, vit_base_20k and _50k) lose 1.4-1.6 % without it: the gap rule then stops the
full model at the warm start.

Large-neighbourhood phase: then, on a model of at least NEIGHBOURHOOD_MIN_NODES candidates and
for at most NEIGHBOURHOOD_SECONDS, every class that reads one shared class (with the zero-cost
glue below) is freed around the incumbent, the rest fixed to it, and that model solved exactly
(each move at most NEIGHBOURHOOD_MOVE_SECONDS), largest neighbourhood first, until a move finds
nothing. On TENSAT's BERT (7 433 candidates) the first move re-partitions the twelve projections
of the layer input into two- and three-way merges, 402.44 -> 398.44 (the best known) at 0.6 s,
which the full model alone finds after 8.6-9.0 s; on the benchmark runs' layers of 6 100-6 600
candidates (TT, ViT-Large) one move costs 0.06-0.07 s and finds nothing, on ViT-Base at 71 000
candidates 0.5 s. Smaller models go to the full model at once: it finds such answers within
about a second there (BERT's run: optimal in 1.4 s), and a move would only add its model's
building (NasRNN's run: 0.3 s more).

Contracted model: on an acyclic model with at least a quarter of its candidates zero-cost glue
(proj of a merged op) the full model is `contracted._Contracted`, which folds the glue into
reachability and keeps one column per distinct non-glue candidate; it is exact there. TENSAT's
BERT: proven optimal in 8 s (the full model: 44-49 s); the NasRNN and BERT benchmark runs'
extraction 1.7 -> 0.5 s and 1.4 -> 0.3 s, same answers. Where glue is rare (ViT, TT) it lacks the
dominator and closure rows' strength and the full model stays. On a cyclic model with that much
glue it is a relaxation, solved first for CONTRACTED_SHARE of the time left, and on to
CONTRACTED_MAX_SHARE while its bound stands above the full model's LP bound, under the stop rules
(`_contracted_phase`): its bound holds and its grounded answers are offered. TENSAT's NasRNN: LP
325.5, the phase 346.0 after its root, 353.03 found (the full model keeps 356.40) and proven
optimal in 10-14 s of a 30 s solve; nasrnn_cyclic_20k: LP 641.0 over the phase's 636, so the
full model takes over at the first share and proves 0.8 % by 10 s.

What is reported is checked, not taken from HiGHS's status: every selection is walked (valid,
acyclic, its DAG cost) before it counts; the solution HiGHS returns must have the objective HiGHS
reports or a cost its dual bound proves (highspy 1.16 hands back a MIP start set with setSolution
itself when that start is already optimal in the presolved space, with objective and bound of
another solution; where highspy has the user-solution callback the start goes in that way);
otherwise the solve is repeated without the start, and a second mismatch ends the loop with
status "inconsistent" and the best verified selection. The bound is HiGHS's dual bound on the
full model (never a primal cost); "optimal" means that bound meets the true DAG cost of the
returned selection. The result is never worse than the warm start.

Costs must be non-negative (an unreachable selected part then never pays off, which the cycle cuts
rely on).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from . import contracted, stop
from .model import _freed, _Model, _neighbourhoods, _presolve, _restricted
from .selection import _agree, _find_cycles, _knuth_greedy, _tol, _valid_cost, _valid_walk
from .stop import _Progress

RESTRICT = (4,)                 # candidates per class in the restricted primal phases
RESTRICT_SHARE = 0.25           # of the time left, at most, for each restricted phase
RESTRICT_MAX_FRACTION = 0.7     # a restricted model this close to the full one is skipped
RESTRICT_MIN_NODES = 10_000     # a model with fewer candidates goes straight to the full solve
# the large-neighbourhood phase (_neighbourhood_phase)
NEIGHBOURHOOD_MIN_NODES = 5_000  # a model with fewer candidates goes straight to the full solve
NEIGHBOURHOOD_SECONDS = 3.0     # at most, and at most RESTRICT_SHARE of the time left
NEIGHBOURHOOD_MOVE_SECONDS = 1.0    # at most a move (TENSAT's BERT: its improving move 0.5 s)
NEIGHBOURHOOD_MAX_SHARE = 0.5   # of the model's classes: a larger group is not a neighbourhood
NEIGHBOURHOOD_GLUE_DEPTH = 4    # levels of zero-cost classes below a group that are freed with it
CONTRACTED_SHARE = 0.25         # of the time left, for the contracted phase (cyclic) ...
CONTRACTED_MAX_SHARE = 0.5      # ... and up to this while its bound beats the full model's LP
CONTRACTED_HIGHS = {"presolve": "off"}  # TENSAT's NasRNN: proven optimal at 5-15 s over seeds
                                        # 0-3, where with presolve 3 of 4 took over 25 s


class _Incumbent:
    """The best verified selection so far (never taken on trust: each offer is walked by
    `_valid_cost`) and the best proven bound; `emit` (the worker's progress channel) hears of
    every improvement, so a killed worker still hands back what it found."""

    def __init__(self, P: dict, emit: Callable[[dict], None] | None):
        self.P, self.emit = P, emit
        self.choice: np.ndarray | None = None
        self.cost = float("inf")
        self.bound = 0.0
        self.timeline: list[tuple[float, str, float]] = []  # (time.time(), "cost"|"bound", v)

    def offer(self, sel: np.ndarray | None) -> bool:
        walked = _valid_walk(self.P, sel)
        if walked is None or walked[0] >= self.cost - _tol(walked[0]) * (self.choice is not None):
            return False
        self.cost, self.choice = walked
        self.timeline.append((time.time(), "cost", self.cost))
        self._emit()
        return True

    def offer_bound(self, b: float) -> None:
        if np.isfinite(b) and b > self.bound:
            self.bound = b
            self.timeline.append((time.time(), "bound", b))
            self._emit()

    def _emit(self) -> None:
        if self.emit is not None and self.choice is not None:
            self.emit({"choice": self.choice, "cost": self.cost,
                       "bound": min(self.bound, self.cost)})



def _solve(P: dict, opts: dict) -> dict:
    """Solve one problem (P: the arrays of selection._arrays, plus the dominator and closure
    rows), or each of its independent layers (P["layers"]) in turn."""
    if "layers" in P:
        return _solve_layers(P, opts)
    t0, c0 = time.perf_counter(), stop._CLOCK()      # c0: the stall rule's clock at the start
    wall0 = time.time()
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
    restrict = opts.get("restrict")
    if restrict is None:
        restrict = RESTRICT if full_nodes >= RESTRICT_MIN_NODES else ()
    for k in restrict:
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
    neighbourhoods = opts.get("neighbourhoods")
    if neighbourhoods is None:
        neighbourhoods = full_nodes >= NEIGHBOURHOOD_MIN_NODES
    if neighbourhoods and inc.choice is not None:
        t = time.perf_counter()
        end = t + min(NEIGHBOURHOOD_SECONDS, RESTRICT_SHARE * max(deadline - t, 0.0))
        stats["neighbourhoods"] = _neighbourhood_phase(P, pre, inc, opts, end, cut_sets)
        stats["neighbourhoods"]["seconds"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    contract = opts.get("contract")     # None: where it applies; True: on any acyclic model
    share = 0.0 if contract else contracted.MIN_GLUE_SHARE
    loop: dict[str, Any] | None = None
    inherited = 0
    if contract is not False and inc.choice is not None and contracted.relaxes(P, pre, share):
        left = max(deadline - t, 0.0)
        phase = stats["contracted"] = _contracted_phase(
            P, pre, inc, opts, t + CONTRACTED_SHARE * left, t + CONTRACTED_MAX_SHARE * left,
            stop_gap)
        if phase["done"]:           # its bound proves the incumbent (within the gap rule's gap)
            loop = {"status": phase["stopped"] or "optimal", "cuts": 0, "rounds": 0,
                    "resolves": 0}
        t = time.perf_counter()
    if loop is None:
        whole = contract is not False and contracted.applies(P, pre, share)
        m = contracted._Contracted(P, pre, opts) if whole else _Model(P, pre, opts)
        inherited = 0 if whole else sum(m.cycle_cut(sorted(S)) for S in cut_sets)
        stats["model"] = m.stats | {"seconds": round(time.perf_counter() - t, 3),
                                    "inherited_cuts": inherited}
        watch = _Progress(lambda: inc.cost, stall, start=c0, gap=stop_gap)
        loop = _cut_loop(P, m, inc, deadline, watch=watch, also=opts.get("outer"))
        inc.timeline += [(wall0 + t, "bound", low) for t, low in zip(watch.ts, watch.lows)
                         if np.isfinite(low)]   # the full model's bounds as HiGHS reported them
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
               status=status, optimal=optimal, resolves=loop["resolves"], events=inc.timeline,
               timeline=_timeline([inc.timeline], [inc.timeline[0][2]] if inc.timeline else [],
                                  bound))
    return out


def _contracted_phase(P: dict, pre: dict, inc: _Incumbent, opts: dict, end: float,
                      longest: float, stop_gap: float) -> dict:
    """The glue-contracted model (contracted.py) of a cyclic model, solved until `end` (until
    `longest` while its bound stands above the full model's LP bound: it is then the stronger
    formulation, and its tree search tends to close late, all at once) or until the stall or gap
    rule stops it: a relaxation of the problem, so its dual bound holds and is kept, and so is
    the LP bound; each answer whose grounded part is an acyclic selection is offered. `done`: its
    bound proves the incumbent, or proves it within `stop_gap` (the gap rule). TENSAT's NasRNN:
    LP 325.5, the phase 346.0 after its root and optimal (353.03) at 10-11 s; the NasRNN e-graph
    of nasrnn_cyclic_20k: LP 641.0 over the phase's 636.2, so the full model goes on at `end`."""
    t0 = time.perf_counter()
    lp = _lp_bound(P, pre, opts, longest)
    inc.offer_bound(lp)
    t = time.perf_counter()
    m = contracted._Contracted(P, pre, opts | {"highs": CONTRACTED_HIGHS | (opts.get("highs")
                                                                          or {})})
    built = time.perf_counter() - t
    watch = _Progress(lambda: inc.cost, float(opts.get("stall", 0.0)), start=stop._CLOCK(),
                      gap=stop_gap)

    def progress(primal: float, dual: float) -> bool:
        return watch.observe(primal, dual) or \
            (time.perf_counter() >= end and watch.bound <= lp)

    def improving(colv: np.ndarray) -> None:
        inc.offer(m.selection(colv))    # walked there: a cyclic or partial one is refused

    start = m.start_vector(inc.choice) if inc.choice is not None else None
    kind, ms, colv, db, _ = run_checked(m.h, m.obj, start, longest, on_improving=improving,
                                        on_progress=progress)
    if colv is not None:
        inc.offer(m.selection(colv))
    inc.offer_bound(max(db, watch.bound))
    proven = inc.choice is not None and inc.cost - inc.bound <= _tol(inc.cost)
    return {"columns": m.ncol, "build_seconds": round(built, 3), "lp_bound": lp,
            "lp_seconds": round(t - t0, 3), "seconds": round(time.perf_counter() - t0, 2),
            "cost": inc.cost, "bound": db,
            "stopped": None if proven else watch.stopped,
            "done": proven or watch.stopped == "within_gap",
            "points": watch.record()["points"]}


def _lp_bound(P: dict, pre: dict, opts: dict, deadline: float) -> float:
    """The full model's LP relaxation bound (a bound on the optimum; -inf when HiGHS does not
    solve it by `deadline`)."""
    import highspy

    m = _Model(P, pre, opts)
    n = m.ntotal
    m.h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.zeros(n, np.uint8))
    m.h.setOptionValue("time_limit", max(deadline - time.perf_counter(), 0.01))
    m.h.run()
    if m.h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return -np.inf
    return float(m.h.getInfo().objective_function_value)


def _neighbourhood_phase(P: dict, pre: dict, inc: _Incumbent, opts: dict, end: float,
                         cut_sets: set[frozenset]) -> dict:
    """Large-neighbourhood search until `end`: each neighbourhood (model._neighbourhoods, the
    largest first) freed around the incumbent and solved exactly; an answer is offered to `inc`
    (checked there) and the next move starts from the incumbent. The moves' bounds hold for
    their neighbourhoods only and are not kept. Measured on TENSAT's BERT: the neighbourhood of
    the layer input re-partitions its twelve projections into 2 three-way and 6 two-way merges
    (402.44 -> 398.44, the best known) in about a second, which the full model finds after 8 s."""
    tried = improved = 0
    start_cost = inc.cost
    for free in _neighbourhoods(P, pre, NEIGHBOURHOOD_MAX_SHARE, NEIGHBOURHOOD_GLUE_DEPTH):
        if time.perf_counter() >= end:
            break
        before = inc.cost
        ms = _Model(P, _freed(pre, free, inc.choice), opts)
        _cut_loop(P, ms, inc, min(end, time.perf_counter() + NEIGHBOURHOOD_MOVE_SECONDS),
                  bounds=False)
        cut_sets |= ms.seen
        tried += 1
        if inc.cost >= before:      # the full model takes over: where the incumbent is good
            break                   # already, the phase costs one move
        improved += 1
    return {"tried": tried, "improved": improved, "cost_before": start_cost, "cost": inc.cost}


def _timeline(events: list[list], start_costs: list[float], final_bound: float | None = None
              ) -> list[tuple[float, float, float]]:
    """(time.time(), cost, bound) at each change of the total over parts whose events are
    (time.time(), "cost"|"bound", value) (part j's cost before its first event: start_costs[j];
    its bound: 0). A bound never exceeds its part's cost; `final_bound` caps the last point's."""
    cost = list(start_costs)
    low = [0.0] * len(events)
    merged = sorted((t, j, kind, v) for j, ev in enumerate(events) for t, kind, v in ev)
    out: list[tuple[float, float, float]] = []
    for t, j, kind, v in merged:
        if kind == "cost":
            cost[j] = min(cost[j], v)
        else:
            low[j] = max(low[j], v)
        point = (t, float(sum(cost)), float(sum(min(a, b) for a, b in zip(low, cost))))
        if not out or point[1:] != out[-1][1:]:
            out.append(point)
    if out and final_bound is not None and out[-1][2] > final_bound:
        out[-1] = out[-1][:2] + (float(final_bound),)
    return out


# HiGHS's options for a layer: without its presolve (ours has been done) NasRNN's cells are
# proven optimal in 0.65-1.0 s instead of 2.7-4.7 s (3 seeds; the run e-graph's whole ILP 3.7 s
# instead of 6.0 s); on a whole problem its presolve still pays (TENSAT-schedule BERT: 3.3 s
# instead of 13.5 s to the optimum)
LAYER_HIGHS = {"presolve": "off"}
# ... but a layer of at least this share of the problem's candidates (the rest a few tiny
# layers) is solved as the whole problem would be, with HiGHS's presolve: the ViT-Large, ViT-Base
# and Transformer-Transducer runs' one big layer proves its answer within the gap in 1.0 s, 0.5 s
# and 0.8 s with it, 1.7 s, 0.9 s and 1.9 s without (its probing finds the implications that the
# LP lacks); NasRNN's five cells (none over 30 %) take 5.1 s with it, 1.8 s without
WHOLE_LAYER_SHARE = 0.9
# the share of the time spent that layers the stall rule left untried still get, for their own
# bounds (_solve_layers): TENSAT's VGG-19 stalls in the first of its 8 layers; 0.18 s more give
# the other seven theirs (bound 871 -> 1 088 of 2 809)
BOUND_PASS_SHARE = 0.05
# what a set of layers reports when they ended differently: the first of these any layer has
_WORST = ("infeasible", "inconsistent", "time_limit", "stalled", "within_gap", "optimal")


def _layer_highs(parts: list[dict]) -> list[dict]:
    """HiGHS's options for each layer: LAYER_HIGHS, except for one of WHOLE_LAYER_SHARE of the
    candidates or more (HiGHS's defaults, as for a whole problem)."""
    sizes = [int(part["P"]["node_class"].size) for part in parts]
    return [{} if n >= WHOLE_LAYER_SHARE * sum(sizes) else LAYER_HIGHS for n in sizes]


def _solve_layers(P: dict, opts: dict) -> dict:
    """The independent layers of a problem (decompose.py), one after the other, each with a share
    of the time left in proportion to its candidates; costs and bounds add up, and the
    selections together are the problem's (P["n_classes"] classes; a layer's class c is the
    problem's class_map[c], its candidate i the problem's node_map[i], -1 for the zero-cost
    leaf standing for a separator below, which that separator's own layer decides). Every
    improvement of any layer is reported (`emit`) as a whole selection. When the stall rule (on
    the sum) stops the solve before every layer was tried, the untried ones still get a short
    solve each (BOUND_PASS_SHARE of the time spent), for their bounds and answers."""
    t0 = time.perf_counter()
    deadline = t0 + float(opts["time_limit"])
    if "wall_deadline" in opts:
        deadline = min(deadline, t0 + float(opts["wall_deadline"]) - time.time())
    parts = P["layers"]
    emit = opts.get("emit")
    best: list[list] = []           # per layer: [choice, cost, bound]
    for part in parts:              # every layer starts from a valid selection
        start = _valid_walk(part["P"], part.get("warm_start"))
        if start is None:
            greedy, _, _ = _knuth_greedy(part["P"], np.ones(part["P"]["node_class"].size, bool))
            start = _valid_walk(part["P"], greedy)
        if start is None:
            return {"choice": None, "cost": float("inf"), "bound": 0.0, "cuts": 0,
                    "status": "infeasible", "optimal": False, "stats": {}}
        best.append([start[1], start[0], 0.0])

    def assemble() -> np.ndarray:
        choice = np.full(int(P["n_classes"]), -1, np.int64)
        for part, (sel, _, _) in zip(parts, best):
            on = sel >= 0
            picked = part["node_map"][np.maximum(sel, 0)]
            mine = on & (picked >= 0)
            choice[part["class_map"][mine]] = picked[mine]
        return choice

    def report() -> None:
        if emit is not None:
            emit({"choice": assemble(), "cost": sum(b[1] for b in best),
                  "bound": sum(min(b[2], b[1]) for b in best)})

    def heard(j: int) -> Callable[[dict], None]:
        def hear(progress: dict) -> None:
            best[j][:] = [np.asarray(progress["choice"], np.int64), float(progress["cost"]),
                          float(progress["bound"])]
            report()
        return hear

    report()
    # the stall and gap rules on the sum over the layers (each layer keeps the gap rule for
    # itself, so that one within the gap leaves its time to the others)
    outer = _Progress(lambda: sum(b[1] for b in best), float(opts.get("stall", 0.0)),
                      gap=float(opts.get("stop_gap", 0.0)))
    source = [part.get("twin", -1) if part.get("twin", -1) >= 0 else j
              for j, part in enumerate(parts)]

    def rules(j: int) -> Callable[[float, float], bool]:
        def observe(primal: float, bound: float) -> bool:
            low = max(bound, best[j][2])
            total_low = sum(low if source[t] == j else best[source[t]][2]
                            for t in range(len(parts)))
            total_up = sum(min(primal, b[1]) if t == j else b[1] for t, b in enumerate(best))
            return outer.observe(total_up, total_low)
        return observe

    results: list[dict | None] = [None] * len(parts)
    weight = [0 if part.get("twin", -1) >= 0 else int(part["P"]["node_class"].size)
              for part in parts]
    layer_highs = _layer_highs(parts)

    def solve_layer(j: int, share: float, also: Callable[[float, float], bool] | None) -> None:
        lopts = dict(opts, time_limit=share, wall_deadline=time.time() + share,
                     warm_start=best[j][0], emit=heard(j), stall=0.0, outer=also,
                     highs=layer_highs[j] | dict(opts.get("highs") or {}))
        r = _solve(parts[j]["P"], lopts)
        r["events"] = (results[j] or {}).get("events", []) + r.get("events", [])
        if results[j] is not None:
            r["stats"] = {"sweeps": [results[j].get("stats", {}), r.get("stats", {})]}
        results[j] = r
        if r["choice"] is not None and r["cost"] <= best[j][1]:
            best[j][:2] = [np.asarray(r["choice"], np.int64), float(r["cost"])]
        best[j][2] = max(best[j][2], min(float(r["bound"]), best[j][1]))

    def carry_twins() -> None:
        for i, part in enumerate(parts):        # a layer identical to an earlier one: its answer
            j = part.get("twin", -1)
            if j < 0 or results[j] is None:
                continue
            sel = _twin_choice(parts[j], part, best[j][0])
            walked = _valid_walk(part["P"], sel)
            if walked is not None and walked[0] <= best[i][1] + _tol(best[i][1]):
                best[i][:2] = [walked[1], walked[0]]
                if abs(walked[0] - best[j][1]) <= _tol(walked[0]):
                    best[i][2] = max(best[i][2], best[j][2])    # the same problem: its bound
                    results[i] = dict(results[j], stats={"twin_of": j}, twin_time=time.time())
            if results[i] is None:
                results[i] = dict(results[j], optimal=False, status="time_limit",
                                  stats={"twin_of": j})

    for sweep in range(2):          # a second sweep gives the time left to unfinished layers
        todo = [j for j, part in enumerate(parts) if weight[j] and (
            results[j] is None or results[j]["status"] not in ("optimal", "within_gap"))]
        if sweep and (not todo or deadline - time.perf_counter() < 0.5):
            break
        for j in todo:
            left = deadline - time.perf_counter()
            solve_layer(j, max(left, 0.0) * weight[j] / max(sum(weight[t] for t in todo
                                                                if t >= j), 1), rules(j))
            if outer.stopped:
                break
        carry_twins()
        report()
        if outer.stopped:
            break
    # The stall rule ended the solve before some layers were tried (it sees the sum over the
    # layers, an untried one at bound 0): each of them still gets a short solve of its own, in
    # all BOUND_PASS_SHARE of the time spent so far, so that the bound reported is theirs too
    untried = [j for j in range(len(parts)) if weight[j] and results[j] is None]
    if outer.stopped == "stalled" and untried:
        end = min(deadline, time.perf_counter() + BOUND_PASS_SHARE * (time.perf_counter() - t0))
        for j in untried:
            left = end - time.perf_counter()
            if left <= 0:
                break
            solve_layer(j, left * weight[j] / sum(weight[t] for t in untried if t >= j), None)
        carry_twins()
        report()
    results = [r if r is not None else {"status": "time_limit", "optimal": False, "cuts": 0}
               for r in results]
    events = []
    for j, r in enumerate(results):
        ev = list(r.get("events", []))
        if r.get("stats", {}).get("twin_of") is not None:
            ev = [(r.get("twin_time", t0), "cost", best[j][1]), (r.get("twin_time", t0), "bound",
                                                                 best[j][2])]
        events.append(ev)
    starts = [float(_valid_walk(part["P"], part.get("warm_start"))[0])
              if _valid_walk(part["P"], part.get("warm_start")) is not None else ev[0][2]
              if ev else float("inf") for part, ev in zip(parts, events)]
    statuses = [r["status"] for r in results]
    status = next(s for s in _WORST if s in statuses) if statuses else "optimal"
    optimal = all(r["optimal"] for r in results)
    optimal = optimal and all(b[1] - b[2] <= _tol(b[1]) for b in best)
    if outer.stopped and not optimal and status not in ("infeasible", "inconsistent"):
        status = outer.stopped          # the rules saw the whole problem stall or within gap
    return {"choice": assemble(), "cost": sum(b[1] for b in best),
            "bound": sum(b[2] for b in best), "cuts": sum(r.get("cuts", 0) for r in results),
            "status": "optimal" if optimal else status, "optimal": optimal,
            "resolves": sum(r.get("resolves", 0) for r in results),
            "timeline": _timeline(events, starts, sum(b[2] for b in best)),
            "stats": {"layers": [{"classes": int(p["P"]["n_classes"]),
                                  "nodes": int(p["P"]["node_class"].size),
                                  "status": r["status"], "cost": b[1], "bound": b[2],
                                  "highs": dict(o)} | r.get("stats", {})
                                 for p, r, b, o in zip(parts, results, best, layer_highs)]}}



def _cut_loop(P: dict, m: "_Model", inc: _Incumbent, deadline: float, bounds: bool = True,
              watch: _Progress | None = None,
              also: Callable[[float, float], bool] | None = None) -> dict:
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

    cut_now = [False]       # a run interrupted to cut the cycles of an incumbent it reported

    def progress(primal: float, bound: float) -> bool:
        """The stop rules; and a cyclic incumbent ends the run at once: its cycles are cut and
        the model re-solved (HiGHS has no lazy constraints), instead of HiGHS spending the rest
        of its time on a relaxation whose answers are all cyclic."""
        if watch is not None and watch.observe(primal, bound):
            return True
        if also is not None and also(primal, bound):    # the layers' rules (_solve_layers)
            return True
        if seen_cycles:
            cut_now[0] = True
            return True
        return False

    while True:
        if time.perf_counter() >= deadline:
            break
        if m.ncol:
            start = m.start_vector(inc.choice) if inc.choice is not None else None
            cut_now[0] = False
            kind, ms, colv, db, again = run_checked(
                m.h, m.obj, start, deadline, on_improving=improving, on_progress=progress)
            rounds += 1
            resolves += again
            if bounds:
                inc.offer_bound(db)         # cuts only tighten the model: every bound holds
                if watch is not None:       # as does every bound HiGHS reported during the run
                    inc.offer_bound(watch.bound)
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
        if not cyc and cut_now[0] and seen_cycles and not (watch is not None and watch.stopped):
            inc.offer(sel)              # interrupted to cut what HiGHS reported: go on
        elif not cyc:
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


def _twin_choice(src: dict, dst: dict, choice: np.ndarray) -> np.ndarray:
    """`choice` of layer `src` carried to the identical layer `dst` through their canonical
    labellings (decompose.canonical: class rank, node order)."""
    pos = np.empty_like(src["node_order"])
    pos[src["node_order"]] = np.arange(pos.size)
    canon = np.full(src["class_rank"].size, -1, np.int64)
    on = choice >= 0
    canon[src["class_rank"][on]] = pos[choice[on]]
    picked = canon[dst["class_rank"]]
    return np.where(picked >= 0, dst["node_order"][np.maximum(picked, 0)], -1)
