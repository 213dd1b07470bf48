"""Equality saturation: TENSAT's rules and limits, egg's backoff scheduling.

Each iteration searches every rule the scheduler lets run on the rebuilt e-graph (each distinct
source pattern once), drops matches that would close a cycle, applies the rest (shape-checked, see
rules/apply.py), rebuilds, and filters the newest node of any cycle the unions still made.
Multi-pattern rules run in `k_multi` iterations each: TENSAT's first `k_multi`, unless the
scheduler banned one of them then, which keeps its turn for when the ban ends (a merge of merged
pairs with a third operand comes in the second one). The scheduler (schedule.py, egg's
BackoffScheduler) bans a rule for a few iterations when its matches exceed a threshold, so one
family cannot fill the node budget alone; the node limit is enforced within a rule's application.
The run stops when an iteration changes nothing and no ban is left to cut short (saturated) or at
the node, iteration or time limit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import numpy as np

from ..egraph.index import build_index
from ..egraph.layout import M_DEAD, M_EPOCH
from ..egraph.shapes_nb import shape_consts
from ..egraph.store import EOP_NAMES, OP_KIND, EGraph, EGraphError
from ..rules.apply import B_CONST, B_NODE, Applier, RuleCompileError, apply_matches, compile_applier
from ..rules.compile import Program, compile_pattern
from ..rules.match import MatchIndex, search
from ..rules.multi import canonical_key, is_symmetric, join
from ..rules.pattern import PNode, Rule
from .cycles import cycle_mask, heights
from .limits import Limits, work_clock
from .schedule import BackoffScheduler, Candidate


@dataclass
class RuleStats:
    matches: int = 0
    applied: int = 0
    rejected_condition: int = 0
    rejected_shape: int = 0
    rejected_cycle: int = 0
    merged: int = 0
    banned: bool = False        # over the scheduler's threshold: matches dropped, rule banned


@dataclass
class Iteration:
    index: int
    nodes: int
    classes: int
    filtered: int
    search_s: float
    apply_s: float
    rebuild_s: float
    filter_s: float
    rules: dict[str, RuleStats] = field(default_factory=dict)


@dataclass
class Report:
    iterations: list[Iteration]
    stop_reason: str
    seconds: float

    def _per_rule(self, count) -> dict[str, int]:
        """`count(stats)` summed per rule over the iterations, rules with a zero sum left out."""
        out: dict[str, int] = {}
        for it in self.iterations:
            for name, st in it.rules.items():
                n = count(st)
                if n:
                    out[name] = out.get(name, 0) + n
        return out

    @property
    def applied(self) -> dict[str, int]:
        """Applications per rule over the whole run (rules that fired)."""
        return self._per_rule(lambda st: st.applied)

    @property
    def banned(self) -> dict[str, int]:
        """Bans per rule over the whole run (rules the scheduler held back at least once)."""
        return self._per_rule(lambda st: 1 if st.banned else 0)


@dataclass
class _Compiled:
    name: str
    sources: tuple                   # source patterns
    applier: Applier
    symmetric: bool
    var_names: tuple[str, ...]       # columns after the roots

    @property
    def is_multi(self) -> bool:
        return len(self.sources) > 1

    @cached_property
    def family(self) -> object:
        """Equal for rule directions with the same source patterns up to a renaming of variables
        (one renaming for all sources: which variables they share matters)."""
        return canonical_key(PNode("$sources", (), tuple(self.sources)))[0]


def compile_rules(rules: Sequence[Rule], eg: EGraph) -> list[_Compiled]:
    """Compile every direction of every rule against `eg` (adds the literals targets mention)."""
    out = []
    for rule in rules:
        for name, lhs, rhs in rule.directions():
            dry = [compile_pattern(p, lambda v: -1, f"$check{s}_") for s, p in enumerate(lhs)]
            names: list[str] = []
            for p in dry:
                names += [v for v in p.var_names if v not in names]
            checks = tuple(c for p in dry for c in p.checks)
            try:
                applier = compile_applier(name, tuple(names), rhs, rule.conds, checks, eg)
            except RuleCompileError as e:                   # name and locate the rule
                raise RuleCompileError(f"rule {name}: {e.message}", rule.loc, rule.file) from None
            out.append(_Compiled(name, lhs, applier, is_symmetric(lhs, rhs, rule.conds),
                                 tuple(names)))
    return out


def saturate(eg: EGraph, rules: Sequence[Rule], limits: Limits = Limits(),
             progress: Callable[[Iteration], None] | None = None) -> Report:
    """Run equality saturation on `eg` in place."""
    start, work_start = time.perf_counter(), work_clock()
    compiled = compile_rules(rules, eg)
    scheduler = BackoffScheduler(limits.match_limit, limits.ban_length, limits.incremental,
                                 limits.budget_share)
    multi = {r.name for r in compiled if r.is_multi}
    iterations: list[Iteration] = []
    stop = "iteration limit"
    for it in range(limits.iter_limit):
        if work_clock() - work_start > limits.time_limit:     # Numba compilation not counted
            stop = "time limit"
            break
        record, hit_limit, changed = run_iteration(eg, compiled, limits, it + 1, True,
                                                   scheduler=scheduler)
        iterations.append(record)
        _compact_if_mostly_dead(eg, compiled)
        if progress is not None:
            progress(record)
        if hit_limit:
            stop = "node limit"
            break
        if not changed and not scheduler.cut_bans(
                it + 1, lambda name: scheduler.has_turns(name, name in multi, limits.k_multi)):
            stop = "saturated"
            break
    return Report(iterations, stop, time.perf_counter() - start)


def _compact_if_mostly_dead(eg: EGraph, compiled: Sequence[_Compiled]) -> None:
    """Drop the dead nodes once they outnumber the live ones (see egraph/compact.py): they
    would otherwise stay in every array for the rest of the run. Class ids change; the rules'
    literal classes are renumbered here (the e-graph renumbers its roots, inputs and names)."""
    dead = int(eg.meta[M_DEAD])
    if dead <= eg.num_nodes - dead:
        return
    new_class_of = eg.compact()
    for rule in compiled:
        build = rule.applier.build
        consts = build[:, 0] == B_CONST
        if consts.any():
            build = build.copy()
            build[consts, 1] = new_class_of[build[consts, 1]]
            rule.applier.build = build


def run_iteration(eg: EGraph, compiled: Sequence[_Compiled], limits: Limits, number: int = 1,
                  with_multi: bool = True, since: int = 0,
                  scheduler: BackoffScheduler | None = None) -> tuple[Iteration, bool, bool]:
    """One iteration of `compiled` on `eg` in place: search, filter, apply, rebuild, filter.

    `number` is the 1-based iteration number (it stamps the epoch that `since` reads: a later
    call with `since=number` searches only matches involving what this one added). With a
    `scheduler` it decides which rules run and each rule's own `since` (the argument is then
    ignored), and bans a rule whose matches exceed its threshold. Returns the statistics, whether
    the node limit stopped it, and whether the e-graph changed. A step-wise search (MCTS) calls
    this with one rule at a time.
    """
    before = (eg.num_nodes, eg.num_unions)
    t0 = time.perf_counter()
    stats: dict[str, RuleStats] = {}
    if scheduler is not None:
        compiled = [r for r in compiled if scheduler.may_search(r.name, number)
                    and (with_multi or not r.is_multi)
                    and scheduler.has_turns(r.name, r.is_multi, limits.k_multi)]
        sinces = [scheduler.since(r.name) for r in compiled]
        since = max(sinces, default=0)      # the usual one: the index lists its new nodes first
    index = MatchIndex(eg, since)
    height = None
    reversed_edges = [np.zeros(0, np.int64)] * 2    # cycle_mask's, built once per iteration
    if limits.filter_cycles:
        found = np.full(1, -1, np.int64)
        height = heights(index.cstart, index.cnodes, eg.nodes, eg.children, eg.classes, found)
    found_matches = _search_all(compiled, eg, index, with_multi, limits,
                                sinces if scheduler is not None else since)
    if scheduler is not None:
        found = [Candidate(r.name, r.family, len(found_matches[r.name]), r.applier.new_nodes,
                           r.is_multi)
                 for r in compiled if r.name in found_matches]
        ok = scheduler.admit(found, number, limits.node_limit - eg.num_nodes)
        for c in found:
            if c.name not in ok:
                stats[c.name] = RuleStats(matches=c.matches, banned=True)
                del found_matches[c.name]
    eg.meta[M_EPOCH] = number          # what this iteration adds or merges is new next time
    t1 = time.perf_counter()
    consts = shape_consts(eg.lits)
    hit_limit = False
    pending_unions: list[np.ndarray] = []
    for rule in compiled:
        if rule.name not in found_matches:
            continue
        rows = found_matches[rule.name]
        st = stats[rule.name] = RuleStats(matches=len(rows))
        def acyclic(block: np.ndarray, rule=rule, st=st) -> np.ndarray:
            if height is None or not len(block):
                return block
            var_cols = np.arange(len(rule.sources), block.shape[1], dtype=np.int64)
            keep, pstart, pcls = cycle_mask(block, len(rule.sources), var_cols, height,
                                            index.cstart, index.cnodes, eg.nodes, eg.children,
                                            eg.classes, *reversed_edges)
            reversed_edges[:] = [pstart, pcls]
            st.rejected_cycle += int(len(block) - keep.sum())
            return block[keep]

        if len(rows) and limits.chunked_node_limit:
            # chunks of at most as many matches as the room left could take (`new_nodes` bounds a
            # match's nodes), so the limit is passed by less than one match's nodes. Rows are
            # cycle-checked only as far as they get applied: a row's check reads the e-graph as
            # the iteration found it, so the kept rows and chunks are the same as checking all
            # first (a multi-pattern action joins 20 000 pairs for a few hundred)
            per = max(rule.applier.new_nodes, 1)
            ready, pos = rows[:0], 0
            while eg.num_nodes < limits.node_limit:
                k = max(1, (limits.node_limit - eg.num_nodes) // per)
                while len(ready) < k and pos < len(rows):
                    block = rows[pos:pos + max(k, 1024)]
                    pos += len(block)
                    ready = np.concatenate([ready, acyclic(block)])
                if not len(ready):
                    break
                pending_unions.append(_apply(eg, rule.applier, ready[:k], consts, st))
                ready = ready[k:]
            if len(ready) or pos < len(rows):
                hit_limit = True            # matches left over: the rule stopped at the limit
        elif len(rows):
            rows = acyclic(rows)
            if len(rows):
                pending_unions.append(_apply(eg, rule.applier, rows, consts, st))
        if scheduler is not None:
            scheduler.applied(rule.name, number)
        if hit_limit or eg.num_nodes > limits.node_limit:
            hit_limit = True
            break
    t2 = time.perf_counter()
    for pairs in pending_unions:
        eg.union_many(pairs)
    eg.rebuild()
    complete_splits(eg, before[0])
    t3 = time.perf_counter()
    n_filtered = 0
    if limits.filter_cycles:
        cstart, cnodes, _, _ = build_index(eg.nodes, eg.classes, eg.num_nodes, len(EOP_NAMES), 0)
        found = np.full(4096, -1, np.int64)
        heights(cstart, cnodes, eg.nodes, eg.children, eg.classes, found)
        n_filtered = int(np.sum(found >= 0))
    t4 = time.perf_counter()
    record = Iteration(number, eg.num_nodes, eg.num_classes, n_filtered, t1 - t0, t2 - t1,
                       t3 - t2, t4 - t3, stats)
    return record, hit_limit, (eg.num_nodes, eg.num_unions) != before


def complete_splits(eg: EGraph, first: int) -> int:
    """Give every split node added since node id `first` all its results (`proj` nodes): a rule
    whose target reads one result of a new split (rules/transformer.rules' scale folded into one
    part of a merged projection) adds only that one, and the other results must exist for rules
    (split_of_merged_projection_*) to join them to the values they equal. Returns the number of
    results added. TENSAT's merges name every result: then this only reads arrays (a new split's
    results are added in the same iteration as the split)."""
    from ..egraph.layout import N_CLS, N_OP
    from ..ir.ops import infer_types
    end = eg.num_nodes
    ops = eg.nodes[N_OP, first:end]
    splits = np.nonzero(ops == EOP_NAMES.index("split"))[0] + first
    if not len(splits):
        return 0
    projs = np.nonzero(ops == EOP_NAMES.index("proj"))[0] + first
    have: dict[int, set[int]] = {}
    lit_value: dict[int, object] = {}

    def value(c: int) -> object:
        if c not in lit_value:
            lit_value[c] = eg.literal_value(eg.class_nodes(c)[0])
        return lit_value[c]

    if len(projs):
        lits = eg.canonical(eg.children[projs, 0].astype(np.int32))
        owners = eg.canonical(eg.children[projs, 1].astype(np.int32))
        for lc, sc in zip(lits.tolist(), owners.tolist()):
            have.setdefault(sc, set()).add(value(lc))
    classes = eg.canonical(eg.nodes[N_CLS, splits].astype(np.int32)).tolist()
    added = 0
    for n, s in zip(splits.tolist(), classes):
        if not eg.is_live(n):
            continue
        axis_c, sizes_c, x = (eg.find(c) for c in eg.node_children(n))
        sizes = value(sizes_c)
        got = have.get(s, set())
        if len(got) >= len(sizes):
            continue
        xt = eg.class_type(x)
        if xt is None:
            continue
        types = infer_types("split", [xt], (("axis", value(axis_c)), ("sizes", sizes)))
        for j in range(len(sizes)):
            lit = eg.add_literal(j)
            if j in got or eg.lookup("proj", (lit, s)) >= 0:
                continue
            eg.add("proj", (lit, s), ty=types[j])
            added += 1
        have[s] = set(range(len(sizes)))
    return added


def _search_all(compiled: list[_Compiled], eg: EGraph, index: MatchIndex, with_multi: bool,
                limits: Limits, since: int | Sequence[int]) -> dict[str, np.ndarray]:
    """Match rows per rule direction; each distinct source pattern is searched once per `since`.

    Semi-naive with `since` > 0 (one for all rules, or one per rule): a single-pattern rule gets
    the matches new since that epoch; a multi-pattern rule the pairs with at least one new match,
    new × all ∪ all × new (each source is also searched in full: new × new alone would lose every
    pair of a new match with an old one, e.g. a merged pair with a third matmul)."""
    sinces = [since] * len(compiled) if isinstance(since, (int, np.integer)) else list(since)
    cache: dict[object, tuple[np.ndarray, tuple[str, ...], dict[str, str]]] = {}
    out: dict[str, np.ndarray] = {}
    for rule, since in zip(compiled, sinces):
        if rule.is_multi and not with_multi:
            continue
        srcs = [(p, f"$check{s}_") for s, p in enumerate(rule.sources)]
        if not rule.is_multi:
            rows, names = source_matches(eg, index, *srcs[0], since, cache)
            out[rule.name] = _reorder(rows, names, rule.var_names, 1)
            continue
        new = [source_matches(eg, index, p, pre, since, cache) for p, pre in srcs]
        if since <= 0:
            rows, names = join([m[0] for m in new], [m[1] for m in new], rule.symmetric,
                               limits.multi_match_limit)
        else:
            full = [source_matches(eg, index, p, pre, 0, cache) for p, pre in srcs]
            rows, names = semi_naive_join(new, full, rule.symmetric, limits.multi_match_limit)
        out[rule.name] = _reorder(rows, names, rule.var_names, len(rule.sources))
    return out


def semi_naive_join(new: list[tuple[np.ndarray, tuple[str, ...]]],
                    full: list[tuple[np.ndarray, tuple[str, ...]]], symmetric: bool,
                    limit: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """The join rows of two sources that use at least one new match: new0 × all1 ∪ all0 × new1,
    each row once (at most `limit`). `new`/`full`: (rows, names) per source."""
    (n0, v0), (n1, v1) = new
    (a0, w0), (a1, w1) = full
    assert v0 == w0 and v1 == w1
    r1, names = join([n0, a1], [v0, v1], symmetric, limit)
    r2, names2 = join([a0, n1], [v0, v1], symmetric, limit)
    assert names == names2
    rows = np.concatenate([r1, r2])
    if len(r1) and len(r2):
        _, first = np.unique(rows, axis=0, return_index=True)
        rows = rows[np.sort(first)]
    return rows[:limit], names


def source_matches(eg: EGraph, index: MatchIndex, pattern, prefix: str, since: int,
                   cache: dict) -> tuple[np.ndarray, tuple[str, ...]]:
    """Rows of `pattern` (new since `since` when > 0), with columns named after its own variables;
    `cache` (one per iteration) shares the search between patterns equal up to renaming."""
    key, renaming = canonical_key(pattern)
    hit = cache.get((key, prefix, since))
    if hit is None:
        prog, renaming_of_prog = source_program(eg, pattern, key, renaming, prefix)
        hit = (search(prog, index, since=since), prog.var_names, renaming_of_prog)
        cache[(key, prefix, since)] = hit
    rows, names, first = hit          # named after the first pattern with this key
    back = {canon: name for name, canon in renaming.items()}
    return rows, tuple(back.get(first.get(n, n), n) for n in names)


def source_program(eg: EGraph, pattern, key: object, renaming: dict[str, str],
                   prefix: str) -> tuple[Program, dict[str, str]]:
    """The compiled pattern and the variable renaming of the pattern it was compiled from, cached
    with the literal interner: reused while every literal it names is in `eg` in the same class
    (MCTS runs one rule at a time thousands of times on snapshots of one e-graph)."""
    cache_key = ("program", key, prefix)
    got = eg.lits.derived.get(cache_key)
    if got is not None and np.array_equal(eg.literal_classes(got[2]), got[3]):
        return got[0], got[1]
    ids: list[int] = []
    found: list[int] = []

    def literal_class(value: object) -> int:
        lid = eg.lits.literal(value)
        ids.append(lid)
        found.append(eg.lookup("lit", (), lid))
        return found[-1]

    prog = compile_pattern(pattern, literal_class, prefix)
    if all(c >= 0 for c in found):      # a missing literal: no match now, another later
        eg.lits.derived[cache_key] = (prog, renaming, np.array(ids, np.int64),
                                      np.array(found, np.int64))
    return prog, renaming


def _reorder(rows: np.ndarray, names: tuple[str, ...], want: tuple[str, ...],
             n_roots: int) -> np.ndarray:
    """Columns (roots..., vars in `want` order) from rows whose vars are in `names` order."""
    if names == want:
        return rows
    cols = list(range(n_roots)) + [n_roots + names.index(v) for v in want]
    return np.ascontiguousarray(rows[:, cols])


def _uses_per_match(applier: Applier) -> int:
    """An upper bound of the parent-list entries one match adds (the children of its nodes)."""
    b = applier.build
    return max(int(b[b[:, 0] == B_NODE, 2].sum()), 1)


def _apply(eg: EGraph, applier: Applier, rows: np.ndarray, consts: np.ndarray,
           st: RuleStats) -> np.ndarray:
    """Add the targets of every match; returns the class pairs to merge."""
    # the kernel stops when the arrays lack room for one more match. The node-side arrays then
    # grow at once to what all remaining matches could need (fresh pages cost nothing until
    # used, and each growth copies every used row), at most 4x; the hash-cons, filled when made,
    # and the literals grow by doubling (most targets of a large batch usually exist already)
    per = max(applier.new_nodes, 1)            # node and literal slots of the target
    per_uses = _uses_per_match(applier)
    stats = np.zeros(5, np.int64)
    unions = np.empty((len(rows) * len(applier.targets), 2), np.int32)
    rows = np.ascontiguousarray(rows, np.int32)
    while True:
        got = apply_matches(eg.nodes, eg.children, eg.classes, eg.uses, eg.table, eg.pending,
                            eg.meta, OP_KIND, eg.lits.rows, eg.lits.table, eg.lits.count, consts,
                            applier.build, applier.targets, applier.expr_code, applier.exprs,
                            applier.conds, applier.checks, rows, stats, unions)
        if got != -2:
            break
        left = len(rows) - int(stats[3])
        k = min(left, max(1024, 3 * eg.capacity // per))
        live = eg.num_nodes - int(eg.meta[M_DEAD])
        eg.reserve(k * per, k * per_uses, min(k * per, max(1024, live // 2)))
        eg.lits.reserve(per + 1)
    if got < 0:
        try:
            eg._raise_kernel_error()
        except EGraphError as e:
            raise EGraphError(f"rule {applier.name}: {e.message}") from None
    st.applied += int(stats[0])
    st.rejected_condition += int(stats[1])
    st.rejected_shape += int(stats[2])
    st.merged += got
    return unions[:got]
