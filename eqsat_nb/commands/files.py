"""Output files written safely: never over a file without --force, never half-written.

A file is written to a temporary file beside it and renamed into place, with the mode `open()`
would give, so an interrupted or failed command never leaves a partial output behind. Shared by
`run`, `bench`, `profile` and the ONNX output path (`onnx_out.py`).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

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


def write_atomic(path: str, write: Callable[[Path], None], side_files: tuple[str, ...] = (),
                 check: Callable[[Path], None] | None = None) -> None:
    """Call `write(tmp)` on a temporary file next to `path`, then `check(tmp)` if given, then
    rename it into place. `side_files` are other files `write` creates: removed if it fails."""
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                   dir=str(target.parent if str(target.parent) else "."))
    except OSError as e:
        raise TirError(f"cannot write file: {e.strerror}", file=path) from None
    done = False
    try:
        try:        # mkstemp makes 0600; give the file what open() would under the umask
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        write(Path(tmp))
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, target)
        done = True
    except OSError as e:
        raise TirError(f"cannot write file: {e.strerror}", file=path) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        for side in side_files if not done else ():
            if os.path.exists(side):
                os.unlink(side)


def _umask() -> int:
    """The process's umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_onnx(path: str, model: Any, force: bool = True, taken: tuple[Path, ...] = ()
               ) -> list[str]:
    """Write an ONNX model atomically, checked by onnx.checker; a model too large for protobuf
    keeps its weights in a data file beside it (onnx_io/external.py). The files written."""
    from ..onnx_io.external import write_model

    return write_model(path, model, force, taken)
