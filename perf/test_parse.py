"""Front end: parse + shape-check of `.tir` text (target: the largest example < 0.5 s)."""
from __future__ import annotations

import pytest
from benchutil import EXAMPLES, Rounds, example

from eqsat_nb.ir.parse import parse


def _largest() -> str:
    files = sorted(EXAMPLES.glob("*.tir"), key=lambda p: p.stat().st_size)
    if not files:
        pytest.skip("no examples generated")
    return files[-1].stem


@pytest.mark.parametrize("model", ["tiny_mlp", "squeezenet"])
def test_parse_check(bench, benchmark, model):
    """A small model: mostly per-file overhead (grammar, checker)."""
    path = example(model)
    text = path.read_text()
    graph = bench(parse, args=(text, str(path)), rounds=Rounds(20, 50))
    benchmark.extra_info.update(model=model, nodes=len(graph.nodes), chars=len(text))


@pytest.mark.full
def test_parse_check_largest(bench, benchmark):
    """The largest example (ViT-Huge): throughput of the parser and shape checker."""
    path = example(_largest())
    text = path.read_text()
    graph = bench(parse, args=(text, str(path)), rounds=Rounds(3, 10))
    benchmark.extra_info.update(model=path.stem, nodes=len(graph.nodes), chars=len(text))
