"""JIT compile time, measured apart from every other benchmark (which run warm): a fresh Python
process with an empty Numba cache imports the engine and runs `eqsat_nb.warmup.warm_up()`
(~30 s on the baseline machine); then the warm start, a fresh process loading those kernels from
the cache it just filled. Full tier only."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchutil import ROOT, Rounds

pytestmark = pytest.mark.full

SCRIPT = "from eqsat_nb.warmup import warm_up; warm_up()"


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("numba-cache")


def _start(cache: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, check=True, timeout=600)


def _files(cache: Path) -> int:
    return sum(1 for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc"))


def test_cold_start_compile(bench, benchmark, cache_dir):
    """Import + warm_up with an empty NUMBA_CACHE_DIR: every kernel compiled and cached."""
    def empty() -> tuple[tuple, dict]:
        for p in sorted(cache_dir.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        return (), {}

    bench(lambda: _start(cache_dir), setup=empty, rounds=Rounds(1, 1), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache_dir))


def test_warm_start(bench, benchmark, cache_dir):
    """Import + warm_up in a fresh process, kernels loaded from the cache filled above."""
    if _files(cache_dir) == 0:
        _start(cache_dir)
    bench(lambda: _start(cache_dir), rounds=Rounds(3, 3), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache_dir))
