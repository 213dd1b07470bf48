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
    """Fail early (before any work) if an output would overwrite a file without --force."""
    if path and Path(path).exists() and not force:
        raise TirError("file exists; pass --force to overwrite it", file=path)


def write_atomic(path: str, write: Callable[[Path], None], side_files: tuple[str, ...] = ()
                 ) -> None:
    """Call `write(tmp)` on a temporary file next to `path`, then rename it into place.
    `side_files` are other files `write` creates (ONNX external data): removed if it fails."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                               dir=str(target.parent if str(target.parent) else "."))
    done = False
    try:
        try:        # mkstemp makes 0600; give the file what open() would under the umask
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        write(Path(tmp))
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


def write_onnx(path: str, model: Any) -> None:
    """Write an ONNX model atomically; weights beyond protobuf's 2 GB go to `PATH.data`."""
    from ..runtime import PROTOBUF_LIMIT

    if model.ByteSize() < PROTOBUF_LIMIT:
        write_atomic(path, lambda p: p.write_bytes(model.SerializeToString()))
        return
    import onnx

    data = Path(path).name + ".data"
    write_atomic(path, lambda p: onnx.save_model(model, str(p), save_as_external_data=True,
                                                 all_tensors_to_one_file=True, location=data),
                 side_files=(str(Path(path).with_name(data)),))
