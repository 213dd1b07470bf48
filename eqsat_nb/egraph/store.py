"""The e-graph: struct-of-arrays NumPy buffers (capacity doubling) and the thin Python API over
the Numba kernels. Everything per node or per class happens in kernels; Python only grows arrays,
converts names and raises errors.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import TirError
from ..ir.graph import TensorType
from ..ir.ops import OP_NAMES
from .compact import compact
from .hashcons import add_nodes, find_key, leaf_classes, rehash
from .layout import (C_CONST, C_HEAD, C_PARENT, C_TYPE, CLASS_COLS, EMPTY, ERR_TYPE_MISMATCH, F_DEAD,
                     F_FILTERED,
                     K_CONST_LEAF, K_INPUT, K_PLAIN, M_CLASSES, M_DEAD, M_ERR, M_ERR_A, M_ERR_B,
                     M_NODES, M_PENDING, M_UNIONS, M_USES, MAXA, META_SIZE, N_CLS, N_FLAGS,
                     N_NCH, N_NEXT, N_OP, N_PAYLOAD, NODE_COLS, T_LIT, T_TUPLE, T_UNKNOWN)
from .literals import Literals
from .memory import fresh
from .rebuild import rebuild, union_pairs
from .unionfind import find_all

# e-graph operators: the IR's operator table, then three that exist only in e-graphs.
EXTRA_OPS = ("lit", "proj", "opaque")
EOP_NAMES: tuple[str, ...] = OP_NAMES + EXTRA_OPS
EOP_IDS: dict[str, int] = {name: i for i, name in enumerate(EOP_NAMES)}
LIT, PROJ, OPAQUE = (EOP_IDS[n] for n in EXTRA_OPS)
OP_KIND = np.full(len(EOP_NAMES), K_PLAIN, np.int8)
OP_KIND[[EOP_IDS["weight"], LIT]] = K_CONST_LEAF
OP_KIND[EOP_IDS["input"]] = K_INPUT


class EGraphError(TirError):
    """An operation broke an e-graph invariant (e.g. merged classes of different types)."""


class EGraph:
    """An e-graph over tensor operators.

    Node ids and class ids share one index space (a class is named by the node that created it);
    `find` gives the canonical class. Literal attributes are leaf nodes of op `lit`; a split is a
    node of op `split` (a tuple class) read through `proj` nodes. `roots` are the output classes.
    """

    def __init__(self, capacity: int = 1024, literals: Literals | None = None) -> None:
        cap = max(16, capacity)
        self.lits = literals if literals is not None else Literals()
        self.nodes = fresh((NODE_COLS, cap), np.int32)
        self.children = fresh((cap, MAXA), np.int32, EMPTY)
        self.classes = fresh((CLASS_COLS, cap), np.int32)
        self.uses = fresh((2, cap * 2), np.int32)
        self.table = fresh(_pow2(2 * cap), np.int64, EMPTY)   # see hashcons.LOW32
        self.pending = fresh(2 * cap + 16, np.int32)
        self.meta = np.zeros(META_SIZE, np.int64)
        self.roots: list[int] = []
        self.inputs: list[tuple[str, int]] = []    # graph inputs in order: (value name, class)
        self.names: dict[int, str] = {}            # class → original SSA value name
        self.graph_name = "main"

    # ------------------------------------------------------------------ sizes and growth
    @property
    def num_nodes(self) -> int:
        """Nodes ever added (dead duplicates included)."""
        return int(self.meta[M_NODES])

    @property
    def num_classes(self) -> int:
        return int(self.meta[M_CLASSES])

    @property
    def num_unions(self) -> int:
        return int(self.meta[M_UNIONS])

    @property
    def capacity(self) -> int:
        return self.nodes.shape[1]

    def reserve(self, extra_nodes: int, extra_uses: int | None = None,
                extra_keys: int | None = None) -> None:
        """Make room for `extra_nodes` more nodes (and their parent-list entries), of which the
        hash-cons must hold `extra_keys` (default all: a caller that reserves for a worst case
        grows the table, which is filled when made, by what it expects)."""
        need = self.num_nodes + extra_nodes
        if need > self.capacity:
            cap = self.capacity
            while cap < need:
                cap *= 2
            n = self.num_nodes             # only the used prefix is copied
            self.nodes = _grow(self.nodes, cap, n)
            # rows past num_nodes are unused (add_node writes a whole row): left unfilled
            children = fresh((cap, MAXA), np.int32)
            children[:n] = self.children[:n]
            self.children = children
            self.classes = _grow(self.classes, cap, n)
            queued = int(self.meta[M_PENDING])
            pending = fresh(2 * cap + 16, np.int32)   # untouched pages: cheap
            pending[:queued] = self.pending[:queued]
            self.pending = pending
        uses_need = int(self.meta[M_USES]) + (extra_uses if extra_uses is not None
                                              else extra_nodes * MAXA)
        if uses_need > self.uses.shape[1]:
            ucap = self.uses.shape[1]
            while ucap < uses_need:
                ucap *= 2
            self.uses = _grow(self.uses, ucap, int(self.meta[M_USES]))
        keys = extra_nodes if extra_keys is None else extra_keys
        live = self.num_nodes + keys - int(self.meta[M_DEAD])   # the table holds live nodes only
        if 2 * live > self.table.size:            # load factor stays <= 1/2
            old, self.table = self.table, fresh(_pow2(2 * live), np.int64, EMPTY)
            rehash(self.table, old)

    # ------------------------------------------------------------------ adding
    def type_id(self, ty: TensorType | None) -> int:
        return T_UNKNOWN if ty is None else self.lits.literal(ty)

    def add_batch(self, ops: np.ndarray, payloads: np.ndarray, kids: np.ndarray,
                  nkids: np.ndarray, types: np.ndarray) -> np.ndarray:
        """Add many nodes in one kernel call; returns their canonical classes. A child id c < 0
        means the class of batch node -c-1. `types` are type ids (see `type_id`)."""
        k = len(ops)
        self.reserve(k, int(np.sum(nkids)))
        out = np.empty(k, np.int32)
        got = add_nodes(self.nodes, self.children, self.classes, self.uses, self.table, self.meta,
                        OP_KIND, np.ascontiguousarray(ops, np.int32),
                        np.ascontiguousarray(payloads, np.int32),
                        np.ascontiguousarray(kids, np.int32),
                        np.ascontiguousarray(nkids, np.int32),
                        np.ascontiguousarray(types, np.int32), out)
        if got < 0:
            self._raise_kernel_error()
        return out

    def add(self, op: str, children: Sequence[int] = (), payload: int = -1,
            ty: TensorType | None = None, type_id: int | None = None) -> int:
        """Add one node (the slow path; batch with `add_batch` in hot code)."""
        if len(children) > MAXA:
            raise EGraphError(f"{op}: {len(children)} children exceed the e-graph limit of {MAXA}")
        kids = np.full((1, MAXA), EMPTY, np.int32)
        kids[0, : len(children)] = children
        tid = self.type_id(ty) if type_id is None else type_id
        return int(self.add_batch(np.array([EOP_IDS[op]]), np.array([payload]), kids,
                                  np.array([len(children)]), np.array([tid]))[0])

    def lookup(self, op: str, children: Sequence[int] = (), payload: int = -1) -> int:
        """The class holding node `op(children)` with this payload, or -1 (adds nothing)."""
        ch = self.canonical(np.array(list(children) + [EMPTY] * (MAXA - len(children)), np.int32))
        n = find_key(self.table, self.nodes, self.children, EOP_IDS[op], payload, ch,
                     len(children))
        return -1 if n < 0 else self.node_class(n)

    def lookup_literal(self, value: Any) -> int:
        """The class of an attribute literal if the e-graph has it, else -1."""
        return self.lookup("lit", (), self.lits.literal(value))

    def literal_classes(self, literal_ids: np.ndarray) -> np.ndarray:
        """lookup_literal for literals already interned (ids from `self.lits.literal`), all at
        once: int64 classes, -1 where the e-graph lacks one."""
        return leaf_classes(self.table, self.nodes, self.children, self.classes, EOP_IDS["lit"],
                            np.ascontiguousarray(literal_ids, np.int64))

    def add_literal(self, value: Any) -> int:
        """The class of an attribute literal (int, float, bool, str or tuple of ints)."""
        return self.add("lit", (), self.lits.literal(value), type_id=T_LIT)

    # ------------------------------------------------------------------ merging
    def union(self, a: int, b: int) -> int:
        """Merge two classes now; invariants hold again after `rebuild`."""
        self.union_many(np.array([[a, b]], np.int32))
        return self.find(a)

    def union_many(self, pairs: np.ndarray) -> int:
        got = union_pairs(self.nodes, self.classes, self.uses, self.pending, self.meta,
                          np.ascontiguousarray(pairs, np.int32).reshape(-1, 2))
        if got < 0:
            self._raise_kernel_error()
        return got

    def rebuild(self) -> int:
        """Restore the invariants (egg's deferred rebuilding); returns the repairs done."""
        if self.meta[M_PENDING] == 0:
            return 0
        got = rebuild(self.nodes, self.children, self.classes, self.uses, self.table,
                      self.pending, self.meta, OP_KIND)
        if got < 0:
            self._raise_kernel_error()
        self._shrink_table()
        return got

    def _shrink_table(self) -> None:
        """After congruences killed most nodes, a table sized for the peak is mostly empty and
        every probe misses the cache: rehash the live nodes into a table twice their number."""
        live = self.num_nodes - int(self.meta[M_DEAD])
        size = _pow2(2 * max(live, 512))
        if 8 * size <= self.table.size:
            old, self.table = self.table, fresh(size, np.int64, EMPTY)
            rehash(self.table, old)

    def compact(self) -> np.ndarray:
        """Drop the dead nodes and renumber (see compact.py); returns, for every old id, the new
        id of its class. `roots`, `inputs` and `names` are renumbered here (into new objects:
        snapshots share them); any other holder of class ids must map them through the result.
        The e-graph must be rebuilt (nothing pending)."""
        if self.meta[M_PENDING]:
            raise EGraphError("compact() needs a rebuilt e-graph (unions are pending)")
        live = self.num_nodes - int(self.meta[M_DEAD])
        classes = fresh(self.classes.shape, self.classes.dtype)
        self.table = fresh(_pow2(2 * max(live, 512)), np.int64, EMPTY)
        new_class_of = compact(self.nodes, self.children, self.classes, classes, self.uses,
                               self.table, self.meta)
        old_parent, self.classes = self.classes[C_PARENT], classes
        self.roots = [int(new_class_of[r]) for r in self.roots]
        self.inputs = [(name, int(new_class_of[c])) for name, c in self.inputs]
        # names are looked up under canonical ids: one under a merged-away id was unreachable
        self.names = {int(new_class_of[c]): name for c, name in self.names.items()
                      if old_parent[c] == c}
        return new_class_of

    def _raise_kernel_error(self) -> None:
        code, a, b = (int(x) for x in self.meta[[M_ERR, M_ERR_A, M_ERR_B]])
        self.meta[M_ERR] = 0
        ta = self.describe_type(int(self.classes[C_TYPE, a]))
        if code == ERR_TYPE_MISMATCH:
            tb = self.describe_type(int(self.classes[C_TYPE, b]))
            raise EGraphError(f"merging classes of different types: e-class {a} is {ta}, "
                              f"e-class {b} is {tb} (an unsound rewrite)")
        raise EGraphError(f"adding a node of type {self.describe_type(b)} that equals a node of "
                          f"e-class {a}, of type {ta} (an unsound rewrite)")

    # ------------------------------------------------------------------ reading
    def find(self, c: int) -> int:
        """Canonical id of class c. Python reads one id at a time here (the cost model, the
        report), 100 000 times a run, so this walks the parent row in Python rather than paying a
        kernel call's argument checks each time; it does not compress the path (the kernels do)."""
        parent = self.classes[C_PARENT]
        c = int(c)
        p = int(parent[c])
        while p != c:
            c, p = p, int(parent[p])
        return c

    def canonical(self, ids: np.ndarray) -> np.ndarray:
        return find_all(self.classes[C_PARENT], np.ascontiguousarray(ids, np.int32))

    def op_name(self, n: int) -> str:
        return EOP_NAMES[self.nodes[N_OP, n]]

    def node_children(self, n: int) -> list[int]:
        return [int(c) for c in self.children[n, : self.nodes[N_NCH, n]]]

    def is_live(self, n: int) -> bool:
        return not self.nodes[N_FLAGS, n] & F_DEAD

    def is_filtered(self, n: int) -> bool:
        return bool(self.nodes[N_FLAGS, n] & F_FILTERED)

    def class_nodes(self, c: int) -> list[int]:
        """Live nodes of class c."""
        out = []
        n = int(self.classes[C_HEAD, self.find(c)])
        while n != EMPTY:
            if self.is_live(n):
                out.append(n)
            n = int(self.nodes[N_NEXT, n])
        return out

    def class_ids(self) -> np.ndarray:
        """Canonical ids of all classes."""
        n = self.num_nodes
        idx = np.arange(n, dtype=np.int32)
        return idx[self.classes[C_PARENT, :n] == idx]

    def live_nodes(self) -> np.ndarray:
        return np.nonzero((self.nodes[N_FLAGS, : self.num_nodes] & F_DEAD) == 0)[0]

    def class_type(self, c: int) -> TensorType | None:
        tid = int(self.classes[C_TYPE, self.find(c)])
        return self.lits.value(tid) if tid >= 0 else None

    def describe_type(self, tid: int) -> str:
        return {T_LIT: "a literal", T_TUPLE: "a split tuple", T_UNKNOWN: "untyped"}.get(
            tid, str(self.lits.value(tid)) if tid >= 0 else "?")

    def is_const(self, c: int) -> bool:
        return bool(self.classes[C_CONST, self.find(c)])

    def literal_value(self, n: int) -> Any:
        return self.lits.value(int(self.nodes[N_PAYLOAD, n]))

    def node_class(self, n: int) -> int:
        return self.find(int(self.nodes[N_CLS, n]))

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> "EGraph":
        """An independent copy (MCTS takes thousands: only the used prefixes are copied; the
        literal interner is shared, it only ever grows)."""
        n = self.num_nodes
        u = int(self.meta[M_USES])
        g = EGraph.__new__(EGraph)
        g.lits = self.lits
        g.nodes = self.nodes[:, :n].copy() if n else self.nodes.copy()
        g.children = self.children[:n].copy() if n else self.children.copy()
        g.classes = self.classes[:, :n].copy() if n else self.classes.copy()
        g.uses = self.uses[:, :u].copy() if u else self.uses.copy()
        g.table = self.table.copy()
        queued = int(self.meta[M_PENDING])
        # sized for the copy's capacity (2 * capacity + 16, as `reserve` keeps it): an empty
        # e-graph is copied whole, so its capacity is not n
        g.pending = np.empty(2 * g.nodes.shape[1] + 16, np.int32)  # content matters only if queued
        g.pending[:queued] = self.pending[:queued]
        g.meta = self.meta.copy()
        g.roots = list(self.roots)
        g.inputs = self.inputs
        g.names = self.names
        g.graph_name = self.graph_name
        return g

    def fingerprint(self) -> int:
        """A deterministic 64-bit digest of the live nodes and the class partition."""
        from .digest import fingerprint
        return int(fingerprint(self.nodes, self.children, self.classes, self.num_nodes))

    def __repr__(self) -> str:
        return f"EGraph({self.num_nodes} nodes, {self.num_classes} classes)"


def _pow2(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())


def _grow(arr: np.ndarray, cap: int, used: int) -> np.ndarray:
    """A copy of 2-D `arr` (columns along axis 1) with `cap` columns, of which the first `used`
    are copied; zeros come from fresh pages the OS zeroes on first touch, so unused capacity
    costs nothing."""
    out = fresh((arr.shape[0], cap), arr.dtype)
    out[:, :used] = arr[:, :used]
    return out
