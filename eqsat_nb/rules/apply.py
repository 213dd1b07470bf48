"""Rule application: right-hand sides compiled to build programs that one Numba kernel runs for
every match.

For each match the kernel (1) checks the rule's `where` conditions and left-hand attribute checks,
(2) infers the type of every node the right-hand side would create (shapes_nb, the compiled form of
the operator table) and skips the match if any is invalid, so nothing is added for a rejected match,
and only then (3) adds the nodes and unions each source root with its target.

Build program rows (int32[k, 4 + MAXA]): kind, a, nch, unused, child slots...
    B_VAR   a = match column            the class bound to a variable
    B_CONST a = class id                a literal the rule mentions (added before matching)
    B_EXPR  a = expression id           a computed attribute (interned, added as a literal)
    B_NODE  a = op id, nch, slots       a new node over earlier slots (attrs first, as in e-graphs)
Expression programs (int64[m, 3] rows: opcode, a, b) run on a small stack; see E_* below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ..egraph.hashcons import LOW32, add_node, key_hash
from ..egraph.intern import WIDTH, intern_row
from ..egraph.layout import (C_HEAD, C_PARENT, C_TYPE, EMPTY, M_DEAD, M_NODES, M_USES, MAXA,
                             N_CLS, N_OP, N_PAYLOAD, T_LIT, T_TUPLE)
from ..egraph.literals import K_INT, K_INTS, K_TYPE
from ..egraph.prefetch import prefetch
from ..egraph.shapes_nb import infer_proj, infer_row
from ..egraph.store import EOP_IDS, LIT, PROJ, EGraph
from ..egraph.unionfind import find, find_cls, root
from ..errors import TirError
from ..kernels import kernel
from .pattern import Cond, Expr, Lit, Pattern, Var

B_VAR, B_CONST, B_EXPR, B_NODE = 1, 2, 3, 4
B_COLS = 4 + MAXA

E_CONST, E_DIM, E_RANK, E_LITVAL = 1, 2, 3, 4
E_ADD, E_SUB, E_MUL, E_FDIV, E_MOD, E_NEG = 10, 11, 12, 13, 14, 15
E_EQ, E_NE, E_LT, E_LE, E_GT, E_GE = 20, 21, 22, 23, 24, 25
_BINARY = {"add": E_ADD, "sub": E_SUB, "mul": E_MUL, "floordiv": E_FDIV, "mod": E_MOD}
_CMP = {"==": E_EQ, "!=": E_NE, "<": E_LT, "<=": E_LE, ">": E_GT, ">=": E_GE}
SPLIT = EOP_IDS["split"]


class RuleCompileError(TirError):
    """A rule that is valid text but cannot be applied (e.g. an unbound target variable)."""


@dataclass
class Applier:
    """One direction of a rule, compiled against an e-graph's literal table."""

    name: str
    build: np.ndarray          # int32[k, B_COLS]
    targets: np.ndarray        # int32[n_sources]: slot of each source's replacement
    expr_code: np.ndarray      # int64[m, 3]
    exprs: np.ndarray          # int32[e, 3]: start, end, arity (-1 scalar, n list)
    conds: np.ndarray          # int32[c]: expression ids that must be non-zero
    checks: np.ndarray         # int32[h, 2]: (expression id, match column) that must be equal
    new_nodes: int             # upper bound of nodes added per match (for capacity)


class _Compiler:
    def __init__(self, eg: EGraph, columns: dict[str, int]) -> None:
        self.eg = eg
        self.columns = columns
        self.build: list[list[int]] = []
        self.slot_of: dict[Any, int] = {}
        self.expr_code: list[tuple[int, int, int]] = []
        self.exprs: list[tuple[int, int, int]] = []

    def _row(self, kind: int, a: int, kids: list[int] = ()) -> int:
        key = (kind, a, tuple(kids))
        if key in self.slot_of:
            return self.slot_of[key]
        row = [kind, a, len(kids), 0] + list(kids) + [EMPTY] * (MAXA - len(kids))
        self.build.append(row)
        self.slot_of[key] = len(self.build) - 1
        return len(self.build) - 1

    def var(self, name: str) -> int:
        if name not in self.columns:
            raise RuleCompileError(f"variable ?{name} is not bound by the source pattern(s)")
        return self.columns[name]

    def value(self, v: Any) -> None:
        """Emit code pushing scalar v (int, Lit int, Var bound to an int literal, Expr)."""
        if isinstance(v, bool):
            raise RuleCompileError("booleans are not numbers in rule expressions")
        if isinstance(v, int):
            self.expr_code.append((E_CONST, v, 0))
        elif isinstance(v, Lit) and isinstance(v.value, int) and not isinstance(v.value, bool):
            self.expr_code.append((E_CONST, v.value, 0))
        elif isinstance(v, Var):
            self.expr_code.append((E_LITVAL, self.var(v.name), 0))
        elif isinstance(v, Expr) and v.fn == "dim":
            var, axis = v.args
            self.expr_code.append((E_DIM, self.var(var.name), _int(axis)))
        elif isinstance(v, Expr) and v.fn == "rank":
            self.expr_code.append((E_RANK, self.var(v.args[0].name), 0))
        elif isinstance(v, Expr) and v.fn in _BINARY:
            self.value(v.args[0])
            self.value(v.args[1])
            self.expr_code.append((_BINARY[v.fn], 0, 0))
        elif isinstance(v, Expr) and v.fn == "neg":
            self.value(v.args[0])
            self.expr_code.append((E_NEG, 0, 0))
        else:
            raise RuleCompileError(f"cannot compute {v!r} as a number")

    def expression(self, e: Any) -> int:
        """An expression id whose result is a scalar (arity -1) or a list (arity n)."""
        start = len(self.expr_code)
        if isinstance(e, Expr) and e.fn == "list":
            for item in e.args:
                self.value(item)
            arity = len(e.args)
        elif isinstance(e, Lit) and isinstance(e.value, tuple):
            for item in e.value:
                self.value(item)
            arity = len(e.value)
        else:
            self.value(e)
            arity = -1
        self.exprs.append((start, len(self.expr_code), arity))
        return len(self.exprs) - 1

    def condition(self, c: Cond) -> int:
        start = len(self.expr_code)
        self.value(c.lhs)
        self.value(c.rhs)
        self.expr_code.append((_CMP[c.op], 0, 0))
        self.exprs.append((start, len(self.expr_code), -1))
        return len(self.exprs) - 1

    def attr(self, a: Any) -> int:
        if isinstance(a, Var):
            return self._row(B_VAR, self.var(a.name))
        if isinstance(a, Lit):
            return self._row(B_CONST, self.eg.add_literal(a.value))
        return self._row(B_EXPR, self.expression(a))

    def pattern(self, p: Pattern) -> int:
        if isinstance(p, Var):
            return self._row(B_VAR, self.var(p.name))
        kids = [self.attr(a) for _, a in p.attrs] + [self.pattern(o) for o in p.operands]
        if len(kids) > MAXA:
            raise RuleCompileError(f"{p.op} with {len(kids)} children exceeds {MAXA}")
        if p.op == "proj":
            split = self.build[kids[1]]
            if split[0] != B_NODE or split[1] != SPLIT:
                raise RuleCompileError("split_<i> on the right-hand side must read a split built "
                                       "by the same right-hand side")
        return self._row(B_NODE, EOP_IDS[p.op], kids)


def compile_applier(name: str, sources_vars: tuple[str, ...], targets: tuple[Pattern, ...],
                    conds: tuple[Cond, ...], checks: tuple[tuple[str, Expr], ...],
                    eg: EGraph) -> Applier:
    """Compile the targets of one rule direction. Match rows are (root of each source..., then
    the variables in `sources_vars` order)."""
    n_src = len(targets)
    columns = {v: n_src + i for i, v in enumerate(sources_vars)}
    comp = _Compiler(eg, columns)
    target_slots = [comp.pattern(t) for t in targets]
    cond_ids = [comp.condition(c) for c in conds]
    check_rows = [(comp.expression(e), comp.var(hidden)) for hidden, e in checks]
    build = np.array(comp.build, np.int32).reshape(-1, B_COLS)
    return Applier(
        name, build, np.array(target_slots, np.int32),
        np.array(comp.expr_code, np.int64).reshape(-1, 3),
        np.array(comp.exprs, np.int32).reshape(-1, 3),
        np.array(cond_ids, np.int32), np.array(check_rows, np.int32).reshape(-1, 2),
        int(np.sum(build[:, 0] >= B_EXPR)) if len(build) else 0)


def _int(v: Any) -> int:
    if isinstance(v, Lit):
        v = v.value
    if not isinstance(v, int):
        raise RuleCompileError(f"expected an integer, got {v!r}")
    return v


# ------------------------------------------------------------------------------------ kernel

@njit(cache=True)
def _class_row(classes: np.ndarray, nodes: np.ndarray, lit_rows: np.ndarray, c: int,
               out: np.ndarray) -> int:
    """The type row of class c (or its literal row for literal classes); returns its C_TYPE."""
    tid = classes[C_TYPE, c]
    if tid >= 0 or tid == T_LIT:
        r = tid if tid >= 0 else nodes[N_PAYLOAD, classes[C_HEAD, c]]
        for w in range(WIDTH):
            out[w] = lit_rows[r, w]
    else:
        out[:] = 0
    return tid


@njit(cache=True, inline="always")
def _copy_row(dst: np.ndarray, i: int, src: np.ndarray, j: int) -> None:
    """dst[i] = src[j], element by element (a row slice assignment may allocate a temporary,
    which the kernels compiled without NRT cannot)."""
    for w in range(dst.shape[1]):
        dst[i, w] = src[j, w]


@njit(cache=True, inline="always")
def _set_row(dst: np.ndarray, i: int, src: np.ndarray) -> None:
    """dst[i] = src (1-D), element by element (see _copy_row)."""
    for w in range(dst.shape[1]):
        dst[i, w] = src[w]


@njit(cache=True)
def _eval(code: np.ndarray, start: int, end: int, stack: np.ndarray, matches: np.ndarray, m: int,
          classes: np.ndarray, nodes: np.ndarray, lit_rows: np.ndarray, row: np.ndarray) -> int:
    """Run expression code[start:end]; returns the stack depth (−1 when undefined, e.g. a dim of
    an untyped class or a division by zero)."""
    sp = 0
    for pc in range(start, end):
        op, a, b = code[pc, 0], code[pc, 1], code[pc, 2]
        if op == E_CONST:
            stack[sp] = a
            sp += 1
        elif op == E_DIM or op == E_RANK or op == E_LITVAL:
            tid = _class_row(classes, nodes, lit_rows, find_cls(classes, matches[m, a]), row)
            if op == E_LITVAL:
                if tid != T_LIT or row[0] != K_INT:
                    return -1
                stack[sp] = row[2]
            elif tid < 0 or row[0] != K_TYPE:
                return -1
            elif op == E_RANK:
                stack[sp] = row[1]
            else:
                axis = b + row[1] if b < 0 else b
                if axis < 0 or axis >= row[1]:
                    return -1
                stack[sp] = row[3 + axis]
            sp += 1
        elif op == E_NEG:
            stack[sp - 1] = -stack[sp - 1]
        else:
            y = stack[sp - 1]
            x = stack[sp - 2]
            sp -= 1
            if op == E_ADD:
                r = x + y
            elif op == E_SUB:
                r = x - y
            elif op == E_MUL:
                r = x * y
            elif op == E_FDIV or op == E_MOD:
                if y == 0:
                    return -1
                r = x // y if op == E_FDIV else x % y
            elif op == E_EQ:
                r = 1 if x == y else 0
            elif op == E_NE:
                r = 1 if x != y else 0
            elif op == E_LT:
                r = 1 if x < y else 0
            elif op == E_LE:
                r = 1 if x <= y else 0
            elif op == E_GT:
                r = 1 if x > y else 0
            else:
                r = 1 if x >= y else 0
            stack[sp - 1] = r
    return sp


@njit(cache=True)
def _expr_row(code: np.ndarray, exprs: np.ndarray, e: int, stack: np.ndarray, matches: np.ndarray,
              m: int, classes: np.ndarray, nodes: np.ndarray, lit_rows: np.ndarray,
              tmp: np.ndarray, out: np.ndarray) -> bool:
    """The literal row (K_INT or K_INTS) computed by expression e for match row m."""
    sp = _eval(code, exprs[e, 0], exprs[e, 1], stack, matches, m, classes, nodes, lit_rows, tmp)
    if sp < 0:
        return False
    out[:] = 0
    arity = exprs[e, 2]
    if arity < 0:
        out[0], out[1], out[2] = K_INT, 1, stack[sp - 1]
    else:
        if arity > WIDTH - 2:
            return False
        out[0], out[1] = K_INTS, arity
        for i in range(arity):
            out[2 + i] = stack[sp - arity + i]
    return True


# Prefetch distances (in matches) of the hash-cons look-ups of target nodes over match variables
# only: the union-find and type entries of match m + PF_VARS's classes, the table slot of match
# m + PF_SLOT's key, then the node stored there for m + PF_NODE (its key columns), then that
# node's class's union-find and type entries for m + PF_CLASS.
PF_VARS, PF_SLOT, PF_NODE, PF_CLASS, PF_RING = 24, 16, 8, 4, 32


@kernel("i8[::1](i4[:, ::1])")
def _leaf_slots(build: np.ndarray) -> np.ndarray:
    """The node slots whose children are all match variables or constant classes: their
    hash-cons keys are known from the match row alone, ahead of applying it."""
    out = np.empty(build.shape[0], np.int64)
    n = 0
    for s in range(build.shape[0]):
        if build[s, 0] != B_NODE:
            continue
        leaf = True
        for j in range(build[s, 2]):
            kind = build[build[s, 4 + j], 0]
            if kind != B_VAR and kind != B_CONST:
                leaf = False
        if leaf:
            out[n] = s
            n += 1
    return out[:n]


@njit(cache=True, inline="always")
def _slot_node(table: np.ndarray, slot: int) -> int:
    """The node stored at a prefetched hash-cons slot, or -1 (no slot recorded, or empty)."""
    if slot < 0 or slot >= table.size:
        return -1
    e = table[slot]
    return -1 if e == EMPTY else e & LOW32


@njit(cache=True, inline="always")
def _prefetch_keys(build: np.ndarray, leaf: np.ndarray, matches: np.ndarray, m: int,
                   parent: np.ndarray, table: np.ndarray, ch: np.ndarray, slots: np.ndarray,
                   r: int) -> None:
    """Prefetch the hash-cons slots where the leaf node slots' keys of `match` start probing
    (as add_node will compute them, if no union happens in between) for match row m; record them
    in slots[r]. Rows are indexed in place: a row view costs atomic reference counting."""
    mask = table.size - 1
    for i in range(leaf.size):
        s = leaf[i]
        nch = build[s, 2]
        for j in range(nch):
            c = build[s, 4 + j]
            a = build[c, 1]
            ch[j] = root(parent, matches[m, a] if build[c, 0] == B_VAR else a)
        h = np.int64(key_hash(build[s, 1], -1, ch, nch) & np.uint64(LOW32))
        slots[r, i] = h & mask
        prefetch(table, h & mask)


def apply_matches(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
                  table: np.ndarray, pending: np.ndarray, meta: np.ndarray, op_kind: np.ndarray,
                  lit_rows: np.ndarray, lit_table: np.ndarray, lit_count: np.ndarray,
                  consts: np.ndarray, build: np.ndarray, targets: np.ndarray,
                  expr_code: np.ndarray, exprs: np.ndarray, conds: np.ndarray,
                  checks: np.ndarray, matches: np.ndarray, stats: np.ndarray,
                  unions: np.ndarray) -> int:
    """Apply every match row, adding the target nodes and writing the (root, target) class pairs
    to merge into `unions` (the caller merges them after the whole iteration's applications, so
    the hash-cons stays exact while nodes are added). stats = [applied, rejected by condition,
    rejected by shape, next match, pairs written]: the kernel starts at match stats[3] with
    stats[4] pairs already in `unions`, and stops early, returning -2 with stats[3:5] updated, when
    the node, parent-list, hash-cons or literal arrays lack room for one more match (the caller
    grows them and calls again). Returns the number of pairs, or -1 on a type conflict
    (meta[M_ERR]).

    The workspace is allocated here, in Python, not in a compiled wrapper: a wrapper kernel
    would link the whole application kernel into its own module, and LLVM would optimize and
    emit all of it a second time on a first run."""
    k = build.shape[0]
    leaf = _leaf_slots(build)
    return _apply_rows(nodes, children, classes, uses, table, pending, meta, op_kind, lit_rows,
                       lit_table, lit_count, consts, build, targets, expr_code, exprs, conds,
                       checks, matches, stats, unions, leaf,
                       np.zeros((k, WIDTH), np.int64), np.empty(k, np.int64),
                       np.empty(k, np.int32), np.empty(k, np.int64), np.zeros(k, np.bool_),
                       np.zeros(k, np.bool_), np.empty((k, MAXA), np.int64),
                       np.zeros((k, WIDTH), np.int64), np.empty(k, np.int64),
                       np.empty(64, np.int64), np.empty(WIDTH, np.int64),
                       np.empty((MAXA, WIDTH), np.int64), np.empty((MAXA, WIDTH), np.int64),
                       np.empty((2, WIDTH), np.int64), np.empty(MAXA, np.int32),
                       np.empty(WIDTH, np.int64),
                       np.full((PF_RING, max(leaf.size, 1)), -1, np.int64),
                       np.empty(MAXA, np.int64))


@kernel(
    "i8(i4[:, ::1], i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1], i4[::1], i8[::1], "
    "i1[::1], i8[:, ::1], i4[::1], i8[::1], i8[::1], i4[:, ::1], i4[::1], "
    "i8[:, ::1], i4[:, ::1], i4[::1], i4[:, ::1], i4[:, ::1], i8[::1], i4[:, ::1], "
    "i8[::1], i8[:, ::1], i8[::1], i4[::1], i8[::1], b1[::1], b1[::1], i8[:, ::1], "
    "i8[:, ::1], i8[::1], i8[::1], i8[::1], i8[:, ::1], i8[:, ::1], i8[:, ::1], "
    "i4[::1], i8[::1], i8[:, ::1], i8[::1])",
    _nrt=False)
def _apply_rows(nodes: np.ndarray, children: np.ndarray, classes: np.ndarray, uses: np.ndarray,
                table: np.ndarray, pending: np.ndarray, meta: np.ndarray, op_kind: np.ndarray,
                lit_rows: np.ndarray, lit_table: np.ndarray, lit_count: np.ndarray,
                consts: np.ndarray, build: np.ndarray, targets: np.ndarray,
                expr_code: np.ndarray, exprs: np.ndarray, conds: np.ndarray,
                checks: np.ndarray, matches: np.ndarray, stats: np.ndarray,
                unions: np.ndarray, leaf: np.ndarray, rows: np.ndarray, slot_tid: np.ndarray,
                slot_class: np.ndarray, slot_key: np.ndarray, cached: np.ndarray,
                ready: np.ndarray, cache_key: np.ndarray, cache_row: np.ndarray,
                cache_tid: np.ndarray, stack: np.ndarray, tmp: np.ndarray, attrs: np.ndarray,
                ins: np.ndarray, sattrs: np.ndarray, kids: np.ndarray, out: np.ndarray,
                pf_slots: np.ndarray, pf_ch: np.ndarray) -> int:
    """apply_matches over its workspace. Compiled without reference counting (NRT), as are the
    helpers it inlines: Numba would count every array handed to an inlined helper, two atomic
    updates per array per call, as much time as the rest of the work.

    Per build slot s: rows[s] its type or literal row when ready[s] (else made on demand),
    slot_tid / slot_class its type id and class, slot_key what a node slot's type depends on;
    cached / cache_key / cache_row / cache_tid the last inferred type of a node slot and the keys
    it was inferred from. pf_slots is the ring of prefetched hash-cons slots of the leaf slots'
    look-ups (memory-level parallelism: later matches' look-ups are prefetched while this one is
    applied; reads only, the results are the same without)."""
    n_unions = stats[4]
    parent = classes[C_PARENT]
    k = build.shape[0]
    per_nodes = 0                             # most nodes / parent entries / literals per match
    per_uses = 0
    for s in range(k):
        if build[s, 0] == B_NODE or build[s, 0] == B_EXPR:
            per_nodes += 1
        if build[s, 0] == B_NODE:
            per_uses += build[s, 2]
    n_src = targets.size
    n_cls = nodes[N_CLS]
    n_matches = matches.shape[0]
    n_op = nodes[N_OP]
    n_payload = nodes[N_PAYLOAD]
    c_type = classes[C_TYPE]
    for m in range(stats[3], n_matches):
        ahead = m + PF_VARS
        if ahead < n_matches:
            for j in range(matches.shape[1]):
                prefetch(parent, matches[ahead, j])
                prefetch(c_type, matches[ahead, j])
        if leaf.size:
            ahead = m + PF_SLOT
            if ahead < n_matches:
                _prefetch_keys(build, leaf, matches, ahead, parent, table, pf_ch, pf_slots,
                               ahead % PF_RING)
            ahead = m + PF_NODE
            if ahead < n_matches:
                for i in range(leaf.size):
                    node = _slot_node(table, pf_slots[ahead % PF_RING, i])
                    if node >= 0:
                        prefetch(children, node)
                        prefetch(n_cls, node)
                        prefetch(n_op, node)
                        prefetch(n_payload, node)
            ahead = m + PF_CLASS
            if ahead < n_matches:
                for i in range(leaf.size):
                    node = _slot_node(table, pf_slots[ahead % PF_RING, i])
                    if node >= 0:
                        prefetch(parent, n_cls[node])
                        prefetch(c_type, n_cls[node])
        if (meta[M_NODES] + per_nodes > nodes.shape[1] or meta[M_USES] + per_uses > uses.shape[1]
                or 2 * (meta[M_NODES] - meta[M_DEAD] + per_nodes) > table.size
                or lit_count[0] + per_nodes >= lit_rows.shape[0]):
            stats[3] = m
            stats[4] = n_unions
            return -2
        ok = True
        for i in range(conds.size):
            e = conds[i]
            sp = _eval(expr_code, exprs[e, 0], exprs[e, 1], stack, matches, m, classes, nodes,
                       lit_rows, tmp)
            if sp < 0 or stack[sp - 1] == 0:
                ok = False
                break
        for i in range(checks.shape[0]):
            if not ok:
                break
            if not _expr_row(expr_code, exprs, checks[i, 0], stack, matches, m, classes, nodes,
                             lit_rows, tmp, out):
                ok = False
                break
            tid = _class_row(classes, nodes, lit_rows, find(parent, matches[m, checks[i, 1]]), tmp)
            if tid != T_LIT:
                ok = False
                break
            for w in range(WIDTH):
                if tmp[w] != out[w]:
                    ok = False
                    break
        if not ok:
            stats[1] += 1
            continue
        # pass 1: the type (or literal) of every slot; nothing is added yet. A node slot whose
        # children have the same types/literals as at the previous match reuses its result.
        for s in range(k):
            kind = build[s, 0]
            if kind == B_VAR or kind == B_CONST:
                c = find(parent, matches[m, build[s, 1]]) if kind == B_VAR else find(parent, build[s, 1])
                slot_class[s] = c
                tid = classes[C_TYPE, c]
                slot_tid[s] = tid
                if tid == T_LIT:
                    _class_row(classes, nodes, lit_rows, c, rows[s])
                    ready[s] = True
                    # the interned literal's id: equal ids are equal literals (the row's first
                    # value is not: perm [0, 2, 1, 3] and [0, 2, 3, 1] shared a cached type)
                    slot_key[s] = -16 - nodes[N_PAYLOAD, classes[C_HEAD, c]]
                else:                         # a type row is copied only if a node needs it
                    ready[s] = False
                    slot_key[s] = tid if tid >= 0 else -2
            elif kind == B_EXPR:
                if not _expr_row(expr_code, exprs, build[s, 1], stack, matches, m, classes, nodes,
                                 lit_rows, tmp, rows[s]):
                    ok = False
                    break
                ready[s] = True
                slot_tid[s] = T_LIT
                slot_key[s] = -1
            else:
                op, nch = build[s, 1], build[s, 2]
                hit = cached[s] and op != PROJ and op != SPLIT
                for j in range(nch):
                    key = slot_key[build[s, 4 + j]]
                    if key < 0 and key > -16:
                        hit = False
                    if hit and cache_key[s, j] != key:
                        hit = False
                    cache_key[s, j] = key
                if hit:                       # rows[s] would be cache_row[s]
                    ready[s] = False
                    slot_tid[s] = cache_tid[s]
                    slot_key[s] = cache_tid[s]
                    continue
                for j in range(nch):
                    child = build[s, 4 + j]
                    if not ready[child]:
                        if build[child, 0] == B_NODE:
                            _copy_row(rows, child, cache_row, child)
                        else:
                            _class_row(classes, nodes, lit_rows, slot_class[child], rows[child])
                        ready[child] = True
                nattr = np.int64(0)     # not a literal 0, which would compile infer_row twice
                nin = np.int64(0)
                for j in range(nch):
                    child = build[s, 4 + j]
                    if slot_tid[child] == T_LIT:
                        _copy_row(attrs, nattr, rows, child)
                        nattr += 1
                    else:
                        _copy_row(ins, nin, rows, child)
                        nin += 1
                out[:] = 0
                if op == PROJ:
                    split = build[s, 5]
                    _copy_row(sattrs, 0, rows, build[split, 4])
                    _copy_row(sattrs, 1, rows, build[split, 5])
                    good = infer_proj(attrs[0, 2], sattrs, rows[build[split, 6]], out) == 1
                else:
                    good = infer_row(op, attrs, nattr, ins, nin, consts, out) == 1
                if not good:
                    cached[s] = False
                    ok = False
                    break
                _set_row(rows, s, out)
                ready[s] = True
                if op == SPLIT:
                    slot_tid[s] = T_TUPLE
                    slot_key[s] = -3
                else:
                    tid = intern_row(lit_rows, lit_table, lit_count, out)
                    slot_tid[s] = tid
                    slot_key[s] = tid if op != PROJ else -1
                    _set_row(cache_row, s, out)
                    cache_tid[s] = tid
                    cached[s] = op != PROJ
        if not ok:
            stats[2] += 1
            continue
        # pass 2: add literals and nodes, then merge each source root with its target
        for s in range(k):              # one add_node call site: each is a large inlined body
            kind = build[s, 0]
            if kind == B_EXPR:
                op, nch, tid = LIT, 0, T_LIT
                payload = intern_row(lit_rows, lit_table, lit_count, rows[s])
            elif kind == B_NODE:
                op, payload, nch, tid = build[s, 1], -1, build[s, 2], slot_tid[s]
                for j in range(nch):
                    kids[j] = slot_class[build[s, 4 + j]]
            else:
                continue
            c = add_node(nodes, children, classes, uses, table, meta, op_kind, op, payload, kids,
                         nch, tid)
            if c < 0:
                return -1
            slot_class[s] = c
        for i in range(n_src):
            a = find(parent, matches[m, i])
            b = find(parent, slot_class[targets[i]])
            if a != b:
                unions[n_unions, 0] = a
                unions[n_unions, 1] = b
                n_unions += 1
        stats[0] += 1
    stats[3] = matches.shape[0]
    stats[4] = n_unions
    return n_unions

