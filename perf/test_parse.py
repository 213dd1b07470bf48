"""Front-end speed: parse + shape-check of the largest shipped example (target < 0.5 s)."""
from __future__ import annotations

from pathlib import Path

import pytest

from eqsat_nb.ir.parse import parse

EXAMPLES = Path(__file__).resolve().parent.parent / "ir_examples"


def _largest() -> Path:
    files = sorted(EXAMPLES.glob("*.tir"), key=lambda p: p.stat().st_size)
    if not files:
        pytest.skip("no examples generated")
    return files[-1]


def test_parse_check_largest(benchmark):
    path = _largest()
    text = path.read_text()
    graph = benchmark(parse, text, str(path))
    benchmark.extra_info.update(model=path.stem, nodes=len(graph.nodes), chars=len(text))
