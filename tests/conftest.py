"""The suite's two tiers, and the one cold just-in-time compile that tests share.

`pytest` runs the default tier: every capability, each with quick cases. Tests marked
`@pytest.mark.slow` — the zoo models end to end, the full ONNX fuzz run, the bounds-checked pass
of the e-graph tests, cold Numba compiles in fresh processes — run with `--slow` too; CI
(`.ci/run`) runs both tiers. As in `perf/`, an explicit `-m EXPR` replaces the tier selection
(`pytest -m slow` runs the slow tier alone), and a slow test named on the command line by its node
id (`pytest tests/test_x.py::test_y`) runs without the option.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", default=False,
                     help="eqsat-nb: run the slow tier too (zoo models, full fuzz, cold compiles)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slow: slow tier, run with `pytest --slow` (and by CI): minutes of work that "
                   "a quicker test of the same capability stands in for by default")


def named_on_command_line(item: pytest.Item, config: pytest.Config) -> bool:
    """Whether a `PATH::NAME` argument names this test (or its class, or all its parameters)."""
    for arg in config.args:
        path, sep, name = arg.partition("::")
        if not sep or (config.invocation_params.dir / path).resolve() != Path(item.path):
            continue
        own = item.nodeid.partition("::")[2]
        if own == name or own.startswith((name + "[", name + "::")):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow tier unless `--slow` or an explicit `-m` asks otherwise."""
    if config.getoption("--slow") or config.getoption("markexpr"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        slow = item.get_closest_marker("slow") and not named_on_command_line(item, config)
        (drop if slow else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("--slow"):
        return "eqsat-nb tests: default and slow tiers"
    return "eqsat-nb tests: default tier (`--slow` adds the slow tier, as CI runs it)"


@pytest.fixture(scope="session")
def first_jit_run(tmp_path_factory: pytest.TempPathFactory
                  ) -> tuple[subprocess.CompletedProcess, Path]:
    """`eqsat-nb run tiny_mlp.tir --no-verify` in a fresh process with just-in-time kernels
    (EQSAT_NB_JIT=1), a Numba cache folder of its own that starts empty, and nothing else in its
    environment but PATH: what a first run does where the install could not compile the kernels.
    Returns the finished process and the cache folder, now holding every kernel the run
    compiled. The cold compile takes about a minute on 2 cores; the tests that need just-in-time
    kernels in a fresh process share this one (the notice a first run prints, the compiled and
    the just-in-time kernels agreeing)."""
    cache = tmp_path_factory.mktemp("jit-cache")
    env = {"NUMBA_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "EQSAT_NB_JIT": "1"}
    done = subprocess.run([sys.executable, "-m", "eqsat_nb", "run",
                           str(ROOT / "ir_examples" / "tiny_mlp.tir"), "--no-verify"],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    return done, cache
