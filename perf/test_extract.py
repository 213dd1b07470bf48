"""Extraction speed (issue: OCF < 1 ms median on a 2 000-node e-graph). Warm JIT: each extractor
runs once before timing."""
from __future__ import annotations

import numpy as np
import pytest

from eqsat_nb.extract.dag import is_valid
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.problem import from_arrays


def random_problem(n_classes: int = 1300, n_nodes: int = 2000, n_back: int = 20, seed: int = 0):
    """Seeded: classes in topological order (the first 100 leaves), every class one node whose
    children are 1–3 recent classes (sharing), the remaining nodes extra alternatives (2–4 per
    class), and `n_back` alternatives that also point to a later class (possible cycles)."""
    rng = np.random.default_rng(seed)
    node_class = list(range(n_classes))
    extra = rng.integers(100, n_classes, size=n_nodes - n_classes)
    node_class += [int(c) for c in extra]
    kids, costs = [], []
    for i, c in enumerate(node_class):
        costs.append(float(rng.integers(1, 10)) if c >= 100 else 0.0)
        if c < 100:
            kids.append([])
            continue
        ch = [int(x) for x in rng.integers(max(0, c - 40), c, size=int(rng.integers(1, 4)))]
        if i >= n_classes and i < n_classes + n_back:
            ch.append(int(rng.integers(c, n_classes)))
        kids.append(ch)
    roots = [n_classes - 1 - k for k in range(5)]
    return from_arrays(n_classes, node_class, costs, kids, roots)


@pytest.fixture(scope="module")
def problem():
    p = random_problem()
    assert p.n_nodes == 2000 and p.n_classes == 1300
    assert is_valid(p, extract_ocf(p))          # warm the JIT
    return p


def test_ocf_2000_nodes(benchmark, problem):
    choice = benchmark(extract_ocf, problem)
    assert is_valid(problem, choice)
