"""Matching and saturation: e-matching every rule over a saturated e-graph, the TENSAT models at
the default settings (TENSAT's limits, k_multi 2, backoff; next to TENSAT's published exploration
times, RESULTS.md, T4 GPU host), and the egglog side-by-side workloads (EGGLOG_WORKLOADS.md) with egglog run in the same test, so the
ratio eqsat-nb / egglog in `extra_info` comes from one machine and one moment."""
from __future__ import annotations

import importlib.util
import os
import statistics
from pathlib import Path
from types import ModuleType

import pytest
from benchutil import ROOT, RULES, Rounds, example, median_s, saturated_egraph

from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.ir.parse import load
from eqsat_nb.rules.compile import compile_pattern
from eqsat_nb.rules.match import MatchIndex, search
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.saturate import Limits, Report, saturate
from eqsat_nb.search.workloads import (ITERATION_CAP, build_workload, egglog_limits,
                                       tensor_counts, workload_rules)

pytestmark = pytest.mark.usefixtures("warm_jit")

TENSAT_EXPLORATION_S = {"nasrnn": 0.10, "bert": 0.83, "resnext50": 0.68, "nasneta": 8.81,
                        "squeezenet": 0.16, "vgg19": 0.42, "inceptionv3": 4.38}
QUICK_MODELS = ("squeezenet", "nasrnn")
ANCHOR_ENV = "EQSAT_NB_EGGLOG_ANCHOR"


def total_matches(report: Report) -> int:
    """Matches found over all iterations and rule directions."""
    return sum(st.matches for it in report.iterations for st in it.rules.values())


# ------------------------------------------------------------------ e-matching alone

@pytest.mark.parametrize("model", ["bert", pytest.param("nasneta", marks=pytest.mark.full)])
def test_ematch_all_rules(bench, benchmark, model):
    """Search (no application) every source pattern of every rule direction of the rule set on
    the model's saturated e-graph, from scratch: the index build plus the matcher."""
    from eqsat_nb.search.saturate import compile_rules

    eg = saturated_egraph(model).snapshot()
    compiled = compile_rules(load_rules(RULES), eg)
    progs = {}
    for rule in compiled:
        for s, p in enumerate(rule.sources):
            prog = compile_pattern(p, eg.lookup_literal, f"$check{s}_")
            progs[(rule.name, s)] = prog

    def run() -> int:
        index = MatchIndex(eg)
        return sum(len(search(prog, index)) for prog in progs.values())

    matches = bench(run, rounds=Rounds(5, 15))
    benchmark.extra_info.update(model=model, nodes=eg.num_nodes, classes=eg.num_classes,
                                patterns=len(progs), matches=matches)


# ------------------------------------------------------------------ TENSAT models

@pytest.mark.parametrize("model", [m if m in QUICK_MODELS else
                                   pytest.param(m, marks=pytest.mark.full)
                                   for m in sorted(TENSAT_EXPLORATION_S)])
def test_tensat_model(bench, benchmark, model):
    """Graph → e-graph → saturation at the default settings (TENSAT's 50k nodes and 15
    iterations, k_multi 2, backoff scheduling)."""
    graph = load(example(model))
    rules = load_rules(RULES)

    def run():
        eg = graph_to_egraph(graph)
        return eg, saturate(eg, rules, Limits())

    eg, report = bench(run, rounds=Rounds(3, 5))
    benchmark.extra_info.update(model=model, nodes=eg.num_nodes,
                                live_nodes=int(len(eg.live_nodes())), classes=eg.num_classes,
                                iterations=len(report.iterations), stop=report.stop_reason,
                                matches=total_matches(report),
                                applied=sum(report.applied.values()),
                                tensat_exploration_s=TENSAT_EXPLORATION_S[model])


# ------------------------------------------------------------------ egglog side by side

QUICK_WORKLOADS = [("mm_chain", 20), ("add_ac", 8), ("mlp", 100), ("mlp2", 10)]
FULL_WORKLOADS = [("mm_chain", 40), ("add_ac", 9), ("mlp", 1000), ("mlp2", 100)]
WORKLOADS = QUICK_WORKLOADS + [pytest.param(*w, marks=pytest.mark.full) for w in FULL_WORKLOADS]


def _limits(kind: str) -> Limits:
    """egglog's schedule: no node limit, no cycle filter, stop at saturation or the cap."""
    return egglog_limits(kind)


def _saturate_workload(kind: str, size: int, bench, benchmark):
    """Saturate one workload under the benchmark (building excluded, as for egglog)."""
    rules = workload_rules(kind)
    eg, report = bench(lambda eg: (eg, saturate(eg, rules, _limits(kind))),
                       setup=lambda: ((build_workload(kind, size),), {}), rounds=Rounds(3, 5))
    nodes, classes = tensor_counts(eg)
    benchmark.extra_info.update(workload=kind, size=size, nodes=nodes, classes=classes,
                                iterations=len(report.iterations), stop=report.stop_reason,
                                matches=total_matches(report))
    return nodes, classes


@pytest.mark.full
@pytest.mark.parametrize("kind,size", FULL_WORKLOADS)
def test_workload(bench, benchmark, kind, size):
    """eqsat-nb alone on the large workloads (history even where egglog is not installed)."""
    _saturate_workload(kind, size, bench, benchmark)


def egglog_anchor() -> ModuleType:
    """shared/tools/egglog_anchor.py (or $EQSAT_NB_EGGLOG_ANCHOR); skips when egglog or the
    anchor is not there."""
    try:
        import egglog  # noqa: F401
    except ImportError:
        pytest.skip("egglog is not installed (optional `bench` extra: pip install -e '.[bench]')")
    path = Path(os.environ.get(ANCHOR_ENV) or ROOT.parent / "shared" / "tools" /
                "egglog_anchor.py")
    if not path.exists():
        pytest.skip(f"egglog anchor not found at {path} (set {ANCHOR_ENV})")
    spec = importlib.util.spec_from_file_location("egglog_anchor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("kind,size", WORKLOADS)
def test_egglog_side_by_side(bench, benchmark, tier, kind, size):
    """The same term, rules and schedule in eqsat-nb (benchmarked) and egglog (timed in the
    same test, median of as many runs); `ratio_vs_egglog` = eqsat-nb median / egglog median."""
    anchor = egglog_anchor()
    nodes, classes = _saturate_workload(kind, size, bench, benchmark)
    runs = [anchor.run_once(kind, size, ITERATION_CAP[kind])
            for _ in range(3 if tier == "quick" else 5)]
    ref = runs[0]
    assert (nodes, classes) == (ref["nodes"], ref["classes"]), "e-graphs differ from egglog's"
    egglog_s = statistics.median(r["run_s"] for r in runs)
    ours = median_s(benchmark)
    benchmark.extra_info.update(egglog_run_s=round(egglog_s, 6), egglog_matches=ref["matches"],
                                ratio_vs_egglog=None if ours is None else round(ours / egglog_s,
                                                                                 3))
