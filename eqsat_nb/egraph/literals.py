"""Encoding of attribute literals and tensor types as interned rows (see intern.py).

Attributes are leaf e-nodes (op LIT, payload = literal id), as in TENSAT, so rule patterns stay
structural; a class's tensor type is a type id. Both are rows of one shared `Interner`.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from ..errors import TirError
from ..ir.graph import DTYPES, TensorType
from .intern import WIDTH, Interner

K_INT, K_FLOAT, K_BOOL, K_STR, K_INTS, K_TYPE = 1, 2, 3, 4, 5, 6
MAX_VALUES = WIDTH - 2
MAX_RANK = WIDTH - 3


def _memo_key(value: Any) -> Any:
    """A dict key that tells apart what `encode` tells apart (True from 1, -0.0 from 0.0, by
    kind and bits); None for values not worth a key (NaN floats, unhashable values)."""
    if isinstance(value, float):
        return None if value != value else (float, struct.pack("<d", value))
    if isinstance(value, tuple):
        return (tuple, tuple(type(v) for v in value), value)
    try:
        hash(value)
    except TypeError:
        return None
    return (type(value), value)


class Literals(Interner):
    """The shared interner plus the Python-side string table."""

    def __init__(self, capacity: int = 256) -> None:
        super().__init__(capacity)
        self.strings: list[str] = []
        self._string_ids: dict[str, int] = {}
        self._decoded: dict[int, Any] = {}
        self._ids: dict[Any, int] = {}     # literal() memo: (kind, value) -> id
        # values computed from interned literals (ids never change, so they stay valid for this
        # interner and every e-graph sharing it): shape constants, compiled rule patterns
        self.derived: dict[Any, Any] = {}

    def _string_id(self, s: str) -> int:
        sid = self._string_ids.get(s)
        if sid is None:
            sid = self._string_ids[s] = len(self.strings)
            self.strings.append(s)
        return sid

    def encode(self, value: Any) -> np.ndarray:
        row = np.zeros(WIDTH, np.int64)
        if isinstance(value, bool):
            row[:3] = (K_BOOL, 1, int(value))
        elif isinstance(value, int):
            row[:3] = (K_INT, 1, value)
        elif isinstance(value, float):
            row[:3] = (K_FLOAT, 1, struct.unpack("<q", struct.pack("<d", value))[0])
        elif isinstance(value, str):
            row[:3] = (K_STR, 1, self._string_id(value))
        elif isinstance(value, tuple):
            if len(value) > MAX_VALUES:
                raise TirError(f"literal {list(value)} has more than {MAX_VALUES} values")
            row[0], row[1] = K_INTS, len(value)
            row[2:2 + len(value)] = value
        elif isinstance(value, TensorType):
            if value.rank > MAX_RANK:
                raise TirError(f"{value} has rank > {MAX_RANK}")
            row[0], row[1], row[2] = K_TYPE, value.rank, DTYPES.index(value.dtype)
            row[3:3 + value.rank] = value.shape
        else:
            raise TypeError(f"cannot encode literal {value!r}")
        return row

    def literal(self, value: Any) -> int:
        """Id of an attribute value or TensorType. Memoized: the same few values are asked for
        thousands of times a search (3 000 kernel calls per SqueezeNet saturation), and an id
        never changes."""
        key = _memo_key(value)
        lid = self._ids.get(key) if key is not None else None
        if lid is None:
            lid = self.intern(self.encode(value))
            if key is not None:
                self._ids[key] = lid
        return lid

    def value(self, lid: int) -> Any:
        """The Python value of literal id `lid` (attribute value or TensorType)."""
        hit = self._decoded.get(lid)
        if hit is not None:
            return hit
        row = self.rows[lid]
        kind, n = int(row[0]), int(row[1])
        if kind == K_INT:
            v: Any = int(row[2])
        elif kind == K_FLOAT:
            v = struct.unpack("<d", struct.pack("<q", int(row[2])))[0]
        elif kind == K_BOOL:
            v = bool(row[2])
        elif kind == K_STR:
            v = self.strings[int(row[2])]
        elif kind == K_INTS:
            v = tuple(int(x) for x in row[2:2 + n])
        elif kind == K_TYPE:
            v = TensorType(tuple(int(x) for x in row[3:3 + n]), DTYPES[int(row[2])])
        else:
            raise ValueError(f"bad literal row {row}")
        self._decoded[lid] = v
        return v
