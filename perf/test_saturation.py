"""Saturation speed: the egglog side-by-side workloads (EGGLOG_WORKLOADS.md; egglog itself runs in
the same session when the `bench` extra is installed, see issue tracker) and the TENSAT models at
TENSAT's settings, next to TENSAT's published exploration times (RESULTS.md, T4 GPU host)."""
from __future__ import annotations

from pathlib import Path

import pytest

from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.ir.parse import load
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.saturate import Limits, saturate
from eqsat_nb.search.workloads import run_workload, tensor_counts
from eqsat_nb.warmup import warm_up

ROOT = Path(__file__).resolve().parent.parent
TENSAT_EXPLORATION_S = {"nasrnn": 0.10, "bert": 0.83, "resnext50": 0.68, "nasneta": 8.81,
                        "squeezenet": 0.16, "vgg19": 0.42, "inceptionv3": 4.38}


@pytest.fixture(scope="module", autouse=True)
def _warm():
    warm_up()


@pytest.mark.parametrize("kind,size", [("mm_chain", 40), ("add_ac", 9), ("mlp", 1000),
                                       ("mlp2", 100)])
def test_workload(benchmark, kind, size):
    eg, report = benchmark.pedantic(run_workload, args=(kind, size), rounds=3, iterations=1)
    nodes, classes = tensor_counts(eg)
    benchmark.extra_info.update(nodes=nodes, classes=classes, iterations=len(report.iterations),
                                stop=report.stop_reason)


@pytest.mark.parametrize("model", sorted(TENSAT_EXPLORATION_S))
def test_tensat_model(benchmark, model):
    path = ROOT / "ir_examples" / f"{model}.tir"
    graph = load(path)
    rules = load_rules(ROOT / "rules")

    def run():
        eg = graph_to_egraph(graph)
        return eg, saturate(eg, rules, Limits())

    eg, report = benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(nodes=eg.num_nodes, live_nodes=int(len(eg.live_nodes())),
                                classes=eg.num_classes, iterations=len(report.iterations),
                                stop=report.stop_reason,
                                tensat_exploration_s=TENSAT_EXPLORATION_S[model])
