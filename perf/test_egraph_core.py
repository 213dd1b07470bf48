"""E-graph core speed (issue: ≥ 5 M hash-cons insertions/s; rebuild after 10 000 random unions on a
100 000-node e-graph < 50 ms; snapshot of a 2 000-node e-graph < 20 µs). Warm JIT: the kernels are
compiled or loaded once per session before timing."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.egraph import EGraph, graph_to_egraph, warm_up
from eqsat_nb.egraph.layout import EMPTY, MAXA, T_UNKNOWN
from eqsat_nb.egraph.store import EOP_IDS
from eqsat_nb.ir.parse import load

EXAMPLES = Path(__file__).resolve().parent.parent / "ir_examples"


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_up()


def random_dag(n: int, leaves: int = 1000, seed: int = 0):
    """A batch of `n` nodes: `leaves` distinct literals, then binary ewadd nodes over random
    earlier nodes (batch references), all untyped."""
    rng = np.random.default_rng(seed)
    ops = np.full(n, EOP_IDS["ewadd"], np.int32)
    ops[:leaves] = EOP_IDS["lit"]
    payloads = np.full(n, -1, np.int32)
    payloads[:leaves] = np.arange(leaves)
    kids = np.full((n, MAXA), EMPTY, np.int32)
    idx = np.arange(leaves, n)
    kids[leaves:, 0] = -(rng.integers(0, idx) + 1)
    kids[leaves:, 1] = -(rng.integers(0, idx) + 1)
    nkids = np.where(np.arange(n) < leaves, 0, 2).astype(np.int32)
    return ops, payloads, kids, nkids, np.full(n, T_UNKNOWN, np.int32)


def test_insert_100k(benchmark):
    batch = random_dag(100_000)

    def setup():
        eg = EGraph(capacity=1 << 17)
        eg.reserve(100_000)
        return (eg,), {}

    def insert(eg):
        eg.add_batch(*batch)
        return eg

    eg = benchmark.pedantic(insert, setup=setup, rounds=15, warmup_rounds=1)
    med = benchmark.stats.stats.median
    benchmark.extra_info.update(nodes=eg.num_nodes, classes=eg.num_classes,
                                m_inserts_per_s=round(100_000 / med / 1e6, 2))


def test_union_rebuild_10k_on_100k(benchmark):
    base = EGraph(capacity=1 << 17)
    base.add_batch(*random_dag(100_000))
    pairs = np.random.default_rng(1).integers(1000, base.num_nodes, (10_000, 2)).astype(np.int32)

    def run(eg):
        eg.union_many(pairs)
        eg.rebuild()
        return eg

    eg = benchmark.pedantic(run, setup=lambda: ((base.snapshot(),), {}), rounds=15,
                            warmup_rounds=1)
    benchmark.extra_info.update(nodes=eg.num_nodes, classes_after=eg.num_classes,
                                unions=eg.num_unions)


def test_snapshot_2000(benchmark):
    eg = EGraph()
    eg.add_batch(*random_dag(2000, leaves=200))
    snap = benchmark(eg.snapshot)
    benchmark.extra_info.update(nodes=snap.num_nodes)


def test_graph_to_egraph_largest(benchmark):
    files = sorted(EXAMPLES.glob("*.tir"), key=lambda p: p.stat().st_size)
    if not files:
        pytest.skip("no examples generated")
    graph = load(files[-1])
    eg = benchmark(graph_to_egraph, graph)
    benchmark.extra_info.update(model=files[-1].stem, nodes=eg.num_nodes, classes=eg.num_classes)
