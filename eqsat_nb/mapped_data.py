"""A model's external data left in its files: initializers as read-only NumPy views of a
memory map, never read into memory as a whole.

A 7-B language model carries 12 GB of weights; reading them into the model (as `onnx.load`
does) needs that much memory before any work starts, and every copy made on the way (the
import's arrays, a serialized model for onnxruntime) needs it again. Mapped, a tensor's bytes
are read from the page cache when something looks at them, and `release` gives the pages this
process touched back (the kernel keeps them cached, so the next look reads no disk): the run's
resident memory stays near what one layer needs, whatever the model's size. The model keeps its
external references, so its writer copies those tensors file to file, byte for byte
(`external.write_model(source=...)`), and onnxruntime reads them from the input's folder
(`runtime.session` with `use`).

NumPy has no bfloat16: the IR holds bf16 values as float32 (ir/bfloat16.py), and a mapped bf16
weight is the view of its bit patterns (uint16), which `ir.tensors.as_dtype` and the interpreter
widen to float32 where a value is read (one weight at a time), so a bf16 model's weights take
no more memory than an fp16 model's.
"""
from __future__ import annotations

import mmap
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .external_data import entries, is_external

_BFLOAT16 = 16          # TensorProto.BFLOAT16


class MappedData:
    """The data files of one model (in folder `base`), each mapped read-only once. Locations
    are checked by the loader (external.check_external) before any is mapped."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)
        self._maps: dict[str, mmap.mmap] = {}

    def _map(self, location: str) -> mmap.mmap:
        m = self._maps.get(location)
        if m is None:
            with open(self.base / location, "rb") as f:
                m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps[location] = m
        return m

    def array(self, t: Any) -> np.ndarray:
        """An external tensor's values: a read-only view of its file (for bfloat16, of its bit
        patterns: see the module doc)."""
        from onnx import helper

        e = entries(t)
        offset = int(e.get("offset", 0) or 0)
        shape = tuple(int(d) for d in t.dims)
        count = int(np.prod(shape, dtype=np.int64))
        buf = self._map(e["location"])
        if t.data_type == _BFLOAT16:        # its bit patterns (see the module doc)
            return np.frombuffer(buf, "<u2", count, offset).reshape(shape)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).newbyteorder("<")
        return np.frombuffer(buf, dtype, count, offset).reshape(shape)

    def release(self) -> None:
        """Give back the pages read so far (they stay in the page cache): what keeps the
        resident memory of a layer-by-layer pass at one layer's."""
        for m in self._maps.values():
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (AttributeError, OSError, ValueError):    # no madvise on this platform
                pass


def is_mapped(a: Any) -> bool:
    """Whether an array is a view of a mapped file (`MappedData.array`)."""
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a, memoryview) and isinstance(a.obj, mmap.mmap)


def mapped_initializers(model: Any) -> list[Any]:
    """The main graph's initializers whose bytes are in external files (the ones mapped)."""
    return [t for t in model.graph.initializer if is_external(t)]


# A model is read mapped when its external initializers weigh at least MAP_BYTES: below that,
# reading them in costs less than the memory they take. Of such a model, initializers of
# MIN_TENSOR_BYTES and more stay in their files; smaller ones (shape constants, norms' scales)
# are read in, as shape inference and the import's folding read their values.
MAP_BYTES = 1 << 30
MIN_TENSOR_BYTES = 1 << 16


def to_map(model: Any) -> list[Any]:
    """The initializers of `model` (parsed without its data) that a mapped read leaves in their
    files: none when the model's external initializers weigh less than MAP_BYTES (or the
    environment's EQSAT_NB_MAP_BYTES: benchmarks and tests read small models as large ones)."""
    import os

    from .external_data import expected_bytes

    floor = int(os.environ.get("EQSAT_NB_MAP_BYTES") or MAP_BYTES)
    big = [t for t in mapped_initializers(model)
           if (expected_bytes(t) or 0) >= min(MIN_TENSOR_BYTES, max(floor, 1))]
    return big if sum(expected_bytes(t) or 0 for t in big) >= floor else []


_CURRENT: list[MappedData] = []


@contextmanager
def use(data: MappedData | None) -> Iterator[MappedData | None]:
    """`with use(data):` the mapped data that onnxruntime sessions (runtime.session) and the
    widening of a model (widen.py) read external tensors from, for the models of one run: the
    input and the models derived from it keep the input's external references."""
    if data is None:
        yield None
        return
    _CURRENT.append(data)
    try:
        yield data
    finally:
        _CURRENT.remove(data)


def current() -> MappedData | None:
    """The mapped data in use (`use`), None outside."""
    return _CURRENT[-1] if _CURRENT else None


def release() -> None:
    """Give back the pages of the mapped data in use (`use`) read so far; nothing outside."""
    data = current()
    if data is not None:
        data.release()


def inline(model: Any) -> Any:
    """A copy of `model` whose mapped initializers hold their bytes inline (for a model small
    enough to widen whole)."""
    import onnx

    data = current()
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if data is None:
        return out
    for t in mapped_initializers(out):
        raw = data.array(t).tobytes()           # (little-endian, bf16 as its bits: the file's)
        del t.external_data[:]
        t.data_location = 0
        t.raw_data = raw
    return out
