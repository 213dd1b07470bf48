"""Keeps Numba's on-disk cache honest.

Numba invalidates a cached kernel only when *its own* source file changes; a kernel that calls a
kernel from another module keeps the callee's old code compiled in. So on import we fingerprint
every source file of the package and, when the fingerprint differs from the one stored beside the
cache, delete this package's cache entries before any kernel loads.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent


def _cache_dirs() -> list[Path]:
    """Folders where Numba keeps this package's cache files (*.nbi, *.nbc)."""
    root = os.environ.get("NUMBA_CACHE_DIR")
    if root:
        # Numba keeps a source folder D's files in NUMBA_CACHE_DIR/<D's name>_<sha1 of D's path>
        # (numba/core/caching.py, UserProvidedCacheLocator.get_suitable_cache_subpath)
        folders = {PACKAGE} | {p.parent for p in PACKAGE.rglob("*.py")}
        return [Path(root) / f"{d.name}_{hashlib.sha1(str(d).encode()).hexdigest()}"
                for d in sorted(folders)]
    return [p for p in PACKAGE.rglob("__pycache__") if p.is_dir()]


def source_fingerprint() -> str:
    """Digest of every module that defines or feeds kernels (those mentioning numba), plus the
    layout constants and the operator table (ir/ops/: op ids, hence the e-graph's extra ops' ids)
    the kernels freeze in."""
    h = hashlib.sha256()
    table = PACKAGE / "ir" / "ops"
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_bytes()
        if b"numba" in text or path.name == "layout.py" or path.parent == table:
            h.update(path.relative_to(PACKAGE).as_posix().encode())
            h.update(text)
    return h.hexdigest()[:16]


def ensure_fresh_cache() -> None:
    """Drop stale compiled kernels when any source file changed since they were cached."""
    try:
        stamp_dir = Path(os.environ.get("NUMBA_CACHE_DIR") or PACKAGE / "__pycache__")
        stamp = stamp_dir / "eqsat_nb.jitstamp"
        current = source_fingerprint()
        if stamp.exists() and stamp.read_text() == current:
            return
        for folder in _cache_dirs():
            for f in list(folder.glob("*.nbi")) + list(folder.glob("*.nbc")):
                f.unlink(missing_ok=True)
        stamp_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(current)
    except OSError:
        pass          # a read-only install: Numba then compiles in memory, which is still correct
