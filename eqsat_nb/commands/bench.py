"""`eqsat-nb bench`: every example through `run`, estimated and measured, in one table.

Columns follow Table 2 of Hartmann et al. 2024: original and optimized latency (estimated by the
cost model; measured end to end with onnxruntime on this CPU, median of repeats, the two models
timed alternately in the same run so drift hits both), speed-up %, optimization time. With a GPU
profile (`--device a100`) the published speed-ups are printed next to ours; no GPU is needed for
that (the estimate is analytic), and measuring on this CPU is then skipped unless asked for. A
model the optimizer left unchanged (no cheaper graph) is not timed against itself.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from ..examples import resolve_models
from .files import check_writable, write_atomic
from .run import (WHY_SHOWN, add_search_options, cost_model_from_args, describe_cost_model,
                  optimize_and_verify)

# Published runtime speed-ups, % (../shared/reference/RESULTS.md): TENSAT (Yang et al. 2021, T4,
# k_multi 1) and MCTS OCF/ILP (Hartmann et al. 2024, A100, budget 128, node limit 2 000).
PUBLISHED_TENSAT = {"nasrnn": 68.9, "bert": 9.2, "resnext50": 8.8, "nasneta": 7.3,
                    "squeezenet": 24.5, "vgg19": 8.9, "inceptionv3": 10.0}
PUBLISHED_MCTS = {"bert": 14.63, "inceptionv3": -0.01, "mobilenetv2": -0.36, "nasneta": 17.71,
                  "nasrnn": 41.19, "resnet50": 3.60, "resnext50": 77.84, "squeezenet": 48.16,
                  "vgg19": 39.69, "transformer_transducer": 13.02, "vit_base": 14.60,
                  "vit_large": 9.69, "vit_huge": 0.82}

def add_parser(sub: Any) -> None:
    c = sub.add_parser("bench", help="run every example (or the given models) through the "
                       "optimizer; table of estimated and measured speed-ups")
    c.add_argument("models", nargs="*", metavar="MODEL",
                   help="model files or names of shipped examples (default: the 13 benchmarks)")
    c.add_argument("--repeats", type=int, default=20,
                   help="onnxruntime runs per model and graph (median; default 20)")
    c.add_argument("--measure", choices=("auto", "yes", "no"), default="auto",
                   help="time original and optimized models in onnxruntime on this CPU "
                   "(auto: yes for the cpu profile, no for GPU profiles)")
    c.add_argument("--markdown", metavar="FILE.md", help="also write the table here")
    c.add_argument("--json", metavar="FILE.json", help="also write all rows as JSON")
    c.add_argument("--force", action="store_true", help="overwrite existing output files")
    c.add_argument("--no-verify", action="store_true", help="skip verification")
    c.add_argument("--verify-seeds", type=int, default=1)
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    add_search_options(c)
    c.set_defaults(func=bench_command)


def measure_pair(first, second, repeats: int, warmups: int = 3) -> tuple[float, float]:
    """Median onnxruntime latency (ms) of two ONNX models, timed alternately in one process.

    The clock is the calling thread's CPU time: with one intra-op thread onnxruntime runs the
    kernels on the caller's thread, so this is the latency of a run without the time the process
    spent descheduled (on a 2-vCPU machine shared with other jobs, wall time swung by 2x under load)."""
    from ..cost.onnx_node import random_inputs
    from ..runtime import session

    sessions = [session(first), session(second)]
    feeds = [random_inputs(first), random_inputs(second)]
    times: list[list[float]] = [[], []]
    for r in range(warmups + repeats):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            t0 = time.thread_time()
            sessions[i].run(None, feeds[i])
            if r >= warmups:
                times[i].append(time.thread_time() - t0)
    return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3


def bench_command(args: argparse.Namespace) -> int:
    for out in (args.markdown, args.json):
        check_writable(out, args.force)
    from ..rules.parse import load_rules
    from .run import load_model

    models = resolve_models(args.models)
    rules = load_rules(args.rules or None)
    cost_model = cost_model_from_args(args)
    cost_name = describe_cost_model(cost_model)
    gpu = (args.device or "cpu") != "cpu"
    measure = args.measure == "yes" or (args.measure == "auto" and not gpu)
    rows = []
    print(_header(measure, gpu), flush=True)
    for path in models:
        args.model = str(path)
        graph, weights = load_model(str(path))
        t = time.perf_counter()
        result, check = optimize_and_verify(graph, weights, cost_model, rules, args)
        row: dict[str, Any] = {
            "model": path.stem, "ops_before": len(list(graph.compute_nodes())),
            "ops_after": len(list(result.optimized.compute_nodes())),
            "est_before_ms": result.cost_before / 1e3, "est_after_ms": result.cost_after / 1e3,
            "est_speedup_pct": result.speedup_pct,
            "optimize_s": sum(v for k, v in result.times.items() if k != "verify"),
            "verified": None if check is None or hasattr(check, "reason") else check.ok,
            "egraph_nodes": result.egraph_nodes, "extraction": result.extraction,
            "changes": [c.as_dict() for c in result.changes[:WHY_SHOWN]]}
        if measure and result.improved:     # an unchanged model is not timed against itself
            from ..onnx_io import to_onnx
            a = to_onnx(graph, weights, seed=args.seed)
            b = to_onnx(result.optimized, weights, seed=args.seed)
            row["ort_before_ms"], row["ort_after_ms"] = measure_pair(a, b, args.repeats)
            row["ort_speedup_pct"] = (row["ort_before_ms"] / row["ort_after_ms"] - 1) * 100
        elif measure:
            row["ort_before_ms"] = row["ort_after_ms"] = row["ort_speedup_pct"] = None
        row["wall_s"] = time.perf_counter() - t
        row["paper_tensat_pct"] = PUBLISHED_TENSAT.get(path.stem)
        row["paper_mcts_pct"] = PUBLISHED_MCTS.get(path.stem)
        rows.append(row)
        print(_row(row, measure, gpu), flush=True)
    table = "\n".join([_header(measure, gpu)] + [_row(r, measure, gpu) for r in rows]) + "\n"
    note = (f"cost model: {cost_name}; search: {args.search}; extraction: {args.extract}"
            + ("; measured: onnxruntime CPU, 1 thread, thread CPU time, median of "
               f"{args.repeats} alternating runs" if measure else ""))
    print(note)
    why = _why(rows)
    if why:
        print(why, end="")
    if args.markdown:
        write_atomic(args.markdown,
                     lambda p: p.write_text(table + "\n" + note + "\n" + ("\n" + why if why
                                                                          else "")))
    if args.json:
        from ..provenance import record
        doc = {**record(getattr(args, "argv", None)), "cost_model": cost_name, "rows": rows}
        body = json.dumps(doc, indent=2) + "\n"
        write_atomic(args.json, lambda p: p.write_text(body))
    return 0


def _why(rows: list[dict[str, Any]]) -> str:
    """Per changed model, the largest cost difference behind its result (run's "why" line)."""
    lines = [f"- {r['model']}: {r['changes'][0]['summary']}" for r in rows if r.get("changes")]
    return ("why (the largest cost difference behind each result):\n" + "\n".join(lines) + "\n"
            if lines else "")


def _header(measure: bool, gpu: bool) -> str:
    cols = ["model", "ops", "est. orig ms", "est. opt ms", "est. speed-up %"]
    if measure:
        cols += ["ort orig ms", "ort opt ms", "ort speed-up %"]
    if gpu:
        cols += ["paper TENSAT %", "paper MCTS %"]
    cols += ["optimize s"]
    return "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _row(r: dict[str, Any], measure: bool, gpu: bool) -> str:
    cells = [r["model"], f"{r['ops_before']} → {r['ops_after']}", _fmt(r["est_before_ms"], 3),
             _fmt(r["est_after_ms"], 3), _fmt(r["est_speedup_pct"], 1)]
    if measure and r["ort_before_ms"] is None:
        cells += ["unchanged", "unchanged", "0 (same model)"]
    elif measure:
        cells += [_fmt(r["ort_before_ms"]), _fmt(r["ort_after_ms"]), _fmt(r["ort_speedup_pct"], 1)]
    if gpu:
        cells += [_fmt(r["paper_tensat_pct"], 1), _fmt(r["paper_mcts_pct"], 1)]
    cells += [_fmt(r["optimize_s"], 2)]
    return "| " + " | ".join(cells) + " |"
