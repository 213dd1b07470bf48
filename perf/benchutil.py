"""Helpers shared by the benchmark modules in `perf/` (fixtures and tiers: `conftest.py`)."""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "ir_examples"
RULES = ROOT / "rules"


@dataclass(frozen=True)
class Rounds:
    """Rounds per tier: quick keeps CI short, full gives steadier medians for the baseline."""

    quick: int
    full: int


def median_s(benchmark: Any) -> float | None:
    """The benchmark's median in seconds (None under --benchmark-disable)."""
    stats = getattr(benchmark, "stats", None)
    return None if stats is None else float(stats.stats.median)


def example(name: str) -> Path:
    """ir_examples/NAME.tir (skips the benchmark when it was not generated)."""
    path = EXAMPLES / f"{name}.tir"
    if not path.exists():
        pytest.skip(f"{path.name} not generated (tools/gen_models.py)")
    return path


def all_examples() -> list[str]:
    """Every benchmark model shipped in ir_examples/, sorted."""
    return sorted(p.stem for p in EXAMPLES.glob("*.tir"))


_SATURATED: dict[str, Any] = {}


def saturated_egraph(model: str) -> Any:
    """The model's e-graph saturated at the default settings, built once per session and shared:
    do not modify it (take `.snapshot()` for a private copy)."""
    if model not in _SATURATED:
        from eqsat_nb.egraph import graph_to_egraph
        from eqsat_nb.ir.parse import load
        from eqsat_nb.rules.parse import load_rules
        from eqsat_nb.search.saturate import Limits, saturate

        eg = graph_to_egraph(load(example(model)))
        saturate(eg, load_rules(RULES), Limits())
        _SATURATED[model] = eg
    return _SATURATED[model]


# ------------------------------------------------------------------ machine description

def machine_description() -> dict[str, Any]:
    """What a timing depends on: CPU, usable cores, RAM, load, library versions, date."""
    from eqsat_nb.provenance import cpu_model, load_average, ram_gib, usable_cores, version

    return {"cpu_model": cpu_model(), "usable_cores": usable_cores(), "ram_gib": ram_gib(),
            "loadavg_at_start": load_average(), "python": platform.python_version(),
            "numba": version("numba"), "numpy": version("numpy"),
            "pytest_benchmark": version("pytest-benchmark"), "egglog": version("egglog"),
            "highspy": version("highspy"), "date": time.strftime("%Y-%m-%d")}
