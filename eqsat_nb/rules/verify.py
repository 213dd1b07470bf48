"""Numeric soundness check of rules with the reference interpreter.

For every rule and each direction it is applied in, the variables of the source pattern(s) are
instantiated several times ("draws") with shapes (ranks 1-4, sizes mostly 1-6; so batched
matmuls meet rank-2 weights and batch dims of 1 that broadcast) and attribute values (a `shape`
attribute from the shapes in play and their neighbours) that make the sources and the `where`
conditions valid. Instantiations come from a small
randomized search: a backtracking seed (variables assigned in order of first appearance; every
source node is checked with the operator table's shape functions, and every condition evaluated,
as soon as all its variables are set; restarts with doubling budgets), then a random walk that
changes one thing at a time (a size, a size everywhere, size moved between two tensors, a whole
shape, an attribute value) and keeps only valid states, so the draws spread over the valid
shapes. Two such walks, started from differently biased seeds, take turns supplying the draws.

Both sides are then built with `GraphBuilder` (computed attributes evaluated from the drawn
shapes) and run by `ir.interp` in float64 on the same random tensors. A rule fails when

- a target cannot be built (shape error) for an instantiation where the sources could,
- a target's result differs from its source's (shape, or values beyond rtol 1e-7; 1e-6 for a
  rule whose source matches a constant written to float32 precision: see `tolerance`), or
- no instantiation at all was found within the search budget ("could not instantiate").

Everything is seeded from the seed and the rule's name, so a run is reproducible.
"""
from __future__ import annotations

import itertools
import random
import time
import zlib
from dataclasses import dataclass, field
from math import prod
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..errors import TirError
from ..ir.builder import GraphBuilder
from ..ir.graph import TensorType
from ..ir.interp import run
from ..ir.ops import ACTIVATIONS, OPS, AttrSpec, infer_types, normalize_attrs
from .pattern import Cond, Expr, Lit, PNode, Pattern, Rule, Var, pattern_vars

DIMS = (1, 2, 3, 4, 5, 6)
MAX_RANK = 4
MAX_DIM = 18           # the walk may grow sizes (x2, x3) up to here
MAX_NUMEL = 4096       # per tensor, to keep the interpreter quick
RTOL = 1e-7
RTOL_F32 = 1e-6        # float32's resolution (2^-23 = 1.2e-7), with some room for erf/tanh slopes
ATOL = 1e-9

# Candidate values for attribute variables, by attribute name, then by kind.
_BY_NAME: dict[str, tuple] = {
    "stride": ((1, 1), (2, 2), (1, 2)),
    "kernel": ((1, 1), (2, 2), (3, 3), (2, 3)),
    "pad": ("same", "valid", (0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)),
    "act": ACTIVATIONS,
    "axis": (0, 1, 2, 3, -1, -2),
    "axes": ((0,), (1,), (-1,), (0, 1), (1, 2)),
    "count": (1, 2, 3),
    "groups": (1, 2, 3, 4, 6),
    "perm": tuple(p for r in range(1, MAX_RANK + 1) for p in itertools.permutations(range(r))),
    "sizes": ((1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 3), (1, 1, 1), (1, 2, 3)),
    "eps": (1e-5, 0.1),
    "value": (0.5, 1.0, 2.0, 1e-5),
}
_BY_KIND: dict[str, tuple] = {
    "int": (-1, 0, 1, 2, 3, 4),
    "float": (0.5, 1.0, 2.0),
    "bool": (False, True),
    "ints": ((1,), (2,), (1, 2), (2, 3), (2, 2), (1, 2, 3), (6,)),
    "padding": ("same", "valid", (0, 0, 0, 0), (1, 1, 1, 1)),
    "dtype": ("f64",),
}


class _Undefined(Exception):
    """An expression has no value (axis out of range, division by zero)."""


class _Exhausted(Exception):
    """The search ran out of budget."""


# ------------------------------------------------------------------------------ evaluation

def eval_expr(e: Any, env: dict[str, Any]) -> Any:
    """Value of an attribute pattern / expression; `env` maps tensor variables to shapes
    (tuples) and attribute variables to their values."""
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    if not isinstance(e, Expr):
        return e
    fn, args = e.fn, e.args
    if fn == "dim":
        shape = env[args[0].name]
        axis = eval_expr(args[1], env)
        if not -len(shape) <= axis < len(shape):
            raise _Undefined(f"dim({args[0].name}, {axis}) of a rank-{len(shape)} tensor")
        return shape[axis]
    if fn == "rank":
        return len(env[args[0].name])
    if fn == "list":
        return tuple(eval_expr(a, env) for a in args)
    if fn == "neg":
        return -eval_expr(args[0], env)
    a, b = eval_expr(args[0], env), eval_expr(args[1], env)
    if fn in ("floordiv", "mod") and b == 0:
        raise _Undefined("division by zero")
    return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0,
            "mod": a % b if b else 0}[fn]


_CMP: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def cond_holds(c: Cond, env: dict[str, Any]) -> bool:
    try:
        return bool(_CMP[c.op](eval_expr(c.lhs, env), eval_expr(c.rhs, env)))
    except _Undefined:
        return False


def _attrs(p: PNode, env: dict[str, Any]) -> dict[str, Any]:
    return {name: eval_expr(a, env) for name, a in p.attrs}


def _walk(p: Pattern) -> Iterator[PNode]:
    """Pattern nodes in post-order (operands before the node)."""
    if isinstance(p, PNode):
        for o in p.operands:
            yield from _walk(o)
        yield p


# ------------------------------------------------------------------------------ variables

@dataclass
class _VarInfo:
    name: str
    spec: AttrSpec | None      # None: a tensor


def _var_order(sources: tuple[Pattern, ...]) -> list[_VarInfo]:
    """Variables in order of first appearance (post-order: operands, then attributes)."""
    seen: dict[str, _VarInfo] = {}

    def visit(p: Pattern) -> None:
        if isinstance(p, Var):
            seen.setdefault(p.name, _VarInfo(p.name, None))
            return
        for o in p.operands:
            visit(o)
        if p.op != "proj":
            for name, a in p.attrs:
                if isinstance(a, Var):
                    seen.setdefault(a.name, _VarInfo(a.name, OPS[p.op].attr_spec(name)))

    for s in sources:
        visit(s)
    return list(seen.values())


# ------------------------------------------------------------------------------ the search

class _Search:
    """Finds valid instantiations of a rule's sources: a seed by randomized backtracking with
    early checks, then a random walk (one variable changed at a time, kept only when the sources
    and conditions stay valid) that spreads the draws over the valid shapes."""

    def __init__(self, sources: tuple[Pattern, ...], conds: tuple[Cond, ...],
                 rng: random.Random, per_level: int = 40,
                 tiers: tuple[float, float] = (0.5, 0.8)) -> None:
        self.vars = _var_order(sources)
        self.tensor_vars = [v.name for v in self.vars if v.spec is None]
        index = {v.name: i for i, v in enumerate(self.vars)}
        self.rng = rng
        self.tiers = tiers
        self.budget = 0
        self.per_level = per_level
        self.steps = 0
        n = len(self.vars)
        self.nodes = [node for src in sources for node in _walk(src)]
        self.conds = conds
        self.node_checks: list[list[PNode]] = [[] for _ in range(n)]
        self.cond_checks: list[list[Cond]] = [[] for _ in range(n)]
        for node in self.nodes:
            self.node_checks[max((index[v] for v in pattern_vars(node)), default=0)].append(node)
        for c in conds:
            self.cond_checks[max((index[v] for v in pattern_vars(c)), default=0)].append(c)
        self.env: dict[str, Any] = {}
        self.types: dict[int, list[TensorType]] = {}

    # -- checks
    def _check_nodes(self, nodes: list[PNode], conds: Iterable[Cond]) -> bool:
        env, types = self.env, self.types
        try:
            for node in nodes:
                if node.op == "proj":
                    ts = types[id(node.operands[0])]
                    types[id(node)] = [ts[eval_expr(dict(node.attrs)["index"], env)]]
                    continue
                kids = [TensorType(env[o.name], "f64") if isinstance(o, Var)
                        else types[id(o)][0] for o in node.operands]
                attrs = normalize_attrs(OPS[node.op], _attrs(node, env))
                types[id(node)] = infer_types(node.op, kids, attrs)
        except (TirError, _Undefined, IndexError, TypeError):
            return False
        return all(cond_holds(c, env) for c in conds)

    def valid(self) -> bool:
        for n in self.tensor_vars:
            shape = self.env[n]
            if max(shape, default=1) > MAX_DIM or prod(shape) > MAX_NUMEL:
                return False
        if not self._check_nodes(self.nodes, self.conds):
            return False
        return all(prod(t.shape) <= MAX_NUMEL for ts in self.types.values() for t in ts)

    # -- candidates
    def _known_shapes(self) -> list[tuple[int, ...]]:
        shapes = [self.env[n] for n in self.tensor_vars if n in self.env]
        for ts in self.types.values():
            shapes.extend(t.shape for t in ts)
        return shapes

    def _variants(self, shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        out: set[tuple[int, ...]] = set()
        for s in shapes:
            r = len(s)
            for i in range(r):
                for d in DIMS:
                    out.add(s[:i] + (d,) + s[i + 1:])
            if r >= 2:
                out.add(s[:-2] + (s[-1], s[-2]))
                out.add(tuple(reversed(s)))
            if r > 1:
                out.add(s[:-1])
                out.add(s[1:])
            if r < MAX_RANK:
                for d in DIMS:
                    out.add(s + (d,))
                    out.add((d,) + s)
        items = sorted(out)
        self.rng.shuffle(items)
        return items

    def _random_shape(self) -> tuple[int, ...]:
        r = self.rng.randint(1, MAX_RANK)
        return tuple(self.rng.choice(DIMS) for _ in range(r))

    def _tensor_candidates(self) -> Iterator[tuple[int, ...]]:
        """Three tiers interleaved at random (`self.tiers` are the cumulative odds of the first
        two): copies of shapes already in play and uniform shapes (k, k, ...); shapes one change
        away from those in play; random shapes."""
        known = sorted(set(self._known_shapes()))
        uniform = [(k,) * r for r in range(1, MAX_RANK + 1) for k in DIMS if k > 1]
        self.rng.shuffle(known)
        self.rng.shuffle(uniform)
        tiers = [iter(known + uniform), iter(self._variants(known))]
        tried: set[tuple[int, ...]] = set()
        misses = 0
        while misses < 100:
            x = self.rng.random()
            cand = (next(tiers[0], None) if x < self.tiers[0] else
                    next(tiers[1], None) if x < self.tiers[1] else None)
            if cand is None:
                cand = self._random_shape()
            if cand in tried:
                misses += 1
                continue
            tried.add(cand)
            yield cand

    def _attr_candidates(self, spec: AttrSpec) -> list[Any]:
        if spec.kind == "str" and spec.choices:
            values = list(spec.choices)
        else:
            values = list(_BY_NAME.get(spec.name, _BY_KIND.get(spec.kind, ())))
        self.rng.shuffle(values)
        if spec.name == "shape":            # a broadcast's or reshape's target: a shape in play
            known = sorted(set(self._known_shapes()))   # (e.g. the activation a weight meets)
            near = [s for s in self._variants(known) if s not in known]
            self.rng.shuffle(known)
            values = known + near[:40] + values
        return values

    # -- the seed: backtracking
    def _assign(self, level: int) -> bool:
        if level == len(self.vars):
            return True
        v = self.vars[level]
        cands: Iterable[Any] = (self._tensor_candidates() if v.spec is None
                                else self._attr_candidates(v.spec))
        for tries, value in enumerate(cands):
            if tries >= self.per_level:
                break
            self.steps += 1
            if self.steps > self.budget:
                raise _Exhausted
            self.env[v.name] = value
            if self._check_nodes(self.node_checks[level], self.cond_checks[level]) \
                    and self._assign(level + 1):
                return True
        self.env.pop(v.name, None)
        return False

    def seed(self, restarts: int = 8, budget: int = 300) -> bool:
        """Restarts with doubling budgets: a bad early choice costs little."""
        for k in range(restarts):
            self.env, self.types, self.steps = {}, {}, 0
            self.budget = budget << k
            try:
                if self._assign(0):
                    return True
            except _Exhausted:
                pass
        return False

    # -- the walk
    def _propose(self) -> tuple[str, Any] | None:
        v = self.rng.choice(self.vars)
        cur = self.env[v.name]
        if v.spec is not None:
            options = [c for c in self._attr_candidates(v.spec) if c != cur]
            return (v.name, options[0]) if options else None
        move = self.rng.random()
        if move < 0.3 and cur:                           # one axis to another size
            i = self.rng.randrange(len(cur))
            return v.name, cur[:i] + (self.rng.choice(DIMS),) + cur[i + 1:]
        if move < 0.45 and cur:                          # ... to a multiple of a size in play
            i = self.rng.randrange(len(cur))
            other = self.env[self.rng.choice(self.tensor_vars)]
            if other:
                size = self.rng.choice(other) * self.rng.choice((1, 2, 3))
                return v.name, cur[:i] + (size,) + cur[i + 1:]
        if move < 0.6 and cur:                           # one axis times 2 or 3
            i = self.rng.randrange(len(cur))
            return v.name, cur[:i] + (cur[i] * self.rng.choice((2, 3)),) + cur[i + 1:]
        if move < 0.75:                                  # rename a size everywhere
            sizes = sorted({d for n in self.tensor_vars for d in self.env[n]})
            free = [d for d in DIMS if d not in sizes]   # to an unused one: keeps differences
            if free:
                return "*", (self.rng.choice(sizes), self.rng.choice(free))
        if move < 0.9 and cur:                           # move size from one tensor to another
            same = [n for n in self.tensor_vars if n != v.name and len(self.env[n]) == len(cur)]
            if same:
                other = self.rng.choice(same)
                i = self.rng.randrange(len(cur))
                delta = self.rng.choice((1, 2, 3))
                return "+", ((v.name, i, delta), (other, i, -delta))
        return v.name, self._random_shape()

    def walk(self, steps: int) -> None:
        """`steps` proposals; each is kept when everything stays valid."""
        for _ in range(steps):
            prop = self._propose()
            if prop is None:
                continue
            name, value = prop
            saved = dict(self.env)
            if name == "*":
                old, new = value
                for n in self.tensor_vars:
                    self.env[n] = tuple(new if d == old else d for d in self.env[n])
            elif name == "+":
                for n, i, delta in value:
                    shape = self.env[n]
                    self.env[n] = shape[:i] + (max(1, shape[i] + delta),) + shape[i + 1:]
            else:
                self.env[name] = value
            if not self.valid():
                self.env = saved
        self.valid()                                     # types of the final state


# ------------------------------------------------------------------------------ building

def _build(patterns: tuple[Pattern, ...], env: dict[str, Any], tensor_vars: list[str]) -> Any:
    """A Graph computing `patterns` from inputs %<var> (raises TirError when invalid)."""
    b = GraphBuilder("side")
    values: dict[str, str] = {}
    for name in tensor_vars:
        values[name] = b.input(env[name], "f64", name=f"v_{name}")
    memo: dict[int, Any] = {}

    def build(p: Pattern) -> Any:
        if isinstance(p, Var):
            return values[p.name]
        if id(p) in memo:
            return memo[id(p)]
        if p.op == "proj":
            out = build(p.operands[0])[eval_expr(dict(p.attrs)["index"], env)]
        else:
            kids = [build(o) for o in p.operands]
            try:
                attrs = _attrs(p, env)
            except _Undefined as e:
                raise TirError(f"{p.op}: {e}") from None
            out = b.op(p.op, *kids, **{k: list(v) if isinstance(v, tuple) else v
                                       for k, v in attrs.items()})
        memo[id(p)] = out
        return out

    outs = [build(p) for p in patterns]
    return b.build(*outs)


def _fmt_env(env: dict[str, Any], tensor_vars: list[str]) -> str:
    parts = []
    for k, v in env.items():
        if k in tensor_vars:
            parts.append(f"?{k}={'x'.join(map(str, v)) or 'scalar'}")
        else:
            parts.append(f"?{k}={v!r}")
    return ", ".join(parts)


@dataclass
class Verdict:
    """The outcome for one rule: `problems` is empty when it passed."""

    rule: Rule
    problems: list[str] = field(default_factory=list)
    instances: int = 0            # instantiations evaluated (all directions)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def where(self) -> str:
        line = f":{self.rule.loc.line}" if self.rule.loc else ""
        return f"{self.rule.file or '<input>'}{line}"


def tolerance(rule: Rule) -> float:
    """The relative tolerance a rule is checked at: RTOL_F32 when a source pattern matches a
    float literal float32 does not hold exactly (a constant written to float32 precision, as
    exporters write sqrt 2 = 1.4142135 or GELU's 0.044715: such a rule is exact in float32
    arithmetic and off by float32's rounding of the constant in float64), else RTOL."""
    def inexact(p: Any) -> bool:
        if isinstance(p, PNode):
            return any(isinstance(a, Lit) and isinstance(a.value, float)
                       and a.value != float(np.float32(a.value))
                       and a.value != OPS[p.op].attr_spec(name).default
                       for name, a in p.attrs if p.op != "proj") or any(map(inexact, p.operands))
        return False
    return RTOL_F32 if any(inexact(s) for s in rule.lhs) else RTOL


def _check_instance(sources: tuple[Pattern, ...], targets: tuple[Pattern, ...],
                    env: dict[str, Any], tensor_vars: list[str], rng: np.random.Generator,
                    rtol: float = RTOL) -> str | None:
    """None when both sides agree on this instantiation, else why not."""
    try:
        src_graph = _build(sources, env, tensor_vars)
    except TirError as e:           # the search accepted it, so this is a verifier bug
        return f"source cannot be built ({e.message})"
    try:
        tgt_graph = _build(targets, env, tensor_vars)
    except TirError as e:
        return f"target cannot be built: {e.message}"
    inputs = {name: rng.standard_normal(ty.shape) for name, ty in src_graph.inputs}
    src_out = run(src_graph, inputs, dtype=np.float64)
    tgt_out = run(tgt_graph, inputs, dtype=np.float64)
    for i, (a, b) in enumerate(zip(src_out, tgt_out)):
        which = f"target {i + 1} " if len(sources) > 1 else ""
        if a.shape != b.shape:
            return f"{which}has shape {b.shape}, source {a.shape}"
        scale = max(1.0, float(np.abs(a).max(initial=0.0)))
        if not np.allclose(a, b, rtol=rtol, atol=ATOL * scale):
            err = float(np.abs(a - b).max())
            return f"{which}results differ (max abs difference {err:.3g})"
    return None


def verify_rule(rule: Rule, draws: int = 4, seed: int = 0, walk: int = 100) -> Verdict:
    """Check one rule in each of its directions on `draws` random instantiations, taken in turn
    from two random walks: one started from a solution built mostly of repeated and uniform
    shapes, one from a solution built mostly of perturbed and random shapes."""
    start = time.perf_counter()
    verdict = Verdict(rule)
    for direction, (dname, sources, targets) in enumerate(rule.directions()):
        label = " (right to left)" if direction else ""
        base = zlib.crc32(f"{seed}/{dname}".encode())
        chains = []
        for k, tiers in enumerate(((0.5, 0.8), (0.15, 0.6))):
            search = _Search(sources, rule.conds, random.Random(base + k), tiers=tiers)
            if search.seed():
                chains.append(search)
        if not chains:
            verdict.problems.append(f"could not instantiate{label}: no shapes found that make "
                                    f"the source pattern(s) and conditions valid")
            continue
        rng = np.random.default_rng(base)
        for d in range(draws):
            search = chains[d % len(chains)]
            search.walk(walk)
            env = dict(search.env)
            problem = _check_instance(sources, targets, env, search.tensor_vars, rng,
                                      tolerance(rule))
            verdict.instances += 1
            if problem:
                verdict.problems.append(f"{problem}{label} with "
                                        f"{_fmt_env(env, search.tensor_vars)}")
                break
    verdict.seconds = time.perf_counter() - start
    return verdict


def verify_rules(rules: Iterable[Rule], draws: int = 4, seed: int = 0,
                 progress: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    out = []
    for r in rules:
        v = verify_rule(r, draws, seed)
        if progress:
            progress(v)
        out.append(v)
    return out
