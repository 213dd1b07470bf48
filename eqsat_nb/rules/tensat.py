"""TENSAT rule text → our `Rule` objects (used by tools/import_tensat.py and the tests).

TENSAT's rule files hold one `lhs=>rhs` per line in egg syntax, parameters as leading numeric
operands; multi-pattern rules are consecutive line pairs. Conventions (TASO's enums):

    (matmul ACT a b)                  ACT: 0 none, 1 sigmoid, 2 relu, 3 tanh
    (conv2d SH SW PAD ACT x w)        PAD: 0 same, 1 valid
    (poolmax x KH KW SH SW PAD ACT), (poolavg ...)
    (concat AXIS NDIM a b)            → concat {axis}, plus `rank(?v) == NDIM` where ?v carries
                                        the rank of the first operand (skipped when an operator
                                        already fixes it, e.g. a conv2d result and NDIM 4)
    (split_0 (split AXIS x)), split_1 → proj of split {axis, sizes}: TENSAT took the sizes from
                                        the concat history of x; we compute them from the shapes
                                        of the pieces of the concat found inside x
    (merge w COUNT)                   → merge {count, groups}; groups = dim(x, 1) / dim(w, 1) of
                                        the conv2d(x, merge(w)) it feeds
    (enlarge w ref), (ewadd a b), (ewmul a b), (relu x), (tanh x), (sigmoid x), (noop a b)

Matmuls in TENSAT's rules are 2-D (their concats say NDIM 2), so a split of a matmul result along
axis 0 is a split of its left operand's rows and along axis 1 of its right operand's columns.
Variables `?input_N` are renamed by role: conv inputs ?x ?y ?z, weights ?w ?v ?u, others ?a ?b ...
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Union

from ..errors import Loc, TirError
from ..ir.ops import OPS
from .pattern import Cond, Expr, Lit, PNode, Pattern, Rule, Var

SExpr = Union[str, list]
ACT = {0: "none", 1: "sigmoid", 2: "relu", 3: "tanh"}
PAD = {0: "same", 1: "valid"}
_FIXED4 = ("conv2d", "enlarge", "merge", "poolmax", "poolavg")
_ELEMENTWISE = ("ewadd", "ewmul", "relu", "tanh", "sigmoid")
_FAMILIES = {"x": ("x", "y", "z"), "w": ("w", "v", "u"), "a": tuple("abcdefghijklmnopqrst")}


class TensatError(TirError):
    """A TENSAT rule this converter does not understand (located at its file and line)."""


@dataclass(frozen=True)
class TensatEntry:
    """One TENSAT rule: one line (single) or two consecutive lines (multi-pattern)."""

    file: str
    lines: tuple[int, ...]        # 1-based line numbers in `file`
    texts: tuple[str, ...]        # the `lhs=>rhs` lines, verbatim

    @property
    def is_multi(self) -> bool:
        return len(self.texts) > 1

    def origin(self) -> str:
        return f"{Path(self.file).name}:{','.join(map(str, self.lines))}"


# ------------------------------------------------------------------------------ reading

def read_tensat(path: str | Path, multi: bool | None = None) -> list[TensatEntry]:
    """The rules of a TENSAT rule file. `multi`: True = consecutive line pairs, False = one rule a
    line, None = decide per section: lines starting with '#' are comments, and a comment that
    mentions "multi" switches to pairs (the layout of predefined_rules.txt)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TensatError(f"cannot read file: {e.strerror}", file=str(path)) from None
    return parse_tensat(text, str(path), multi)


def parse_tensat(text: str, file: str = "<tensat>", multi: bool | None = None) -> list[TensatEntry]:
    entries: list[TensatEntry] = []
    pending: list[tuple[int, str]] = []
    pairs = bool(multi)
    for no, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if multi is None:
                pairs = "multi" in line.lower()
            continue
        if "=>" not in line:
            raise TensatError("expected `lhs=>rhs`", Loc(no, 1), file, text)
        pending.append((no, line))
        if len(pending) == (2 if pairs else 1):
            entries.append(TensatEntry(file, tuple(n for n, _ in pending),
                                       tuple(t for _, t in pending)))
            pending = []
    if pending:
        raise TensatError("a multi-pattern rule needs a second line", Loc(pending[0][0], 1),
                          file, text)
    return entries


def parse_sexpr(text: str) -> SExpr:
    tokens = re.findall(r"\(|\)|[^\s()]+", text)
    pos = 0

    def one() -> SExpr:
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("unexpected end of S-expression")
        tok = tokens[pos]
        pos += 1
        if tok == ")":
            raise ValueError("unexpected ')'")
        if tok != "(":
            return tok
        out: list = []
        while pos < len(tokens) and tokens[pos] != ")":
            out.append(one())
        if pos >= len(tokens):
            raise ValueError("missing ')'")
        pos += 1
        return out

    result = one()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r} after the S-expression")
    return result


# ------------------------------------------------------------------------------ conversion

def _int(s: SExpr, what: str) -> int:
    if isinstance(s, str) and re.fullmatch(r"-?\d+", s):
        return int(s)
    raise ValueError(f"{what} must be a number, got {_show(s)}")


def _show(s: SExpr) -> str:
    return s if isinstance(s, str) else "(" + " ".join(map(_show, s)) + ")"


def _attrs(op: str, **given: Any) -> tuple:
    """All attributes of `op` in schema order: given ones (Lit/Expr), else the default."""
    out = []
    for spec in OPS[op].attrs:
        v = given.get(spec.name, Lit(spec.default))
        out.append((spec.name, v if isinstance(v, (Lit, Expr, Var)) else Lit(v)))
    return tuple(out)


def _node(op: str, operands: Iterable[Pattern], **attrs: Any) -> PNode:
    return PNode(op, _attrs(op, **attrs), tuple(operands))


def _first(p: Pattern) -> Pattern:
    return p.operands[0]


def dim_of(p: Pattern, axis: int) -> Any:
    """An expression for dimension `axis` of pattern p's value (TENSAT's ops, 2-D matmuls)."""
    if isinstance(p, Var):
        return Expr("dim", (p, axis))
    op = p.op
    if op in _ELEMENTWISE:
        return dim_of(_first(p), axis)
    if op == "proj":
        split = dict(_first(p).attrs)
        if axis != split["axis"].value:
            return dim_of(_first(_first(p)), axis)
        return split["sizes"].args[dict(p.attrs)["index"].value]
    if op == "concat":
        if axis == dict(p.attrs)["axis"].value:
            parts = [dim_of(o, axis) for o in p.operands]
            out = parts[0]
            for q in parts[1:]:
                out = Expr("add", (out, q))
            return out
        return dim_of(_first(p), axis)
    if op == "matmul":
        return dim_of(p.operands[0], 0) if axis == 0 else dim_of(p.operands[1], 1)
    if op == "conv2d" and axis in (0, 1):
        return dim_of(p.operands[0], 0) if axis == 0 else dim_of(p.operands[1], 0)
    if op == "enlarge":
        return dim_of(p.operands[0] if axis < 2 else p.operands[1], axis)
    if op == "merge":
        d = dim_of(_first(p), axis)
        return Expr("mul", (d, dict(p.attrs)["count"])) if axis == 1 else d
    raise ValueError(f"cannot tell dimension {axis} of ({op} ...) from its operands")


def _pieces(p: Pattern, axis: int) -> tuple[list, int] | None:
    """The sizes along `axis` of the concat pieces that make up p, and that concat's NDIM."""
    if isinstance(p, Var):
        return None
    op = p.op
    if op == "concat" and dict(p.attrs)["axis"].value == axis:
        return [dim_of(o, axis) for o in p.operands], -1
    if op in _ELEMENTWISE or op == "concat":
        for o in p.operands:
            found = _pieces(o, axis)
            if found:
                return found
        return None
    if op == "matmul":                 # 2-D: rows come from the left, columns from the right
        return _pieces(p.operands[0] if axis == 0 else p.operands[1], axis)
    if op == "conv2d":                 # batch from the input, channels from the weight's axis 0
        return (_pieces(p.operands[0], 0) if axis == 0 else
                _pieces(p.operands[1], 0) if axis == 1 else None)
    if op in ("enlarge", "merge") and axis == 0:
        return _pieces(p.operands[0], 0)
    return None


def _rank_source(p: Pattern) -> Var | str | None:
    """A variable whose rank is p's rank, or "4" when an operator fixes it."""
    if isinstance(p, Var):
        return p
    if p.op in _FIXED4:
        return "4"
    if p.op == "proj":
        return _rank_source(_first(_first(p)))
    return _rank_source(_first(p)) if p.operands else None


class _RankClasses:
    """Union-find over the ranks of source-pattern variables: equal-rank operators (element-wise,
    concat, matmul, split) join their operands' classes; conv-like operators fix rank 4."""

    _RANK_PRESERVING = _ELEMENTWISE + ("concat", "matmul", "proj", "split")

    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}
        self.rank: dict[Any, int] = {}
        self.fresh = 0

    def find(self, k: Any) -> Any:
        self.parent.setdefault(k, k)
        while self.parent[k] != k:
            k = self.parent[k]
        return k

    def union(self, a: Any, b: Any) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra
            if rb in self.rank:
                self.rank.setdefault(ra, self.rank[rb])

    def key(self, p: Pattern) -> Any:
        if isinstance(p, Var):
            return self.find(p.name)
        kids = [self.key(o) for o in p.operands]
        if p.op in _FIXED4:
            for k in kids:
                self.fix_key(k, 4)
            self.fresh += 1
            k = ("node", self.fresh)
            self.fix_key(k, 4)
            return k
        if p.op in self._RANK_PRESERVING and kids:
            for k in kids[1:]:
                self.union(kids[0], k)
            return self.find(kids[0])
        self.fresh += 1
        return ("node", self.fresh)

    def fix_key(self, k: Any, r: int) -> None:
        self.rank.setdefault(self.find(k), r)

    def fixed(self, v: Var) -> int | None:
        return self.rank.get(self.find(v.name))

    def fix(self, v: Var, r: int) -> None:
        self.fix_key(v.name, r)


class _Converter:
    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.count: dict[str, int] = {}
        self.conds: list[Cond] = []
        self.concats: list[tuple[list[Pattern], int]] = []

    def var(self, token: str, role: str) -> Var:
        if token not in self.names:
            fam = _FAMILIES[role]
            n = self.count.get(role, 0)
            self.count[role] = n + 1
            self.names[token] = fam[n] if n < len(fam) else f"{fam[0]}{n + 1}"
        return Var(self.names[token])

    def rank_conds(self, sources: list[Pattern]) -> None:
        """`rank(?v) == NDIM` for every concat operand whose rank the sources do not already fix
        (operators like conv2d fix rank 4; equal-rank operators tie their operands together)."""
        classes = _RankClasses()
        for p in sources:
            classes.key(p)
        for parts, ndim in self.concats:
            for part in parts:
                src = _rank_source(part)
                fixed = 4 if src == "4" else classes.fixed(src) if isinstance(src, Var) else None
                if fixed is not None:
                    if fixed != ndim:
                        raise ValueError(f"concat NDIM {ndim} contradicts rank {fixed}")
                    continue
                if src is None:
                    raise ValueError("cannot tell the rank of a concat operand")
                classes.fix(src, ndim)
                self.conds.append(Cond("==", Expr("rank", (src,)), ndim))

    def pattern(self, s: SExpr, role: str = "a") -> Pattern:
        if isinstance(s, str):
            if s.startswith("?"):
                return self.var(s, role)
            raise ValueError(f"unexpected atom {s!r} where a tensor is expected")
        if not s:
            raise ValueError("empty ()")
        op, args = s[0], s[1:]

        def need(n: int) -> None:
            if len(args) != n:
                raise ValueError(f"{op} takes {n} operands in TENSAT, got {len(args)}")

        if op in ("ewadd", "ewmul", "noop"):
            need(2)
            return _node(op, [self.pattern(a) for a in args])
        if op in ("relu", "tanh", "sigmoid"):
            need(1)
            return _node(op, [self.pattern(args[0], role)])
        if op == "matmul":
            need(3)
            return _node("matmul", [self.pattern(args[1]), self.pattern(args[2])],
                         act=ACT[_int(args[0], "matmul activation")])
        if op == "conv2d":
            need(6)
            sh, sw, pad, act = (_int(a, "conv2d parameter") for a in args[:4])
            x = self.pattern(args[4], "x")
            w_s = args[5]
            if isinstance(w_s, list) and w_s and w_s[0] == "merge":
                if len(w_s) != 3:
                    raise ValueError("merge takes 2 operands in TENSAT")
                inner = self.pattern(w_s[1], "w")
                groups = Expr("floordiv", (dim_of(x, 1), dim_of(inner, 1)))
                w = _node("merge", [inner], count=Lit(_int(w_s[2], "merge count")), groups=groups)
            else:
                w = self.pattern(w_s, "w")
            return _node("conv2d", [x, w], stride=(sh, sw), pad=PAD[pad], act=ACT[act])
        if op in ("poolmax", "poolavg"):
            need(7)
            kh, kw, sh, sw, pad, act = (_int(a, f"{op} parameter") for a in args[1:])
            return _node(op, [self.pattern(args[0], "x")], kernel=(kh, kw), stride=(sh, sw),
                         pad=PAD[pad], act=ACT[act])
        if op == "enlarge":
            need(2)
            return _node("enlarge", [self.pattern(args[0], "w"), self.pattern(args[1], "w")])
        if op == "merge":
            raise ValueError("merge is only understood as the weight of a conv2d")
        if op == "concat":
            need(4)
            axis, ndim = _int(args[0], "concat axis"), _int(args[1], "concat NDIM")
            parts = [self.pattern(a, role) for a in args[2:]]
            self.concats.append((parts, ndim))
            return _node("concat", parts, axis=axis)
        if op in ("split_0", "split_1"):
            need(1)
            inner = args[0]
            if not (isinstance(inner, list) and len(inner) == 3 and inner[0] == "split"):
                raise ValueError(f"{op} must read (split AXIS x)")
            axis = _int(inner[1], "split axis")
            x = self.pattern(inner[2], role)
            found = _pieces(x, axis)
            if not found:
                raise ValueError(f"cannot find the concat along axis {axis} that the split "
                                 f"undoes in {_show(inner[2])}")
            sizes = Expr("list", tuple(found[0]))
            split = _node("split", [x], axis=axis, sizes=sizes)
            return PNode("proj", (("index", Lit(int(op[-1]))),), (split,))
        if op == "split":
            raise ValueError("a split must be read through split_0 or split_1")
        raise ValueError(f"unknown TENSAT operator {op!r}")


def convert_entry(entry: TensatEntry, name: str) -> Rule:
    """Convert one TENSAT rule (single or multi) to a one-way `Rule` named `name`."""
    conv = _Converter()
    lhs, rhs = [], []
    try:
        for k, text in enumerate(entry.texts):
            left, right = text.split("=>", 1)
            lhs.append(conv.pattern(parse_sexpr(left)))
        for k, text in enumerate(entry.texts):
            rhs.append(conv.pattern(parse_sexpr(text.split("=>", 1)[1])))
        conv.rank_conds(lhs)
    except (ValueError, KeyError) as e:
        raise TensatError(f"{e}", Loc(entry.lines[k], 1), entry.file, None) from None
    return Rule(name, tuple(lhs), tuple(rhs), tuple(conv.conds), False, entry.file,
                Loc(entry.lines[0], 1))


# ------------------------------------------------------------------------------ names

def _term(p: Pattern) -> str | None:
    if isinstance(p, Var):
        return None
    if p.op == "proj":
        return "split"
    act = dict(p.attrs).get("act")
    if p.op == "concat":
        return f"concat{dict(p.attrs)['axis'].value}"
    base = {"conv2d": "conv", "matmul": "matmul"}.get(p.op, p.op)
    if isinstance(act, Lit) and act.value != "none":
        base += act.value
    stride = dict(p.attrs).get("stride")
    if isinstance(stride, Lit) and stride.value != (1, 1):
        base += "_stride" + "x".join(map(str, sorted(set(stride.value))))
    return base


def _ops(p: Pattern) -> list[str]:
    if isinstance(p, Var):
        return []
    out = [t for t in [_term(p)] if t]
    for o in p.operands:
        out += _ops(o)
    return out


def _sig(p: Pattern) -> str:
    """Root term and the distinct terms directly below it: (ewadd (matmul) (matmul)) →
    ewadd_matmul."""
    kids = []
    for o in p.operands:
        t = _term(o)
        if t and t not in kids:
            kids.append(t)
    return "_".join([_term(p)] + kids)


def suggest_name(rule: Rule) -> str:
    """A readable base name from the rule's structure and, when a concat's rank is a condition,
    `_2d`/`_4d` (callers number repeats)."""
    ranks = [c.rhs for c in rule.conds if isinstance(c.lhs, Expr) and c.lhs.fn == "rank"]
    suffix = f"_{ranks[0]}d" if ranks else ""
    return _base_name(rule) + suffix


def _base_name(rule: Rule) -> str:
    lhs_ops = [t for p in rule.lhs for t in _ops(p)]
    rhs_ops = [t for p in rule.rhs for t in _ops(p)]
    if rule.is_multi and "split" in rhs_ops:      # several ops merged into one, then split
        split = rule.rhs[0].operands[0]
        extra = "_enlarge" if "enlarge" in rhs_ops else ""
        return (f"merge_{_term(split.operands[0])}s_axis{dict(split.attrs)['axis'].value}"
                f"{extra}")
    if rule.is_multi:
        return "pair_" + _base_name(Rule(rule.name, rule.lhs[:1], rule.rhs[:1]))
    if "merge" in rhs_ops:
        return f"{_term(rule.lhs[0])}_merge_groups"
    if sorted(lhs_ops) == sorted(rhs_ops):
        seen: list[str] = []
        for t in lhs_ops:
            if t not in seen:
                seen.append(t)
        return "_".join(seen) + "_reorder"
    return f"{_sig(rule.lhs[0])}_to_{_sig(rule.rhs[0])}"
