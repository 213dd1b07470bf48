"""E-graph core (targets: ≥ 5 M hash-cons insertions/s; rebuild after 10 000 random unions
on a 100 000-node e-graph < 50 ms; snapshot of a 2 000-node e-graph < 20 µs). Warm JIT: the
kernels are compiled or loaded once per session before timing. Inputs are seeded."""
from __future__ import annotations

import numpy as np
import pytest
from benchutil import EXAMPLES, Rounds, median_s

from eqsat_nb.egraph import EGraph, graph_to_egraph
from eqsat_nb.egraph.layout import EMPTY, MAXA, T_UNKNOWN
from eqsat_nb.egraph.store import EOP_IDS
from eqsat_nb.ir.parse import load


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    from eqsat_nb.egraph import warm_up
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


def test_insert_100k(bench, benchmark):
    batch = random_dag(100_000)

    def setup():
        eg = EGraph(capacity=1 << 17)
        eg.reserve(100_000)
        return (eg,), {}

    def insert(eg):
        eg.add_batch(*batch)
        return eg

    eg = bench(insert, setup=setup, rounds=Rounds(5, 15))
    med = median_s(benchmark)
    benchmark.extra_info.update(nodes=eg.num_nodes, classes=eg.num_classes,
                                m_inserts_per_s=None if med is None else round(1e-1 / med, 2))


def test_union_rebuild_10k_on_100k(bench, benchmark):
    base = EGraph(capacity=1 << 17)
    base.add_batch(*random_dag(100_000))
    pairs = np.random.default_rng(1).integers(1000, base.num_nodes, (10_000, 2)).astype(np.int32)

    def run(eg):
        eg.union_many(pairs)
        eg.rebuild()
        return eg

    eg = bench(run, setup=lambda: ((base.snapshot(),), {}), rounds=Rounds(5, 15))
    benchmark.extra_info.update(nodes=eg.num_nodes, classes_after=eg.num_classes,
                                unions=eg.num_unions)


def test_snapshot_2000(bench, benchmark):
    """Many short rounds: the median is steady even on a busy machine (tests/test_perf_compare.py
    slows this kernel down on purpose)."""
    eg = EGraph()
    eg.add_batch(*random_dag(2000, leaves=200))
    snap = bench(eg.snapshot, rounds=Rounds(100, 300), iterations=20)
    benchmark.extra_info.update(nodes=snap.num_nodes, classes=snap.num_classes)


def test_graph_to_egraph_largest(bench, benchmark):
    files = sorted(EXAMPLES.glob("*.tir"), key=lambda p: p.stat().st_size)
    if not files:
        pytest.skip("no examples generated")
    graph = load(files[-1])
    eg = bench(graph_to_egraph, args=(graph,), rounds=Rounds(5, 20))
    benchmark.extra_info.update(model=files[-1].stem, nodes=eg.num_nodes, classes=eg.num_classes)
