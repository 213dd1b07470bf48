"""Interning of small fixed-width int64 rows (literal values and tensor types) to dense ids.

One `Interner` is shared by an e-graph and all its snapshots and only ever grows, so an id means
the same value everywhere and snapshots need not copy it. Rows are (kind, n, v0 .. v{W-3}).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..kernels import kernel

WIDTH = 10           # kind, count, up to 8 values
EMPTY = -1


@njit(cache=True)
def row_hash(row: np.ndarray) -> np.uint64:
    h = np.uint64(0xCBF29CE484222325)
    for i in range(row.size):
        h = (h ^ np.uint64(row[i] & 0xFFFFFFFFFFFFFFFF)) * np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    return h


@kernel("i8(i8[:, ::1], i4[::1], i8[::1], i8[::1])")
def intern_row(rows: np.ndarray, table: np.ndarray, count: np.ndarray, row: np.ndarray) -> int:
    """Id of `row`, appending it when new. The caller keeps len(table) >= 2 * (count + 1) and
    rows.shape[0] > count."""
    mask = table.size - 1
    slot = np.int64(row_hash(row) & np.uint64(mask))
    while True:
        rid = table[slot]
        if rid == EMPTY:
            rid = count[0]
            for i in range(row.size):
                rows[rid, i] = row[i]
            table[slot] = rid
            count[0] = rid + 1
            return rid
        same = True
        for i in range(row.size):
            if rows[rid, i] != row[i]:
                same = False
                break
        if same:
            return rid
        slot = (slot + 1) & mask


@kernel("none(i8[:, ::1], i8, i4[::1])")
def _rehash(rows: np.ndarray, count: int, table: np.ndarray) -> None:
    mask = table.size - 1
    for rid in range(count):
        slot = np.int64(row_hash(rows[rid]) & np.uint64(mask))
        while table[slot] != EMPTY:
            slot = (slot + 1) & mask
        table[slot] = rid


class Interner:
    """Append-only table of rows with O(1) lookup; Python side of the kernels above."""

    def __init__(self, capacity: int = 256) -> None:
        self.rows = np.zeros((capacity, WIDTH), np.int64)
        self.table = np.full(2 * capacity, EMPTY, np.int32)
        self.count = np.zeros(1, np.int64)

    def __len__(self) -> int:
        return int(self.count[0])

    def reserve(self, extra: int) -> None:
        """Room for `extra` more rows (kernels that intern never grow the arrays themselves)."""
        need = int(self.count[0]) + extra
        if need < self.rows.shape[0]:
            return
        cap = self.rows.shape[0]
        while cap <= need:
            cap *= 2
        rows = np.zeros((cap, WIDTH), np.int64)
        rows[: self.rows.shape[0]] = self.rows
        self.rows = rows
        self.table = np.full(2 * cap, EMPTY, np.int32)
        _rehash(self.rows, int(self.count[0]), self.table)

    def intern(self, row: np.ndarray) -> int:
        self.reserve(1)
        return intern_row(self.rows, self.table, self.count, row)

    def row(self, rid: int) -> np.ndarray:
        return self.rows[rid]
