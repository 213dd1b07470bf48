"""Benchmark tiers and shared fixtures for the pytest-benchmark suites in `perf/`.

Two tiers:

* quick (the default): the benchmarks without a mark, small inputs, few rounds. `pytest perf -q`
  runs it in well under two minutes; CI runs it as a smoke test that every benchmark still runs.
* full: everything, including the benchmarks marked `@pytest.mark.full` (every model, the large
  sizes, the cold JIT compile), with more rounds. Select it with `pytest perf --full`; the saved
  baselines are full-tier runs. An explicit `-m EXPR` replaces the tier selection (`-m full` runs
  only the full-only benchmarks, at full-tier rounds).

Every benchmark has a stable name (its pytest node id), fixed inputs and seeds, warm JIT (kernels
are compiled or loaded from Numba's cache before timing; compile time is its own benchmark), and
`extra_info` with the domain figures (nodes, classes, matches, DAG cost, speed-up) that
`tools/perf_compare.py` compares next to the timings.
"""
from __future__ import annotations

from typing import Any, Callable

import pytest
from benchutil import Rounds, machine_description


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true", default=False,
                     help="eqsat-nb perf: run the full benchmark tier (all models and sizes)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "full: full-tier benchmark (run with `pytest perf --full`)")


def full_tier(config: pytest.Config) -> bool:
    """Whether this session runs the full tier (`--full`, or an `-m` expression naming it)."""
    return bool(config.getoption("--full")) or "full" in (config.getoption("markexpr") or "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect full-tier benchmarks unless the full tier (or an explicit `-m`) was asked for."""
    if full_tier(config) or config.getoption("markexpr"):
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if item.get_closest_marker("full") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str:
    return f"eqsat-nb perf tier: {'full' if full_tier(config) else 'quick'}"


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    """Record the machine and library versions (and the tier) in every benchmark JSON."""
    machine_info["eqsat_nb"] = {**machine_description(),
                                "tier": "full" if full_tier(config) else "quick"}


@pytest.fixture(scope="session")
def tier(request: pytest.FixtureRequest) -> str:
    """"quick" or "full"."""
    return "full" if full_tier(request.config) else "quick"


@pytest.fixture
def bench(benchmark: Any, tier: str) -> Callable[..., Any]:
    """`bench(fn, rounds=Rounds(q, f), setup=None, iterations=1, warmup=1, args=())`: pedantic
    benchmarking with the tier's number of rounds; returns what `fn` returned."""

    def run(fn: Callable[..., Any], *, rounds: Rounds, setup: Callable[[], Any] | None = None,
            iterations: int = 1, warmup: int = 1, args: tuple = ()) -> Any:
        n = rounds.quick if tier == "quick" else rounds.full
        return benchmark.pedantic(fn, args=args, setup=setup, rounds=n, iterations=iterations,
                                  warmup_rounds=warmup)

    return run


@pytest.fixture(scope="session")
def warm_jit() -> None:
    """Load (or compile) every kernel of the engine once, before any timing."""
    from eqsat_nb.warmup import warm_up
    warm_up()
