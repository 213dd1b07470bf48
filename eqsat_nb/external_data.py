"""ONNX tensors whose bytes live outside the model file ("external data"), in memory: where a
model's tensors are, what they weigh against protobuf's 2 GB limit, and a copy of a model whose
large tensors refer to one data file, built without copying their bytes (`Splitter`).

An ONNX tensor may keep its bytes in another file (a location relative to the model's folder, an
offset and a length). Such tensors can be anywhere: initializers of the main graph and of
If/Loop/Scan bodies, Constant and ConstantOfShape values (attribute tensors), the values and
indices of sparse initializers, functions (`all_tensors` walks them all).

This is the bottom of the ONNX file handling: `runtime.session` needs it to hand onnxruntime a
model past protobuf's limit (`save_split`, a scratch file), and `onnx_io/external.py` builds on it
to read such files safely and to write and copy models of any size as outputs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

PROTOBUF_LIMIT = 1_800_000_000      # bytes; leave room below protobuf's 2 GiB
THRESHOLD = 1024            # bytes: smaller tensors stay inside the model file (as onnx does)
ALIGN = 4096                # offsets of data in a written data file (lets runtimes map it)
EXTERNAL = 1                # TensorProto.EXTERNAL
# bytes per element of the fixed-size element types (TensorProto.DataType); 4-bit types apart
ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
            14: 8, 15: 16, 16: 2, 17: 1, 18: 1, 19: 1, 20: 1, 23: 1}
_NIBBLES = {21, 22, 25, 26}     # uint4, int4, float4e2m1, ... : two elements a byte


# ------------------------------------------------------------------ where tensors are
def all_tensors(model: Any, sparse_only: bool = False) -> Iterator[Any]:
    """Every TensorProto of a model: initializers, sparse initializers' values and indices,
    attribute tensors (dense and sparse), in the main graph, every subgraph and functions.
    `sparse_only`: only the values and indices of sparse tensors."""
    yield from _graph_tensors(model.graph, sparse_only)
    for f in model.functions:
        for n in f.node:
            yield from _node_tensors(n, sparse_only)


def _graph_tensors(g: Any, sparse_only: bool) -> Iterator[Any]:
    if not sparse_only:
        yield from g.initializer
    for s in g.sparse_initializer:
        yield s.values
        yield s.indices
    for n in g.node:
        yield from _node_tensors(n, sparse_only)


def _node_tensors(n: Any, sparse_only: bool) -> Iterator[Any]:
    for a in n.attribute:
        if not sparse_only:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
        sparse = ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(
            a.sparse_tensors)
        for s in sparse:
            yield s.values
            yield s.indices
        if a.HasField("g"):
            yield from _graph_tensors(a.g, sparse_only)
        for sg in a.graphs:
            yield from _graph_tensors(sg, sparse_only)


def is_external(t: Any) -> bool:
    """Whether a tensor's bytes are in another file."""
    return t.data_location == EXTERNAL


def entries(t: Any) -> dict[str, str]:
    """An external tensor's `external_data` key-value pairs (location, offset, length, ...)."""
    return {e.key: e.value for e in t.external_data}


def data_files(model: Any) -> list[str]:
    """The locations (as written) of the files a model read without its data refers to."""
    out: list[str] = []
    for t in all_tensors(model):
        if is_external(t):
            loc = entries(t).get("location", "")
            if loc not in out:
                out.append(loc)
    return out


def expected_bytes(t: Any) -> int | None:
    """The bytes a tensor's data must have (None for strings and unknown element types)."""
    n = 1
    for d in t.dims:
        n *= int(d)
    if t.data_type in _NIBBLES:
        return (n + 1) // 2
    size = ITEMSIZE.get(t.data_type)
    return None if size is None else n * size


# ------------------------------------------------------------------ sizes
def data_bytes(t: Any) -> int:
    """The bytes a tensor's values take in memory, found without copying them (protobuf copies
    a bytes field on every read, and sizes a message by walking it: 1.3 s a GB)."""
    if t.data_location == EXTERNAL:
        return 0
    if t.HasField("raw_data"):
        need = expected_bytes(t)
        return need if need is not None else len(t.raw_data)
    return 8 * sum(len(getattr(t, f)) for f in ("float_data", "int32_data", "int64_data",
                                                 "double_data", "uint64_data")) + sum(
        len(x) for x in t.string_data)


def _list_bytes(g: Any) -> int:
    """Bytes of the attribute lists (ints, floats, strings) of a graph's nodes, subgraphs too."""
    n = 0
    for node in g.node:
        for a in node.attribute:
            n += 8 * (len(a.ints) + len(a.floats)) + sum(len(x) for x in a.strings)
            n += _list_bytes(a.g) if a.HasField("g") else 0
            n += sum(_list_bytes(sg) for sg in a.graphs)
    return n


def needs_external(model: Any, limit: int | None = None) -> bool:
    """Whether a model is too large to serialize as one protobuf message: its tensors' and
    attribute lists' bytes, and, when those are near the limit, protobuf's own count."""
    limit = PROTOBUF_LIMIT if limit is None else limit
    known = sum(map(data_bytes, all_tensors(model))) + _list_bytes(model.graph)
    if known >= limit:
        return True
    if known < limit // 2:      # names and node structure do not make up the other half
        return False
    try:
        return model.ByteSize() >= limit
    except Exception:       # noqa: BLE001 - protobuf refuses to size it: too large
        return True


# ------------------------------------------------------------------ a split copy
def _copy_except(src: Any, dst: Any, skip: set[str]) -> None:
    """Copy the set fields of message `src` into `dst`, except those named in `skip` (which
    are never read: reading a bytes field copies it)."""
    for fd in src.DESCRIPTOR.fields:
        name = fd.name
        if name in skip:
            continue
        if _repeated(fd):           # (ONNX's messages have no map fields)
            value = getattr(src, name)
            if len(value):
                getattr(dst, name).extend(value)
        elif src.HasField(name):
            if fd.message_type is not None:
                getattr(dst, name).CopyFrom(getattr(src, name))
            else:
                setattr(dst, name, getattr(src, name))


def _repeated(fd: Any) -> bool:
    """Whether a field is repeated (protobuf 5+ says `is_repeated`; older ones `label`)."""
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == fd.LABEL_REPEATED


class Splitter:
    """A copy of a model whose chosen tensors refer to one data file, built without copying
    their bytes: tensors held in memory from `threshold` bytes up, and, when `origin` is given,
    every tensor kept in an external file of the input. `origin(tensor)` says where such a
    tensor's bytes are, checked: (file, offset, length); without it those tensors keep their
    references as they are. `parts` lists what goes where in the new file."""

    def __init__(self, location: str, threshold: float,
                 origin: Callable[[Any], tuple[Path, int, int]] | None = None) -> None:
        self.location = location
        self.threshold = threshold
        self.origin = origin
        self.parts: list[tuple[int, Any, tuple[Path, int, int] | None]] = []
        self.end = 0

    def tensor(self, src: Any, dst: Any) -> None:
        origin = None
        if src.data_location == EXTERNAL:
            if self.origin is None:
                dst.CopyFrom(src)
                return
            origin = self.origin(src)
            length = origin[2]
        else:
            length = data_bytes(src)
            if length < self.threshold or not src.HasField("raw_data"):
                dst.CopyFrom(src)
                return
        _copy_except(src, dst, {"raw_data", "external_data", "data_location"})
        offset = -(-self.end // ALIGN) * ALIGN
        self.parts.append((offset, src, origin))
        self.end = offset + length
        dst.data_location = EXTERNAL
        for k, v in (("location", self.location), ("offset", str(offset)),
                     ("length", str(length))):
            e = dst.external_data.add()
            e.key, e.value = k, v

    def graph(self, src: Any, dst: Any) -> None:
        _copy_except(src, dst, {"initializer", "sparse_initializer", "node"})
        for t in src.initializer:
            self.tensor(t, dst.initializer.add())
        for s in src.sparse_initializer:
            self.sparse(s, dst.sparse_initializer.add())
        for n in src.node:
            self.node(n, dst.node.add())

    def sparse(self, src: Any, dst: Any) -> None:
        _copy_except(src, dst, {"values", "indices"})
        self.tensor(src.values, dst.values)
        self.tensor(src.indices, dst.indices)

    def node(self, src: Any, dst: Any) -> None:
        if not any(a.HasField("t") or a.HasField("g") or a.HasField("sparse_tensor")
                   or len(a.tensors) or len(a.graphs) or len(a.sparse_tensors)
                   for a in src.attribute):
            dst.CopyFrom(src)
            return
        _copy_except(src, dst, {"attribute"})
        for a in src.attribute:
            b = dst.attribute.add()
            _copy_except(a, b, {"t", "tensors", "g", "graphs", "sparse_tensor",
                                "sparse_tensors"})
            if a.HasField("t"):
                self.tensor(a.t, b.t)
            for t in a.tensors:
                self.tensor(t, b.tensors.add())
            if a.HasField("sparse_tensor"):
                self.sparse(a.sparse_tensor, b.sparse_tensor)
            for s in a.sparse_tensors:
                self.sparse(s, b.sparse_tensors.add())
            if a.HasField("g"):
                self.graph(a.g, b.g)
            for g in a.graphs:
                self.graph(g, b.graphs.add())

    def model(self, src: Any) -> Any:
        import onnx

        dst = onnx.ModelProto()
        _copy_except(src, dst, {"graph", "functions"})
        self.graph(src.graph, dst.graph)
        for f in src.functions:        # functions' Constant tensors: kept as they are
            dst.functions.add().CopyFrom(f)
        return dst

    def write_data(self, path: Path) -> None:
        with open(path, "wb") as f:
            for offset, t, origin in self.parts:
                f.seek(offset)
                if origin is None:
                    data = t.raw_data
                    if len(data) != data_bytes(t):      # only checked models come here
                        raise ValueError(f"tensor '{t.name}' holds {len(data)} bytes, not the "
                                         f"{data_bytes(t)} its dims say")
                    f.write(data)
                    continue
                with open(origin[0], "rb") as g:
                    g.seek(origin[1])
                    left = origin[2]
                    while left:
                        chunk = g.read(min(left, 1 << 24))
                        if not chunk:
                            raise OSError(5, "the input's external data file changed while "
                                             "it was copied")
                        f.write(chunk)
                        left -= len(chunk)


def save_split(model: Any, path: Path) -> None:
    """Write a model of any size to `path` (a scratch location: no checks, no atomicity), its
    large tensors in `PATH.data`; the model in memory is not changed."""
    if not needs_external(model):
        path.write_bytes(model.SerializeToString())
        return
    split = Splitter(path.name + ".data", THRESHOLD)
    skeleton = split.model(model)
    split.write_data(path.with_name(path.name + ".data"))
    path.write_bytes(skeleton.SerializeToString())

