"""Start-up time, measured apart from every other benchmark (which run warm): the command a new
user runs first, `eqsat-nb run ir_examples/nasrnn.tir --device a100`, in a fresh process with an
empty Numba cache (cold) and again on the cache it filled (warm). Cold twice: with the kernels as
installed (compiled ahead of time when the install built eqsat_nb._kernels; `kernels` in
extra_info says which) and with EQSAT_NB_JIT=1 (every kernel compiled just in time).
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


def _run_nasrnn(cache: Path, out: Path, jit: bool = False) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    env.pop("EQSAT_NB_JIT", None)
    if jit:
        env["EQSAT_NB_JIT"] = "1"
    subprocess.run([sys.executable, "-m", "eqsat_nb", "run", str(EXAMPLES / "nasrnn.tir"),
                    "--device", "a100", "-q", "-o", str(out / "nasrnn.tir"), "--force"],
                   cwd=ROOT, env=env, check=True, timeout=600, capture_output=True)


def _files(cache: Path) -> int:
    return sum(1 for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc"))


def _emptied(cache: Path):
    def empty() -> tuple[tuple, dict]:
        for p in sorted(cache.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        return (), {}
    return empty


def test_cold_run_nasrnn(bench, benchmark, cache_dir, tmp_path):
    """`run nasrnn.tir --device a100` with an empty NUMBA_CACHE_DIR, kernels as installed."""
    from eqsat_nb.kernels import aot_status
    bench(lambda: _run_nasrnn(cache_dir, tmp_path), setup=_emptied(cache_dir),
          rounds=Rounds(1, 3), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache_dir), kernels=aot_status())


def test_cold_run_nasrnn_jit(bench, benchmark, tmp_path_factory, tmp_path):
    """The same with EQSAT_NB_JIT=1: every kernel the command needs is compiled, then it runs."""
    cache = tmp_path_factory.mktemp("numba-cache-jit")
    bench(lambda: _run_nasrnn(cache, tmp_path, jit=True), setup=_emptied(cache),
          rounds=Rounds(1, 3), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache), kernels="just in time")


def test_warm_run_nasrnn(bench, benchmark, cache_dir, tmp_path):
    """The same command in a fresh process, kernels loaded from the cache filled above."""
    if _files(cache_dir) == 0:
        _run_nasrnn(cache_dir, tmp_path)
    bench(lambda: _run_nasrnn(cache_dir, tmp_path), rounds=Rounds(3, 5), warmup=0)
    benchmark.extra_info.update(cache_files=_files(cache_dir))
