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
"""
from __future__ import annotations

import math
import random
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from ..cost.model import FREE_OPS, CostModel
from ..egraph.convert import original_choice
from ..egraph.layout import C_CONST, C_TYPE, F_DEAD, MAXA, N_CLS, N_FLAGS, N_NCH, N_OP, N_PAYLOAD
from ..egraph.store import EOP_NAMES, LIT as LIT_OP, EGraph
from ..extract.dag import dag_cost
from ..extract.problem import ExtractionProblem, egraph_choice, from_egraph
from ..extract.run import extract
from ..rules.compile import Program
from ..rules.match import MatchIndex, search
from ..rules.multi import canonical_key
from ..rules.pattern import Rule
from .limits import work_clock
from .saturate import Limits, _Compiled, compile_rules, run_iteration, source_program

FINAL_EXTRACTORS = ("ilp", "ocf")


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
    final_extract: str = "ilp"   # "ilp" | "ocf": what `MctsReport.cost_after` is measured with
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


# ---------------------------------------------------------------------------- costs, extraction
class Pricer:
    """Raw node costs (deadness and weight-only classes ignored; `masked_costs` applies both).

    A node's cost depends only on its operator, its own type and, per child, the child class's
    type, constness (weight-only operands are initializers to a measuring backend) and (for
    attribute children) literal id, so costs are cached under that key and a child
    e-graph only prices the nodes its rule added (`CostModel.egraph_costs` walks every node in
    Python). Literal ids are per interner: `clear` when the interner is a fresh copy."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.cache: dict[bytes, float] = {}
        self.free = np.array([name in FREE_OPS for name in EOP_NAMES], bool)

    def clear(self) -> None:
        self.cache.clear()

    def raw(self, eg: EGraph, start: int = 0, prev: np.ndarray | None = None) -> np.ndarray:
        """float64[num_nodes]: nodes below `start` copied from `prev`, the rest priced."""
        n = eg.num_nodes
        out = np.zeros(n, np.float64)
        if start:
            out[:start] = prev[:start]
        if n <= start:
            return out
        ops = eg.nodes[N_OP, start:n]
        skip = self.free[ops] | ((eg.nodes[N_FLAGS, start:n] & F_DEAD) != 0)
        nch = eg.nodes[N_NCH, start:n]
        valid = np.arange(MAXA)[None, :] < nch[:, None]
        kids = np.where(valid, eg.children[start:n], 0)
        canon = eg.canonical(np.ascontiguousarray(kids.ravel(), np.int32)).reshape(kids.shape)
        ktype = np.where(valid, eg.classes[C_TYPE, canon], -9)
        kpay = np.where(valid & (eg.nodes[N_OP, canon] == LIT_OP), eg.nodes[N_PAYLOAD, canon], -1)
        kconst = np.where(valid, eg.classes[C_CONST, canon], -1)
        own = eg.classes[C_TYPE, eg.canonical(np.ascontiguousarray(eg.nodes[N_CLS, start:n]))]
        keys = np.concatenate([ops[:, None], own[:, None], ktype, kpay, kconst],
                              axis=1).astype(np.int64)
        cache = self.cache
        for i in np.nonzero(~skip)[0]:
            key = keys[i].tobytes()
            got = cache.get(key)
            if got is None:
                got = cache[key] = self.price(eg, start + int(i))
            out[start + i] = got
        return out

    def price(self, eg: EGraph, node: int) -> float:
        """One node's cost, as `CostModel.egraph_costs` computes it for a live, non-const node."""
        if EOP_NAMES[eg.nodes[N_OP, node]] in FREE_OPS:
            return 0.0
        return self.model.node_cost(eg, node)


def masked_costs(eg: EGraph, raw: np.ndarray) -> np.ndarray:
    """`raw` with dead nodes and nodes of weight-only classes at 0 (= `egraph_costs`)."""
    n = eg.num_nodes
    dead = (eg.nodes[N_FLAGS, :n] & F_DEAD) != 0
    const = eg.classes[C_CONST, eg.canonical(eg.nodes[N_CLS, :n])] != 0
    return np.where(dead | const, 0.0, raw[:n])


# ---------------------------------------------------------------------------- search context
class Context:
    """What every simulation needs: actions, limits, cost model, caches (one per process)."""

    def __init__(self, actions: Sequence[_Compiled], model: CostModel, options: MctsOptions,
                 norm: float) -> None:
        self.actions = list(actions)
        self.model = model
        self.pricer = Pricer(model)
        self.options = options
        self.norm = norm if norm > 0 else 1.0          # returns are cost drops / norm
        self.limits = Limits(node_limit=options.node_limit,
                             multi_match_limit=options.multi_match_limit,
                             chunked_node_limit=True)
        # a decision on the real e-graph finishes its rule past the limit, as TENSAT's schedule
        # (which checks the limit after each rule) does, but only up to twice the limit: one
        # multi-pattern action on ResNet-50 would add 120 000 nodes
        self.decision_limits = Limits(node_limit=2 * options.node_limit,
                                      multi_match_limit=options.multi_match_limit,
                                      chunked_node_limit=True)
        self.cost_cache: dict[int, float] = {}         # fingerprint -> ocf DAG cost
        self.noop_cache: set[tuple[int, int]] = set()  # (fingerprint, action) that change nothing
        self.hits = 0
        self.misses = 0
        self.steps = 0
        # per action: indices into `self.patterns` of its source patterns
        # distinct source patterns: (pattern, canonical key, its variable renaming)
        self.patterns: list[tuple[object, object, dict[str, str]]] = []
        key_index: dict[object, int] = {}
        self.action_patterns: list[tuple[int, ...]] = []
        for a in self.actions:
            idx = []
            for p in a.sources:
                key, renaming = canonical_key(p)
                if key not in key_index:
                    key_index[key] = len(self.patterns)
                    self.patterns.append((p, key, renaming))
                idx.append(key_index[key])
            self.action_patterns.append(tuple(idx))

    def reset_caches(self) -> None:
        """Literal ids are per interner: a worker that got a fresh copy must not reuse these."""
        self.cost_cache.clear()
        self.noop_cache.clear()
        self.pricer.clear()

    def program(self, i: int, eg: EGraph) -> Program:
        """Source pattern i compiled for `eg` (cached with the literal interner)."""
        return source_program(eg, *self.patterns[i], "$b_")[0]

    def applicable(self, eg: EGraph) -> list[int]:
        """Actions all of whose source patterns match somewhere in `eg` (the rest: blacklist)."""
        index = MatchIndex(eg)
        found = [search(self.program(i, eg), index, limit=1).shape[0] > 0
                 for i in range(len(self.patterns))]
        return [a for a, pats in enumerate(self.action_patterns) if all(found[i] for i in pats)]

    def cost(self, eg: EGraph, raw: np.ndarray) -> float:
        fp = eg.fingerprint()
        got = self.cost_cache.get(fp)
        if got is not None:
            self.hits += 1
            return got
        self.misses += 1
        problem = from_egraph(eg, masked_costs(eg, raw))
        got = dag_cost(problem, extract(problem, self.options.reward_extract).choice)
        self.cost_cache[fp] = got
        return got

    def apply(self, eg: EGraph, raw: np.ndarray, action: int, number: int,
              decision: bool = False) -> tuple[bool, bool, np.ndarray, dict[str, int]]:
        """Apply one action to `eg` in place: (changed, node limit hit, raw costs, applied).
        `decision`: the real e-graph's step, whose rule runs to the end of its iteration."""
        self.steps += 1
        rule = self.actions[action]
        before = eg.num_nodes
        limits = self.decision_limits if decision else self.limits
        record, hit, changed = run_iteration(eg, [rule], limits, number, rule.is_multi, 0)
        if changed:
            raw = self.pricer.raw(eg, before, raw)
        applied = {n: s.applied for n, s in record.rules.items() if s.applied}
        return changed, hit or eg.num_nodes >= self.options.node_limit, raw, applied


@dataclass
class State:
    eg: EGraph
    raw: np.ndarray              # raw node costs (see `Pricer`)
    cost: float                  # ocf DAG cost


# ---------------------------------------------------------------------------- the tree
class Node:
    """A search-tree node. Its state is kept while in use and may be dropped (`strip`, e.g. to
    ship a tree to another process): it is recomputed by replaying the action on the parent."""

    __slots__ = ("action", "parent", "children", "untried", "tried", "visits", "value", "closed",
                 "terminal", "edge_reward", "state", "depth")

    def __init__(self, action: int, parent: "Node | None", state: State | None,
                 edge_reward: float, terminal: bool) -> None:
        self.action = action
        self.parent = parent
        self.children: dict[int, Node] = {}
        self.untried: list[int] | None = None     # computed at the first expansion
        self.tried: set[int] = set()              # includes actions that changed nothing
        self.visits = 0
        self.value = 0.0
        self.terminal = terminal                  # node limit reached: no further actions
        self.closed = terminal                    # nothing left to explore below
        self.edge_reward = edge_reward
        self.state = state
        self.depth = 0 if parent is None else parent.depth + 1

    def mean(self) -> float:
        return self.value / self.visits if self.visits else 0.0

    def strip(self) -> None:
        """Drop the e-graphs of all descendants (the root keeps its own)."""
        stack = list(self.children.values())
        while stack:
            n = stack.pop()
            n.state = None
            stack.extend(n.children.values())

    def __getstate__(self):
        return {s: getattr(self, s) for s in self.__slots__ if s != "state"} | {"state": None}

    def __setstate__(self, d):
        for k, v in d.items():
            setattr(self, k, v)


def _state(node: Node, ctx: Context) -> State:
    """The node's state, recomputed from its parent's when it was dropped."""
    if node.state is None:
        parent = _state(node.parent, ctx)
        eg = parent.eg.snapshot()
        _, _, raw, _ = ctx.apply(eg, parent.raw, node.action, node.depth)
        node.state = State(eg, raw, ctx.cost(eg, raw))
    return node.state


def _expand(node: Node, ctx: Context, rng: random.Random) -> Node | None:
    """A new child by a random untried action; None when every action is tried or unchanged."""
    st = _state(node, ctx)
    if node.untried is None:
        node.untried = [a for a in ctx.applicable(st.eg) if a not in node.tried]
    fp = st.eg.fingerprint()
    while node.untried:
        a = node.untried.pop(rng.randrange(len(node.untried)))
        node.tried.add(a)
        if (fp, a) in ctx.noop_cache:
            continue
        eg = st.eg.snapshot()
        changed, terminal, raw, _ = ctx.apply(eg, st.raw, a, node.depth + 1)
        if not changed:
            ctx.noop_cache.add((fp, a))
            continue
        cost = ctx.cost(eg, raw)
        child = Node(a, node, State(eg, raw, cost), max(0.0, st.cost - cost) / ctx.norm,
                     terminal)
        node.children[a] = child
        return child
    return None


def _rollout(node: Node, ctx: Context, rng: random.Random) -> float:
    """Random actions from `node` (not changing it); the sum of normalised cost drops."""
    st = _state(node, ctx)
    if node.closed:
        return 0.0
    if node.untried is None:
        node.untried = [a for a in ctx.applicable(st.eg) if a not in node.tried]
    candidates = sorted(set(node.untried) | set(node.children))
    eg, raw, last = None, st.raw, st.cost
    fp = st.eg.fingerprint()
    excluded: set[int] = set()
    total, steps = 0.0, 0
    while steps < ctx.options.depth:
        pool = [a for a in candidates if a not in excluded and (fp, a) not in ctx.noop_cache]
        if not pool:
            break
        a = pool[rng.randrange(len(pool))]
        if eg is None:
            eg = st.eg.snapshot()
        changed, hit, raw, _ = ctx.apply(eg, raw, a, node.depth + steps + 1)
        if not changed:
            ctx.noop_cache.add((fp, a))
            excluded.add(a)
            continue
        steps += 1
        excluded.clear()
        fp = eg.fingerprint()
        cost = ctx.cost(eg, raw)
        total += max(0.0, last - cost) / ctx.norm
        last = cost                  # as the paper: the next step is measured from here
        if hit:
            break
    return total


def _close(node: Node) -> None:
    """Mark nodes closed bottom-up when nothing below them is left to try."""
    while node is not None:
        if node.terminal or (node.untried is not None and not node.untried
                             and all(c.closed for c in node.children.values())):
            node.closed = True
            node = node.parent
        else:
            return


def simulate(root: Node, ctx: Context, rng: random.Random) -> bool:
    """One simulation: select, expand, roll out, back up. False when the root is closed."""
    if root.closed:
        return False
    opts = ctx.options
    node = root
    while not node.terminal:
        can_expand = node.untried is None or bool(node.untried)
        open_children = _open(node)
        if can_expand and (node is root or not open_children or rng.random() < opts.stop_prob):
            child = _expand(node, ctx, rng)
            if child is not None:
                node = child
                break
            open_children = _open(node)
        if not open_children:          # nothing left below this node
            _close(node)
            if root.closed:
                return False
            break
        log_n = math.log(max(node.visits, 1))
        node = max(open_children, key=lambda c: (c.mean() + opts.c_uct * math.sqrt(
            log_n / c.visits) if c.visits else math.inf, -c.action))
    ret = _rollout(node, ctx, rng)
    if node.terminal:
        _close(node)
    while node is not root:           # back up: each node gets the return from itself on
        ret += node.edge_reward
        node.visits += 1
        node.value += ret
        node = node.parent
    root.visits += 1
    root.value += ret
    return True


def _open(node: Node) -> list[Node]:
    return [c for c in node.children.values() if not c.closed]


def run_simulations(root: Node, ctx: Context, n: int, seed: int) -> Node:
    """Run up to `n` simulations from `root` (fewer once it is closed); returns `root`."""
    rng = random.Random(seed)
    for _ in range(n):
        if not simulate(root, ctx, rng):
            break
    return root


# ---------------------------------------------------------------------------- executors
@dataclass
class Job:
    """Run `n` simulations from `tree` (its root holds the decision's state) with `seed`."""

    tree: Node
    n: int
    seed: int


class Executor(Protocol):
    """Maps jobs over workers and hands back their trees, in job order."""

    def run(self, jobs: Sequence[Job]) -> list[Node]: ...

    def close(self) -> None: ...


class InlineExecutor:
    """Runs the jobs here, one after another; trees keep their e-graphs between decisions."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def run(self, jobs: Sequence[Job]) -> list[Node]:
        return [run_simulations(j.tree, self.ctx, j.n, j.seed) for j in jobs]

    def close(self) -> None:
        pass


_WORKER_CTX: Context | None = None


def _worker_init(ctx: Context) -> None:
    global _WORKER_CTX
    _WORKER_CTX = ctx
    # Ctrl-C reaches the whole process group: the parent handles it (a clean message, exit 130)
    # and shuts the pool down; a worker would print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_job(root_state: State, tree: Node, n: int, seed: int) -> Node:
    """In a worker process: attach the shipped root state, simulate, strip the e-graphs."""
    ctx = _WORKER_CTX
    ctx.reset_caches()               # the shipped interner copy is not the previous task's
    ctx.hits = ctx.misses = ctx.steps = 0
    tree.state = root_state
    run_simulations(tree, ctx, n, seed)
    tree.strip()
    tree.state = None
    return tree


class ProcessExecutor:
    """Root parallelism over a process pool. Each job ships the root state and the job's tree
    without e-graphs (they are replayed on demand), so the result depends only on the job."""

    def __init__(self, ctx: Context, workers: int) -> None:
        self.ctx = ctx
        self.pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init,
                                        initargs=(ctx,))

    def run(self, jobs: Sequence[Job]) -> list[Node]:
        futures = []
        for j in jobs:
            state = j.tree.state
            j.tree.strip()
            futures.append(self.pool.submit(_worker_job, state, j.tree, j.n, j.seed))
        out = []
        for j, f in zip(jobs, futures):
            tree = f.result()
            tree.state = j.tree.state
            out.append(tree)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _seed(seed: int, decision: int, worker: int) -> int:
    return int(np.random.SeedSequence([seed, decision, worker]).generate_state(1)[0])


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
    if options.final_extract == "ilp":
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
