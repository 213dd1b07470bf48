"""TENSAT-mode saturation vs MCTS at the same node limit and cost model, like the paper's Table 2.

For every benchmark model in ir_examples/ (the 13 of Hartmann et al. 2024, `--models` for a
subset): TENSAT mode (`saturate` with Limits(node_limit=2000), the defaults otherwise: k_multi 2,
backoff scheduling, the limit enforced within a rule; then the same final extraction), TENSAT's own
schedule at the same limit (every rule in every iteration, the limit checked after each rule,
k_multi 1 as in TENSAT's tables; `--tensat-k-multi`), and MCTS (`mcts_optimize`, budget 128, depth
10, node limit 2000), all priced by the analytic cost model for `--device`. Prints a Markdown
table: estimated cost before and after (microseconds), speed-up % ((before / after - 1) x 100, as
the papers report it), optimization time (search + extraction), MCTS decisions and rules, how
MCTS compares with each (<: cheaper, =, >: dearer), and the paper's MCTS OCF/ILP speed-up and
time (RESULTS.md, A100) next to ours.

    python tools/mcts_compare.py [--models bert nasrnn ...] [--device cpu|a100|h100]
        [--budget 128] [--seed 0] [--workers 1] [--final ilp|ocf] [--out table.md]
        [--stop-on-zero | --zero-patience N (-1: run on to the node limit)]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.cost.model import graph_cost
from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.extract.dag import dag_cost
from eqsat_nb.extract.ilp import extract_ilp
from eqsat_nb.extract.problem import from_egraph
from eqsat_nb.extract.run import extract
from eqsat_nb.ir.parse import load
from eqsat_nb.resources import data_dir
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.mcts import MctsOptions, mcts_optimize
from eqsat_nb.search.saturate import Limits, saturate
from eqsat_nb.warmup import warm_up

# file stem -> (paper name, MCTS OCF/ILP speed-up %, MCTS OCF/ILP time s, TENSAT time s), from
# shared/reference/RESULTS.md (Hartmann et al. 2024, A100, budget 128, node limit 2 000)
PAPER = {
    "bert": ("BERT", 14.63, 43.8, 1.14),
    "inceptionv3": ("Inception-v3", -0.01, 3.4, 0.89),
    "mobilenetv2": ("MobileNet-v2", -0.36, 387.6, 0.93),
    "nasneta": ("NASNet-A", 17.71, 1114.4, 0.45),
    "nasrnn": ("NASRNN", 41.19, 114.6, 9.36),
    "resnet50": ("ResNet-50", 3.60, 10.0, 2.96),
    "resnext50": ("ResNeXt-50", 77.84, 101.4, 2.69),
    "squeezenet": ("SqueezeNet", 48.16, 337.0, 1.55),
    "vgg19": ("VGG-19", 39.69, 1.0, 0.06),
    "transformer_transducer": ("TT", 13.02, 436.2, 1.35),
    "vit_base": ("ViT-Base", 14.60, 61.0, 0.61),
    "vit_large": ("ViT-Large", 9.69, 56.4, 0.69),
    "vit_huge": ("ViT-Huge", 0.82, 62.8, 0.49),
}


def final_extract(eg, model, method: str, ilp_time_limit: float) -> tuple[float, str]:
    """DAG cost of the final extraction: ocf, then (for ilp) HiGHS warm-started from it."""
    problem = from_egraph(eg, model.egraph_costs(eg))
    ocf = extract(problem, "ocf").choice
    cost, how = dag_cost(problem, ocf), "ocf"
    if method == "ilp":
        res = extract_ilp(problem, time_limit=ilp_time_limit, warm_start=ocf)
        if res.choice is not None and np.isfinite(res.cost) and res.cost <= cost:
            cost, how = res.cost, f"ilp ({res.status})"
    return cost, how


def tensat(graph, rules, model, args, own_schedule: bool = False) -> dict:
    """`saturate` at the node limit and the final extraction; `own_schedule`: TENSAT's (every
    rule in every iteration, the limit checked after each rule, `--tensat-k-multi`)."""
    t = time.perf_counter()
    eg = graph_to_egraph(graph)
    limits = Limits(node_limit=args.node_limit)
    if own_schedule:
        limits = Limits(node_limit=args.node_limit, k_multi=args.tensat_k_multi,
                        match_limit=None, budget_share=None, chunked_node_limit=False)
    rep = saturate(eg, rules, limits)
    search_s = time.perf_counter() - t
    cost, how = final_extract(eg, model, args.final, args.ilp_time_limit)
    return {"cost": cost, "how": how, "seconds": time.perf_counter() - t, "search_s": search_s,
            "nodes": eg.num_nodes, "stop": rep.stop_reason, "rules": len(rep.applied),
            "iterations": len(rep.iterations)}


def mcts(graph, rules, model, args) -> dict:
    t = time.perf_counter()
    eg = graph_to_egraph(graph)
    opts = MctsOptions(seed=args.seed, budget=args.budget, depth=args.depth,
                       reward_extract=args.reward, node_limit=args.node_limit, c_uct=args.c_uct,
                       workers=args.workers, final_extract=args.final,
                       ilp_time_limit=args.ilp_time_limit,
                       continue_on_zero=not args.stop_on_zero,
                       zero_patience=None if args.zero_patience < 0 else args.zero_patience)
    rep = mcts_optimize(eg, rules, model, opts)
    return {"cost": rep.cost_after, "how": rep.extraction, "seconds": time.perf_counter() - t,
            "search_s": rep.search_seconds, "nodes": eg.num_nodes, "stop": rep.stop_reason,
            "decisions": [d.action for d in rep.decisions], "rules": rep.rules_applied,
            "simulations": rep.simulations, "before": rep.cost_before}


def pct(before: float, after: float) -> float:
    return (before / after - 1.0) * 100.0 if after else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=list(PAPER))
    ap.add_argument("--device", default="cpu", help="analytic cost profile: cpu, a100, h100")
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--node-limit", type=int, default=2000)
    ap.add_argument("--c-uct", type=float, default=MctsOptions.c_uct)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--final", choices=("ilp", "ocf"), default="ilp")
    ap.add_argument("--reward", choices=("ocf", "ocf+switch"), default=MctsOptions.reward_extract,
                    help="extractor of the rollout rewards")
    ap.add_argument("--ilp-time-limit", type=float, default=60.0)
    ap.add_argument("--stop-on-zero", action="store_true",
                    help="stop at the first decision whose actions all have mean value 0")
    ap.add_argument("--zero-patience", type=int, default=MctsOptions.zero_patience,
                    help="stop after this many zero-value decisions in a row (-1: never)")
    ap.add_argument("--tensat-k-multi", type=int, default=1,
                    help="k_multi of the TENSAT's-own-schedule column (default 1, its tables')")
    ap.add_argument("--out", help="also write the Markdown table here")
    ap.add_argument("--json", help="write the raw results as JSON here")
    args = ap.parse_args(argv)

    warm_up()
    rules = load_rules(data_dir("rules"))
    model = AnalyticCostModel(args.device)
    head = ("| model | before µs | TENSAT mode after | TENSAT mode % | TENSAT mode s | "
            "TENSAT's schedule % | MCTS after | MCTS % | MCTS s | MCTS vs mode / schedule | "
            "decisions / rules | paper MCTS % | paper OCF/ILP s | ours faster |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows, raw = [], {}
    print(f"device profile: analytic {args.device}; node limit {args.node_limit}; budget "
          f"{args.budget}, depth {args.depth}, c_uct {args.c_uct}, seed {args.seed}, workers "
          f"{args.workers}; rewards {args.reward}; final extraction {args.final}; zero-value "
          f"decisions: {'stop' if args.stop_on_zero else f'patience {args.zero_patience}'}; "
          f"TENSAT's schedule: k_multi {args.tensat_k_multi}", flush=True)
    print(head, flush=True)

    def mark(ours: float, theirs: float) -> str:
        return "<" if ours < theirs * (1 - 1e-9) else ("=" if ours <= theirs * (1 + 1e-9)
                                                       else ">")
    for name in args.models:
        graph = load(data_dir("ir_examples") / f"{name}.tir")
        before = graph_cost(model, graph)
        t = tensat(graph, rules, model, args)
        o = tensat(graph, rules, model, args, own_schedule=True)
        m = mcts(graph, rules, model, args)
        t_after, o_after = min(t["cost"], before), min(o["cost"], before)
        m_after = min(m["cost"], before)
        paper = PAPER.get(name, (name, float("nan"), float("nan"), float("nan")))
        ratio = paper[2] / m["seconds"] if m["seconds"] else float("inf")
        row = (f"| {paper[0]} | {before:.1f} | {t_after:.1f} | {pct(before, t_after):.2f} | "
               f"{t['seconds']:.2f} | {pct(before, o_after):.2f} | {m_after:.1f} | "
               f"{pct(before, m_after):.2f} | {m['seconds']:.2f} | {mark(m_after, t_after)} / "
               f"{mark(m_after, o_after)} | {len(m['decisions'])} / {len(m['rules'])} | "
               f"{paper[1]:.2f} | {paper[2]:.1f} | {ratio:.1f}× |")
        rows.append(row)
        print(row, flush=True)
        raw[name] = {"before": before, "tensat": t, "tensat_schedule": o, "mcts": m,
                     "paper": paper}
    table = "\n".join([head] + rows)
    if args.out:
        Path(args.out).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
