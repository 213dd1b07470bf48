"""How well does the sum of per-op `ort` costs predict a whole model's onnxruntime latency?

For every benchmark model (or `--models` subset) the sum of per-op costs and the end-to-end
latency are measured in the same run, alternately, so that both see the same machine load (this
machine's 2 vCPUs are shared; timings taken minutes apart differ by tens of percent):

- end to end: the whole graph exported by the project's exporter (`eqsat_nb.onnx_io.to_onnx`:
  inputs as graph inputs, weights as initializers, so weight-only sub-graphs are folded by
  onnxruntime as the cost model assumes), run with the `ort` backend's settings (1 intra-op and
  1 inter-op thread, sequential, full graph optimization); CPU time of `sess.run` on the calling
  thread (`CpuTimer`: onnxruntime runs the kernels there with one intra-op thread), because wall
  medians of short one-node runs mostly catch the CPU free while a 100 ms whole-model run always
  shares it: under a load average of 5 the wall-clock end to end was 2.5x the sum;
- sum of ops: for every distinct signature of `graph_signatures(graph)`, the one-node models the
  `ort` backend measures (`OrtCostModel.node_model`, cold-weight replicas included), timed as the
  backend does (`KernelTimer`: the node's profiled kernels, boundary NCHWc reorders and
  descheduled time and the profiler's own time per kernel left out) and priced with
  `OrtCostModel.net_cost`, or by its `rule_cost`; the session floor, per-node dispatch and the
  profiler's time per kernel come from the backend's chain models, timed in the same rounds.
  Predicted latency = sum + one floor.

Each round runs the whole model once and every one-node configuration and chain once; medians
over the rounds after the warm-up rounds. Prints a Markdown table: model, ops, sum of ops (ms),
end to end (ms), gap % = (sum - e2e) / e2e. Nothing is read from or written to the cost cache.

    python tools/cost_accuracy.py [--models resnet50 bert ...] [--budget S] [--rounds N]

Never run it beside another profiling process: timings would disturb each other.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat_nb.cost.model import OpSignature, graph_signatures  # noqa: E402
from eqsat_nb.cost.onnx_node import random_inputs  # noqa: E402
from eqsat_nb.cost.ort import (CHAIN_EVENTS, CpuTimer, KernelTimer, OrtCostModel,  # noqa: E402
                                _chain_model)
from eqsat_nb.ir.parse import load  # noqa: E402

MODELS = ("nasrnn", "bert", "resnext50", "nasneta", "squeezenet", "vgg19", "inceptionv3",
          "resnet50", "mobilenetv2", "transformer_transducer", "vit_base", "vit_large",
          "vit_huge")
BURST = 3                    # runs of a one-node model per round, the last timed
PROTO_LIMIT = 1 << 31        # protobuf cannot serialize more: such models go via external data


def whole_model_timer(model: Any, tmp: str) -> CpuTimer:
    """A `CpuTimer` of the whole model (via a file with external weights past protobuf's 2 GiB)."""
    import onnx

    feed = random_inputs(model)
    weights = sum(len(t.raw_data) for t in model.graph.initializer)   # ByteSize() fails past 2 GiB
    if weights < PROTO_LIMIT - (64 << 20):
        return CpuTimer([model], feed=feed)
    path = os.path.join(tmp, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, location="weights.bin")
    return CpuTimer([path], feed=feed)


def measure_model(name: str, budget_s: float, max_rounds: int, warm_rounds: int = 2,
                  log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Sum of per-op costs and end-to-end latency of one model, alternated in rounds."""
    from eqsat_nb.onnx_io import to_onnx

    graph = load(ROOT / "ir_examples" / f"{name}.tir")
    cm = OrtCostModel(None)
    sigs = Counter(graph_signatures(graph))
    measured: dict[tuple, tuple[KernelTimer, int]] = {}
    key_of: dict[OpSignature, tuple | None] = {}
    for sig in sigs:
        if cm.rule_cost(sig) is not None:
            key_of[sig] = None
            continue
        attrs = dict(sig.attrs)
        key = (sig.op, tuple(sorted(attrs.items())), sig.inputs, sig.const_inputs)
        key_of[sig] = key
        if key not in measured:
            model, k = cm.node_model(sig.op, attrs, sig.inputs, set(sig.const_inputs))
            measured[key] = (KernelTimer(model), k)
    chains = [CpuTimer([_chain_model(n)]) for n in (1, 33)]
    events = KernelTimer(_chain_model(CHAIN_EVENTS))      # calibrates the profiler's own time
    with tempfile.TemporaryDirectory(prefix="eqsat-nb-e2e-") as tmp:
        e2e = whole_model_timer(to_onnx(graph), tmp)
        t0 = time.perf_counter()
        rounds = 0
        while True:
            e2e.run()
            for timer, _ in measured.values():
                timer.run(BURST)
            for c in chains:
                c.run(BURST)
            events.run(BURST)
            rounds += 1
            spent = time.perf_counter() - t0
            if rounds >= warm_rounds + 3 and (rounds >= warm_rounds + max_rounds
                                              or spent > budget_s):
                break
    event_us = events.median(warm_rounds) / CHAIN_EVENTS
    for t, _ in measured.values():
        t.event_us = event_us
    run_us = {key: t.median(warm_rounds) for key, (t, _) in measured.items()}
    t1, t33 = (c.median(warm_rounds) for c in chains)
    node = max((t33 - t1) / 32, 0.0)
    floor = max(t1 - node, 0.0)
    cm._floor = (floor, node)         # this run's overheads, not the cached ones
    run_us = {key: cm.per_node(us, measured[key][1]) for key, us in run_us.items()}
    by_op: Counter[str] = Counter()
    total = floor
    for sig, n in sigs.items():
        key = key_of[sig]
        c = cm.rule_cost(sig) if key is None else cm.net_cost(run_us[key])
        by_op[sig.op] += n * c
        total += n * c
    e2e_us = e2e.median(warm_rounds)
    log(f"{name}: {sum(sigs.values())} ops ({len(measured)} timed configurations), "
        f"{rounds - warm_rounds} rounds in {time.perf_counter() - t0:.0f} s; floor {floor:.1f} "
        f"us, node {node:.2f} us, profiler event {event_us:.2f} us; by op (ms): "
        + ", ".join(f"{op} {us / 1000:.3f}" for op, us in by_op.most_common(6)))
    return {"name": name, "ops": sum(sigs.values()), "sum_us": total, "e2e_us": e2e_us,
            "gap": 100.0 * (total - e2e_us) / e2e_us, "rounds": rounds - warm_rounds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), metavar="NAME")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds of alternated timing per model (default 60)")
    ap.add_argument("--rounds", type=int, default=30,
                    help="most timed rounds per model (default 30; at least 3 always run)")
    args = ap.parse_args(argv)
    for name in args.models:
        if not (ROOT / "ir_examples" / f"{name}.tir").exists():
            print(f"no such model: {name}", file=sys.stderr)
            return 1
    rows = []
    for name in args.models:
        r = measure_model(name, args.budget, args.rounds,
                          log=lambda s: print(s, file=sys.stderr, flush=True))
        rows.append(r)
        print(f"{name}: sum {r['sum_us'] / 1000:.3f} ms, e2e {r['e2e_us'] / 1000:.3f} ms "
              f"({r['rounds']} rounds), gap {r['gap']:+.1f} %", file=sys.stderr, flush=True)
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| model | ops | sum of ops (ms) | end to end (ms) | rounds | gap % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['name']} | {r['ops']} | {r['sum_us'] / 1000:.3f} | {r['e2e_us'] / 1000:.3f} "
              f"| {r['rounds']} | {r['gap']:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
