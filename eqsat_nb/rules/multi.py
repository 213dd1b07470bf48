"""Multi-pattern rules: the matches of each source pattern are joined on their shared variables
with a sort-merge hash join (never a filtered Cartesian product).

Each distinct source pattern is searched once per iteration however many rules use it
(`canonical_key` names a pattern up to variable renaming); a pair whose two roots are the same
class is dropped, and for a symmetric rule (`is_symmetric`: swapping the sources, with a renaming of
variables, gives the same sources and conditions back) only one ordering of each pair is kept.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from ..egraph.sort import stable_order
from ..kernels import kernel
from .pattern import Lit, PNode, Pattern, Var


@njit(cache=True)
def _row_keys(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    keys = np.empty(rows.shape[0], np.int64)
    for i in range(rows.shape[0]):
        h = np.uint64(0x9E3779B97F4A7C15)
        for c in cols:
            h = (h ^ np.uint64(rows[i, c])) * np.uint64(0xBF58476D1CE4E5B9)
            h ^= h >> np.uint64(31)
        keys[i] = np.int64(h >> np.uint64(1))
    return keys


@kernel("i8[:, ::1](i4[:, ::1], i4[:, ::1], i8[::1], i8[::1], b1, b1, i8)")
def join_pairs(a: np.ndarray, b: np.ndarray, ca: np.ndarray, cb: np.ndarray, drop_same_root: bool,
               ordered: bool, limit: int) -> np.ndarray:
    """Index pairs (i, j) with a[i, ca] == b[j, cb] (all shared columns equal), at most `limit`.
    With no shared columns every pair joins (bounded by `limit`)."""
    ka = _row_keys(a, ca)
    kb = _row_keys(b, cb)
    oa = stable_order(ka, ka.size)
    ob = stable_order(kb, kb.size)
    out = np.empty((min(limit, 1024), 2), np.int64)
    n = 0
    j0 = 0
    for ii in range(oa.size):
        i = oa[ii]
        while j0 < ob.size and kb[ob[j0]] < ka[i]:
            j0 += 1
        jj = j0
        while jj < ob.size and kb[ob[jj]] == ka[i]:
            j = ob[jj]
            jj += 1
            same = True
            for c in range(ca.size):
                if a[i, ca[c]] != b[j, cb[c]]:
                    same = False
                    break
            if not same:
                continue
            if drop_same_root and a[i, 0] == b[j, 0]:
                continue
            if ordered and a[i, 0] > b[j, 0]:
                continue
            if n == out.shape[0]:
                if n >= limit:
                    return out[:n]
                grown = np.empty((min(2 * n, limit), 2), np.int64)
                for r in range(n):
                    grown[r, 0] = out[r, 0]
                    grown[r, 1] = out[r, 1]
                out = grown
            out[n, 0] = i
            out[n, 1] = j
            n += 1
    return out[:n]


def join(matches: list[np.ndarray], var_names: list[tuple[str, ...]], symmetric: bool,
         limit: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Join two sources' match rows (root, vars...). Returns rows (root0, root1, union vars...)
    and the union variable names."""
    if len(matches) != 2:
        raise NotImplementedError("multi-pattern rules with more than two sources")
    (a, b), (va, vb) = matches, var_names
    shared = [v for v in va if v in vb]
    ca = np.array([1 + va.index(v) for v in shared], np.int64)
    cb = np.array([1 + vb.index(v) for v in shared], np.int64)
    pairs = join_pairs(a, b, ca, cb, True, symmetric, limit)
    extra = [v for v in vb if v not in va]
    cols_b = [1 + vb.index(v) for v in extra]
    rows = np.empty((len(pairs), 2 + len(va) + len(extra)), np.int32)
    rows[:, 0] = a[pairs[:, 0], 0]
    rows[:, 1] = b[pairs[:, 1], 0]
    rows[:, 2: 2 + len(va)] = a[pairs[:, 0], 1:]
    if extra:
        rows[:, 2 + len(va):] = b[pairs[:, 1]][:, cols_b]
    return rows, tuple(va) + tuple(extra)


def canonical_key(p: Pattern) -> tuple[Any, dict[str, str]]:
    """A hashable key of the pattern up to variable renaming, and the renaming used
    (original name → canonical name ?0, ?1, ... in first-occurrence order)."""
    names: dict[str, str] = {}

    def walk(q: Any) -> Any:
        if isinstance(q, Var):
            names.setdefault(q.name, f"{len(names)}")
            return ("var", names[q.name])
        if isinstance(q, Lit):
            return ("lit", type(q.value).__name__, q.value)
        if isinstance(q, PNode):
            return (q.op, tuple((k, walk(v)) for k, v in q.attrs),
                    tuple(walk(o) for o in q.operands))
        return ("expr", repr(q))

    return walk(p), names


def is_symmetric(lhs: tuple[Pattern, ...], rhs: tuple[Pattern, ...], conds: tuple = ()) -> bool:
    """True when (m1, m2) and (m2, m1) are the same rewrite up to mirroring, so one ordering of
    each unordered pair is enough (TENSAT applies each pair once): the two sources are the same
    pattern under a renaming of variables that swaps them, and the conditions are the same under
    that renaming (`==`/`!=` read both ways; a `rank(?u) == k` whose swapped twin is missing still
    holds when ?u and its twin are operands of one `concat` in a target, which needs equal ranks).

    The targets are not compared: for the merge rules the other ordering builds the mirrored merge
    (`concat ?c ?b` for `concat ?b ?c`), the same value. A rule whose conditions tell the two
    matches apart (e.g. `dim(?w, 2) <= dim(?v, 2)`, enlarge the smaller kernel) keeps both."""
    if len(lhs) != 2:
        return False
    k0, r0 = canonical_key(lhs[0])
    k1, r1 = canonical_key(lhs[1])
    if k0 != k1:
        return False
    # the renaming that maps source 0 onto source 1 (and, as a swap, back)
    swap = {a: b for a, b in _pairs(r0, r1)}
    swap.update({b: a for a, b in _pairs(r0, r1)})
    if _rename(lhs[0], swap) != lhs[1] or _rename(lhs[1], swap) != lhs[0]:
        return False
    have = {_cond_key(c) for c in conds}
    for c in conds:
        if _cond_key(_rename_cond(c, swap)) in have:
            continue
        var = _rank_var(c)
        if var is None or not _concat_siblings(rhs, var, swap.get(var, var)):
            return False
    return True


def _cond_key(c: Any) -> tuple:
    """A condition up to reading ==/!= both ways and a > b as b < a."""
    flip = {">": "<", ">=": "<="}
    if c.op in flip:
        return (flip[c.op], c.rhs, c.lhs)
    if c.op in ("==", "!="):
        return (c.op, frozenset((c.lhs, c.rhs)) if c.lhs != c.rhs else frozenset((c.lhs,)))
    return (c.op, c.lhs, c.rhs)


def _rename_cond(c: Any, m: dict[str, str]) -> Any:
    return type(c)(c.op, _rename(c.lhs, m), _rename(c.rhs, m))


def _rank_var(c: Any) -> str | None:
    """?u of a condition `rank(?u) == k` (either way round), else None."""
    if c.op != "==":
        return None
    for a, b in ((c.lhs, c.rhs), (c.rhs, c.lhs)):
        if getattr(a, "fn", None) == "rank" and isinstance(a.args[0], Var) and \
                isinstance(b, (int, Lit)):
            return a.args[0].name
    return None


def _concat_siblings(targets: tuple, u: str, v: str) -> bool:
    """?u and ?v are both direct operands of one concat node in one of the targets."""
    def walk(q: Any) -> bool:
        if not isinstance(q, PNode):
            return False
        if q.op == "concat":
            names = {o.name for o in q.operands if isinstance(o, Var)}
            if u in names and v in names:
                return True
        return any(walk(o) for o in q.operands)
    return any(walk(t) for t in targets)


def _pairs(r0: dict[str, str], r1: dict[str, str]) -> list[tuple[str, str]]:
    inv1 = {canon: name for name, canon in r1.items()}
    return [(name, inv1[canon]) for name, canon in r0.items()]


def _rename(p: Any, m: dict[str, str]) -> Any:
    if isinstance(p, Var):
        return Var(m.get(p.name, p.name))
    if isinstance(p, PNode):
        return PNode(p.op, tuple((k, _rename(v, m)) for k, v in p.attrs),
                     tuple(_rename(o, m) for o in p.operands))
    if hasattr(p, "fn") and hasattr(p, "args"):
        return type(p)(p.fn, tuple(_rename(a, m) for a in p.args))
    return p
