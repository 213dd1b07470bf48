"""`Rule` objects → rule-file text (the syntax of grammar/rules.lark).

`parse_rules(format_rules(rules)) == rules`: attributes equal to their defaults are left out
(an omitted attribute means its default), `proj` is written `split_<i>`.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..ir.literal import format_literal
from ..ir.ops import OPS
from .pattern import Cond, Expr, Lit, Pattern, Rule, Var

_SYM = {"add": "+", "sub": "-", "mul": "*", "floordiv": "/", "mod": "%"}
_PREC = {"add": 1, "sub": 1, "mul": 2, "floordiv": 2, "mod": 2}




def format_expr(e: Any, prec: int = 0) -> str:
    """An expression; `prec` is the binding strength of the context (parenthesize below it)."""
    if isinstance(e, Var):
        return f"?{e.name}"
    if isinstance(e, Lit):
        return format_literal(e.value)
    if not isinstance(e, Expr):
        text = format_literal(e)
        return f"({text})" if prec > 2 and text.startswith("-") else text
    if e.fn == "dim":
        return f"dim({format_expr(e.args[0])}, {format_expr(e.args[1])})"
    if e.fn == "rank":
        return f"rank({format_expr(e.args[0])})"
    if e.fn == "list":
        return "[" + ", ".join(format_expr(a) for a in e.args) + "]"
    if e.fn == "neg":
        return f"-{format_expr(e.args[0], 3)}"
    p = _PREC[e.fn]
    text = f"{format_expr(e.args[0], p)} {_SYM[e.fn]} {format_expr(e.args[1], p + 1)}"
    return f"({text})" if p < prec else text


def _attr_text(name: str, a: Any) -> str:
    return f"{name} = {format_expr(a)}"


def format_pattern(p: Pattern) -> str:
    if isinstance(p, Var):
        return f"?{p.name}"
    if p.op == "proj":
        index = dict(p.attrs)["index"].value
        inner = p.operands[0]
        return f"({inner.op}_{index} {format_pattern(inner)})"
    parts = [p.op] + [format_pattern(o) for o in p.operands]
    specs = {s.name: s for s in OPS[p.op].attrs}
    shown = [_attr_text(n, a) for n, a in p.attrs
             if not (isinstance(a, Lit) and a.value == specs[n].default)]
    if shown:
        parts.append("{" + ", ".join(shown) + "}")
    return "(" + " ".join(parts) + ")"


def format_cond(c: Cond) -> str:
    return f"{format_expr(c.lhs)} {c.op} {format_expr(c.rhs)}"


def format_rule(r: Rule, wrap: int = 100) -> str:
    """One rule entry; long rules put the targets and the conditions on their own lines."""
    arrow = "<=>" if r.bidirectional else "=>"
    lhs = ", ".join(format_pattern(p) for p in r.lhs)
    rhs = ", ".join(format_pattern(p) for p in r.rhs)
    where = " and ".join(format_cond(c) for c in r.conds)
    one = f"rule {r.name}: {lhs} {arrow} {rhs}" + (f" where {where}" if where else "")
    if len(one) <= wrap:
        return one
    head = f"rule {r.name}: {lhs}"
    if len(r.rhs) > 1:
        body = f"\n    {arrow} " + ",\n       ".join(format_pattern(p) for p in r.rhs)
    else:
        body = f"\n    {arrow} {rhs}"
    if r.conds:
        body += "\n    where " + "\n      and ".join(format_cond(c) for c in r.conds)
    return head + body


def format_rules(rules: Iterable[Rule]) -> str:
    return "".join(format_rule(r) + "\n" for r in rules)
