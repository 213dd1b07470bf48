"""Start-up time, measured apart from every other benchmark (which run warm): the command a new
user runs first, `eqsat-nb run ir_examples/nasrnn.tir --device a100`, in a fresh process with an
empty Numba cache (cold: every kernel it needs is compiled) and again on the cache it filled (warm).
`tools/startup.py` prints the same for every command. Full tier only."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchutil import EXAMPLES, ROOT, Rounds

pytestmark = pytest.mark.full


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("numba-cache")


def _run_nasrnn(cache: Path, out: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-m", "eqsat_nb", "run", str(EXAMPLES / "nasrnn.tir"),
                    "--device", "a100", "-q", "-o", str(out / "nasrnn.tir"), "--force"],
                   cwd=ROOT, env=env, check=True, timeout=600, capture_output=True)


def _files(cache: Path) -> int:
    return sum(1 for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc"))


def test_cold_run_nasrnn(bench, benchmark, cache_dir, tmp_path):
    """`run nasrnn.tir --device a100` with an empty NUMBA_CACHE_DIR: compile, then run."""
    def empty() -> tuple[tuple, dict]:
        for p in sorted(cache_dir.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        return (), {}

    bench(lambda: _run_nasrnn(cache_dir, tmp_path), setup=empty, rounds=Rounds(1, 3), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache_dir))


def test_warm_run_nasrnn(bench, benchmark, cache_dir, tmp_path):
    """The same command in a fresh process, kernels loaded from the cache filled above."""
    if _files(cache_dir) == 0:
        _run_nasrnn(cache_dir, tmp_path)
    bench(lambda: _run_nasrnn(cache_dir, tmp_path), rounds=Rounds(3, 5), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache_dir))
