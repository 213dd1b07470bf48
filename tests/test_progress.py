"""The progress line, and the notice it shows while Numba compiles kernels on a first run."""
from __future__ import annotations

import io
import time

import pytest

from eqsat_nb.progress import CompileNotice, Progress


def test_progress_writes_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress("saturate", total=4, stream=out, min_interval=0.0) as bar:
        bar.update(1, "10 nodes")
        bar.update(2, "20 nodes")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("saturate [") and "20 nodes" in lines[1]


def test_quiet_progress_writes_nothing():
    out = io.StringIO()
    with Progress("x", stream=out, quiet=True) as bar:
        bar.update(1, force=True)
    assert out.getvalue() == ""


def _fresh_kernel():
    """A kernel nobody compiled before (no cache): its first call compiles for a while."""
    from numba import njit

    @njit
    def kernel(a):
        s = 0.0
        for i in range(a.size):
            s += (a[i] * 3.0) % 7.0
        return s
    return kernel


def test_compile_notice_names_the_compilation():
    import numpy as np
    out = io.StringIO()
    with CompileNotice(stream=out, after=0.0, poll=0.01):
        _fresh_kernel()(np.arange(4.0))
        time.sleep(0.05)
    assert "compiling kernels (first run only" in out.getvalue()


def test_compile_notice_is_silent_without_compilation():
    out = io.StringIO()
    with CompileNotice(stream=out, after=0.0, poll=0.01):
        time.sleep(0.1)
    assert out.getvalue() == ""


def test_compile_notice_quiet_starts_nothing():
    out = io.StringIO()
    with CompileNotice(stream=out, quiet=True) as notice:
        import numpy as np
        _fresh_kernel()(np.arange(4.0))
    assert out.getvalue() == "" and not notice.shown


@pytest.mark.slow
def test_first_run_says_it_compiles(first_jit_run):
    """`run` with an empty Numba cache and just-in-time kernels (what a first run does where the
    install could not compile them ahead of time) prints the notice on stderr (not with -q)."""
    done, _ = first_jit_run
    assert done.returncode == 0, done.stderr
    assert "compiling kernels (first run only; cached afterwards)" in done.stderr
