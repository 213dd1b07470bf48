"""Each distinct layer once: optimize one representative per layer class, repeat its rewrite on
every copy, optimize the rest of the graph, and put the whole graph back together.

A transformer exported to ONNX repeats one layer 12-80 times with other weights; optimizing the
whole graph saturates, prices and extracts every copy as if it were new. Here the representative
(the first copy) becomes a graph of its own (inputs: the values it reads from outside; outputs:
the values read outside it) and gets the same optimization as a whole graph would (options,
rules, cost model); the rest of the graph (embeddings, head, anything in no class) is cut into
parts by the layers they follow (detect.py) and each part is one more such graph. The time
budget is shared among these graphs in proportion to their nodes, each class counted once.
The result is the graph that optimizing every copy on its own would give, with one e-graph per
class instead of one per copy.

Optimizing copies one at a time loses the rewrites that join two copies: detect.py rules out
merges between them (the copies form a chain), and the border test here the rewrites across
the border of two consecutive copies (a rewrite matching the end of one and the start of the
next). Once for every pair of classes that follow one another, two consecutive copies are
saturated together as one graph; when no rewrite reaches across their border (border.py) the
test passes, otherwise the pair is optimized together and compared with the two optimized
apart; when together is estimated cheaper, the graph is optimized as one instead, as without
layers. HF BERT and Llama exports pass at the first step (a LayerNorm or a Cast sits on every
border), TENSAT's ViT at the second (a residual Add reassociates across the border, for
nothing), TENSAT's synthetic BERT fails (a layer's last matmul feeds the next layer's Q/K/V
directly, and multiplying the two weights first saves a fifth of its cost).

The combined `Result` prices the assembled graph as a whole; its rule counts are those of the
searches that ran (one per class, not per copy) and its changes (the report's "why" lines) are
the representatives', times their numbers of copies.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..cost.model import CostModel, graph_cost
from ..ir.graph import Graph
from ..optimize import Options, Result, optimize
from ..rules.pattern import Rule
from .assemble import assemble, for_copy
from .border import saturate_pair
from .detect import Layers
from .pieces import GraphIndex, Piece, make_piece, piece_graph

# a pair optimized together must be cheaper than apart by more than this share to fail the
# border test: the ILP's own gap (an answer within it of the optimum is the extractor's answer;
# a saving across the border that small is within what any run may leave), or 1e-6 without it
BOUNDARY_TOLERANCE = 1e-6


@dataclass
class PieceRun:
    """One optimized graph: a layer class's representative, or a part of the rest."""

    name: str                   # "layer class 1", "rest of the graph before the layers"
    kind: str                   # "class" | "rest"
    copies: tuple[Piece, ...]   # the pieces it stands for (the representative first)
    result: Result              # the representative's optimization
    originals: list[Graph] = field(default_factory=list)   # each copy as a graph
    optimized: list[Graph] = field(default_factory=list)   # each copy, rewritten

    @property
    def changed(self) -> bool:
        return self.result.improved


@dataclass(frozen=True)
class BorderTest:
    """Two consecutive copies saturated together: whether a rewrite reaches across their border
    (border.py), and if so, the two optimized together against the same two optimized apart and
    put together as the whole graph will be (an expression both compute, such as the broadcast
    of a shared mask, counted once, as the pair's own e-graph counts it)."""

    classes: tuple[int, int]    # the classes of the first and second copy (from 1)
    seconds: float
    together_us: float | None = None      # None: no rewrite reaches across, nothing to price
    apart_us: float | None = None
    tolerance: float = BOUNDARY_TOLERANCE

    @property
    def passed(self) -> bool:
        if self.together_us is None or self.apart_us is None:
            return True
        return self.together_us >= self.apart_us * (1 - self.tolerance) - 1e-9

    def describe(self) -> str:
        a, b = self.classes
        what = f"layer class {a} then {b}" if a != b else f"two layers of class {a}"
        if self.together_us is None:
            return f"{what}: no rewrite reaches across their border"
        return (f"{what} optimized together: {self.together_us:.1f} us, apart: "
                f"{self.apart_us:.1f} us")


@dataclass
class LayerRun:
    """What optimizing layer by layer did (the report's "layers" entry reads it)."""

    layers: Layers
    runs: list[PieceRun]
    borders: list[BorderTest] = field(default_factory=list)
    whole: str = ""             # why the graph was optimized as one after all ("": it was not)
    check: Any = None           # check.LayerCheck once the copies were checked

    def summary(self) -> dict[str, Any]:
        L = self.layers
        classes = [{"copies": len(r.copies), "ops": len(r.copies[0].act),
                    "inputs": len(r.copies[0].inputs), "outputs": len(r.copies[0].outputs),
                    "improved": r.changed,
                    "cost_before_us": r.result.cost_before, "cost_after_us": r.result.cost_after,
                    "extraction": r.result.extraction}
                   for r in self.runs if r.kind == "class"]
        out: dict[str, Any] = {"layers": L.count, "distinct": L.distinct,
                               "ops_outside": len(L.rest), "classes": classes,
                               "optimized_as_one_graph": self.whole or None,
                               "border_tests": [b.describe() for b in self.borders]}
        if self.check is not None:
            out["checks"] = self.check.as_dict()
        return out


def optimize_layers(graph: Graph, layers: Layers, cost_model: CostModel, rules: Sequence[Rule],
                    options: Options = Options(),
                    on_iteration: Callable[..., None] | None = None,
                    on_decision: Callable[..., None] | None = None,
                    min_egraph: int = 0) -> tuple[Result, LayerRun]:
    """Optimize `graph` class by class (see the module doc): the combined Result and how.
    `min_egraph`: optimize the graph as one when its saturated e-graph would have fewer nodes
    (estimated from two layers saturated together, times half the number of layers), as that is
    as fast as the start-ups of the several graphs optimized by layers. When the graph was
    optimized as one (that, or a failed border test), the Result is `optimize(graph)`'s and the
    LayerRun says why."""
    started = time.perf_counter()
    _prestart_ilp(options)
    ix = layers.index
    progress = dict(on_iteration=on_iteration, on_decision=on_decision)
    classes = [(f"layer class {k + 1}", c.copies) for k, c in enumerate(layers.classes)]
    rest = [(_rest_name(lv), (make_piece(ix, nodes),)) for lv, nodes in layers.rest_parts]
    pairs = _border_pairs(layers)
    # each graph's share of the time: its nodes; a border test's as one layer's (its pair is
    # saturated, and optimized only where a rewrite reaches across)
    sizes = ([max(len(a.act), len(b.act)) for _, a, b in pairs]
             + [len(copies[0].act) for _, copies in classes]
             + [len(copies[0].act) for _, copies in rest])
    taken = set(graph.types())
    runs: list[PieceRun] = []
    how = LayerRun(layers, runs)
    done = 0

    def next_options() -> Options:
        nonlocal done
        opts = _share(options, max(sizes[done], 1) / max(sum(sizes[done:]), 1))
        done += 1
        return opts

    def run_one(g: Graph) -> Result:
        res = optimize(g, cost_model, rules, next_options(), **progress)
        _prestart_ilp(options)
        return res

    def whole(why: str) -> tuple[Result, LayerRun]:
        how.whole = why
        tried = time.perf_counter() - started
        result = optimize(graph, cost_model, rules, options, **progress)
        result.times = {"layers_tried": tried, **result.times}
        result.layers = how
        return result, how

    saturated = []
    for (a, b), first, second in pairs:
        g = piece_graph(ix, make_piece(ix, first.act + second.act), f"{graph.name}.border")
        border = [v for v in first.outputs if v in set(second.inputs)]
        sat = saturate_pair(g, first.values(graph), second.values(graph), border, rules,
                            _search_limits(next_options()))
        saturated.append((g, sat))
    estimate = sum(sat.nodes for _, sat in saturated) / max(len(saturated), 1) / 2 * layers.count
    if estimate < min_egraph:
        return whole(f"its e-graph would be small (about {estimate:.0f} nodes, from two layers "
                     f"saturated together): the start-ups of the graphs optimized by layers "
                     f"would cost more than they save; --layers on optimizes it by layers")
    for name, copies in classes:
        runs.append(_repeat(graph, ix, name, "class", copies, run_one, taken))
    for ((a, b), first, second), (g, sat) in zip(pairs, saturated):
        if not sat.crossed:
            how.borders.append(BorderTest((a + 1, b + 1), sat.seconds))
            continue
        t = time.perf_counter()       # the pair's share of the time: two layers' nodes
        pair_nodes = len(first.act) + len(second.act)
        res = optimize(g, cost_model, rules, _share(options, pair_nodes / (
            pair_nodes + sum(sizes[done:]))), **progress)
        apart = assemble(g, [(_rewritten(runs[a], first), first),
                             (_rewritten(runs[b], second), second)])
        gap = options.ilp_gap / 100 if options.extract == "ilp" else 0.0
        how.borders.append(BorderTest((a + 1, b + 1), sat.seconds + time.perf_counter() - t,
                                      res.cost_after, graph_cost(cost_model, apart),
                                      max(gap, BOUNDARY_TOLERANCE)))
        if not how.borders[-1].passed:
            return whole(f"rewrites cross the layers' borders ({how.borders[-1].describe()})")
    for name, copies in rest:
        runs.append(_repeat(graph, ix, name, "rest", copies, run_one, taken))
    parts = [(opt, copy) for r in runs for opt, copy in zip(r.optimized, r.copies)]
    assembled = assemble(graph, parts) if any(r.changed for r in runs) else graph
    result = _combined(graph, assembled, cost_model, runs)
    if how.borders:
        result.times["border_test"] = sum(b.seconds for b in how.borders)
    result.layers = how
    return result, how


def _repeat(graph: Graph, ix: GraphIndex, name: str, kind: str, copies: tuple[Piece, ...],
            run_one: Callable[[Graph], Result], taken: set[str]) -> PieceRun:
    """Optimize the representative `copies[0]` and carry the rewrite over to every copy."""
    rep = copies[0]
    g = piece_graph(ix, rep, f"{graph.name}.{name.replace(' ', '_')}")
    res = run_one(g)
    run = PieceRun(name, kind, copies, res)
    for copy in copies:
        original = piece_graph(ix, copy, g.name)
        run.originals.append(original)
        run.optimized.append(for_copy(res.optimized, graph, rep, copy, taken)
                             if res.improved else original)
    return run


def _rewritten(run: PieceRun, copy: Piece) -> Graph:
    """The graph that now computes `copy`, one of `run`'s copies."""
    return run.optimized[run.copies.index(copy)]


def _border_pairs(layers: Layers) -> list[tuple[tuple[int, int], Piece, Piece]]:
    """The first two consecutive copies of every pair of classes that follow one another."""
    seen: dict[tuple[int, int], tuple[Piece, Piece]] = {}
    chain = layers.chain
    for (a, first), (b, second) in zip(chain, chain[1:]):
        seen.setdefault((a, b), (first, second))
    return [(k, first, second) for k, (first, second) in seen.items()]


def work_share(layers: Layers) -> float:
    """The nodes optimized layer by layer (each class once, each border test as one layer, the
    rest) as a share of the nodes of the graph."""
    pairs = sum(max(len(a.act), len(b.act)) for _, a, b in _border_pairs(layers))
    done = sum(len(c.rep.act) for c in layers.classes) + pairs + len(layers.rest)
    return done / max(len(layers.index.act), 1)


def _rest_name(level: int) -> str:
    return ("rest of the graph before the layers" if level == 0 else
            f"rest of the graph after layer {level}")


def _prestart_ilp(options: Options) -> None:
    """Start the next graph's ILP worker now (its imports take 0.3-1 s), so that it is ready when
    that graph's extraction begins: `optimize` starts one before its search, which for a small
    graph is shorter than the start-up."""
    if options.extract == "ilp" and options.search == "saturate":
        from ..extract.ilp import worker
        worker.prestart()


def _search_limits(options: Options):
    """The saturation limits `optimize` would search with under `options` (its search's share
    of the budget)."""
    if options.budget is None:
        return options.limits
    share = max(0.0, options.search_share * (options.budget.left() - options.reserve))
    return replace(options.limits, time_limit=min(options.limits.time_limit, share))


def _share(options: Options, fraction: float) -> Options:
    """`options` for one of the graphs optimized in turn: with a budget, this graph may use
    `fraction` of what is left of it (less the caller's reserve); the graphs after it keep
    the rest."""
    if options.budget is None or fraction >= 1.0:
        return options
    left = max(0.0, options.budget.left() - options.reserve)
    return replace(options, reserve=options.reserve + (1.0 - fraction) * left)


def _combined(graph: Graph, assembled: Graph, cost_model: CostModel,
              runs: list[PieceRun]) -> Result:
    """One Result for the whole graph (see the module doc)."""
    before = graph_cost(cost_model, graph)
    after = graph_cost(cost_model, assembled) if assembled is not graph else before
    improved = after < before * (1 - 1e-9)
    if not improved:
        assembled, after = graph, before
    times: dict[str, float] = {}
    fired: Counter = Counter()
    banned: Counter = Counter()
    for r in runs:
        for k, v in r.result.times.items():
            times[k] = times.get(k, 0.0) + v
        fired.update(r.result.rules_fired)
        banned.update(r.result.rules_banned)
    how = _joined(runs, lambda r: r.result.extraction if r.changed else "no cheaper graph")
    stop = _joined(runs, lambda r: r.result.stop_reason)
    changes = _scaled_changes(runs) if improved else []
    return Result(graph, assembled, before, after,
                  sum(r.result.egraph_nodes for r in runs),
                  sum(r.result.egraph_classes for r in runs),
                  max(r.result.iterations for r in runs), stop,
                  how if improved else f"{how}; no cheaper graph, original kept",
                  dict(fired), times, improved, dict(banned), changes)


def _joined(runs: list[PieceRun], text: Callable[[PieceRun], str]) -> str:
    """One text when every graph says the same, else each text after the graphs that say it:
    'layer class 1: ilp (optimal); the rest (2 parts): no cheaper graph'."""
    groups: dict[str, list[PieceRun]] = {}
    for r in runs:
        groups.setdefault(text(r), []).append(r)
    if len(groups) == 1:
        return next(iter(groups))
    parts = []
    for t, rs in groups.items():
        names = [r.name for r in rs if r.kind == "class"]
        rest = sum(1 for r in rs if r.kind == "rest")
        if rest:
            names.append(f"the rest ({rest} part{'s' if rest != 1 else ''})")
        parts.append(f"{', '.join(names)}: {t}")
    return "; ".join(parts)


def _scaled_changes(runs: list[PieceRun]) -> list:
    """Every run's changes times its number of copies, identical changes merged, the largest
    saving first (as cost.explain orders them)."""
    merged: dict[tuple, Any] = {}
    for r in runs:
        m = len(r.copies)
        for ch in r.result.changes:
            scaled = replace(ch, before_us=ch.before_us * m, after_us=ch.after_us * m,
                             count=ch.count * m,
                             rules_before=Counter({k: v * m for k, v in ch.rules_before.items()}),
                             rules_after=Counter({k: v * m for k, v in ch.rules_after.items()}))
            key = (tuple(sorted(ch.removed.items())), tuple(sorted(ch.added.items())),
                   tuple(ch.rules()))
            if key in merged:
                old = merged[key]
                merged[key] = replace(old, before_us=old.before_us + scaled.before_us,
                                      after_us=old.after_us + scaled.after_us,
                                      count=old.count + scaled.count,
                                      rules_before=old.rules_before + scaled.rules_before,
                                      rules_after=old.rules_after + scaled.rules_after)
            else:
                merged[key] = scaled
    return sorted(merged.values(), key=lambda c: (-abs(c.saved_us), c.summary()))
