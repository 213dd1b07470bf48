"""Output files written safely: never over a file without --force, never half-written.

The checks run before any work (`check_writable`, `check_tir_output`); the writing itself is
`atomic_write.write_atomic` (a temporary file renamed into place), imported from here by `run`,
`bench` and `profile`, and `write_onnx` for models (`onnx_io/external.py`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..atomic_write import write_atomic  # noqa: F401 - the commands import it from here
from ..errors import TirError


def check_writable(path: str | None, force: bool) -> None:
    """Fail early (before any work) if an output would overwrite a file without --force, is a
    folder, or lies in a folder that does not exist."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        raise TirError("cannot write file: Is a directory", file=path)
    if not (p.parent if str(p.parent) else Path(".")).is_dir():
        raise TirError("cannot write file: its folder does not exist", file=path)
    if p.exists() and not force:
        raise TirError("file exists; pass --force to overwrite it", file=path)


def check_tir_output(path: str | None, onnx_option: str | None = None) -> None:
    """Refuse a .tir output (`-o`) named like an ONNX file: it would hold .tir text that every
    ONNX reader rejects. `onnx_option`: the option that writes ONNX instead, if the command has
    one."""
    if path and Path(path).suffix.lower() == ".onnx":
        hint = f"; for ONNX pass {onnx_option} {path}" if onnx_option else ""
        raise TirError(f"-o writes the graph as .tir text, not ONNX{hint}", file=path)


def write_onnx(path: str, model: Any, force: bool = True, taken: tuple[Path, ...] = (),
               source: str | None = None) -> list[str]:
    """Write an ONNX model atomically, checked by onnx.checker; a model too large for protobuf
    keeps its weights in a data file beside it (onnx_io/external.py). `source`: the input
    file whose data files the model still refers to (a mapped read, mapped_data.py): those
    tensors are copied file to file into OUT's data file. The files written."""
    from ..onnx_io.external import write_model

    origin = None if source is None else (Path(source).parent, source)
    return write_model(path, model, force, taken, source=origin)
