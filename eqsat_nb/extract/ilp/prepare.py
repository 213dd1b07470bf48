"""What the ILP solves, prepared in the calling process (Numba; the worker never imports this
module): the simplified problem (simplify.py) with its dominator and closure rows
(dominators.py), split into independent layers where it has separators (decompose.py), and the
warm start carried over to it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..decompose import canonical, layers
from ..dominators import dominator_rows
from ..problem import ExtractionProblem
from ..simplify import Simplified, simplify
from .selection import _arrays, _valid_cost


MAX_ROUNDS = 8          # of simplification after dropping nodes that need their own class


@dataclass
class Prepared:
    simplified: Simplified
    P: dict[str, Any]               # the simplified problem's arrays (what answers are checked on)
    send: dict[str, Any]            # what the solve gets: P with its rows, or its layers
    warm_start: np.ndarray | None   # the warm start on the simplified problem (None: none fits)
    feasible: bool                  # every root has an acyclic derivation
    stats: dict[str, Any] = field(default_factory=dict)


def prepare(problem: ExtractionProblem, warm_start: np.ndarray | None) -> Prepared:
    """The problem as the solve takes it (`warm_start`: a valid selection of `problem`)."""
    t0 = time.perf_counter()
    drop = np.zeros(problem.n_nodes, bool)
    for _ in range(MAX_ROUNDS):     # candidates that need their own class go, then simplify again
        simp = simplify(problem, drop=drop)
        small = simp.problem
        dom = dominator_rows(small)
        if not dom.circular.any():
            break
        drop[simp.node_orig[dom.circular]] = True
    P = _arrays(small)
    P.update(dominators=dom.pairs, closure=dom.closure, closure_start=dom.closure_start,
             closure_nodes=dom.closure_nodes)
    ws = None if warm_start is None else simp.restrict(warm_start)
    if ws is not None and _valid_cost(P, ws) is None:
        ws = None
    parts = layers(small, dom.mandatory)
    send = P if not parts else {"layers": _layer_parts(parts, ws), "n_classes": small.n_classes}
    kept = set(simp.class_orig[small.roots].tolist())
    feasible = all(simp.fixed[r] >= 0 for r in problem.roots if r not in kept)
    stats = {"classes": small.n_classes, "nodes": small.n_nodes, "rounds": simp.rounds,
             "circular": int(drop.sum()),
             "dominator_pairs": int(len(dom.pairs)), "closure_rows": int(len(dom.closure)),
             "layers": [int(part.problem.n_classes) for part in parts],
             "seconds": round(time.perf_counter() - t0, 3)}
    return Prepared(simp, P, send, ws, feasible, {"simplify": stats})


def _with_rows(problem) -> dict[str, Any]:
    """The problem's arrays for the solve, with its dominator and closure rows."""
    P = _arrays(problem)
    dom = dominator_rows(problem)
    P.update(dominators=dom.pairs, closure=dom.closure, closure_start=dom.closure_start,
             closure_nodes=dom.closure_nodes)
    return P


def _layer_parts(parts: list, ws: np.ndarray | None) -> list[dict[str, Any]]:
    """What the solve needs of each layer (decompose.Layer): its arrays and rows (a layer
    identical to an earlier one, its `twin`: its arrays only), its maps, its canonical labelling,
    and the warm start's selection on it."""
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
