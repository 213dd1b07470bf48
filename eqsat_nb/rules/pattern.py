"""The rule data model: patterns, computed attributes, conditions, rules.

A pattern is a tree of `PNode`s over operator names with `Var` leaves. Attributes are part of the
pattern: every `PNode` lists *all* of its op's attributes in schema order (the loader fills
defaults), each a `Lit` (must be that literal), a `Var` (binds the literal class, so it can be
reused on the other side) or, on a right-hand side or as a check on a left-hand side, an `Expr`
computed from the shapes of bound variables (`dim(?a, 1)`, `[dim(?a, 1), dim(?b, 1)]`,
`dim(?x, 1) // dim(?w, 1)`). Split results are `PNode("proj", (("index", Lit(i)),), (split,))`.
These mirror the e-graph, where attributes are literal leaf children before the operands, so the
matcher stays purely structural.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Union

from ..errors import Loc


@dataclass(frozen=True)
class Var:
    """`?name`: any e-class (an operand, or an attribute literal in attribute position)."""

    name: str


@dataclass(frozen=True)
class Lit:
    """A concrete attribute value, normalized like `ops.normalize_attrs` (lists are tuples)."""

    value: Any


@dataclass(frozen=True)
class Expr:
    """A value computed from bound variables' shapes.

    fn: "dim" (var, axis) | "rank" (var,) | "list" (items...) | "add" | "sub" | "mul" |
    "floordiv" | "mod" (two args) | "neg" (one arg). Arguments are Var, Lit, int or Expr.
    """

    fn: str
    args: tuple[Any, ...]


AttrPattern = Union[Var, Lit, Expr]


@dataclass(frozen=True)
class PNode:
    op: str
    attrs: tuple[tuple[str, AttrPattern], ...]
    operands: tuple["Pattern", ...]


Pattern = Union[PNode, Var]


@dataclass(frozen=True)
class Cond:
    """`lhs OP rhs` over Exprs/ints/Lits, OP in == != < <= > >=; all of a rule's must hold."""

    op: str
    lhs: Any
    rhs: Any


@dataclass(frozen=True)
class Rule:
    """One rule entry of a rule file.

    Single-pattern rules have one source and one target; a multi-pattern rule has several sources
    sharing variables and one target per source (target i replaces source i). `bidirectional`
    (`<=>`) rules are also applied right to left.
    """

    name: str
    lhs: tuple[Pattern, ...]
    rhs: tuple[Pattern, ...]
    conds: tuple[Cond, ...] = ()
    bidirectional: bool = False
    file: str | None = field(default=None, compare=False)
    loc: Loc | None = field(default=None, compare=False)

    @property
    def is_multi(self) -> bool:
        return len(self.lhs) > 1

    def directions(self) -> Iterator[tuple[str, tuple[Pattern, ...], tuple[Pattern, ...]]]:
        """(name, sources, targets) for each direction the rule is applied in."""
        yield self.name, self.lhs, self.rhs
        if self.bidirectional:
            yield self.name + "~rev", self.rhs, self.lhs


def pattern_vars(p: Any) -> set[str]:
    """Names of all variables in a pattern, attribute pattern, expression or condition."""
    if isinstance(p, Var):
        return {p.name}
    if isinstance(p, PNode):
        out: set[str] = set()
        for _, a in p.attrs:
            out |= pattern_vars(a)
        for o in p.operands:
            out |= pattern_vars(o)
        return out
    if isinstance(p, Expr):
        return set().union(*(pattern_vars(a) for a in p.args)) if p.args else set()
    if isinstance(p, Cond):
        return pattern_vars(p.lhs) | pattern_vars(p.rhs)
    return set()
