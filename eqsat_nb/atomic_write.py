"""Files written whole: to a temporary file beside the target, renamed into place.

An interrupted or failed write never leaves a partial file behind, and the file gets the mode
`open()` would give it. Every output of the tool goes through here: the commands' reports and
graphs (`commands/files.py`) and ONNX models with their data files (`onnx_io/external.py`).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from .errors import TirError


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
