"""The MCTS search tree (mcts.py describes the search): nodes holding e-graph states, one
simulation (selection, expansion, rollout, back-up), and the costs and rewards they are judged by
(`Pricer`: raw node costs, reused across steps; `Context`: the rule actions, caches, the reward's
normalisation).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..cost.model import FREE_OPS, CostModel
from ..egraph.layout import C_CONST, C_TYPE, F_DEAD, MAXA, N_CLS, N_FLAGS, N_NCH, N_OP, N_PAYLOAD
from ..egraph.store import EOP_NAMES, LIT as LIT_OP, EGraph
from ..extract.dag import dag_cost
from ..extract.problem import from_egraph
from ..extract.run import extract
from ..rules.compile import Program
from ..rules.match import MatchIndex, search
from ..rules.multi import canonical_key
from .saturate import Limits, _Compiled, run_iteration, source_program


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

    def __init__(self, actions: Sequence[_Compiled], model: CostModel, options: Any,  # MctsOptions
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
