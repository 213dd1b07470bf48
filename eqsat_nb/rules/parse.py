"""Rule files → `Rule` objects: Lark LALR parse of grammar/rules.lark, then a checking pass.

The syntax is described at the top of grammar/rules.lark. Every mistake is a `TirError` located at
the token that caused it (`file:line:col`): syntax errors, unknown operators, wrong operand counts,
unknown or badly typed attributes, missing required attributes, variables used on one side but not
bound on the other, a variable used both as a tensor and as an attribute, duplicate rule names,
and multi-pattern rules whose source and target counts differ.

Attributes are normalized exactly as `ops.normalize_attrs` does for graphs (it is the function that
checks them): every `PNode` lists all attributes of its operator in schema order, omitted ones
filled with their defaults, literal lists stored as tuples.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import Loc, TirError
from ..syntax import end_loc, expected_tokens
from ..ir.ops import OPS, REQUIRED, AttrError, AttrSpec, check_arity, normalize_attrs
from ..resources import data_dir, grammar_path
from .pattern import Cond, Expr, Lit, PNode, Pattern, Rule, Var

_BINOPS = {"+": "add", "-": "sub", "*": "mul", "/": "floordiv", "%": "mod"}
_PROJ = re.compile(r"(?P<base>[A-Za-z_][A-Za-z0-9_]*)_(?P<index>\d+)")
_DESCRIBE = {
    "NAME": "a name", "VAR": "a variable (?name)", "INT": "an integer", "FLOAT": "a number",
    "STRING": "a string", "ARROW": "'=>' or '<=>'", "CMP": "a comparison (== != < <= > >=)",
    "$END": "end of file", "<END-OF-FILE>": "end of file",
}
RULE_SUFFIX = ".rules"


@lru_cache(maxsize=None)
def _parser() -> Lark:
    return Lark(grammar_path("rules.lark").read_text(encoding="utf-8"), parser="lalr",
                maybe_placeholders=False, cache=False)


def _loc(tok: Token) -> Loc:
    return Loc(tok.line, tok.column)


# ------------------------------------------------------------------------------ syntax errors

def _expected(names: Iterable[str]) -> str:
    return expected_tokens(_parser(), names, _DESCRIBE)


def _line(text: str, line: int) -> str:
    lines = text.split("\n")
    return lines[line - 1] if 1 <= line <= len(lines) else ""


def _slash_hint(text: str, line: int | None, e: UnexpectedToken) -> str:
    """A hint for `a // b` written as division (it starts a comment)."""
    if line and "//" in _line(text, line) and {"CMP", "SLASH"} & set(e.accepts or e.expected):
        return " ('/' divides; '//' starts a comment)"
    return ""


def _syntax_error(e: UnexpectedInput, text: str) -> TirError:
    if isinstance(e, UnexpectedCharacters):
        loc = Loc(e.line, e.column)
        if e.char == '"':
            return TirError("unterminated string (strings end with '\"' on the same line)", loc)
        hint = " (comments start with //)" if e.char == "#" else ""
        return TirError(f"unexpected character {e.char!r}, expected "
                        f"{_expected(e.allowed or set())}{hint}", loc)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _expected(e.accepts or e.expected)
        if tok.type == "$END":
            loc = end_loc(tok, text)
            return TirError(f"unexpected end of file, expected {expected}"
                            f"{_slash_hint(text, tok.end_line, e)}", loc)
        loc = Loc(e.line, e.column)
        hint = _slash_hint(text, e.line, e)
        return TirError(f"unexpected '{tok.value}', expected {expected}{hint}", loc)
    if isinstance(e, UnexpectedEOF):
        return TirError(f"unexpected end of file, expected {_expected(set(e.expected))}")
    return TirError(str(e))


# ------------------------------------------------------------------------------ checking pass

@dataclass(frozen=True)
class _Use:
    """One occurrence of a variable. kind: 'tensor' (operand), 'attr' (attribute value, `spec`
    set), 'shape' (first argument of dim/rank) or 'value' (a number inside an expression)."""

    name: str
    kind: str
    loc: Loc
    spec: AttrSpec | None = None
    op: str | None = None

    @property
    def binds(self) -> bool:
        return self.kind in ("tensor", "attr")


def _what(use: _Use) -> str:
    if use.kind == "attr":
        return f"attribute '{use.spec.name}' of {use.op}"
    return {"tensor": "an operand (a tensor)", "shape": "a tensor in dim()/rank()",
            "value": "an integer in an expression"}[use.kind]


def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, list(OPS), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_one(spec: AttrSpec, opname: str, value: Any) -> Any:
    """Validate one literal attribute value with ops.normalize_attrs (the graphs' own check)."""
    single = replace(OPS[opname], attrs=(spec,))
    return normalize_attrs(single, {spec.name: value})[0][1]


def _is_const(x: Any) -> bool:
    return not isinstance(x, (Var, Expr))


class _Side:
    """Converts the patterns of one side of a rule, recording variable uses."""

    def __init__(self) -> None:
        self.uses: list[_Use] = []

    # ---- expressions -------------------------------------------------------------------
    def expr(self, tree: Any) -> Any:
        """An expression tree → int | float | str | bool | tuple (constant-folded) | Var | Expr.
        Constants fold; anything mentioning a variable stays symbolic."""
        if isinstance(tree, Token):           # a bare token (never produced, kept for safety)
            raise TirError(f"unexpected '{tree.value}'", _loc(tree))
        kind = tree.data
        ch = tree.children
        if kind == "int":
            return int(ch[0])
        if kind == "float":
            return float(ch[0])
        if kind == "string":
            return ch[0].value[1:-1]
        if kind in ("true", "false"):
            return kind == "true"
        if kind == "var":
            self.uses.append(_Use(ch[0].value[1:], "value", _loc(ch[0])))
            return Var(ch[0].value[1:])
        if kind == "list":
            items = tuple(self.expr(c) for c in ch[1:])
            if all(_is_const(i) for i in items):
                return items
            for c, i in zip(ch[1:], items):
                self._need_number(i, c)
            return Expr("list", items)
        if kind == "rank":
            self.uses.append(_Use(ch[1].value[1:], "shape", _loc(ch[1])))
            return Expr("rank", (Var(ch[1].value[1:]),))
        if kind == "dim":
            self.uses.append(_Use(ch[1].value[1:], "shape", _loc(ch[1])))
            axis = self.expr(ch[2])
            if not isinstance(axis, int) or isinstance(axis, bool):
                raise TirError("the axis of dim() must be a constant integer", _first_loc(ch[2]))
            return Expr("dim", (Var(ch[1].value[1:]), axis))
        if kind == "neg":
            x = self.expr(ch[1])
            self._need_number(x, ch[1], allow_float=True)
            return -x if _is_const(x) else Expr("neg", (x,))
        if kind == "binop":
            a, op, b = self.expr(ch[0]), ch[1], self.expr(ch[2])
            self._need_number(a, ch[0])
            self._need_number(b, ch[2])
            fn = _BINOPS[op.value]
            if fn in ("floordiv", "mod") and _is_const(b) and b == 0:
                raise TirError("division by zero", _loc(op))
            if _is_const(a) and _is_const(b):
                return {"add": a + b, "sub": a - b, "mul": a * b, "floordiv": a // b if b else 0,
                        "mod": a % b if b else 0}[fn]
            return Expr(fn, (a, b))
        raise TirError(f"unexpected expression {kind}", _first_loc(tree))

    def _need_number(self, x: Any, tree: Any, allow_float: bool = False) -> None:
        if isinstance(x, bool) or not isinstance(x, (int, float, Var, Expr)) or (
                isinstance(x, float) and not allow_float) or (
                isinstance(x, Expr) and x.fn == "list"):
            raise TirError("expressions compute with integers only", _first_loc(tree))

    # ---- patterns ----------------------------------------------------------------------
    def pattern(self, tree: Tree, in_proj: bool = False) -> Pattern:
        if tree.data == "var":
            tok = tree.children[0]
            self.uses.append(_Use(tok.value[1:], "tensor", _loc(tok)))
            return Var(tok.value[1:])
        op_tok = tree.children[0]
        operands = [c for c in tree.children[1:] if isinstance(c, Tree) and c.data != "attrs"]
        attr_tree = next((c for c in tree.children[1:]
                          if isinstance(c, Tree) and c.data == "attrs"), None)
        name = op_tok.value
        m = _PROJ.fullmatch(name)
        if name not in OPS and m and m["base"] in OPS and OPS[m["base"]].multi_result:
            return self._proj(op_tok, m["base"], int(m["index"]), operands, attr_tree)
        opdef = OPS.get(name)
        if opdef is None:
            raise TirError(f"unknown op '{name}'{_suggest(name)}", _loc(op_tok))
        if opdef.leaf:
            raise TirError(f"op '{name}' cannot appear in a rule pattern (a ?variable matches "
                           f"any tensor)", _loc(op_tok))
        if opdef.multi_result and not in_proj:
            raise TirError(f"{name} has several results: take one with {name}_<i> "
                           f"(e.g. ({name}_0 ({name} ...)))", _loc(op_tok))
        try:
            check_arity(opdef, len(operands))
        except TirError as e:
            raise TirError(e.message, _loc(op_tok)) from None
        kids = tuple(self.pattern(o) for o in operands)
        return PNode(name, self._attrs(opdef.name, attr_tree, op_tok), kids)

    def _proj(self, op_tok: Token, base: str, index: int, operands: list, attr_tree: Any) -> PNode:
        name = op_tok.value
        if attr_tree is not None:
            raise TirError(f"{name} takes no attributes (they belong to the {base} inside it)",
                           _first_loc(attr_tree))
        if len(operands) != 1 or operands[0].data != "node" \
                or operands[0].children[0].value != base:
            at = _first_loc(operands[0]) if operands else _loc(op_tok)
            raise TirError(f"{name} takes one ({base} ...) pattern", at)
        inner = self.pattern(operands[0], in_proj=True)
        sizes = dict(inner.attrs).get("sizes")
        n = (len(sizes.value) if isinstance(sizes, Lit) else
             len(sizes.args) if isinstance(sizes, Expr) and sizes.fn == "list" else None)
        if n is not None and index >= n:
            raise TirError(f"{name}: the {base} has only {n} result{'s' if n != 1 else ''}",
                           _loc(op_tok))
        return PNode("proj", (("index", Lit(index)),), (inner,))

    def _attrs(self, opname: str, tree: Tree | None, op_tok: Token) -> tuple:
        opdef = OPS[opname]
        given: dict[str, Any] = {}
        keys: dict[str, Token] = {}
        for attr in tree.children if tree is not None else ():
            key, value = attr.children
            spec = opdef.attr_spec(key.value)
            if spec is None:
                known = ", ".join(s.name for s in opdef.attrs) or "none"
                raise TirError(f"op '{opname}' has no attribute '{key.value}' "
                               f"(attributes: {known})", _loc(key))
            if key.value in given:
                raise TirError(f"attribute '{key.value}' given twice", _loc(key))
            keys[key.value] = key
            given[key.value] = self._attr_value(opname, spec, key, value)
        out = []
        for spec in opdef.attrs:
            if spec.name in given:
                out.append((spec.name, given[spec.name]))
                continue
            if spec.default is REQUIRED:
                raise TirError(f"op '{opname}' requires attribute '{spec.name}'", _loc(op_tok))
            out.append((spec.name, Lit(spec.default)))
        return tuple(out)

    def _attr_value(self, opname: str, spec: AttrSpec, key: Token, tree: Tree) -> Any:
        if tree.data == "var":                 # binds the literal
            tok = tree.children[0]
            self.uses.append(_Use(tok.value[1:], "attr", _loc(tok), spec, opname))
            return Var(tok.value[1:])
        value = self.expr(tree)
        if _is_const(value):
            try:
                return Lit(_check_one(spec, opname, list(value) if isinstance(value, tuple)
                                      else value))
            except AttrError as e:
                raise TirError(e.message, _loc(key)) from None
        scalar = not (isinstance(value, Expr) and value.fn == "list")
        ok = spec.kind in ("int", "float") if scalar else spec.kind in ("ints", "padding")
        if not ok:
            raise TirError(f"attribute '{spec.name}' of {opname} ({spec.kind}) cannot be "
                           f"computed as {'a number' if scalar else 'a list'}", _loc(key))
        return value


def _first_loc(tree: Any) -> Loc:
    if isinstance(tree, Token):
        return _loc(tree)
    for c in tree.children:
        try:
            return _first_loc(c)
        except ValueError:
            continue
    raise ValueError("empty tree")


# ------------------------------------------------------------------------------ rules

class _Checker:
    def __init__(self) -> None:
        self.names: dict[str, Loc] = {}

    def rule(self, tree: Tree, file: str | None) -> Rule:
        name_tok = tree.children[0]
        lhs_tree, arrow, rhs_tree = tree.children[1:4]
        where = tree.children[4] if len(tree.children) > 4 else None
        name = name_tok.value
        if name in self.names:
            first = self.names[name]
            raise TirError(f"rule '{name}' is defined twice (first at line {first.line}, "
                           f"column {first.col})", _loc(name_tok))
        self.names[name] = _loc(name_tok)
        bidir = arrow.value == "<=>"

        left, right = _Side(), _Side()
        lhs = tuple(left.pattern(p) for p in lhs_tree.children)
        rhs = tuple(right.pattern(p) for p in rhs_tree.children)
        if len(lhs) != len(rhs):
            raise TirError(f"rule '{name}' has {len(lhs)} source pattern"
                           f"{'s' if len(lhs) != 1 else ''} but {len(rhs)} target"
                           f"{'s' if len(rhs) != 1 else ''} (target i replaces source i)",
                           _loc(arrow))
        if len(lhs) > 2:          # the search joins the matches of two sources (rules/multi.py)
            raise TirError(f"rule '{name}' has {len(lhs)} source patterns; multi-pattern rules "
                           f"take two (join a third to a merged pair with a second rule)",
                           _loc(arrow))
        sides = [("a source pattern", lhs, lhs_tree)] + (
            [("the target of a '<=>' rule (it is also a source)", rhs, rhs_tree)] if bidir else [])
        for which, pats, trees in sides:
            for p, t in zip(pats, trees.children):
                if isinstance(p, Var):
                    raise TirError(f"{which} must start with an operator, not a variable",
                                   _first_loc(t))
        conds_side = _Side()
        conds = []
        for c in where.children if where is not None else ():
            a, op, b = c.children
            lhs_e, rhs_e = conds_side.expr(a), conds_side.expr(b)
            for x, t in ((lhs_e, a), (rhs_e, b)):
                conds_side._need_number(x, t)
            conds.append(Cond(op.value, lhs_e, rhs_e))

        uses = left.uses + right.uses + conds_side.uses
        _check_kinds(uses)
        _check_bound(left, right, conds_side, "left", "right")
        if bidir:
            _check_bound(right, left, conds_side, "right", "left", reverse=True)
        return Rule(name, lhs, rhs, tuple(conds), bidir, file, _loc(name_tok))


def _check_kinds(uses: list[_Use]) -> None:
    """A variable is a tensor everywhere or an attribute of one kind everywhere."""
    first: dict[str, _Use] = {}
    for u in uses:                           # binding uses fix the kind
        if u.binds and u.name not in first:
            first[u.name] = u
    for u in uses:
        f = first.get(u.name)
        if f is None or u is f:
            continue
        if f.kind == "tensor":
            bad = u.kind in ("attr", "value")
        else:
            bad = (u.kind in ("tensor", "shape")
                   or (u.kind == "attr" and u.spec.kind != f.spec.kind)
                   or (u.kind == "value" and f.spec.kind != "int"))
        if bad:
            raise TirError(f"?{u.name} is used as {_what(u)} here but as {_what(f)} at line "
                           f"{f.loc.line}, column {f.loc.col}", u.loc)


def _check_bound(src: _Side, dst: _Side, conds: _Side, src_name: str, dst_name: str,
                 reverse: bool = False) -> None:
    bound = {u.name for u in src.uses if u.binds}
    in_dst, in_conds = set(map(id, dst.uses)), set(map(id, conds.uses))
    for u in src.uses + dst.uses + conds.uses:
        if u.name not in bound:
            where = ("in a condition" if id(u) in in_conds else
                     f"on the {dst_name}" if id(u) in in_dst else "in a computed attribute")
            extra = " (a '<=>' rule is also applied right to left)" if reverse else ""
            raise TirError(f"variable ?{u.name} is used {where} but not bound on the "
                           f"{src_name}-hand side{extra}", u.loc)


# ------------------------------------------------------------------------------ entry points

def parse_rules(text: str, file: str | None = None) -> list[Rule]:
    """Parse and check the rules in `text`. Raises TirError (file, line, column) on any mistake."""
    try:
        tree = _parser().parse(text)
        checker = _Checker()
        return [checker.rule(r, file) for r in tree.children]
    except UnexpectedInput as e:
        raise _syntax_error(e, text).located(file, text) from None
    except TirError as e:
        raise e.located(file, text) from None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise TirError("file is not UTF-8 text", file=str(path)) from None


def rule_files(paths: str | Path | Iterable[str | Path] | None = None) -> list[Path]:
    """The rule files named by `paths` (files, or directories whose *.rules files are taken in
    name order); None means the shipped rule set."""
    if paths is None:
        paths = [data_dir("rules")]
    elif isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob(f"*{RULE_SUFFIX}"))
            if not found:
                raise TirError(f"no {RULE_SUFFIX} files in this directory", file=str(p))
            out.extend(found)
        else:
            out.append(p)
    return out


def load_rules(path_or_dir: str | Path | Iterable[str | Path] | None = None) -> list[Rule]:
    """Load rule files: a file, a directory of *.rules files, or a list of either (default: the
    shipped rules/). Rule names must be unique across everything loaded."""
    rules: list[Rule] = []
    seen: dict[str, Rule] = {}
    for path in rule_files(path_or_dir):
        text = _read(path)
        for r in parse_rules(text, str(path)):
            if r.name in seen:
                first = seen[r.name]
                raise TirError(f"rule '{r.name}' is defined twice (first at {first.file}:"
                               f"{first.loc.line}:{first.loc.col})", r.loc, str(path), text)
            seen[r.name] = r
            rules.append(r)
    return rules
