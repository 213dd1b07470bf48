"""Patterns → integer programs for the one Numba matcher (no per-rule compilation).

Registers hold e-class ids; register 0 is the candidate root class. Instructions (rows of
`Program.code`, int32[k, 5]):

    BIND  op, nch, in_reg, out_base   for each node of class in_reg with this op and arity:
                                      out_base + k ← child k   (backtracking point)
    EQ    reg_a, reg_b                the two registers hold the same class
    LIT   reg, class                  the register holds this literal's class
    YIELD                             a match: the variable registers are written out

Attribute children are matched like operands (they are literal leaf classes), so the programs are
purely structural. Left-hand attribute expressions bind a hidden variable that the caller checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..egraph.store import EOP_IDS
from .pattern import Expr, Lit, PNode, Pattern, Var

BIND, EQ, LIT, YIELD = 1, 2, 3, 4


@dataclass(frozen=True)
class Program:
    code: np.ndarray                 # int32[k, 5]
    nregs: int
    root_op: int                     # e-graph op id of the root node
    var_names: tuple[str, ...]       # output columns, in order
    var_regs: np.ndarray             # int32[len(var_names)]
    checks: tuple[tuple[str, Expr], ...]   # hidden variable → expression it must equal


def compile_pattern(p: PNode, literal_class: Callable[[object], int],
                    hidden_prefix: str = "$check") -> Program:
    """Compile a source pattern. `literal_class(value)` gives the e-class of a literal, or -1 when
    the e-graph does not hold it (the program then cannot match). Hidden check variables are
    named `hidden_prefix` + a number (give each source of a multi rule its own prefix)."""
    if not isinstance(p, PNode):
        raise ValueError("a source pattern must start with an operator")
    code: list[tuple[int, int, int, int, int]] = []
    var_reg: dict[str, int] = {}
    checks: list[tuple[str, Expr]] = []
    nregs = 1

    def node(pat: PNode, reg: int) -> None:
        nonlocal nregs
        kids = [a for _, a in pat.attrs] + list(pat.operands)
        base = nregs
        nregs += len(kids)
        code.append((BIND, EOP_IDS[pat.op], len(kids), reg, base))
        deeper = []
        for k, kid in enumerate(kids):     # cheap checks first, then descend
            r = base + k
            if isinstance(kid, Lit):
                code.append((LIT, r, literal_class(kid.value), 0, 0))
            elif isinstance(kid, Var):
                if kid.name in var_reg:
                    code.append((EQ, r, var_reg[kid.name], 0, 0))
                else:
                    var_reg[kid.name] = r
            elif isinstance(kid, Expr):
                hidden = f"{hidden_prefix}{len(checks)}"
                var_reg[hidden] = r
                checks.append((hidden, kid))
            else:
                deeper.append((kid, r))
        for kid, r in deeper:
            node(kid, r)

    node(p, 0)
    code.append((YIELD, 0, 0, 0, 0))
    names = tuple(var_reg)
    return Program(np.array(code, np.int32), nregs, EOP_IDS[p.op], names,
                   np.array([var_reg[n] for n in names], np.int32), tuple(checks))


def pattern_ops(p: Pattern) -> set[str]:
    """Operators a pattern mentions."""
    if isinstance(p, Var):
        return set()
    out = {p.op}
    for o in p.operands:
        out |= pattern_ops(o)
    return out
