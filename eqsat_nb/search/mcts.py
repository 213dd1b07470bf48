"""MCTS-guided e-graph construction (Hartmann et al., PACT 2024).

Instead of applying every rule every iteration (TENSAT), pick one rule direction at a time: the
root of the search tree is the current e-graph, each edge applies one compiled rule direction for
one iteration (`saturate.run_iteration` with that rule alone; multi-pattern rules are actions
too). A decision runs `budget` simulations:

- selection stops at each node with probability `stop_prob` (always at the root while it has
  untried actions), else descends to the open child with the best UCB1;
- expansion applies a random untried action that is not blacklisted at the node (an action one of
  whose source patterns has no match there); a child whose e-graph did not change is dropped and
  the action counts as saturated for that node;
- simulation applies random non-blacklisted actions up to `depth` e-graph-changing steps or the
  node limit; the reward is sum(max(0, cost_before - cost_after)) of the fast extractor's
  (`reward_extract`: ocf with the joint-switch pass by default, plain ocf as the paper) DAG cost
  over the steps, tree edges included, divided by the original cost so that `c_uct`
  means the same on every model (the artifact's raw milliseconds made selection nearly uniform);
- back-up adds the return from each node on down to that node's value and one to its visits.

The root child with the best mean value is applied to the real e-graph and its subtree is kept.
When every root action's mean value is 0 (nothing paid within the rollouts' horizon), the most
visited one (lowest index on ties) is applied anyway (`continue_on_zero`, default): the paper's
loop runs until the node limit or until no action is left, and the final extraction (ILP) sees
what a larger e-graph holds even where the rollouts' greedy rewards did not, e.g. on NASRNN (a100)
it turns 39.0 % into 43.2 % speed-up, TENSAT mode's 39.0 % unchanged. `continue_on_zero=False`
restores the earlier stop at the first zero-value decision ("no improving action"). Deviation:
after `zero_patience` consecutive zero-value decisions the run stops (None: never), because such
decisions cost a full budget each and, measured, pay only in the first two. The run also stops
when every action is saturated, at the node limit, or at the time or decision limit.
Extraction costs are cached by e-graph fingerprint.

Deviations from the paper (measured or forced): rewards are normalised by the original cost
(`c_uct` is a fraction of it); in the rollouts the node limit is applied in chunks within a rule
(one action cannot overshoot it by thousands of nodes), while a decision on the real e-graph may
finish its rule past the limit as TENSAT's own schedule does (it checks the limit after each rule;
`saturate` now enforces it within a rule), up to twice the limit (measured: on ViT-Large stopping
the merge rule at the limit lost 0.8 of TENSAT's 1.8 %); a multi-pattern action joins at most
`multi_match_limit` match pairs (first in the join's key order, so deterministic). The saturation
scheduler (backoff, schedule.py) does not apply: MCTS chooses one rule per step itself.

Root parallelism: an `Executor` maps "run k simulations from this root with seed s" over workers;
per-action visits and values are summed into one decision. `ProcessExecutor` uses a process pool;
anything with the same `run` method (e.g. Ray tasks) can replace it. Every worker's seed is derived
from (seed, decision, worker), so a run is reproducible for a given seed and worker count.

This module is the options, the report and the driver; the tree and one simulation are
mcts_tree.py, the executors mcts_workers.py.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..cost.model import CostModel
from ..egraph.convert import original_choice
from ..egraph.store import EGraph
from ..extract.dag import dag_cost
from ..extract.problem import ExtractionProblem, egraph_choice, from_egraph
from ..extract.run import extract
from ..rules.pattern import Rule
from .limits import work_clock
from .mcts_tree import Context, Node, State, masked_costs
from .mcts_workers import Executor, InlineExecutor, Job, ProcessExecutor, _seed
from .saturate import compile_rules
FINAL_EXTRACTORS = ("ilp", "ocf+switch", "ocf")


@dataclass(frozen=True)
class MctsOptions:
    """The paper's settings: budget 128 simulations per decision, depth 10, node limit 2 000."""

    seed: int = 0
    budget: int = 128            # simulations per decision (split over the workers)
    depth: int = 10              # e-graph-changing rollout steps per simulation
    node_limit: int = 2000
    c_uct: float = 0.05          # rewards are fractions of the original cost (0.05 = 5 %)
    stop_prob: float = 0.5       # selection stops at a node with this probability
    workers: int = 1
    final_extract: str = "ilp"   # "ilp" | "ocf+switch" | "ocf": what `MctsReport.cost_after`
    #                              is measured with
    ilp_time_limit: float = 60.0
    # the rollouts' extractor: "ocf" (the paper's) or "ocf+switch", whose joint-switch pass sees
    # merges (enlarge/concat + one kernel + split) that pay only when all consumers switch.
    # Measured (a100): with plain ocf rewards MCTS ended above TENSAT mode on NASNet-A (8.5 vs
    # 12.6 %: ocf prices TENSAT's own e-graph at 4782 us, above the original 4194, the switch
    # pass and ILP at 3725), so the rollouts never chose the merges
    reward_extract: str = "ocf+switch"
    time_limit: float = 3600.0   # whole search
    max_decisions: int = 1000
    # multi-pattern matches joined per action: an action never adds more than `node_limit` nodes
    # in a useful way, while unrelated sources (relu x relu) join to (#relu)^2 pairs that are all
    # cycle-checked; saturate's 1 000 000 applies to its k_multi early multi-pattern iterations
    multi_match_limit: int = 20_000
    # True (the paper's loop): a decision whose actions all have mean value 0 still applies one
    # (the most visited); False stops there ("no improving action")
    continue_on_zero: bool = True
    # consecutive zero-value decisions after which the run stops anyway (None: up to the node
    # limit, as the paper). Measured on the 13 models (a100 and cpu profiles, budget 128): the
    # only gain from zero-value decisions (NASRNN, a100) needs 2 of them, while MobileNet-v2 spent
    # 110 s on 78 such decisions and found nothing, so 4 keeps the gain at a fraction of the time
    zero_patience: int | None = 4


@dataclass
class Decision:
    index: int
    action: str                  # rule direction applied to the real e-graph
    mean_value: float            # its mean return (fraction of the original cost)
    visits: int
    simulations: int             # simulations run for this decision (all workers)
    nodes: int                   # e-graph nodes after applying it
    cost: float                  # ocf DAG cost after applying it
    seconds: float


@dataclass
class MctsReport:
    egraph: EGraph               # the final e-graph (the caller's object, modified in place)
    decisions: list[Decision]
    rules_applied: dict[str, int]    # rule direction -> matches applied on the real e-graph
    stop_reason: str
    cost_before: float           # DAG cost of the original graph
    cost_after: float            # DAG cost of the final extraction (never above cost_before)
    ocf_cost: float              # ocf cost of the final e-graph
    choice: np.ndarray | None    # e-graph node per e-graph class (`egraph_to_graph` takes
    #                              it); None: no extraction beat the original graph, keep it
    extraction: str              # how `choice` was found
    seconds: float               # whole call
    search_seconds: float
    extract_seconds: float
    simulations: int
    cache_hits: int = 0
    cache_misses: int = 0
    stats: dict[str, float] = field(default_factory=dict)

    @property
    def speedup_pct(self) -> float:
        return (self.cost_before / self.cost_after - 1.0) * 100.0 if self.cost_after else 0.0


# ---------------------------------------------------------------------------- the driver
def mcts_optimize(eg: EGraph, rules: Sequence[Rule], cost_model: CostModel,
                  options: MctsOptions = MctsOptions(),
                  progress: Callable[[Decision], None] | None = None,
                  executor: Executor | None = None) -> MctsReport:
    """Grow `eg` (in place) one rule decision at a time by MCTS, then extract.

    `executor` replaces the built-in ones (inline for one worker, a process pool for more); it
    gets one job per worker and decision."""
    if options.final_extract not in FINAL_EXTRACTORS:
        raise ValueError(f"unknown final extractor {options.final_extract!r} "
                         f"(known: {', '.join(FINAL_EXTRACTORS)})")
    if options.budget < 1 or options.workers < 1:
        raise ValueError("budget and workers must be at least 1")
    start, work_start = time.perf_counter(), work_clock()
    actions = compile_rules(rules, eg)          # adds the literals targets mention
    eg.rebuild()
    ctx = Context(actions, cost_model, options, 1.0)
    raw = ctx.pricer.raw(eg)
    problem0 = from_egraph(eg, masked_costs(eg, raw))
    orig = original_choice(eg)
    cost_before = _choice_cost(problem0, orig)
    ctx.norm = cost_before if cost_before > 0 else 1.0
    root = Node(-1, None, State(eg.snapshot(), raw, ctx.cost(eg, raw)), 0.0, False)
    workers = options.workers
    trees = [root] + [Node(-1, None, None, 0.0, False) for _ in range(workers - 1)]
    own_executor = executor is None
    if executor is None:
        executor = InlineExecutor(ctx) if workers == 1 else ProcessExecutor(ctx, workers)
    per_worker = [options.budget // workers + (1 if w < options.budget % workers else 0)
                  for w in range(workers)]
    decisions: list[Decision] = []
    applied: dict[str, int] = {}
    stop = "decision limit"
    sims_total = 0
    zeros = 0                       # consecutive decisions whose best mean value was 0
    try:
        for d in range(options.max_decisions):
            if work_clock() - work_start > options.time_limit:  # compilation not counted
                stop = "time limit"
                break
            state = root.state
            if state.eg.num_nodes >= options.node_limit:
                stop = "node limit"
                break
            t0 = time.perf_counter()
            for tr in trees:
                tr.state = state
            jobs = [Job(trees[w], per_worker[w], _seed(options.seed, d, w))
                    for w in range(workers) if per_worker[w]]
            prior = sum(tr.visits for tr in trees)     # a reused subtree's earlier visits
            trees = executor.run(jobs)
            visits: dict[int, int] = {}
            values: dict[int, float] = {}
            sims = sum(tr.visits for tr in trees) - prior
            for tr in trees:
                for a, c in tr.children.items():
                    visits[a] = visits.get(a, 0) + c.visits
                    values[a] = values.get(a, 0.0) + c.value
            sims_total += sims
            scored = [(values[a] / visits[a], visits[a], -a) for a in visits if visits[a]]
            if not scored:
                stop = "saturated"
                break
            mean, n_vis, neg_a = max(scored)
            zeros = zeros + 1 if mean <= 0.0 else 0
            if mean <= 0.0:
                if not options.continue_on_zero:
                    stop = "no improving action"
                    break
                if options.zero_patience is not None and zeros > options.zero_patience:
                    stop = f"no improving action in {options.zero_patience + 1} decisions"
                    break
                # nothing paid within the rollouts' horizon: grow the e-graph anyway (the paper's
                # loop runs to the node limit) by the most-visited action, lowest index on ties
                n_vis, neg_a = max((visits[a], -a) for a in visits if visits[a])
                mean = values[-neg_a] / n_vis
            a = -neg_a
            # apply the chosen action to the real state (the same replay every worker did)
            new_eg = state.eg.snapshot()
            changed, terminal, new_raw, fired = ctx.apply(new_eg, state.raw, a, d + 1,
                                                          decision=True)
            for name, k in fired.items():
                applied[name] = applied.get(name, 0) + k
            new_state = State(new_eg, new_raw, ctx.cost(new_eg, new_raw))
            new_trees = []
            for tr in trees:
                child = tr.children.get(a)
                if (child is not None and child.state is not None
                        and child.state.eg.num_nodes != new_eg.num_nodes):
                    child = None        # the rollouts' copy stopped at the limit mid-rule
                if child is None:
                    child = Node(a, None, None, 0.0, terminal)
                child.parent = None
                child.depth = 0
                child.edge_reward = 0.0
                child.state = new_state
                new_trees.append(child)
            trees = new_trees
            root = trees[0]
            dec = Decision(d, actions[a].name, mean, n_vis, sims, new_eg.num_nodes,
                           new_state.cost, time.perf_counter() - t0)
            decisions.append(dec)
            if progress is not None:
                progress(dec)
            if not changed:             # cannot happen for a child that exists; be safe
                stop = "saturated"
                break
    finally:
        if own_executor:
            executor.close()
    final = root.state
    search_s = time.perf_counter() - start
    # the caller's e-graph becomes the final one (snapshots share the literal interner)
    eg.__dict__.update(final.eg.snapshot().__dict__)
    t = time.perf_counter()
    problem = from_egraph(eg, masked_costs(eg, ctx.pricer.raw(eg)))
    ocf = extract(problem, "ocf").choice
    ocf_cost = dag_cost(problem, ocf)
    choice, how, cost_after = ocf, "ocf", ocf_cost
    if options.final_extract == "ocf+switch":
        from ..extract.switch import joint_switch
        choice, how = joint_switch(problem, ocf), "ocf+switch"
        cost_after = dag_cost(problem, choice)
    elif options.final_extract == "ilp":
        from ..extract.ilp import extract_ilp
        res = extract_ilp(problem, time_limit=options.ilp_time_limit, warm_start=ocf)
        if res.choice is not None and np.isfinite(res.cost) and res.cost <= ocf_cost:
            choice, how, cost_after = res.choice, f"ilp ({res.status})", dag_cost(problem,
                                                                                  res.choice)
        else:
            how = f"ocf (ilp: {res.status})"
    egc = egraph_choice(problem, choice, eg.num_nodes)
    if cost_after > cost_before:      # never hand back something estimated slower
        egc, how, cost_after = None, f"original kept ({how} was worse)", cost_before
    extract_s = time.perf_counter() - t
    return MctsReport(eg, decisions, applied, stop, cost_before, cost_after, ocf_cost, egc, how,
                      time.perf_counter() - start, search_s, extract_s, sims_total, ctx.hits,
                      ctx.misses, {"steps": float(ctx.steps)})


def _choice_cost(problem: ExtractionProblem, egraph_choice: np.ndarray) -> float:
    """DAG cost of an e-graph-level choice (node per class) in `problem`'s dense terms."""
    pos = {int(n): i for i, n in enumerate(problem.node_ids)}
    dense = np.full(problem.n_classes, -1, np.int64)
    for c in range(problem.n_classes):
        n = int(egraph_choice[problem.class_ids[c]])
        dense[c] = pos.get(n, -1)
    return dag_cost(problem, dense)
