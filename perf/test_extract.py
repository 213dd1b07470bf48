"""Extraction (target: OCF < 1 ms median on a 2 000-node e-graph), every extractor on each
TENSAT model's saturated e-graph, with the true DAG cost of its answer in `extra_info`, and
every extractor on the checked-in e-graphs of `perf/data/extract/` against their reference
optima (TENSAT-schedule e-graphs too, with the time to a good answer and to a 1 % proof). Warm JIT: each extractor runs once before timing (the ILP, which is not JIT code
and takes seconds, runs once, timed)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from benchutil import ROOT, Rounds, saturated_egraph

from eqsat_nb.extract.dag import dag_cost, is_valid
from eqsat_nb.extract.greedy import extract_greedy
from eqsat_nb.extract.ilp import GAP_PERCENT, STALL_SECONDS, extract_ilp
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.problem import ExtractionProblem as Problem, from_arrays, from_egraph
from eqsat_nb.extract.switch import joint_switch


def random_problem(n_classes: int = 1300, n_nodes: int = 2000, n_back: int = 20,
                   seed: int = 0) -> Problem:
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


def test_ocf_2000_nodes(bench, benchmark):
    problem = random_problem()
    assert problem.n_nodes == 2000 and problem.n_classes == 1300
    assert is_valid(problem, extract_ocf(problem))          # warm the JIT
    choice = bench(extract_ocf, args=(problem,), rounds=Rounds(50, 200))
    assert is_valid(problem, choice)
    benchmark.extra_info.update(classes=problem.n_classes, nodes=problem.n_nodes,
                                dag_cost=dag_cost(problem, choice))


# ------------------------------------------------------------------ saturated benchmark models

MODELS = ["nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "vgg19", "inceptionv3"]
METHODS = ["greedy", "ocf", "ocf+switch", "ilp"]
QUICK = {("nasrnn", "greedy"), ("nasrnn", "ocf"), ("nasrnn", "ocf+switch"),
         ("squeezenet", "ilp")}
_PROBLEMS: dict[str, Problem] = {}


def unit_cost_problem(model: str) -> Problem:
    """The saturated e-graph with unit costs per compute node (weight-only and layout-free
    nodes cost 0), so the DAG cost counts kernels."""
    if model not in _PROBLEMS:
        eg = saturated_egraph(model)
        free = ("lit", "input", "weight", "proj")
        costs = np.array([0.0 if eg.op_name(n) in free or eg.is_const(eg.node_class(n)) else 1.0
                          for n in range(eg.num_nodes)])
        _PROBLEMS[model] = from_egraph(eg, costs)
    return _PROBLEMS[model]


@pytest.mark.parametrize("model,method", [
    (m, x) if (m, x) in QUICK else pytest.param(m, x, marks=pytest.mark.full)
    for m in MODELS for x in METHODS])
def test_extract_saturated(bench, benchmark, warm_jit, model, method):
    """Each extractor on the model's e-graph saturated at TENSAT's settings. ILP runs
    in-process, warm-started from greedy, 60 s limit."""
    problem = unit_cost_problem(model)
    run = {"greedy": lambda: extract_greedy(problem),
           "ocf": lambda: extract_ocf(problem),
           "ocf+switch": lambda: joint_switch(problem, extract_ocf(problem)),
           "ilp": lambda: extract_ilp(problem, time_limit=60, in_process=True,
                                      warm_start=extract_greedy(problem)).choice}[method]
    run()                                                    # warm the JIT
    choice = bench(run, rounds=Rounds(3, 5), warmup=0)
    assert is_valid(problem, choice)
    benchmark.extra_info.update(model=model, method=method, classes=problem.n_classes,
                                nodes=problem.n_nodes, dag_cost=dag_cost(problem, choice))


# ------------------------------------------------------------------ reference e-graphs
# perf/data/extract/NAME.json.gz: saturated (k_multi 2), larger (node limits 20 000-50 000) and
# cyclic (no cycle filter) e-graphs priced with the analytic a100 profile, and reference.json:
# the best DAG cost known for each (a 15-minute ILP solve or ocf+switch) and its proven bound.
# Rebuild both with tools/extract_egraphs.py when the search changes. Each benchmark records the
# DAG cost, the ILP's status and bound, and the gap to the reference in `extra_info`.

DATA = ROOT / "perf" / "data" / "extract"
REFERENCE = json.loads((DATA / "reference.json").read_text()) \
    if (DATA / "reference.json").exists() else {}
# ilp15: extract_ilp as `optimize` runs it (15 s, the stall and gap rules); ilp30: the time to a
# good answer (30 s, stopped once proven within 1 %; targets: the answer within 0.5 % of the
# reference by 10 s, proven within 1 % by 30 s; docs/extraction.md)
REF_METHODS = ["ocf", "ocf+switch", "ilp15", "ilp30"]
REF_QUICK = {("bert", "ocf+switch"), ("bert", "ilp15")}
ANSWER_WITHIN = 0.005
PROOF_WITHIN = 0.01
_LOADED: dict[str, tuple] = {}


def reference_problem(name: str) -> tuple[Problem, dict]:
    """The checked-in e-graph NAME as a problem, and its "eqsat_nb" metadata."""
    if name not in _LOADED:
        import importlib.util
        import sys
        tool = sys.modules.get("extract_egraphs")
        if tool is None:
            spec = importlib.util.spec_from_file_location("extract_egraphs",
                                                          ROOT / "tools" / "extract_egraphs.py")
            tool = importlib.util.module_from_spec(spec)
            sys.modules["extract_egraphs"] = tool       # dataclasses look the module up
            spec.loader.exec_module(tool)
        _LOADED[name] = tool.load_problem(name)
    return _LOADED[name]


def milestones(timeline: list, start: float, best: float) -> dict:
    """Seconds (from `start`, the warm start's time) until the answer is within ANSWER_WITHIN of
    `best` and until it is proven within PROOF_WITHIN ((cost - bound) / cost), from an ILP's
    stats["timeline"] of (seconds, cost, bound); None where never reached."""
    out = {"seconds_to_answer": None, "seconds_to_proof": None}
    for t, cost, bound in [(0.0, float("inf"), 0.0)] + list(timeline):
        if out["seconds_to_answer"] is None and cost <= best * (1 + ANSWER_WITHIN):
            out["seconds_to_answer"] = round(start + t, 3)
        if out["seconds_to_proof"] is None and np.isfinite(cost) and \
                cost - bound <= PROOF_WITHIN * cost:
            out["seconds_to_proof"] = round(start + t, 3)
    return out


@pytest.mark.parametrize("name,method", [
    (n, m) if (n, m) in REF_QUICK else pytest.param(n, m, marks=pytest.mark.full)
    for n in REFERENCE for m in REF_METHODS])
def test_extract_reference(bench, benchmark, warm_jit, name, method):
    """One extractor on one reference e-graph. ilp15: extract_ilp as `optimize` runs it (in its
    worker process, warm-started from ocf+switch, time limit 15 s, the default stall and gap
    rules); ilp30: 30 s, stopped once proven within 1 %, with the seconds (ocf+switch included)
    until its answer is within 0.5 % of the reference and until it is proven within 1 %."""
    import time

    problem, meta = reference_problem(name)
    ref = REFERENCE[name]
    assert (problem.n_nodes, problem.n_classes) == (ref["nodes"], ref["classes"]), \
        "perf/data/extract changed without its reference: rerun tools/extract_egraphs.py"
    found: dict = {}

    def run():
        t0 = time.perf_counter()
        choice = joint_switch(problem, extract_ocf(problem)) if method != "ocf" \
            else extract_ocf(problem)
        if method.startswith("ilp"):
            warm = time.perf_counter() - t0
            rules = {"stall": STALL_SECONDS, "stop_gap": GAP_PERCENT / 100} \
                if method == "ilp15" else {"stop_gap": PROOF_WITHIN}
            res = extract_ilp(problem, time_limit=float(method[3:]), warm_start=choice, **rules)
            found.update(status=res.status, bound=res.bound, ilp_gap_pct=100 * res.gap,
                         seconds=res.seconds, restricted=res.stats.get("restricted"),
                         neighbourhoods=res.stats.get("neighbourhoods"),
                         layers=res.stats.get("simplify", {}).get("layers"),
                         simplified=[res.stats.get("simplify", {}).get(k)
                                     for k in ("classes", "nodes")])
            found.update(milestones(res.stats.get("timeline", []), warm, ref["best"]))
            choice = res.choice
        return choice

    if not method.startswith("ilp"):
        run()                                               # warm the JIT
    choice = bench(run, rounds=Rounds(1, 1) if method.startswith("ilp") else Rounds(3, 5),
                   warmup=0)
    assert is_valid(problem, choice)
    cost = dag_cost(problem, choice)
    assert cost >= ref["bound"] - 1e-6 * max(1.0, abs(cost))    # nothing beats a proven bound
    benchmark.extra_info.update(
        egraph=name, model=meta.get("model"), method=method, nodes=problem.n_nodes,
        classes=problem.n_classes, iterations=meta.get("iterations"), stop=meta.get("stop"),
        dag_cost=cost, reference=ref["best"], reference_bound=ref["bound"],
        gap_to_reference_pct=round(100 * (cost - ref["best"]) / ref["best"], 4),
        **{k: (round(v, 4) if isinstance(v, float) else v) for k, v in found.items()})
