"""E-matching: one Numba backtracking VM runs every compiled pattern (see compile.py).

Candidates come from the per-op index of the rebuilt e-graph (egraph/index.py); matches are rows of
a flat int32 buffer: the root class, then one class per pattern variable.
"""
from __future__ import annotations

import numpy as np

from ..egraph.index import build_index
from ..egraph.layout import C_PARENT, N_EPOCH, N_NCH, N_OP
from ..egraph.store import EOP_NAMES, EGraph
from ..egraph.unionfind import find
from ..kernels import kernel
from .compile import BIND, EQ, LIT, Program


def run_program(code: np.ndarray, nregs: int, var_regs: np.ndarray, roots: np.ndarray,
                cstart: np.ndarray, cnodes: np.ndarray, nodes: np.ndarray, children: np.ndarray,
                classes: np.ndarray, since: int, out: np.ndarray, new_first: bool,
                count: int, first_root: int) -> tuple[int, int, int]:
    """Match the program at the classes roots[first_root:]; write (root, vars...) rows into
    `out` from row `count` on. Only matches using a node whose row changed at epoch >= `since`
    are written (semi-naive: a match of unchanged rows was found, and applied, by the previous
    search). `new_first`: the index lists each class's new nodes of an op before its old ones
    (build_index with the same `since`), so the last node of a match is looked for among the
    new ones only when the match has no new node yet.
    Returns (rows written in all, the root index to resume at, the rows written before that
    root's): the root index is roots.size when every root was matched, else `out` filled up
    while matching it (resume there with a larger `out` holding the rows before it).
    (A Python wrapper: a compiled one would make LLVM optimize the matcher twice on a first
    run.)"""
    return _run_program(code, var_regs, roots, cstart, cnodes, nodes, children, classes, since,
                        out, new_first, count, first_root, np.empty(nregs, np.int32),
                        np.empty(code.shape[0], np.int32), np.empty(code.shape[0], np.int32))


@kernel(
    "UniTuple(i8, 3)(i4[:, ::1], i4[::1], i4[::1], i4[::1], i4[::1], i4[:, ::1], "
    "i4[:, ::1], i4[:, ::1], i8, i4[:, ::1], b1, i8, i8, i4[::1], i4[::1], i4[::1])",
    _nrt=False)
def _run_program(code: np.ndarray, var_regs: np.ndarray, roots: np.ndarray, cstart: np.ndarray,
                 cnodes: np.ndarray, nodes: np.ndarray, children: np.ndarray,
                 classes: np.ndarray, since: int, out: np.ndarray, new_first: bool, count: int,
                 first_root: int, regs: np.ndarray, stack_pc: np.ndarray,
                 stack_pos: np.ndarray) -> tuple[int, int, int]:
    """run_program over its registers and backtracking stack, without reference counting (see
    apply._apply_rows)."""
    parent = classes[C_PARENT]
    last_bind = -1
    for i in range(code.shape[0]):
        if code[i, 0] == BIND:
            last_bind = i
    nvars = var_regs.size
    for r in range(first_root, roots.size):
        before = count
        regs[0] = roots[r]
        pc = 0
        sp = 0
        pos = -1                      # -1: enter an instruction fresh; else resume a BIND
        while True:
            op = code[pc, 0]
            ok = True
            if op == BIND:
                c = regs[code[pc, 3]]
                want, nch, base = code[pc, 1], code[pc, 2], code[pc, 4]
                p = cstart[c] if pos < 0 else pos + 1
                end = cstart[c + 1]
                # the last node of a match with no new node before it must be new itself; the
                # index puts a class's new nodes of an op before its old ones (semi-naive)
                only_new = new_first and since > 0 and pc == last_bind
                for q in range(sp):
                    if not only_new:
                        break
                    if nodes[N_EPOCH, cnodes[stack_pos[q]]] >= since:
                        only_new = False
                found = -1
                while p < end:
                    n = cnodes[p]
                    if nodes[N_OP, n] == want:
                        if only_new and nodes[N_EPOCH, n] < since:
                            break
                        if nodes[N_NCH, n] == nch:
                            found = p
                            break
                    if nodes[N_OP, n] > want:
                        break
                    p += 1
                if found < 0:
                    ok = False
                else:
                    n = cnodes[found]
                    for k in range(nch):
                        regs[base + k] = find(parent, children[n, k])
                    stack_pc[sp] = pc
                    stack_pos[sp] = found
                    sp += 1
            elif op == EQ:
                ok = regs[code[pc, 1]] == regs[code[pc, 2]]
            elif op == LIT:
                ok = regs[code[pc, 1]] == code[pc, 2]
            else:  # YIELD
                fresh = since <= 0
                for q in range(sp):
                    if fresh:
                        break
                    fresh = nodes[N_EPOCH, cnodes[stack_pos[q]]] >= since
                if fresh:
                    if count >= out.shape[0]:
                        return count, r, before
                    out[count, 0] = regs[0]
                    for v in range(nvars):
                        out[count, 1 + v] = regs[var_regs[v]]
                    count += 1
                ok = False               # backtrack for more
            pos = -1
            if ok:
                pc += 1
                continue
            if sp == 0:
                break
            sp -= 1
            pc = stack_pc[sp]
            pos = stack_pos[sp]
    return count, roots.size, count


class MatchIndex:
    """The per-iteration index of a rebuilt e-graph."""

    def __init__(self, eg: EGraph, since: int = 0) -> None:
        """`since`: the epoch `search` will be called with (0: any); it orders the index."""
        eg.rebuild()
        self.eg = eg
        self.since = since
        self.cstart, self.cnodes, self.ostart, self.oclasses = build_index(
            eg.nodes, eg.classes, eg.num_nodes, len(EOP_NAMES), since)

    def classes_with(self, op_id: int) -> np.ndarray:
        return self.oclasses[self.ostart[op_id]: self.ostart[op_id + 1]]


def search(prog: Program, index: MatchIndex, limit: int | None = None,
           since: int = 0) -> np.ndarray:
    """All matches of `prog`: int32[m, 1 + len(prog.var_names)] (root class, then variables),
    at most `limit` rows when given; with `since` > 0 only those new since that epoch."""
    eg = index.eg
    roots = index.classes_with(prog.root_op)
    cap = limit if limit is not None else max(64, 4 * roots.size)
    out = np.empty((cap, 1 + len(prog.var_names)), np.int32)
    count, first = 0, 0
    while True:
        got, first, count = run_program(prog.code, prog.nregs, prog.var_regs, roots,
                                        index.cstart, index.cnodes, eg.nodes, eg.children,
                                        eg.classes, since, out,
                                        since > 0 and index.since == since, count, first)
        if first == roots.size or limit is not None:
            return out[:got]
        # full while matching roots[first]: keep the rows before it, go on with a larger buffer
        # (the roots already matched are not searched again)
        grown = np.empty((len(out) * 4, out.shape[1]), np.int32)
        grown[:count] = out[:count]
        out = grown
