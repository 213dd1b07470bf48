"""Text → Graph: Lark LALR parse of grammar/tir.lark, then a checking pass that builds the Graph.

Every user mistake becomes a `TirError` located at the token that caused it: syntax errors say what
was expected, semantic errors (unknown op, arity, attribute, undefined or redefined value, shape
mismatch, declared type that disagrees with the inferred one) point at the offending token.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import Loc, ShapeError, TirError
from ..resources import grammar_path
from ..syntax import end_loc, expected_tokens
from .graph import DTYPES, Graph, Node, TensorType
from .ops import AttrError, check_arity, infer_types, normalize_attrs, op_def

_DESCRIBE = {
    "VALUE": "a value (%name)", "SYMBOL": "a symbol (@name)", "TYPE": "a tensor type",
    "NAME": "a name", "INT": "an integer", "FLOAT": "a number", "STRING": "a string",
    "$END": "end of file", "<END-OF-FILE>": "end of file",
}
_TYPE_RE = re.compile(r"tensor<[^<>(){}\[\],:=%@\"\n]*>")

# Sanity bounds on a tensor's size, checked for every written and every inferred type: beyond
# them element counts and byte sizes overflow int64 arithmetic (cost model, Numba kernels) or are
# no real model (2^40 elements of f32 are 4 TiB).
MAX_DIM = 2**31 - 1
MAX_ELEMENTS = 2**40


@lru_cache(maxsize=None)
def _parser() -> Lark:
    return Lark(grammar_path("tir.lark").read_text(), parser="lalr", propagate_positions=False,
                maybe_placeholders=False, cache=False)


def _loc(tok: Token) -> Loc:
    return Loc(tok.line, tok.column)


def _expected(names: Iterable[str]) -> str:
    return expected_tokens(_parser(), names, _DESCRIBE)


def _offset(text: str, line: int, col: int) -> int:
    """The index in `text` of 1-based (line, col)."""
    start = 0
    for _ in range(line - 1):
        nl = text.find("\n", start)
        if nl < 0:
            return len(text)
        start = nl + 1
    return start + col - 1


_AFTER_END = "after the end of the function (a file holds one function)"


def _only_end(names: set[str] | frozenset[str]) -> bool:
    return bool(names) and set(names) <= {"$END", "<END-OF-FILE>"}


def _syntax_error(e: UnexpectedInput, text: str) -> TirError:
    if isinstance(e, UnexpectedCharacters):
        loc = Loc(e.line, e.column)
        expected = _expected(e.allowed or set())
        if _only_end(e.allowed or set()):
            return TirError(f"unexpected character {e.char!r} {_AFTER_END}", loc)
        if e.char == '"':
            return TirError("unterminated string (strings end with '\"' on the same line)", loc)
        if text.startswith("tensor<", e.pos_in_stream):
            return TirError("malformed tensor type, expected tensor<DIMSxDTYPE> such as "
                            "tensor<1x64x56x56xf32>", loc)
        hint = " (comments start with //)" if e.char == "#" else ""
        return TirError(f"unexpected character {e.char!r}, expected {expected}{hint}", loc)
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _expected(e.accepts or e.expected)
        if tok.type == "$END":
            return TirError(f"unexpected end of file, expected {expected}", end_loc(tok, text))
        loc = Loc(e.line, e.column)
        at = _offset(text, e.line, e.column)
        if text.startswith("tensor<", at):
            m = _TYPE_RE.match(text, at)
            if m is None:
                return TirError("malformed tensor type, expected tensor<DIMSxDTYPE> such as "
                                "tensor<1x64x56x56xf32>", loc)
            return TirError(f"unexpected type {m.group()}, expected {expected}", loc)
        if _only_end(e.accepts or e.expected):
            return TirError(f"unexpected '{tok.value}' {_AFTER_END}", loc)
        return TirError(f"unexpected '{tok.value}', expected {expected}", loc)
    if isinstance(e, UnexpectedEOF):
        return TirError(f"unexpected end of file, expected {_expected(set(e.expected))}")
    return TirError(str(e))


def parse_type(tok: Token) -> TensorType:
    """`tensor<1x64x56x56xf32>` → TensorType; `tensor<f32>` is a scalar."""
    body = tok.value[len("tensor<"):-1].strip()
    parts = body.split("x")
    dtype = parts[-1]
    if dtype not in DTYPES:
        raise TirError(f"unknown element type '{dtype}' in {tok.value} "
                       f"(expected one of {', '.join(DTYPES)})", _loc(tok))
    dims = []
    for p in parts[:-1]:
        if not p.isdigit() or int(p) <= 0:
            raise TirError(f"bad dimension '{p}' in {tok.value} (dimensions are positive integers)",
                           _loc(tok))
        if int(p) > MAX_DIM:
            raise TirError(f"dimension {p} in {tok.value} is too large (at most {MAX_DIM})",
                           _loc(tok))
        dims.append(int(p))
    ty = TensorType(tuple(dims), dtype)
    problem = size_problem(ty)
    if problem:
        raise TirError(f"{tok.value}: {problem}", _loc(tok))
    return ty


def size_problem(ty: TensorType) -> str | None:
    """Why a tensor type is too large to be real (see MAX_DIM, MAX_ELEMENTS), or None."""
    big = next((d for d in ty.shape if d > MAX_DIM), None)
    if big is not None:
        return f"dimension {big} is too large (at most {MAX_DIM})"
    n = 1
    for d in ty.shape:
        n *= d
    if n > MAX_ELEMENTS:
        return (f"{n:.3g} elements is too large a tensor (at most 2^40 = {MAX_ELEMENTS:.3g} "
                f"elements)")
    return None


def _attr_value(tree: Tree) -> Any:
    kind = tree.data
    if kind == "list":
        return [_attr_value(c) for c in tree.children]
    if kind in ("true", "false"):
        return kind == "true"
    tok = tree.children[0]
    if kind == "int":
        return int(tok)
    if kind == "float":
        return float(tok)
    return tok.value[1:-1]


class _Builder:
    """Checks statements in order and collects the Graph."""

    def __init__(self, later: dict[str, Loc] | None = None) -> None:
        self.env: dict[str, TensorType] = {}
        self.defined_at: dict[str, Loc] = {}
        self.later = later or {}           # where every op result is defined, for messages
        self.weight_names: set[str] = set()
        self.nodes: list[Node] = []

    def define(self, tok: Token, ty: TensorType) -> None:
        if tok.value in self.env:
            first = self.defined_at[tok.value]
            raise TirError(f"value {tok.value} is defined twice (first at line {first.line}, "
                           f"column {first.col})", _loc(tok))
        self.env[tok.value] = ty
        self.defined_at[tok.value] = _loc(tok)

    def use(self, tok: Token) -> TensorType:
        try:
            return self.env[tok.value]
        except KeyError:
            at = self.later.get(tok.value)
            if at is None:
                raise TirError(f"value {tok.value} is not defined", _loc(tok)) from None
            raise TirError(f"value {tok.value} is used before its definition on line {at.line}",
                           _loc(tok)) from None

    def weight(self, result: Token, symbol: Token, type_tok: Token) -> None:
        ty = parse_type(type_tok)
        name = symbol.value[1:]
        if name in self.weight_names:
            raise TirError(f"weight @{name} is declared twice", _loc(symbol))
        self.weight_names.add(name)
        attrs = normalize_attrs(op_def("weight"), {"name": name, "shape": ty.shape,
                                                   "dtype": ty.dtype})
        self.define(result, ty)
        self.nodes.append(Node("weight", (), attrs, (result.value,), (ty,), _loc(result)))

    def op(self, children: list) -> None:
        name_at = next(i for i, c in enumerate(children) if isinstance(c, Token) and c.type == "NAME")
        results = children[:name_at]
        op_tok = children[name_at]
        rest = children[name_at + 1:]
        operands = [c for c in rest if isinstance(c, Token) and c.type == "VALUE"]
        attr_tree = next((c for c in rest if isinstance(c, Tree)), None)
        type_toks = [c for c in rest if isinstance(c, Token) and c.type == "TYPE"]
        loc = _loc(op_tok)

        try:
            opdef = op_def(op_tok.value)
            if opdef.leaf:
                raise TirError(f"op '{opdef.name}' cannot be written as a statement "
                               f"(use a function argument or `weight @name : type`)")
            check_arity(opdef, len(operands))
        except TirError as e:
            raise TirError(e.message, loc) from None
        in_types = [self.use(t) for t in operands]

        given: dict[str, Any] = {}
        attr_locs: dict[str, Loc] = {}
        for attr in attr_tree.children if attr_tree is not None else ():
            key, value = attr.children
            if key.value in given:
                raise TirError(f"attribute '{key.value}' given twice", _loc(key))
            given[key.value] = _attr_value(value)
            attr_locs[key.value] = _loc(key)
        try:
            attrs = normalize_attrs(opdef, given)
        except AttrError as e:
            raise TirError(e.message, attr_locs.get(e.attr, loc)) from None
        if opdef.name == "opaque":
            out_types = self.opaque_types(attrs, in_types, results, type_toks, attr_locs, loc)
        else:
            try:
                out_types = infer_types(opdef.name, in_types, attrs)
            except ShapeError as e:
                raise ShapeError(e.message, loc) from None
            for ty in out_types:
                problem = size_problem(ty)
                if problem:
                    raise ShapeError(f"{opdef.name} produces {ty}: {problem}", loc)

        if len(results) != len(out_types):
            raise TirError(f"{opdef.name} produces {len(out_types)} result"
                           f"{'s' if len(out_types) != 1 else ''}, but {len(results)} "
                           f"{'are' if len(results) != 1 else 'is'} named", _loc(results[0]))
        if type_toks:
            if len(type_toks) != len(out_types):
                raise TirError(f"{opdef.name} produces {len(out_types)} result"
                               f"{'s' if len(out_types) != 1 else ''}, but {len(type_toks)} "
                               f"type{'s are' if len(type_toks) != 1 else ' is'} declared",
                               _loc(type_toks[0]))
            for tok, ty in zip(type_toks, out_types):
                declared = parse_type(tok)
                if declared != ty:
                    raise ShapeError(f"{opdef.name}: declared type {declared} but the op produces "
                                     f"{ty}", _loc(tok))
        for tok, ty in zip(results, out_types):
            self.define(tok, ty)
        self.nodes.append(Node(opdef.name, tuple(t.value for t in operands), attrs,
                               tuple(t.value for t in results), tuple(out_types), loc))


    def opaque_types(self, attrs: tuple, in_types: list[TensorType], results: list[Token],
                     type_toks: list[Token], attr_locs: dict[str, Loc], loc: Loc
                     ) -> list[TensorType]:
        """An opaque node's result types are what is written (nothing can infer them)."""
        from .opaque import OpaqueAttrError

        if not type_toks:
            raise TirError("opaque nodes need their result types written after ':'", loc)
        if len(type_toks) != len(results):
            raise TirError(f"{len(results)} result{'s are' if len(results) != 1 else ' is'} "
                           f"named but {len(type_toks)} type"
                           f"{'s are' if len(type_toks) != 1 else ' is'} declared",
                           _loc(type_toks[0]))
        declared = [parse_type(t) for t in type_toks]
        try:
            return infer_types("opaque", in_types, attrs, declared)
        except OpaqueAttrError as e:
            raise TirError(e.message, attr_locs.get(e.attr, loc)) from None


def _build(tree: Tree) -> Graph:
    symbol, *rest = tree.children
    args = [c for c in rest if isinstance(c, Tree) and c.data == "arg"]
    rettypes = next(c for c in rest if isinstance(c, Tree) and c.data in ("one_type", "many_types"))
    stmts = [c for c in rest if isinstance(c, Tree) and c.data in ("weight_stmt", "op_stmt")]
    ret = next(c for c in rest if isinstance(c, Tree) and c.data == "ret")

    later: dict[str, Loc] = {}
    for st in stmts:
        for c in st.children:
            if isinstance(c, Token) and c.type == "VALUE":
                later.setdefault(c.value, _loc(c))
            elif isinstance(c, Token):
                break               # results come first; the rest are operands
    b = _Builder(later)
    inputs = []
    for arg in args:
        tok, type_tok = arg.children
        ty = parse_type(type_tok)
        b.define(tok, ty)
        inputs.append((tok.value, ty))
    for st in stmts:
        if st.data == "weight_stmt":
            b.weight(*st.children)
        else:
            b.op(st.children)

    declared = [parse_type(t) for t in rettypes.children]
    outputs = []
    for tok in ret.children:
        outputs.append((tok, b.use(tok)))
    if len(outputs) != len(declared):
        raise TirError(f"function returns {len(outputs)} value{'s' if len(outputs) != 1 else ''} "
                       f"but its signature declares {len(declared)}", _loc(ret.children[0]))
    for (tok, ty), want in zip(outputs, declared):
        if ty != want:
            raise ShapeError(f"returned value {tok.value} has type {ty}, signature says {want}",
                             _loc(tok))
    return Graph(symbol.value[1:], tuple(inputs), tuple(b.nodes), tuple(t.value for t, _ in outputs))


def parse(text: str, file: str | None = None) -> Graph:
    """Parse and check `.tir` text. Raises TirError (with file, line, column) on any mistake."""
    try:
        tree = _parser().parse(text)
        return _build(tree)
    except UnexpectedInput as e:
        raise _syntax_error(e, text).located(file, text) from None
    except TirError as e:
        raise e.located(file, text) from None


def load(path: str | Path) -> Graph:
    """Parse a `.tir` file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise TirError("file is not UTF-8 text", file=str(path)) from None
    return parse(text, str(path))
