"""The optimizer as one call: graph → e-graph → search → extraction → graph.

`optimize` is what `eqsat-nb run` and `eqsat-nb bench` call; it does not verify (see
`check_outputs`) and writes nothing. Extraction: ocf and its joint-switch pass always run
(milliseconds) and are the fallback; `ilp` then solves exactly, warm-started from ocf+switch,
within a time limit, and its answer is taken when its checked DAG cost is at least as good. If
no extracted graph is estimated cheaper than the original, the original is returned unchanged:
the optimizer never hands back a graph it predicts is slower.

With a `Budget` (`eqsat-nb run --time-limit`: one wall-clock budget for the whole command) the
phases share it: the search may use `search_share` of what is left (less `reserve`, the seconds the
caller keeps for verification and writing), pricing, ocf and the switch pass always run (they
are needed for any answer and take milliseconds to a second), and the ILP gets what is then
left, again less `reserve` (skipped below ILP_MIN_SECONDS, ocf+switch's answer stands). Numba
compilation is not counted (search/limits.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from .cost.model import CostModel, graph_cost
from .egraph.convert import egraph_to_graph, graph_to_egraph
from .extract import METHODS
from .extract.dag import dag_cost
from .extract.ilp import GAP_PERCENT, STALL_SECONDS
from .extract.problem import egraph_choice, from_egraph
from .extract.run import extract
from .ir.graph import Graph
from .rules.pattern import Rule
from .search.limits import Budget
from .search.saturate import Iteration, Limits, saturate

SEARCHES = ("saturate", "mcts")
EXTRACTORS = METHODS
ILP_MIN_SECONDS = 1.5       # below this the ILP worker cannot start, presolve and solve
ILP_OVERHEAD_SECONDS = 1.0  # worker start-up and result handling outside HiGHS's own time limit


@dataclass(frozen=True)
class Options:
    search: str = "saturate"
    limits: Limits = Limits()               # saturation limits (TENSAT's defaults)
    mcts: Any = None                        # MctsOptions for search="mcts" (None: defaults)
    extract: str = "ilp"
    ilp_time_limit: float = 10.0            # seconds (see --ilp-time-limit)
    ilp_stall: float = STALL_SECONDS        # the ILP's stall window, seconds (see --ilp-stall)
    ilp_gap: float = GAP_PERCENT            # the ILP's gap rule, percent (see --ilp-gap; 0: off)
    budget: Budget | None = None            # the command's time budget (None: only the limits)
    reserve: float = 0.0                    # seconds of the budget kept for after optimize()
    search_share: float = 0.5               # of the budget left (less reserve) when search starts
    alternatives: bool = False              # also extract with the cheaper extractors


@dataclass
class Result:
    original: Graph
    optimized: Graph
    cost_before: float            # estimated, microseconds
    cost_after: float
    egraph_nodes: int
    egraph_classes: int
    iterations: int
    stop_reason: str
    extraction: str               # what produced the graph, e.g. "ilp (optimal)"
    rules_fired: dict[str, int]
    times: dict[str, float] = field(default_factory=dict)   # seconds per phase
    improved: bool = True         # False: the original was kept
    rules_banned: dict[str, int] = field(default_factory=dict)   # saturate: bans per rule
    changes: list = field(default_factory=list)   # cost.explain.Change, largest saving first
    # Options.alternatives: (extractor, graph) of the other extractors' answers, for a choice
    # confirmed end to end (confirm.py)
    alternatives: list = field(default_factory=list)
    confirmed: str = ""           # how the choice was confirmed end to end (confirm.py), if it was
    layers: Any = None            # layers.LayerRun when optimized one layer class at a time

    @property
    def speedup_pct(self) -> float:
        """Estimated speed-up, (before / after - 1) * 100, as TASO and TENSAT report it."""
        return (self.cost_before / self.cost_after - 1.0) * 100.0 if self.cost_after else 0.0


def optimize(graph: Graph, cost_model: CostModel, rules: Sequence[Rule],
             options: Options = Options(),
             on_iteration: Callable[[Iteration], None] | None = None,
             on_decision: Callable[..., None] | None = None) -> Result:
    """Find a cheaper equivalent of `graph` under `cost_model` with `rules`."""
    if options.search not in SEARCHES:
        raise ValueError(f"unknown search {options.search!r} (known: {', '.join(SEARCHES)})")
    if options.extract not in EXTRACTORS:
        raise ValueError(f"unknown extractor {options.extract!r} "
                         f"(known: {', '.join(EXTRACTORS)})")
    options = _with_search_budget(options)
    if options.extract == "ilp" and options.search == "saturate":
        from .extract.ilp import worker
        worker.prestart()           # the ILP's worker imports while the search runs
    times: dict[str, float] = {}
    t = time.perf_counter()
    eg = graph_to_egraph(graph)
    times["build"] = time.perf_counter() - t

    t = time.perf_counter()
    if options.search == "saturate":
        report = saturate(eg, rules, options.limits, progress=on_iteration)
        times["search"] = time.perf_counter() - t
        res = extract_saturated(eg, graph, cost_model, options)
        res.times = {**times, **res.times}
        res.iterations, res.stop_reason = len(report.iterations), report.stop_reason
        res.rules_fired, res.rules_banned = report.applied, report.banned
        return res
    else:          # MCTS prices, searches and extracts (ocf during search, its final extractor)
        from .search.mcts import MctsOptions, mcts_optimize
        mopts = options.mcts if options.mcts is not None else MctsOptions()
        if options.budget is not None:      # its ILP runs right after its search
            mopts = replace(mopts, time_limit=min(mopts.time_limit, options.limits.time_limit),
                            ilp_time_limit=min(mopts.ilp_time_limit, max(
                                0.1, options.budget.left() - options.reserve
                                - options.limits.time_limit - ILP_OVERHEAD_SECONDS)))
        report = mcts_optimize(eg, rules, cost_model, mopts, progress=on_decision)
        eg = report.egraph
        iterations, stop = len(report.decisions), report.stop_reason
        fired, how = dict(report.rules_applied), report.extraction
        banned = {}
        times["search"] = report.search_seconds
        times["extract"] = report.extract_seconds
        nodes = report.choice
    return _result(eg, graph, nodes, cost_model, how, times, iterations, stop, fired, banned)


def extract_saturated(eg: Any, graph: Graph, cost_model: CostModel,
                      options: Options = Options()) -> Result:
    """Price the searched e-graph `eg` of `graph` with `cost_model` and extract from it
    (`options.extract`, its ILP limits): what `optimize` does after saturating, so that one
    saturated e-graph can be priced by several cost models (tools/gpu_truth.py extracts each
    model in four precisions from one saturation). `eg` is read, not changed. The search's
    figures (iterations, stop reason, rules fired) are left empty."""
    times: dict[str, float] = {}
    t = time.perf_counter()
    costs = cost_model.egraph_costs(eg)
    problem = from_egraph(eg, costs)
    times["costs"] = time.perf_counter() - t

    t = time.perf_counter()
    choice, how = _extract(problem, options)
    nodes = egraph_choice(problem, choice, eg.num_nodes)
    alternatives = [(label, egraph_to_graph(eg, egraph_choice(problem, c, eg.num_nodes),
                                            name=graph.name))
                    for label, c in _alternatives(problem, options)]
    times["extract"] = time.perf_counter() - t
    res = _result(eg, graph, nodes, cost_model, how, times, 0, "", {}, {})
    res.alternatives = alternatives
    return res


def _result(eg: Any, graph: Graph, nodes: Any, cost_model: CostModel, how: str,
            times: dict[str, float], iterations: int, stop: str, fired: dict[str, int],
            banned: dict[str, int]) -> Result:
    """The `Result` of extracting `nodes` from `eg`: the original kept unless it is cheaper."""
    optimized = egraph_to_graph(eg, nodes, name=graph.name) if nodes is not None else graph

    before, after = graph_cost(cost_model, graph), graph_cost(cost_model, optimized)
    improved = after < before * (1 - 1e-9)
    changes: list = []
    if improved:                # which cost differences decided it (the report's "why" lines)
        from .cost.explain import explain_changes
        changes = explain_changes(eg, graph, optimized, cost_model)
    else:
        optimized, after = graph, before
    return Result(graph, optimized, before, after, eg.num_nodes, eg.num_classes, iterations,
                  stop, how if improved else f"{how}; no cheaper graph, original kept", fired,
                  times, improved, banned, changes)


def _alternatives(problem, options: Options) -> list[tuple[str, np.ndarray]]:
    """With `options.alternatives`, the choices of the extractors cheaper than the one asked
    for (ocf+switch, ocf, greedy): graphs a cost model ranks close that an end-to-end
    measurement may order otherwise."""
    if not options.alternatives:
        return []
    order = ("ilp", "ocf+switch", "ocf", "greedy")
    below = order[order.index(options.extract) + 1:] if options.extract in order else ()
    return [(label, _extract(problem, replace(options, extract=label))[0]) for label in below]


def _with_search_budget(options: Options) -> Options:
    """`options` whose search time limit is its share of the budget (unchanged without one)."""
    if options.budget is None:
        return options
    share = max(0.0, options.search_share * (options.budget.left() - options.reserve))
    return replace(options, limits=replace(options.limits,
                                           time_limit=min(options.limits.time_limit, share)))


def _extract(problem, options: Options) -> tuple[np.ndarray, str]:
    """The chosen node per class and a few words on how it was found. For "ilp": ocf, then the
    joint-switch pass (ocf+switch), which is the ILP's warm start and its fallback; the ILP's
    answer is taken only when its checked DAG cost is at most ocf+switch's, so nothing ocf+switch
    found is thrown away when the ILP stops early, is killed or fails."""
    if options.extract == "greedy":
        return extract(problem, "greedy").choice, "greedy"
    ocf = extract(problem, "ocf").choice
    if options.extract == "ocf":
        return ocf, "ocf"
    from .extract.ilp import extract_ilp
    from .extract.switch import joint_switch
    warm = joint_switch(problem, ocf)
    if options.extract == "ocf+switch":
        return warm, "ocf+switch"
    warm_cost = dag_cost(problem, warm)
    # --ilp-time-limit holds as wall time, worker start-up included: HiGHS overruns its own limit
    # by seconds on large models, so the worker is killed at the deadline (keeping its selection,
    # losing its bound; extract_ilp's `deadline`)
    seconds = options.ilp_time_limit
    deadline = time.perf_counter() + seconds + ILP_OVERHEAD_SECONDS
    if options.budget is not None:          # the ILP gets what is left, worker start-up included
        left = options.budget.left() - options.reserve
        if left < ILP_MIN_SECONDS:
            return warm, "ocf+switch (ilp skipped: the time limit was reached)"
        seconds = min(seconds, left - ILP_OVERHEAD_SECONDS)
        deadline = min(deadline, time.perf_counter() + left)
    res = extract_ilp(problem, time_limit=seconds, warm_start=warm, deadline=deadline,
                      stall=options.ilp_stall, stop_gap=max(options.ilp_gap, 0.0) / 100)
    if res.choice is None or not np.isfinite(res.cost) or res.cost > warm_cost:
        return warm, f"ocf+switch (ilp: {res.status})"
    if res.status == "killed" and res.cost >= warm_cost:
        return warm, "ocf+switch (ilp: stopped at its time limit)"
    gap = "" if res.optimal else f", gap {100 * res.gap:.1f} %"
    return res.choice, f"ilp ({res.status}{gap})"
