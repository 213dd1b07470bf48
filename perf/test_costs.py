"""Costs: the analytic (roofline) cost model pricing every node of a saturated e-graph, and the
SQLite cost cache's lookups (`eqsat_nb/cost/db.py`) on the distinct op signatures of one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from benchutil import Rounds, saturated_egraph

from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.cost.db import CostCache, make_key
from eqsat_nb.cost.model import OpSignature, egraph_signatures
from eqsat_nb.extract.dag import dag_cost
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.problem import from_egraph

pytestmark = pytest.mark.usefixtures("warm_jit")


@pytest.mark.parametrize("model", ["nasrnn", pytest.param("bert", marks=pytest.mark.full),
                                   pytest.param("nasneta", marks=pytest.mark.full),
                                   pytest.param("vit_huge", marks=pytest.mark.full)])
def test_analytic_egraph_costs(bench, benchmark, model):
    """`AnalyticCostModel("cpu").egraph_costs(eg)` with a fresh model (empty memo) each round;
    `ocf_dag_cost_us` is what extraction makes of those costs (a quality figure)."""
    eg = saturated_egraph(model)
    costs = bench(lambda m: m.egraph_costs(eg), setup=lambda: ((AnalyticCostModel("cpu"),), {}),
                  rounds=Rounds(3, 5))
    problem = from_egraph(eg, costs)
    benchmark.extra_info.update(model=model, nodes=eg.num_nodes, classes=eg.num_classes,
                                priced_nodes=int(np.count_nonzero(costs)),
                                ocf_dag_cost_us=round(dag_cost(problem, extract_ocf(problem)), 3))


def _keys(model: str) -> list[tuple]:
    """Canonical (backend, device, op, attrs, shapes) keys of the distinct op signatures of the
    saturated e-graph, sorted."""
    sigs: set[OpSignature] = {s for _, s in egraph_signatures(saturated_egraph(model))
                              if s is not None}
    return sorted({make_key("analytic", "bench-device", s.op, dict(s.attrs),
                            [[list(t.shape), t.dtype] for t in s.inputs + s.outputs])
                   for s in sigs})


@pytest.fixture
def filled_cache(tmp_path: Path):
    """A fresh cache file holding every signature of saturated NasRNN (seeded values)."""
    keys = _keys("nasrnn")
    rng = np.random.default_rng(0)
    cache = CostCache(tmp_path / "costs.sqlite")
    cache.put_many([(k, float(us)) for k, us in zip(keys, rng.uniform(1, 100, len(keys)))])
    yield cache, keys
    cache.close()


def test_cost_cache_get_many(bench, benchmark, filled_cache):
    """One read transaction for every signature of a saturated model (all hits)."""
    cache, keys = filled_cache
    got = bench(cache.get_many, args=(keys,), rounds=Rounds(10, 50))
    assert len(got) == len(keys)
    benchmark.extra_info.update(model="nasrnn", keys=len(keys), hits=len(got))


def test_cost_cache_get_one(bench, benchmark, filled_cache):
    """Single-key lookups (`get`): every key once as a hit and once as a miss (at most 50 each)."""
    cache, keys = filled_cache
    probe = keys[:50] + [(*k[:2], k[2] + "_absent", *k[3:]) for k in keys[:50]]

    def run() -> int:
        return sum(cache.get(*k) is not None for k in probe)

    hits = bench(run, rounds=Rounds(10, 50))
    benchmark.extra_info.update(model="nasrnn", lookups=len(probe), hits=hits)
