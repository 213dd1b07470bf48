"""How well does the sum of per-op `ort` costs predict a whole model's onnxruntime latency?

For every benchmark model (or `--models` subset): the whole graph is lowered to one ONNX model
(`eqsat_nb.cost.onnx_graph`) and timed end to end with the `ort` backend's settings (1 intra-op
and 1 inter-op thread, sequential, full graph optimization, median of repeats); the per-op costs
of the same graph come from `OrtCostModel` (one-node models, cached in the cost DB) and are added
up with `graph_cost` (weight-only sub-graphs free) plus one session floor (`floor_us`: what a
`sess.run` costs beyond its kernels, paid once per inference). Prints a Markdown table:
model, sum of ops (ms), end to end (ms), gap % = (sum - e2e) / e2e.

    python tools/cost_accuracy.py [--models resnet50 bert ...] [--cost-db PATH] [--budget S]

Never run it beside another profiling process: timings would disturb each other.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat_nb.cost.db import CostCache  # noqa: E402
from eqsat_nb.cost.model import graph_cost, graph_signatures  # noqa: E402
from eqsat_nb.cost.onnx_graph import graph_model  # noqa: E402
from eqsat_nb.cost.onnx_node import make_session, random_inputs  # noqa: E402
from eqsat_nb.cost.ort import OrtCostModel  # noqa: E402
from eqsat_nb.ir.parse import load  # noqa: E402

MODELS = ("nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "vgg19", "inceptionv3",
          "resnet50", "mobilenetv2", "transformer_transducer", "vit_base", "vit_large",
          "vit_huge")


def time_end_to_end(model, budget_s: float, max_repeats: int = 50) -> tuple[float, int]:
    """(median µs of one whole-model run, repeats); repeats fit in about `budget_s`."""
    sess = make_session(model)
    feed = random_inputs(model)
    t0 = time.perf_counter()
    sess.run(None, feed)                              # first run: allocations, prepacking
    first = time.perf_counter() - t0
    warm = max(1, min(10, int(budget_s / 4 / max(first, 1e-6))))
    for _ in range(warm):
        sess.run(None, feed)
    repeats = max(3, min(max_repeats, int(budget_s / max(first, 1e-6))))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        sess.run(None, feed)
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1000.0, repeats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), metavar="NAME")
    ap.add_argument("--cost-db", help="cost cache (default: $EQSAT_NB_COST_DB or user cache)")
    ap.add_argument("--budget", type=float, default=20.0,
                    help="seconds of end-to-end timing per model (default 20)")
    args = ap.parse_args(argv)
    cm = OrtCostModel(CostCache(args.cost_db))
    rows = []
    for name in args.models:
        path = ROOT / "ir_examples" / f"{name}.tir"
        if not path.exists():
            print(f"no such model: {path}", file=sys.stderr)
            return 1
        graph = load(path)
        t0 = time.perf_counter()
        total_us = graph_cost(cm, graph) + cm.floor_us     # one sess.run floor per inference
        n_ops = sum(1 for _ in graph_signatures(graph))
        t_ops = time.perf_counter() - t0
        e2e_us, reps = time_end_to_end(graph_model(graph), args.budget)
        gap = 100.0 * (total_us - e2e_us) / e2e_us
        rows.append((name, n_ops, total_us / 1000, e2e_us / 1000, gap, reps))
        print(f"{name}: {n_ops} ops, sum {total_us / 1000:.3f} ms (priced in {t_ops:.1f} s), "
              f"e2e {e2e_us / 1000:.3f} ms ({reps} runs), gap {gap:+.1f} %", file=sys.stderr)
    print("| model | ops | sum of ops (ms) | end to end (ms) | gap % |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, n, s, e, g, _ in rows:
        print(f"| {name} | {n} | {s:.3f} | {e:.3f} | {g:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
