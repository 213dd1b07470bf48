"""Each distinct layer once: optimize one representative per layer class, repeat its rewrite on
every copy, optimize the rest of the graph, and put the whole graph back together.

A transformer exported to ONNX repeats one layer 12-80 times with other weights; optimizing the
whole graph saturates, prices and extracts every copy as if it were new. Here the representative
(the first copy) becomes a graph of its own (inputs: the values it reads from outside; outputs:
the values read outside it) and gets the same optimization as a whole graph would (options,
rules, cost model); the rest of the graph (embeddings, head, anything in no class) is one more
such graph. The time budget is shared among these graphs in proportion to their nodes, each
class counted once. The result is the graph that optimizing every copy on its own would give
(detect.py says why no rewrite joining two copies is lost), with one e-graph per class instead
of one per copy.

The combined `Result` prices the assembled graph as a whole; its rule counts are those of the
searches that ran (one per class, not per copy) and its changes (the report's "why" lines) are
the representative's, times the number of copies.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ..cost.model import CostModel, graph_cost
from ..ir.graph import Graph
from ..optimize import Options, Result, optimize
from ..rules.pattern import Rule
from .assemble import assemble, for_copy
from .detect import Layers
from .pieces import Piece, make_piece, piece_graph


@dataclass
class PieceRun:
    """One optimized graph: a layer class's representative, or the rest of the graph."""

    name: str                   # "layer class 1", "rest of the graph"
    copies: tuple[Piece, ...]   # the pieces it stands for (the representative first)
    result: Result              # the representative's optimization
    originals: list[Graph] = field(default_factory=list)   # each copy as a graph
    optimized: list[Graph] = field(default_factory=list)   # each copy, rewritten

    @property
    def changed(self) -> bool:
        return self.result.improved


@dataclass
class LayerRun:
    """What optimizing layer by layer did (the report's "layers" entry reads it)."""

    layers: Layers
    runs: list[PieceRun]
    check: Any = None           # check.LayerCheck once the copies were checked

    def summary(self) -> dict[str, Any]:
        L = self.layers
        classes = [{"copies": len(r.copies), "ops": len(r.copies[0].act),
                    "inputs": len(r.copies[0].inputs), "outputs": len(r.copies[0].outputs),
                    "improved": r.changed,
                    "cost_before_us": r.result.cost_before, "cost_after_us": r.result.cost_after,
                    "extraction": r.result.extraction}
                   for r in self.runs if r.name != REST]
        out: dict[str, Any] = {"layers": L.count, "distinct": L.distinct,
                               "ops_outside": len(L.rest), "classes": classes}
        if self.check is not None:
            out["checks"] = self.check.as_dict()
        return out


REST = "rest of the graph"


def optimize_layers(graph: Graph, layers: Layers, cost_model: CostModel, rules: Sequence[Rule],
                    options: Options = Options(),
                    on_iteration: Callable[..., None] | None = None,
                    on_decision: Callable[..., None] | None = None) -> tuple[Result, LayerRun]:
    """Optimize `graph` class by class (see the module doc): the combined Result and how."""
    ix = layers.index
    jobs: list[tuple[str, tuple[Piece, ...]]] = [
        (f"layer class {k + 1}", c.copies) for k, c in enumerate(layers.classes)]
    if layers.rest:
        jobs.append((REST, (make_piece(ix, layers.rest),)))
    sizes = [max(len(copies[0].act), 1) for _, copies in jobs]
    taken = set(graph.types())
    runs: list[PieceRun] = []
    for k, (name, copies) in enumerate(jobs):
        rep = copies[0]
        g = piece_graph(ix, rep, f"{graph.name}.{name.replace(' ', '_')}")
        opts = _share(options, sizes[k] / sum(sizes[k:]))
        res = optimize(g, cost_model, rules, opts, on_iteration=on_iteration,
                       on_decision=on_decision)
        run = PieceRun(name, copies, res)
        for copy in copies:
            original = piece_graph(ix, copy, g.name)
            run.originals.append(original)
            run.optimized.append(for_copy(res.optimized, graph, rep, copy, taken)
                                 if res.improved else original)
        runs.append(run)
    parts = [(opt, copy) for r in runs for opt, copy in zip(r.optimized, r.copies)]
    assembled = assemble(graph, parts) if any(r.changed for r in runs) else graph
    result, how = _combined(graph, assembled, cost_model, runs), LayerRun(layers, runs)
    result.layers = how
    return result, how


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
    how = _joined([(r.name, r.result.extraction) for r in runs])
    stop = _joined([(r.name, r.result.stop_reason) for r in runs])
    changes = _scaled_changes(runs) if improved else []
    return Result(graph, assembled, before, after,
                  sum(r.result.egraph_nodes for r in runs),
                  sum(r.result.egraph_classes for r in runs),
                  max(r.result.iterations for r in runs), stop,
                  how if improved else f"{how}; no cheaper graph, original kept",
                  dict(fired), times, improved, dict(banned), changes)


def _joined(named: list[tuple[str, str]]) -> str:
    """One text when every graph says the same, else 'layer class 1: ...; rest of ...: ...'."""
    texts = {t for _, t in named}
    if len(texts) == 1:
        return texts.pop()
    return "; ".join(f"{n}: {t}" for n, t in named)


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
