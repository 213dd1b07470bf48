"""Every file an ONNX model refers to: reading it safely, and writing models of any size whole.

An ONNX tensor may keep its bytes in another file ("external data": a location relative to the
model's folder, an offset and a length). Such tensors can be anywhere: initializers of the main
graph and of If/Loop/Scan bodies, Constant and ConstantOfShape values (attribute tensors), the
values and indices of sparse initializers, functions. `onnx.load` reads back only some of them
and checks what it reads unevenly across its versions, so `read_external` checks every location
first (relative, inside the model's folder, a regular file and no symbolic link, offset and
length inside the file and equal to the tensor's size) and then reads them all.

Writing (`write_model`): protobuf cannot serialize 2 GB, so a model past PROTOBUF_LIMIT is written
as `onnx.save_model(save_as_external_data=True)` would (tensors of 1 KiB and more in one data file
beside it), except that the model in memory is left as it is, an old data file is replaced rather
than appended to, the data file's name is neither OUT's nor that of a file the input still reads,
both files are written whole (temporary files renamed into place), and `onnx.checker` checks the
written model on its path before it takes OUT's place.

Copying (`copy_model`): OUT as the input file byte for byte, with every data file copied beside
it under the same relative name; when a name would land on OUT itself, on a file the input still
needs, or is not a plain relative path, the data go to OUT's own data file and the model's
locations are rewritten instead (the only bytes that change).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import TirError

THRESHOLD = 1024            # bytes: smaller tensors stay inside the model file (as onnx does)
ALIGN = 4096                # offsets of data in a written data file (lets runtimes map it)
EXTERNAL = 1                # TensorProto.EXTERNAL
# bytes per element of the fixed-size element types (TensorProto.DataType); 4-bit types apart
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8,
             14: 8, 15: 16, 16: 2, 17: 1, 18: 1, 19: 1, 20: 1, 23: 1}
_NIBBLES = {21, 22, 25, 26}     # uint4, int4, float4e2m1, ... : two elements a byte
_KEYS = {"location", "offset", "length", "checksum", "basepath"}   # ONNX's external_data keys


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
    return t.data_location == EXTERNAL


def _entries(t: Any) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def data_files(model: Any) -> list[str]:
    """The locations (as written) of the files a model read without its data refers to."""
    out: list[str] = []
    for t in all_tensors(model):
        if is_external(t):
            loc = _entries(t).get("location", "")
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
    size = _ITEMSIZE.get(t.data_type)
    return None if size is None else n * size


# ------------------------------------------------------------------ reading
def resolve(base: Path, location: str, what: str, source: str) -> Path:
    """The file `location` names, relative to the model's folder `base`: a TirError when it is
    absolute, leaves the folder, is a symbolic link or is not a regular file."""
    def refuse(why: str) -> TirError:
        return TirError(f"{what} keeps its data in {location!r} (external data), {why}",
                        file=source)

    if not location:
        raise refuse("but names no file")
    if "\0" in location:
        raise refuse("a name with a NUL character")
    if os.path.isabs(location) or location.startswith(("\\", "/")) or (
            len(location) > 1 and location[1] == ":"):
        raise refuse("an absolute path; external data must be relative to the model's folder")
    parts = Path(location).parts
    if ".." in parts:
        raise refuse("a path through '..'; external data must name a file inside the "
                     "model's folder without it")
    path = base / location
    probe = base
    for part in parts:              # no symbolic link on the way, the file included
        probe = probe / part
        if probe.is_symlink():
            raise refuse(f"and {str(probe)!r} is a symbolic link, which is not followed")
    try:
        st = path.stat()
    except OSError as e:
        raise refuse(f"which cannot be read: {e.strerror}") from None
    import stat
    if not stat.S_ISREG(st.st_mode):
        raise refuse("which is not a regular file")
    return path


def _span(t: Any, path: Path, what: str, source: str) -> tuple[int, int]:
    """(offset, length) of a tensor's bytes in its data file, checked against the file."""
    e = _entries(t)
    loc = e.get("location", "")
    unknown = sorted(set(e) - _KEYS)
    if unknown:
        raise TirError(f"{what}: external data key {unknown[0]!r} is not one ONNX defines "
                       f"({', '.join(sorted(_KEYS))}); onnxruntime refuses such a model",
                       file=source)

    def number(key: str) -> int | None:
        if key not in e:
            return None
        text = e[key].strip()
        if not text.isdigit():
            raise TirError(f"{what}: external data {key} {e[key]!r} is not a non-negative "
                           f"integer", file=source)
        return int(text)

    offset, length = number("offset") or 0, number("length")
    size = path.stat().st_size
    if offset > size:
        raise TirError(f"{what}: external data offset {offset} is past the end of {loc!r} "
                       f"({size} bytes)", file=source)
    if length is None:
        length = size - offset
    if offset + length > size:
        raise TirError(f"{what}: external data of {length} bytes at offset {offset} runs past "
                       f"the end of {loc!r} ({size} bytes)", file=source)
    need = expected_bytes(t)
    if need is None:
        raise TirError(f"{what}: a tensor of element type {t.data_type} cannot keep its data "
                       f"in an external file", file=source)
    if need != length:
        raise TirError(f"{what} has dims {list(t.dims)} ({need} bytes) but its external data "
                       f"in {loc!r} is {length} bytes", file=source)
    return offset, length


def check_external(model: Any, base: Path, source: str) -> None:
    """Every external location of the model is safe and holds exactly its tensor's bytes."""
    for t in all_tensors(model):
        if is_external(t):
            what = f"tensor '{t.name}'"
            _span(t, resolve(base, _entries(t).get("location", ""), what, source), what, source)


def read_external(model: Any, base: Path, source: str) -> None:
    """Read every tensor's external data into the model (checked as `check_external`)."""
    for t in all_tensors(model):
        if not is_external(t):
            continue
        what = f"tensor '{t.name}'"
        path = resolve(base, _entries(t).get("location", ""), what, source)
        offset, length = _span(t, path, what, source)
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise TirError(f"{what}: its external data file changed while it was read",
                           file=source)
        t.raw_data = data
        t.data_location = 0
        del t.external_data[:]


# ------------------------------------------------------------------ writing
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
    from ..runtime import PROTOBUF_LIMIT

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


class _Splitter:
    """A copy of a model whose chosen tensors refer to one data file, built without copying
    their bytes: tensors held in memory from `threshold` bytes up, and, when `source` (the
    input model's folder) is given, every tensor kept in an external file of the input.
    `parts` lists what goes where in the new file."""

    def __init__(self, location: str, threshold: float, source: tuple[Path, str] | None = None
                 ) -> None:
        self.location = location
        self.threshold = threshold
        self.source = source
        self.parts: list[tuple[int, Any, tuple[Path, int, int] | None]] = []
        self.end = 0

    def tensor(self, src: Any, dst: Any) -> None:
        origin = None
        if src.data_location == EXTERNAL:
            if self.source is None:
                dst.CopyFrom(src)
                return
            base, file = self.source
            what = f"tensor '{src.name}'"
            path = resolve(base, _entries(src).get("location", ""), what, file)
            origin = (path, *_span(src, path, what, file))
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


def data_name(out: Path, taken: Iterable[Path] = ()) -> str:
    """The name of OUT's data file: `OUT.data`, else `OUT.1.data`, ... — the first that is
    none of `taken` (files the input still reads)."""
    avoid = {_same(p) for p in taken}
    k = 0
    while True:
        name = f"{out.name}.data" if k == 0 else f"{out.name}.{k}.data"
        if _same(out.with_name(name)) not in avoid:
            return name
        k += 1


def _same(p: Path) -> str:
    """A path as a comparable key (resolved as far as it exists)."""
    try:
        return str(Path(p).resolve())
    except OSError:
        return os.path.abspath(p)


def write_model(path: str, model: Any, force: bool = True, taken: Iterable[Path] = (),
                source: tuple[Path, str] | None = None) -> list[str]:
    """Write `model` at `path` whole (see the module's doc); the files written. `taken`: files
    the data file must not replace (the input's own data). `force`: an existing data file may be
    replaced (OUT itself is checked by the caller). `source` (the input's folder and file):
    tensors still in the input's external files are copied into OUT's data file."""
    from ..commands.files import write_atomic

    out = Path(path)
    big = needs_external(model)
    if not big and source is None:
        write_atomic(path, lambda p: p.write_bytes(model.SerializeToString()),
                     check=_checker)
        return [path]
    name = data_name(out, taken)
    split = _Splitter(name, THRESHOLD if big else float("inf"), source)
    skeleton = split.model(model)
    if not split.parts:
        write_atomic(path, lambda p: p.write_bytes(skeleton.SerializeToString()),
                     check=_checker)
        return [path]
    data = out.with_name(name)
    if data.exists() and not force:
        raise TirError("the model's external data file exists; pass --force to overwrite it",
                       file=str(data))
    write_atomic(str(data), split.write_data)
    try:
        write_atomic(path, lambda p: p.write_bytes(skeleton.SerializeToString()),
                     check=_checker)
    except BaseException:
        data.unlink(missing_ok=True)
        raise
    return [path, str(data)]


def _checker(path: Path) -> None:
    """onnx.checker on a written file (its data files beside it): a TirError if it fails."""
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except (onnx.checker.ValidationError, ValueError) as e:
        text = str(e).strip().splitlines()
        raise TirError(f"the written model does not pass onnx.checker ({text[0] if text else e})"
                       f"; nothing was written. This is a bug in eqsat-nb") from None


def save_split(model: Any, path: Path) -> None:
    """Write a model of any size to `path` (a scratch location: no checks, no atomicity), its
    large tensors in `PATH.data`; the model in memory is not changed."""
    if not needs_external(model):
        path.write_bytes(model.SerializeToString())
        return
    split = _Splitter(path.name + ".data", THRESHOLD)
    skeleton = split.model(model)
    split.write_data(path.with_name(path.name + ".data"))
    path.write_bytes(skeleton.SerializeToString())


# ------------------------------------------------------------------ copying
_FILES: dict[tuple[str, int, int], list[str]] = {}     # (file, mtime, size) → its data files


def remember_files(model_path: Path, model: Any) -> None:
    """Note the data files of a model as read from `model_path` (before its data are read in),
    so that `input_files` need not parse the file again."""
    st = model_path.stat()
    _FILES[(_same(model_path), st.st_mtime_ns, st.st_size)] = data_files(model)


def input_locations(model_path: Path) -> list[str]:
    """The locations (as written) of the data files an ONNX file reads."""
    import onnx

    st = model_path.stat()
    key = (_same(model_path), st.st_mtime_ns, st.st_size)
    if key not in _FILES:
        _FILES[key] = data_files(onnx.load(str(model_path), load_external_data=False))
    return list(_FILES[key])


def input_files(model_path: Path) -> list[Path]:
    """The data files an ONNX file reads (as paths beside it; unchecked)."""
    return [model_path.parent / loc for loc in input_locations(model_path)]


def check_output(model_path: str, out: str) -> None:
    """Refuse (before any work) an output path that is a data file the input model reads."""
    src = Path(model_path)
    try:
        needed = {_same(p) for p in input_files(src)}
    except Exception:       # noqa: BLE001 - an unreadable input is reported when it is loaded
        return
    if _same(Path(out)) in needed:
        raise TirError(f"the output would replace '{Path(out).name}', a data file the input "
                       f"model reads (external data); choose another output name", file=out)


def copy_model(src: str, dst: str, force: bool) -> str:
    """OUT (`dst`) = the input (`src`): byte for byte with its data files copied beside it, or,
    when a data file's name cannot be used beside OUT, with its data moved into OUT's own data
    file. Returns how it was copied (for the report)."""
    import onnx

    from ..commands.files import write_atomic

    src_p, dst_p = Path(src), Path(dst)
    if _same(src_p) == _same(dst_p):
        return "the input file itself"
    check_output(src, dst)
    sources = input_files(src_p)
    locations = input_locations(src_p)
    targets = [dst_p.parent / loc for loc in locations]
    needed = {_same(p) for p in sources} | {_same(src_p)}
    plain = all(loc and os.path.normpath(loc) == loc and not os.path.isabs(loc)
                and ".." not in Path(loc).parts for loc in locations)
    out_key = _same(dst_p)
    clash = any(_same(t) == out_key or _same(t).startswith(out_key + os.sep)
                or (_same(t) != _same(s) and _same(t) in needed)
                for s, t in zip(sources, targets))
    if plain and not clash:
        for source, target in zip(sources, targets):
            if _same(target) == _same(source):
                continue
            if target.exists() and not force:
                raise TirError("external data file exists; pass --force to overwrite it",
                               file=str(target))
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise TirError(f"cannot make the folder for the model's data: {e.strerror}",
                               file=str(target.parent)) from None
            write_atomic(str(target), lambda p, s=source: shutil.copyfile(s, p))
        write_atomic(dst, lambda p: shutil.copyfile(src_p, p))
        return "byte for byte"
    model = onnx.load(str(src_p), load_external_data=False)
    files = write_model(dst, model, force, taken=sources + [src_p], source=(src_p.parent, src))
    return ("with its external data moved to " + Path(files[-1]).name if len(files) > 1
            else "with its external data written inside it")
