"""Every file an ONNX model refers to: reading it safely, and writing models of any size whole.

The tensors themselves (where they are in a model, what they weigh, a copy whose large tensors
refer to one data file) are `external_data.py`'s; this module deals with the files. Reading:
`onnx.load` reads back only some external tensors and checks what it reads unevenly across its
versions, so `read_external` checks every location first (relative, inside the model's folder, a
regular file and no symbolic link, offset and length inside the file and equal to the tensor's
size) and then reads them all.

Writing (`write_model`): protobuf cannot serialize 2 GB, so a model past
`external_data.PROTOBUF_LIMIT` is written as `onnx.save_model(save_as_external_data=True)` would
(tensors of 1 KiB and more in one data file beside it), except that the model in memory is left as
it is, an old data file is replaced rather than appended to, the data file's name is neither OUT's
nor that of a file the input still reads, both files are written whole (temporary files renamed
into place), and `onnx.checker` checks the written model on its path before it takes OUT's place.

Copying (`copy_model`): OUT as the input file byte for byte, with every data file copied beside
it under the same relative name; when a name would land on OUT itself, on a file the input still
needs, or is not a plain relative path, the data go to OUT's own data file and the model's
locations are rewritten instead (the only bytes that change).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

from ..atomic_write import write_atomic
from ..errors import TirError
from ..external_data import (THRESHOLD, Splitter, all_tensors, data_files, entries,
                             expected_bytes, is_external, needs_external)

_KEYS = {"location", "offset", "length", "checksum", "basepath"}   # ONNX's external_data keys


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
    e = entries(t)
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
            _span(t, resolve(base, entries(t).get("location", ""), what, source), what, source)


def read_external(model: Any, base: Path, source: str,
                  skip: Callable[[Any], bool] | None = None) -> None:
    """Read every tensor's external data into the model (checked as `check_external`), except
    those `skip` names (they stay in their files)."""
    for t in all_tensors(model):
        if not is_external(t) or (skip is not None and skip(t)):
            continue
        what = f"tensor '{t.name}'"
        path = resolve(base, entries(t).get("location", ""), what, source)
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


def _origin(base: Path, source: str) -> Callable[[Any], tuple[Path, int, int]]:
    """Where an external tensor of the model `source` (in folder `base`) keeps its bytes:
    (file, offset, length), checked as `check_external` does."""
    def where(t: Any) -> tuple[Path, int, int]:
        what = f"tensor '{t.name}'"
        path = resolve(base, entries(t).get("location", ""), what, source)
        return (path, *_span(t, path, what, source))
    return where


# ------------------------------------------------------------------ writing
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
    out = Path(path)
    big = needs_external(model)
    if not big and source is None:
        write_atomic(path, lambda p: p.write_bytes(model.SerializeToString()),
                     check=_checker)
        return [path]
    name = data_name(out, taken)
    split = Splitter(name, THRESHOLD if big else float("inf"),
                     None if source is None else _origin(*source))
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
