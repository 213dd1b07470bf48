"""The e-graph tests once more with Numba bounds checking (slow tier: `pytest --slow`, CI).

A kernel that indexes past an array end silently corrupts memory in a normal build; with
NUMBA_BOUNDSCHECK=1 it raises IndexError. The run uses its own NUMBA_CACHE_DIR so the
bounds-checked machine code never lands in (or is loaded from) the normal cache, and the quick
hypothesis profile (EQSAT_TEST_PROFILE=quick) to keep it cheap: it costs one cold compile of the
e-graph kernels plus a few seconds.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
def test_egraph_tests_pass_with_numba_boundscheck(tmp_path):
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"),
               EQSAT_TEST_PROFILE="quick")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
         str(TESTS / "test_egraph.py")],
        cwd=TESTS.parent, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"e-graph tests failed under NUMBA_BOUNDSCHECK=1:\n"
                                  f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
    assert "NUMBA_BOUNDSCHECK=1 only" not in proc.stdout     # test_boundscheck_is_active ran
