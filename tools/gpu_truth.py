"""GPU truth: measure, in one call on a machine with a GPU, what a deployment runs.

    python tools/gpu_truth.py [MODEL ...] [--out DIR] [--budget S] [--device-kind cuda|cpu]
        [--precisions fp32,tf32,fp16,bf16] [--e2e-precision bf16] [--export DIR]

MODEL: names of shipped examples (default: the 13 benchmark models) or .tir / .onnx files.
`--export DIR` also exports the transformers of tools/export_transformers.py into DIR (BERT,
DistilBERT, ViT-base and GPT-2 in fp32, the small Llama with GQA and SwiGLU in fp16; files
already there are reused) in background processes while the other models saturate, and adds
them to the models. The command for a GPU machine without network access, and how the project
travels there, are in tools/GPU_TRUTH.md.

Phases, in priority order within one time budget (`--budget`, default 420 s); a phase that
would not fit is cut short and says so, and the results so far are written after each phase and
each model:

1. Saturate every model's e-graph as `run` does (the shipped rules, TENSAT's limits), keep it,
   and collect every distinct operator configuration it holds (`cost.model.egraph_signatures`).
2. Per precision (`--precisions`), measure each configuration with its float operands in that
   precision (`cost.table.in_precision`: f32 for fp32 and tf32, f16, bf16) with the `torch`
   backend (`cost/torch_backend.py`: cuDNN benchmark mode, a CUDA graph of back-to-back calls
   timed with CUDA events, median over replays; tf32: TF32 on for cuBLAS and cuDNN, off for the
   others), the configurations of the original graphs first, and write the table
   `<gpu>-measured.json` (fp32) or `<gpu>-measured-<precision>.json` with its "precision"
   (`cost/table.py`). The measuring phase may use `--measure-share` of what phase 1 left; each
   precision gets an equal part of what is left of it when it starts (what one does not use
   passes to the next). TF32 changes only cuBLAS's GEMMs and cuDNN's convolutions, so the tf32
   table measures matmul and conv2d and takes every other operator's time from the fp32
   measurement (its notes say so). Configurations left unmeasured are priced by the roofline at
   that precision (counted per model as table misses).
3. Per model, in the end-to-end precision (`--e2e-precision`, bf16): extract from the saturated
   e-graph with that precision's table (what `run --device <gpu> --precision bf16` chooses once
   the table is shipped; the roofline prices what the table lacks), then run the original and
   the optimized graph whole in PyTorch on the device with every float tensor in that precision
   (`cost/torch_graph.py`: weights folded, both captured as CUDA graphs, timed alternately in
   rounds, medians), after checking both against the original run in float32
   (`precision.tolerance`: the optimized graph's error within 4x the original's own plus four
   roundings). One profiled run of each attributes the kernel time to GEMMs, convolutions and
   the rest (`torch_graph.kernel_times`).
4. Per model, while the budget lasts: both graphs compiled by `torch.compile` (Inductor,
   default mode, `fullgraph=True`), each compiled once, warmed up, then timed alternately
   (back-to-back calls between CUDA events), checked and profiled likewise. A model whose
   compilation is predicted (seconds per graph node of the compilations so far) to exceed
   `--compile-cap` or what is left of the budget, less what phase 5 needs, is skipped and
   listed.
5. The other precisions' estimates: each model extracted from its saturated e-graph with each
   other precision's table. These need no GPU (`run --device <gpu> --precision P` computes them
   from the shipped tables), so they come last.

Per model the report gives the estimated speed-up in each precision, the measured one as-is
and under torch.compile, and per operator kind (GEMMs, convolutions, the rest) the estimated
saving against the measured kernel-time saving; a model whose measured gain under torch.compile
differs from its estimate by more than a third gets one line naming the kind that made the
difference (`compile_line`). Per precision it gives the roofline's per-op error against the
measurement (median and worst per operator kind).

Writes under `--out` (default $OUT, else ./gpu_truth_out): the tables (one per precision),
`gpu_truth.json` (everything) and `gpu_truth.md` (the tables of docs/gpu-costs.md). `--tables
DIR` reuses tables a previous call wrote instead of measuring (a second call for what the first
one's budget did not reach). `--device-kind cpu` is the dry run: torch on the CPU, one thread,
perf_counter, no CUDA graphs, Inductor's C++ backend. `--plan` only saturates and counts
configurations (no torch).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Iterable, Mapping

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat_nb.errors import TirError  # noqa: E402
from eqsat_nb.examples import BENCHMARK_MODELS, resolve_models  # noqa: E402

#: what --export writes (tools/export_transformers.py names; ":fp16" exports in that type)
TRANSFORMERS = ("bert_ts", "distilbert_ts", "vit_base_ts", "gpt2_ts", "llama_small_dynamo:fp16")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
#: operators whose kernels TF32 changes (cuBLAS GEMMs, cuDNN convolutions)
TF32_OPS = ("matmul", "conv2d")
#: kinds the whole-graph time is attributed to (torch_graph.kernel_kind)
KINDS = ("matmul", "conv2d", "other")
#: default number of background compile workers (WarmPool): half the cores beyond 4, at most 6
WORKERS = min(6, max(0, ((os.cpu_count() or 1) - 4) // 2))
WORKER_COMPILE_THREADS = 2


class Clock:
    """The run's budget: seconds since start and left."""

    def __init__(self, budget: float) -> None:
        self.t0 = time.perf_counter()
        self.budget = budget

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget - self.elapsed()


def log(clock: Clock, msg: str) -> None:
    print(f"[{clock.elapsed():6.1f} s] {msg}", flush=True)


# ------------------------------------------------------------------ phase 1: configurations
def load_model(name: str) -> dict[str, Any]:
    """{name, path, graph, weights} for an example name or a .tir/.onnx path."""
    from eqsat_nb.commands.run import load_source

    (p,) = resolve_models([name])
    graph, weights, _ = load_source(str(p))
    return {"name": p.stem, "path": str(p), "graph": graph, "weights": weights}


def saturate_model(m: dict[str, Any], rules) -> None:
    """Saturate `m`'s e-graph as `run` builds it; keep it and its distinct signatures."""
    from eqsat_nb.cost.model import egraph_signatures
    from eqsat_nb.egraph.convert import graph_to_egraph
    from eqsat_nb.precision import graph_precision
    from eqsat_nb.search.saturate import Limits, saturate

    t = time.perf_counter()
    eg = graph_to_egraph(m["graph"])
    report = saturate(eg, rules, Limits())
    seen: dict = {}
    for _, sig in egraph_signatures(eg):
        if sig is not None:
            seen.setdefault(config_key(sig), sig)
    m.update(egraph=eg, signatures=list(seen.values()), egraph_nodes=eg.num_nodes,
             stop=report.stop_reason, saturate_s=time.perf_counter() - t, configs=len(seen),
             nodes=len(list(m["graph"].compute_nodes())),
             precision=graph_precision(m["graph"].types().values()))


def config_key(sig) -> tuple[str, str, str]:
    from eqsat_nb.cost.db import canonical_json
    from eqsat_nb.cost.measured import signature_key
    attrs, operands = signature_key(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
    return sig.op, canonical_json(attrs), canonical_json(operands)


def describe(sig) -> str:
    """e.g. 'conv2d 1x256x28x28 * 512x1x3x3 stride=1,1'."""
    shapes = " * ".join("x".join(map(str, t.shape)) for t in sig.inputs)
    attrs = " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, tuple) else v}"
                     for k, v in sig.attrs if k not in ("sizes",))
    return f"{sig.op} {shapes} {attrs}".strip()


def measure_order(models: list[dict[str, Any]]) -> list:
    """Every model's configurations, the original graphs' first (in model order), then the
    rest of the saturated e-graphs', each once."""
    from eqsat_nb.cost.model import graph_signatures
    seen: dict = {}
    for m in models:
        for s in graph_signatures(m["graph"]):
            seen.setdefault(config_key(s), s)
    for m in models:
        for s in m["signatures"]:
            seen.setdefault(config_key(s), s)
    return list(seen.values())


def precision_order(order: Iterable, precision: str) -> list:
    """The measurable signatures of `order` (not free, not opaque) with their floats in
    `precision`'s type (`cost.table.in_precision`), each resulting configuration once, first
    occurrence kept: what that precision's table measures (an fp16 model's f16 configurations
    and an fp32 model's f32 ones meet in f32 for fp32 and tf32, in bf16 for bf16)."""
    from eqsat_nb.cost.model import FREE_OPS
    from eqsat_nb.cost.table import in_precision
    out: dict = {}
    for s in order:
        if s.op in FREE_OPS or s.op == "opaque":
            continue
        t = in_precision(s, precision)
        out.setdefault(config_key(t), t)
    return list(out.values())


# ------------------------------------------------------------------ phase 2: per-op times
def measure_configs(order: list, model, clock: Clock, stop_at: float, label: str = "",
                    skip: Iterable = ()) -> dict:
    """{config key: (signature, µs)} for the configurations of `order` (`precision_order`)
    measured before the clock reaches `stop_at` seconds (`skip`: keys not to measure)."""
    skip = set(skip)
    out: dict = {}
    last = clock.elapsed()
    todo = [s for s in order if config_key(s) not in skip]
    for i, sig in enumerate(todo):
        if clock.elapsed() > stop_at:
            log(clock, f"measure {label}: its budget share is spent after {len(out)} of "
                f"{len(todo)} configurations; the rest are priced by the roofline")
            break
        k = config_key(sig)
        if k in out:
            continue
        try:
            us = model.measure(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
        except (TirError, NotImplementedError) as e:
            log(clock, f"measure {label}: skipped {describe(sig)}: {e}")
            continue
        out[k] = (sig, us)
        if clock.elapsed() - last > 15 or i + 1 == len(todo):
            last = clock.elapsed()
            log(clock, f"measure {label}: {len(out)} of {len(todo)} configurations")
    return out


def reuse_for_tf32(fp32: Mapping, order: Iterable) -> dict:
    """The fp32 measurements of the configurations in `order` whose operator TF32 does not
    change (not in `TF32_OPS`): what the tf32 table takes over (same kernels)."""
    keys = {config_key(s) for s in order if s.op not in TF32_OPS}
    return {k: v for k, v in fp32.items() if k in keys}


def table_text(name: str, measured: Mapping, precision: str, device: str, base_profile: str,
               notes: Mapping[str, Any]) -> str:
    """The cost table of `measured` ({key: (signature, µs)}) for `precision`: rows keyed with
    the operands' floats in the precision's type, the "precision" field set."""
    from eqsat_nb.cost.table import table_json, table_rows
    return table_json(name, table_rows(measured.values(), precision), "torch", device,
                      base_profile, notes, precision=precision)


def table_file_name(base: str, precision: str) -> str:
    """`h100-measured` for fp32, `h100-measured-bf16` etc.: the names cost/select.py looks
    for (`measured_table`)."""
    return base if precision == "fp32" else f"{base}-{precision}"


# Per-configuration overhead assumed by `plan_seconds` on a GPU: operand creation, warm-up,
# CUDA graph capture and the Python around them, plus cuDNN's algorithm search for a conv
# (benchmark mode tries every algorithm once). The plan errs high: on the H100 1 229
# configurations took 29.7 s against 68 s planned, on the H200 1 286 took 26.9 s against 70 s
# (21-24 ms each); kept, so that a plan that fits the budget surely does.
OVERHEAD_S = {"conv2d": 0.04, "other": 0.01}


def plan_seconds(order: list, analytic, args) -> float:
    """Estimated seconds to measure `order` with the tool's settings: per configuration its
    overhead, warm-up calls and at least `min_repeats` (5) replays of `calls` calls, or
    `target_s` of replays, at the analytic profile's price."""
    total = 0.0
    for sig in order:
        one = analytic.cost(sig) * 1e-6
        replays = max(5 * args.calls * one, args.target_s)
        total += OVERHEAD_S.get(sig.op, OVERHEAD_S["other"]) + (args.warmups + args.calls) * one \
            + replays
    return total


def op_errors(measured: Mapping, analytic) -> dict[str, dict[str, Any]]:
    """Per operator kind: configurations, median and worst ratio roofline / measured."""
    by_op: dict[str, list] = defaultdict(list)
    for sig, us in measured.values():
        if us > 0:
            by_op[sig.op].append((analytic.cost(sig) / us, sig, us))
    out = {}
    for op, rows in sorted(by_op.items()):
        ratios = [r for r, _, _ in rows]
        worst = max(rows, key=lambda x: abs(math.log(x[0])) if x[0] > 0 else math.inf)
        out[op] = {"configs": len(rows), "median_ratio": statistics.median(ratios),
                   "worst_ratio": worst[0], "worst_config": describe(worst[1]),
                   "worst_measured_us": worst[2], "worst_estimated_us": analytic.cost(worst[1])}
    return out


# ------------------------------------------------------------------ phases 3 and 4
def by_op_sum(model, graph) -> Counter:
    """Estimated µs per operator kind of `graph`'s compute nodes."""
    from eqsat_nb.cost.model import graph_signatures
    c: Counter = Counter()
    for sig in graph_signatures(graph):
        c[sig.op] += model.cost(sig)
    return c


def kind_of(op: str) -> str:
    """The kind (`KINDS`) a whole-graph profile attributes an IR operator's kernels to."""
    return op if op in ("matmul", "conv2d") else "other"


def kind_savings(est_original: Mapping[str, float], est_optimized: Mapping[str, float],
                 kernels_original: Mapping[str, float] | None,
                 kernels_optimized: Mapping[str, float] | None,
                 whole_original: float | None, whole_optimized: float | None
                 ) -> dict[str, dict[str, float | None]]:
    """Per kind (`KINDS`): the saving original -> optimized estimated (`est_*`: µs per IR
    operator kind) and measured: GEMM and convolution kernel time from the profiles
    (`kernels_*`, torch_graph.kernel_times), and for "other" the rest of the whole-graph time
    (`whole_*` less those kernels: the other kernels, launches and gaps)."""
    est: dict[str, float] = defaultdict(float)
    for op, us in est_original.items():
        est[kind_of(op)] += us
    for op, us in est_optimized.items():
        est[kind_of(op)] -= us
    out: dict[str, dict[str, float | None]] = {}
    for kind in KINDS:
        meas: float | None = None
        if kernels_original is not None and kernels_optimized is not None:
            if kind != "other":
                meas = kernels_original[kind] - kernels_optimized[kind]
            elif whole_original is not None and whole_optimized is not None:
                rest_o = whole_original - kernels_original["matmul"] - kernels_original["conv2d"]
                rest_p = whole_optimized - kernels_optimized["matmul"] \
                    - kernels_optimized["conv2d"]
                meas = rest_o - rest_p
        out[kind] = {"estimated_us": est[kind], "measured_us": meas}
    return out


def differs(estimated: float | None, measured: float | None) -> bool:
    """A measured gain that differs from its estimate by more than a third (and by more than
    one percentage point, below which timing noise decides)."""
    if estimated is None or measured is None:
        return False
    return abs(measured - estimated) > abs(estimated) / 3 and abs(measured - estimated) > 1.0


def compile_line(name: str, est_pct: float, asis_pct: float | None, compiled_pct: float,
                 kinds: Mapping[str, Mapping[str, float | None]],
                 est_by_op: Mapping[str, tuple[float, float]]) -> str:
    """The report's line for a model whose gain under torch.compile differs from its estimate:
    the kind whose estimated and measured savings differ most, and for "other" the IR operator
    kinds whose estimated savings it holds."""
    head = (f"{name}: estimated {est_pct:.1f} %, measured {compiled_pct:.1f} % under "
            f"torch.compile" + (f" ({asis_pct:.1f} % as-is)" if asis_pct is not None else ""))
    known = {k: v for k, v in kinds.items() if v.get("measured_us") is not None}
    if not known:
        return head
    kind = max(known, key=lambda k: abs(known[k]["estimated_us"] - known[k]["measured_us"]))
    est, meas = known[kind]["estimated_us"], known[kind]["measured_us"]
    if kind == "other":
        ops = sorted(((o, a - b) for o, (a, b) in est_by_op.items() if kind_of(o) == "other"
                      and abs(a - b) > 0.05), key=lambda x: -abs(x[1]))[:3]
        what = "the other operators" + (
            " (estimated: " + ", ".join(f"{o} {s:.1f} µs" for o, s in ops) + ")" if ops else "")
        where = "of the rest of the whole-graph time (Inductor's fused kernels, launches)"
    else:
        what = kind
        where = "of " + ("GEMM" if kind == "matmul" else "convolution") + " kernel time"
    return (f"{head}; {what}: the rewrite saves {est:.1f} µs estimated, {meas:.1f} µs {where} "
            f"under torch.compile")


def pct(before: float | None, after: float | None) -> float | None:
    if not before or not after:
        return None
    return (before / after - 1.0) * 100.0


def fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def check_against(ref: list, outs: dict[str, list], precision: str) -> dict[str, Any]:
    """Each graph's relative error against the float32 reference and whether the optimized
    one passes `precision`'s rule (the original's own error is its allowance)."""
    from eqsat_nb.cost.torch_graph import relative_error
    from eqsat_nb.precision import tolerance

    tol = tolerance(precision)
    err = {n: relative_error(ref, o) for n, o in outs.items()}
    if tol.relative:
        allowed = tol.factor * err["original"] + tol.floor
    else:
        allowed = tol.rtol
    return {"rel_error": err, "allowed": allowed, "ok": err["optimized"] <= allowed}


class CompileTimes:
    """What the next compilation is predicted to take, from those so far (after Inductor's
    warm-up, `warm_up_compile`): a least-squares line a + b * nodes through them (a, b >= 0)
    once two graph sizes are known, else the one seen scaled by nodes (which overestimates a
    larger graph: its fixed part is scaled too). The models are compiled smallest first, so a
    prediction extrapolates from smaller graphs."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []

    def add(self, seconds: float, nodes: int) -> None:
        self.seen.append((seconds, max(nodes, 1)))

    def predict(self, nodes: int) -> float | None:
        if not self.seen:
            return None
        xs = [n for _, n in self.seen]
        ys = [t for t, _ in self.seen]
        if len(set(xs)) < 2:
            return statistics.mean(t / n for t, n in self.seen) * nodes
        mx, my = statistics.mean(xs), statistics.mean(ys)
        b = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                / sum((x - mx) ** 2 for x in xs))
        a = max(0.0, my - b * mx)
        return a + b * nodes


def warm_up_compile(torch, device: str) -> float:
    """Compile and run a two-operator function once: Inductor's imports, its compile workers
    and (on a GPU) Triton's first kernel, so that the models' compilations time only
    themselves. Returns the seconds it took."""
    t = time.perf_counter()
    x = torch.ones(64, 64, device=device)
    fn = torch.compile(lambda a: torch.relu(a @ a + 1.0), fullgraph=True)
    with torch.inference_mode():
        fn(x)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    torch._dynamo.reset()
    return time.perf_counter() - t


def run_asis(m: dict[str, Any], optimized, precision: str, device: str, args, clock: Clock
             ) -> tuple[dict[str, Any], Any]:
    """Check and time the original and optimized graph of one model as-is in `precision`
    (CUDA graph replays on a GPU, a synchronised loop of calls on the CPU), profile one run of
    each. Returns the results and the float32 reference outputs (for the compiled check)."""
    import torch

    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, kernel_times, time_alternately
    from eqsat_nb.precision import IR_TYPE

    ref_graph = TorchGraph(m["graph"], Leaves(device, m["weights"], seed=0, float_type="f32"))
    ref = ref_graph.outputs()
    ref_graph.release()
    del ref_graph
    leaves = Leaves(device, m["weights"], seed=0, float_type=IR_TYPE[precision])
    graphs = {"original": TorchGraph(m["graph"], leaves)}
    same = optimized == m["graph"]
    graphs["optimized"] = graphs["original"] if same else TorchGraph(optimized, leaves)
    out: dict[str, Any] = {"check": check_against(
        ref, {n: g.outputs() for n, g in graphs.items()}, precision)}
    if not out["check"]["ok"]:
        log(clock, f"{m['name']}: the optimized graph fails the {precision} check on the device "
            f"({out['check']['rel_error']})")
    out["kernels"] = {n: graphs[n].kernels for n in graphs}
    method = "graph" if device.startswith("cuda") else "eager"
    distinct = [graphs["original"]] if same else [graphs["original"], graphs["optimized"]]
    per = max(1.0, min(args.e2e_budget, clock.left() / 4))
    try:
        samples = time_alternately(distinct, method, rounds=args.rounds, budget_s=per)
    except RuntimeError as e:           # a graph CUDA graphs cannot capture: plain calls
        log(clock, f"{m['name']}: CUDA graph capture failed ({str(e).strip()[:200]}); timed "
            "as back-to-back calls")
        for g in distinct:
            g.release()
        method = "loop"
        samples = time_alternately(distinct, method, rounds=args.rounds, budget_s=per)
    for n, xs in zip(("original", "optimized"), samples * (2 if same else 1)):
        out[n] = {"us": statistics.median(xs), "rounds": len(xs),
                  "spread": (max(xs) - min(xs)) / statistics.median(xs)}
    out["method"] = method
    out["pct"] = pct(out["original"]["us"], out["optimized"]["us"])
    try:
        prof = {"original": kernel_times(graphs["original"])}
        prof["optimized"] = prof["original"] if same else kernel_times(graphs["optimized"])
        out["profile"] = prof
    except Exception as e:              # the profiler is a diagnosis: never lose the timing
        log(clock, f"{m['name']}: profiling failed: {type(e).__name__}: {e}")
    for g in graphs.values():
        g.release()
    del graphs, leaves
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out, ref


def run_compiled(m: dict[str, Any], optimized, ref: list, precision: str, device: str, args,
                 clock: Clock) -> dict[str, Any]:
    """Compile the original and optimized graph of one model with torch.compile, check, time
    them alternately and profile one run of each."""
    import torch

    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, kernel_times, time_alternately
    from eqsat_nb.precision import IR_TYPE

    torch._dynamo.reset()
    leaves = Leaves(device, m["weights"], seed=0, float_type=IR_TYPE[precision])
    same = optimized == m["graph"]
    names = ("original",) if same else ("original", "optimized")
    graphs = {n: TorchGraph(m["graph"] if n == "original" else optimized, leaves).compiled(
        args.compile_mode) for n in names}
    out: dict[str, Any] = {"compile_s": {n: graphs[n].compile() for n in names}}
    out["fx_graph_cache"] = {n: graphs[n].cache for n in names}
    if same:
        graphs["optimized"] = graphs["original"]
        out["compile_s"]["optimized"] = 0.0
    out["check"] = check_against(ref, {n: g.outputs() for n, g in graphs.items()}, precision)
    if not out["check"]["ok"]:
        log(clock, f"{m['name']}: the compiled optimized graph fails the {precision} check "
            f"({out['check']['rel_error']})")
    per = max(1.0, min(args.e2e_budget, clock.left() / 4))
    samples = time_alternately([graphs[n] for n in names], "loop", rounds=args.rounds,
                               budget_s=per)
    for n, xs in zip(("original", "optimized"), samples * (2 if same else 1)):
        out[n] = {"us": statistics.median(xs), "rounds": len(xs),
                  "spread": (max(xs) - min(xs)) / statistics.median(xs)}
    out["method"] = "loop"
    out["pct"] = pct(out["original"]["us"], out["optimized"]["us"])
    try:
        prof = {"original": kernel_times(graphs["original"])}
        prof["optimized"] = prof["original"] if same else kernel_times(graphs["optimized"])
        out["profile"] = prof
    except Exception as e:
        log(clock, f"{m['name']}: profiling the compiled graphs failed: {type(e).__name__}: {e}")
    for g in graphs.values():
        g.release()
    del graphs, leaves
    torch._dynamo.reset()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def compile_worker() -> int:
    """`--compile-worker`: compile graphs so that Inductor's on-disk caches (its FX graph cache
    and the compiled kernels) hold them when the main process compiles the same graphs. Reads
    one JSON job a line on stdin ({"id", "model": the model's file, "graph": a .tir file of the
    graph to compile or null for the model's own, "device", "float_type", "mode"}), answers one
    JSON line each ({"id", "s": seconds, "error"}). The values of the tensors do not matter to
    the compiler, but the model's own weights are used: a folded opaque node may read them
    (e.g. a shape)."""
    import torch

    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph
    from eqsat_nb.ir.parse import load

    loaded: dict[str, dict[str, Any]] = {}
    for line in sys.stdin:
        job = json.loads(line)
        t = time.perf_counter()
        answer: dict[str, Any] = {"id": job["id"]}
        try:
            m = loaded.get(job["model"]) or load_model(job["model"])
            loaded.clear()
            loaded[job["model"]] = m
            graph = load(job["graph"]) if job.get("graph") else m["graph"]
            leaves = Leaves(job["device"], m["weights"], seed=0, float_type=job["float_type"])
            if job["device"] == "cpu":
                torch.set_num_threads(1)
            cg = TorchGraph(graph, leaves).compiled(job.get("mode"))
            cg.compile()
            cg.release()
            del cg, leaves
        except Exception as e:      # reported, the main process compiles it anyway
            answer["error"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
        torch._dynamo.reset()
        if job["device"].startswith("cuda"):
            torch.cuda.empty_cache()
        answer["s"] = time.perf_counter() - t
        print(json.dumps(answer), flush=True)
    return 0


class WarmPool:
    """Background processes running `compile_worker`: each model's graphs are compiled there
    as soon as they are known (smallest first), on other cores, while the main process extracts
    and times, so that its own compilation of them mostly reads Inductor's caches. `wait(id)`
    blocks until that job is done (or `timeout`); `cold[id]` is the seconds the worker took."""

    def __init__(self, workers: int, folder: Path) -> None:
        import queue
        import threading

        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.jobs: "queue.PriorityQueue" = queue.PriorityQueue()
        self.done: dict[str, threading.Event] = {}
        self.cold: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self.procs = []
        self.seq = 0
        # each worker's Inductor compiles its kernels with 2 processes (its default is one per
        # core, for every worker), and runs the compiled code on 1 CPU thread
        env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": str(WORKER_COMPILE_THREADS),
               "OMP_NUM_THREADS": "1"}
        for _ in range(workers):
            proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()),
                                     "--compile-worker"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                    env=env)
            self.procs.append(proc)
            threading.Thread(target=self._serve, args=(proc,), daemon=True).start()

    def _serve(self, proc: subprocess.Popen) -> None:
        while True:
            _, _, job = self.jobs.get()
            if job is None:
                break
            try:
                proc.stdin.write(json.dumps(job) + "\n")
                proc.stdin.flush()
                answer = json.loads(proc.stdout.readline() or "{}")
            except (OSError, ValueError) as e:
                answer = {"error": f"worker: {e}"}
            if "s" in answer:
                self.cold[job["id"]] = answer["s"]
            if answer.get("error") or not answer:
                self.errors[job["id"]] = answer.get("error", "the worker exited")
            self.done[job["id"]].set()
            if not answer:
                break

    def submit(self, job_id: str, model_file: str, graph: Any, device: str, float_type: str,
               mode: str | None, size: int) -> None:
        """Queue the compilation of `graph` (None: the model's own) of the model in
        `model_file`; smaller sizes are taken first."""
        import threading

        from eqsat_nb.ir.printer import print_graph

        path = None
        if graph is not None:
            path = self.folder / f"{len(self.done)}.tir"
            path.write_text(print_graph(graph))
        self.done[job_id] = threading.Event()
        self.seq += 1
        self.jobs.put((size, self.seq, {"id": job_id, "model": model_file,
                                        "graph": str(path) if path else None,
                                        "device": device, "float_type": float_type,
                                        "mode": mode}))

    def wait(self, job_id: str, timeout: float) -> bool:
        ev = self.done.get(job_id)
        return ev is not None and ev.wait(max(0.0, timeout))

    def close(self) -> None:
        """Stop the workers (a job under way is abandoned)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for _ in self.procs:
            self.jobs.put((-1, -1, None))


def compile_unavailable(torch, kind: str) -> str | None:
    """Why torch.compile cannot run here (None when it can): Inductor builds C (CPU) and Triton
    launcher stubs (GPU) with a C compiler, and the GPU path needs Triton."""
    if not hasattr(torch, "compile"):
        return f"this PyTorch ({torch.__version__}) has no torch.compile"
    if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
            or os.environ.get("CC")):
        return "no C compiler (cc, gcc or clang) on PATH: Inductor needs one"
    if kind == "cuda":
        try:
            import triton  # noqa: F401
        except ImportError:
            return "Triton is not installed: Inductor's GPU backend needs it"
    return None


def update_summary(row: dict[str, Any], precision: str) -> None:
    """The per-kind savings and the compile line of a model row from what it holds."""
    e = row.get("e2e", {})
    est = row.get("est", {}).get(precision)
    if not est:
        return
    est_by_op = row["est_by_op"]
    orig = {o: a for o, (a, _) in est_by_op.items()}
    opt = {o: b for o, (_, b) in est_by_op.items()}
    kinds = {}
    for method in ("asis", "compiled"):
        r = e.get(method)
        if not r:
            continue
        prof = r.get("profile") or {}
        kinds[method] = kind_savings(orig, opt, prof.get("original"), prof.get("optimized"),
                                     r["original"]["us"], r["optimized"]["us"])
    row["kinds"] = kinds
    comp = e.get("compiled")
    row.pop("note", None)
    if comp and differs(est["pct"], comp["pct"]):
        asis = e.get("asis", {}).get("pct")
        row["note"] = compile_line(row["name"], est["pct"], asis, comp["pct"],
                                   kinds.get("compiled", {}), est_by_op)


def compile_cell(c: Mapping[str, Any]) -> str:
    """Seconds the timed process spent compiling both graphs, and in parentheses what the
    background compilation (cold caches) took, when there was one."""
    if not c.get("compile_s"):
        return "–"
    text = f"{sum(c['compile_s'].values()):.0f}"
    cold = [v for v in (c.get("background_compile_s") or {}).values() if v is not None]
    return text + (f" ({sum(cold):.0f})" if cold else "")


def markdown(doc: dict[str, Any]) -> str:
    """The report: estimates per precision and the measured speed-ups, the roofline's per-op
    error per precision, the lines of the models whose compiled gain differs."""
    e2e_p = doc["e2e_precision"]
    precisions = list(doc["tables"])
    t = doc["tables"]
    lines = [f"Device: {doc['device']} ({doc['fingerprint']}); PyTorch {doc['torch']}; "
             f"budget {doc['budget_s']:.0f} s, used {doc.get('total_s', 0):.0f} s. Tables: "
             + "; ".join(f"{p}: {v['name']} ({v['measured']} of {v['configs']} configurations "
                         f"measured in {v['measure_s']:.0f} s"
                         + (f", {v['reused']} taken from fp32" if v.get("reused") else "") + ")"
                         for p, v in t.items()) + ".", "",
             f"Estimated speed-up (%: original / optimized − 1) by each precision's table, the "
             f"graph that table chose; measured in {e2e_p} (every float tensor in {e2e_p}) for "
             f"the graph the {e2e_p} table chose: as-is ("
             + ("CUDA graph replays" if doc["method"] == "graph" else
                "a synchronised loop of PyTorch calls (no GPU: the dry run)")
             + ") and under torch.compile (Inductor, "
             + (doc.get("compile_mode") or "default mode") + ", back-to-back calls), original "
             "and optimized alternated, medians. Compile s: both graphs in the timed process ("
             "in parentheses: in a background process first, with cold caches)."
             + (f" {doc['compile_workers']} background "
                f"process{'es' if doc['compile_workers'] != 1 else ''} compiled the graphs while the "
                "as-is and compiled timings ran (on other cores; their first runs share the "
                "device)." if doc.get("compile_workers") else ""), "",
             "| model | " + " | ".join(f"est. {p} %" for p in precisions)
             + f" | {e2e_p} as-is % | {e2e_p} torch.compile % | original as-is ms | original "
             f"compiled ms | compile s | {e2e_p} table misses | check |",
             "|---|" + "---|" * (len(precisions) + 7)]
    for r in doc["models"]:
        e = r.get("e2e", {})
        a, c = e.get("asis", {}), e.get("compiled", {})
        checks = [x["check"] for x in (a, c) if x.get("check")]
        check = "–" if not checks else ("ok" if all(x["ok"] for x in checks) else "FAILS") + \
            f" ({max(x['rel_error']['optimized'] for x in checks):.1e})"
        est = r.get("est", {})
        lines.append("| " + " | ".join(
            [r["name"]] + [fmt(est.get(p, {}).get("pct")) for p in precisions]
            + [fmt(a.get("pct")), fmt(c.get("pct")),
               fmt(a["original"]["us"] / 1e3 if a.get("original") else None, 3),
               fmt(c["original"]["us"] / 1e3 if c.get("original") else None, 3),
               compile_cell(c),
               str(est.get(e2e_p, {}).get("misses", "–")), check]) + " |")
    ops = sorted({op for p in precisions for op in t[p]["op_errors"]})
    lines += ["", f"Roofline ({doc['profile']} at each precision) against the measurement, per "
              "operator kind: median est./meas. (worst).", "",
              "| op | " + " | ".join(precisions) + " |", "|---|" + "---|" * len(precisions)]
    for op in ops:
        cells = []
        for p in precisions:
            s = t[p]["op_errors"].get(op)
            cells.append("–" if not s else f"{s['median_ratio']:.2f} ({s['worst_ratio']:.2f}), "
                         f"{s['configs']}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    notes = [r for r in doc["models"] if r.get("note")]
    compiled = [r for r in doc["models"] if r.get("e2e", {}).get("compiled")]
    lines += ["", f"Models whose measured gain under torch.compile differs from the {e2e_p} "
              f"table's estimate by more than a third ({len(notes)} of {len(compiled)} "
              "compiled), and the operator kind whose estimated and measured savings differ "
              "most:" if notes else f"No compiled model's measured gain differs from its "
              f"estimate by more than a third ({len(compiled)} compiled)."]
    lines += [f"- {r['note']}" for r in notes]
    if doc.get("skipped"):
        lines += ["", "Not done: " + "; ".join(doc["skipped"])]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ main
def table_name(device_name: str) -> str:
    low = device_name.lower()
    for gpu in ("h200", "h100", "a100"):
        if gpu in low:
            return f"{gpu}-measured"
    return "cpu-torch-measured" if device_name == "cpu" else "gpu-measured"


def write_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def export_jobs(folder: Path, names: Iterable[str], timeout: float) -> list[dict[str, Any]]:
    """Start tools/export_transformers.py for the `names` ("name" or "name:dtype") whose file
    is not in `folder` yet: one background process per dtype. Each job: its files, process,
    log file and deadline."""
    folder.mkdir(parents=True, exist_ok=True)
    by_dtype: dict[str, list[str]] = defaultdict(list)
    for spec in names:
        name, _, dtype = spec.partition(":")
        by_dtype[dtype or "fp32"].append(name)
    jobs = []
    for dtype, group in by_dtype.items():
        files = [folder / (f"{n}.onnx" if dtype == "fp32" else f"{n}_{dtype}.onnx")
                 for n in group]
        todo = [n for n, f in zip(group, files) if not f.exists()]
        job: dict[str, Any] = {"dtype": dtype, "files": files, "proc": None,
                               "log": folder / f"export_{dtype}.log"}
        if todo:
            cmd = [sys.executable, str(ROOT / "tools" / "export_transformers.py"), str(folder),
                   *todo, "--dtype", dtype]
            job["proc"] = subprocess.Popen(cmd, stdout=open(job["log"], "w"),
                                           stderr=subprocess.STDOUT)
            job["deadline"] = time.perf_counter() + timeout
        jobs.append(job)
    return jobs


def finish_exports(jobs: list[dict[str, Any]], clock: Clock, skipped: list[str]) -> list[str]:
    """Wait for the export jobs (each until its deadline) and return the files written."""
    files = []
    for job in jobs:
        p = job["proc"]
        if p is not None:
            try:
                p.wait(timeout=max(1.0, job["deadline"] - time.perf_counter()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                skipped.append(f"the {job['dtype']} export (its timeout)")
            if p.returncode:
                tail = job["log"].read_text(errors="replace").strip().splitlines()[-3:]
                log(clock, f"export ({job['dtype']}) exited {p.returncode}: {' | '.join(tail)}")
        for f in job["files"]:
            if f.exists():
                files.append(str(f))
            else:
                skipped.append(f"{f.name} (not exported)")
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", metavar="MODEL",
                    help="shipped example names or .tir/.onnx files (default: the 13 benchmarks)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_truth_out",
                    help="output folder (default $OUT, else ./gpu_truth_out)")
    ap.add_argument("--device-kind", choices=("cuda", "cpu"), default=None,
                    help="cuda (default when PyTorch sees a GPU) or cpu (the dry run)")
    ap.add_argument("--profile", default=None,
                    help="roofline profile the per-op error is taken of (default h100 on a GPU, "
                    "cpu on the CPU)")
    ap.add_argument("--table-name", default=None,
                    help="the fp32 table's name (default: from the GPU, e.g. h100-measured; the "
                    "others add -tf32, -fp16, -bf16)")
    ap.add_argument("--precisions", default=",".join(PRECISIONS),
                    help="precisions to measure, in order (default fp32,tf32,fp16,bf16)")
    ap.add_argument("--e2e-precision", default="bf16", choices=PRECISIONS,
                    help="precision of the whole-graph runs (default bf16)")
    ap.add_argument("--tables", default=None, metavar="DIR",
                    help="reuse the tables a previous call wrote in DIR instead of measuring")
    ap.add_argument("--export", default=None, metavar="DIR",
                    help="export the transformers into DIR (in the background) and add them")
    ap.add_argument("--export-models", default=",".join(TRANSFORMERS),
                    help="what --export writes (default " + ",".join(TRANSFORMERS) + ")")
    ap.add_argument("--export-timeout", type=float, default=180.0)
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for everything (420)")
    ap.add_argument("--measure-share", type=float, default=0.45,
                    help="share of what phase 1 left that per-op measurement may use (0.45)")
    ap.add_argument("--ilp-time-limit", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=50, help="most timed replays per op (50)")
    ap.add_argument("--warmups", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph of one op (20)")
    ap.add_argument("--target-s", type=float, default=0.03,
                    help="seconds of timed replays per op configuration (0.03)")
    ap.add_argument("--rounds", type=int, default=20, help="whole-graph timed rounds (20)")
    ap.add_argument("--e2e-budget", type=float, default=6.0,
                    help="seconds of whole-graph timing per model and method (6)")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="skip the torch.compile phase")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile mode (default: Inductor's default mode)")
    ap.add_argument("--compile-cap", type=float, default=90.0,
                    help="most seconds of compilation per model, both graphs (90)")
    ap.add_argument("--compile-workers", type=int, default=WORKERS,
                    help="background processes that compile the graphs ahead of the timing, "
                    f"filling Inductor's caches (default {WORKERS}: half the cores beyond 4, "
                    "at most 6)")
    ap.add_argument("--compile-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plan", action="store_true",
                    help="only saturate and count configurations; no torch needed")
    args = ap.parse_args(argv)
    if args.compile_worker:
        return compile_worker()
    args.precisions = [p for p in args.precisions.split(",") if p]
    bad = [p for p in args.precisions if p not in PRECISIONS]
    if bad:
        ap.error(f"unknown precision {bad[0]!r} (choose from {', '.join(PRECISIONS)})")
    if args.e2e_precision not in args.precisions:
        ap.error(f"--e2e-precision {args.e2e_precision} must be one of --precisions")
    clock = Clock(args.budget)
    try:
        return run(args, clock)
    except TirError as e:
        print(f"gpu_truth: error: {e}", file=sys.stderr)
        return 1


def run(args, clock: Clock) -> int:
    from eqsat_nb.cost.analytic import AnalyticCostModel
    from eqsat_nb.rules.parse import load_rules

    out = Path(args.out)
    skipped: list[str] = []
    jobs = export_jobs(Path(args.export), args.export_models.split(","),
                       args.export_timeout) if args.export and not args.plan else []
    if any(j["proc"] for j in jobs):
        log(clock, "exporting " + ", ".join(str(f) for j in jobs if j["proc"]
                                           for f in j["files"]) + " in the background")
    rules = load_rules(None)
    models = [load_model(n) for n in (args.models or list(BENCHMARK_MODELS))]
    log(clock, f"{len(models)} models; saturating")

    def saturate_all(ms: list[dict[str, Any]]) -> None:
        for m in ms:
            saturate_model(m, rules)
            log(clock, f"{m['name']}: {m['nodes']} nodes, {m['egraph_nodes']} e-graph nodes "
                f"({m['stop']}), {m['configs']} configurations, {m['saturate_s']:.1f} s")
    saturate_all(models)
    if jobs:
        exported = finish_exports(jobs, clock, skipped)
        more = []
        for f in exported:
            try:
                more.append(load_model(f))
            except TirError as e:
                skipped.append(f"{Path(f).name} (not loaded: {e})")
        saturate_all(more)
        models += more
    order = measure_order(models)
    profile_name = args.profile or ("cpu" if args.device_kind == "cpu" else "h100")
    orders = {p: precision_order(order, p) for p in args.precisions}
    for p in args.precisions:
        analytic = AnalyticCostModel(profile_name, p)
        todo = [s for s in orders[p] if p != "tf32" or s.op in TF32_OPS]
        log(clock, f"{p}: {len(orders[p])} distinct configurations, {len(todo)} to measure; "
            f"the {profile_name} roofline estimates "
            f"{sum(analytic.cost(s) for s in orders[p]) / 1e3:.1f} ms for one call of each; "
            f"measuring should take about {plan_seconds(todo, analytic, args):.0f} s on a GPU "
            "(plan_seconds)")
    if args.plan:
        return 0
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from eqsat_nb.cost.table import CostTable, TableCostModel, load_table
    from eqsat_nb.cost.torch_backend import TorchCostModel, set_tf32

    kind = args.device_kind or ("cuda" if torch.cuda.is_available() else None)
    if kind is None:
        raise TirError("PyTorch sees no GPU; pass --device-kind cpu for the dry run")
    device_name = torch.cuda.get_device_name(0) if kind == "cuda" else "cpu"
    base = args.table_name or table_name(device_name)
    if kind == "cuda":
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(1)
    doc: dict[str, Any] = {
        "device": device_name, "profile": profile_name, "torch": torch.__version__,
        "method": "graph" if kind == "cuda" else "eager", "budget_s": args.budget,
        "e2e_precision": args.e2e_precision, "compile_mode": args.compile_mode,
        "fingerprint": "", "tables": {}, "models": [], "skipped": skipped, "phases_s": {}}
    if kind == "cuda":
        doc["cuda"] = {"version": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                       "fp16_reduced_precision_reduction":
                           torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
                       "bf16_reduced_precision_reduction":
                           torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}
    doc["phases_s"]["saturate"] = clock.elapsed()

    # phase 2: per precision, a part of the measuring share of what phase 1 left
    tables: dict[str, TableCostModel] = {}
    t_phase = clock.elapsed()
    measure_end = t_phase + args.measure_share * clock.left()
    fp32_measured: dict = {}
    for i, p in enumerate(args.precisions):
        name = table_file_name(base, p)
        path = out / f"{name}.json"
        t = clock.elapsed()
        if args.tables:
            src = Path(args.tables) / f"{name}.json"
            table = load_table(src)
            if src.resolve() != path.resolve():
                shutil.copyfile(src, path)
            rows = [(s, us) for s, us in table.samples()]
            measured = {config_key(s): (s, us) for s, us in rows}
            doc["fingerprint"] = table.device
            info = {"name": name, "file": path.name, "measured": len(measured),
                    "configs": len(orders[p]), "measure_s": 0.0, "reused": 0,
                    "from": str(src)}
            log(clock, f"{p}: {len(measured)} configurations from {src}")
        else:
            tm = TorchCostModel(None, device=kind, repeats=args.repeats, warmups=args.warmups,
                                calls=args.calls, target_s=args.target_s, tf32=p == "tf32")
            doc["fingerprint"] = tm.device.replace("|tf32", "")
            stop_at = t + (measure_end - t) / (len(args.precisions) - i)
            reused = reuse_for_tf32(fp32_measured, orders[p]) if p == "tf32" else {}
            measured = dict(reused)
            measured.update(measure_configs(orders[p], tm, clock, stop_at, p, skip=reused))
            if p == "fp32":
                fp32_measured = measured
            notes = {"method": tm.method, "calls": args.calls, "precision": p,
                     "tf32": p == "tf32", "uncaptured": tm.uncaptured,
                     "measured": len(measured) - len(reused), "configs": len(orders[p]),
                     "models": [m["name"] for m in models], "torch": torch.__version__}
            if reused:
                notes["from_fp32"] = (f"{len(reused)} configurations of operators other than "
                                      f"{' and '.join(TF32_OPS)} (TF32 changes only cuBLAS "
                                      "GEMMs and cuDNN convolutions): the fp32 measurement")
            if kind == "cuda":
                notes.update(doc["cuda"])
            path.write_text(table_text(name, measured, p, tm.device, profile_name, notes))
            table = load_table(path)
            info = {"name": name, "file": path.name, "measured": len(measured) - len(reused),
                    "reused": len(reused), "configs": len(orders[p]),
                    "measure_s": clock.elapsed() - t, "uncaptured": tm.uncaptured}
            log(clock, f"{p}: measured {info['measured']} configurations in "
                f"{info['measure_s']:.1f} s; wrote {path}")
        info["op_errors"] = op_errors(measured, AnalyticCostModel(profile_name, p))
        doc["tables"][p] = info
        tables[p] = TableCostModel(CostTable(json.loads(path.read_text()), str(path)))
        write_json(out / "gpu_truth.json", doc)
    if kind == "cuda":
        set_tf32(torch, False)
    doc["phases_s"]["measure"] = clock.elapsed() - t_phase

    # phase 3: the e2e precision's extraction and the as-is whole-graph runs
    from eqsat_nb.optimize import Options, extract_saturated
    from eqsat_nb.precision import IR_TYPE

    e2e_p = args.e2e_precision
    dev = "cuda" if kind == "cuda" else "cpu"
    rows: dict[str, dict[str, Any]] = {}
    optimized: dict[str, Any] = {}
    refs: dict[str, Any] = {}

    def estimate(m: dict[str, Any], p: str, ilp: float) -> Any:
        model = tables[p]
        model.hits = model.misses = 0
        t = time.perf_counter()
        res = extract_saturated(m["egraph"], m["graph"], model, Options(ilp_time_limit=ilp))
        rows[m["name"]].setdefault("est", {})[p] = {
            "pct": res.speedup_pct, "before_us": res.cost_before, "after_us": res.cost_after,
            "extraction": res.extraction, "misses": model.misses, "hits": model.hits,
            "ops": len(list(res.optimized.compute_nodes())), "s": time.perf_counter() - t}
        return res

    why = compile_unavailable(torch, kind) if args.compile else "--no-compile"
    pool = None
    if not why and args.compile_workers > 0:
        import tempfile
        pool = WarmPool(args.compile_workers, Path(tempfile.mkdtemp(prefix="gpu_truth_graphs_")))
        doc["compile_workers"] = args.compile_workers
        log(clock, f"{args.compile_workers} background process"
            f"{'es' if args.compile_workers != 1 else ''} compile the graphs ahead")
    t_phase = clock.elapsed()
    for i, m in enumerate(models):
        row = rows[m["name"]] = {k: m[k] for k in ("name", "path", "nodes", "egraph_nodes",
                                                   "stop", "configs", "precision")}
        doc["models"].append(row)
        if clock.left() < 10:
            skipped.append(f"{m['name']} (budget: not extracted or run)")
            continue
        ilp = min(args.ilp_time_limit, max(1.0, clock.left() / (4 * (len(models) - i))))
        res = estimate(m, e2e_p, ilp)
        optimized[m["name"]] = res.optimized
        if pool is not None:
            ft = IR_TYPE[e2e_p]
            pool.submit(f"{m['name']}/original", m["path"], None, dev, ft, args.compile_mode,
                        m["nodes"])
            if res.optimized != m["graph"]:
                pool.submit(f"{m['name']}/optimized", m["path"], res.optimized, dev, ft,
                            args.compile_mode, len(list(res.optimized.compute_nodes())))
        est = by_op_sum(tables[e2e_p], m["graph"])
        est_opt = by_op_sum(tables[e2e_p], res.optimized)
        row["est_by_op"] = {op: (est[op], est_opt[op]) for op in sorted(set(est) | set(est_opt))}
        t = clock.elapsed()
        try:
            asis, refs[m["name"]] = run_asis(m, res.optimized, e2e_p, dev, args, clock)
            row.setdefault("e2e", {})["asis"] = asis
        except Exception as e:          # one model's failure never ends the run
            msg = f"{type(e).__name__}: {str(e).strip()[:300]}"
            skipped.append(f"{m['name']} whole graph ({msg})")
            log(clock, f"{m['name']}: whole graph not run: {msg}")
        update_summary(row, e2e_p)
        asis_pct = row.get("e2e", {}).get("asis", {}).get("pct")
        log(clock, f"{m['name']}: est. {res.speedup_pct:.1f} % ({e2e_p} table, "
            f"{row['est'][e2e_p]['misses']} misses, {res.extraction}); measured {fmt(asis_pct)} %"
            f" as-is; {clock.elapsed() - t:.1f} s of whole-graph runs")
        write_json(out / "gpu_truth.json", doc)
    doc["phases_s"]["asis"] = clock.elapsed() - t_phase

    # phase 4: torch.compile, while the budget lasts (less what phase 5 needs)
    t_phase = clock.elapsed()
    others = [p for p in args.precisions if p != e2e_p]
    reserve = min(0.25 * clock.left(), len(others) * sum(
        r["est"][e2e_p]["s"] for r in rows.values() if e2e_p in r.get("est", {})))
    if why:
        skipped.append(f"torch.compile ({why})")
        log(clock, f"torch.compile not run: {why}")
    else:
        if hasattr(torch._dynamo.config, "recompile_limit"):
            torch._dynamo.config.recompile_limit = 64
        else:
            torch._dynamo.config.cache_size_limit = 64
        times = CompileTimes()
        try:
            doc["compile_warm_up_s"] = warm_up_compile(torch, dev)
            log(clock, f"torch.compile warmed up in {doc['compile_warm_up_s']:.1f} s")
        except Exception as e:      # Inductor's errors have no common base class
            why = f"{type(e).__name__}: {str(e).strip()[:300]}"
            skipped.append(f"torch.compile (warm-up failed: {why})")
            log(clock, f"torch.compile not run: its warm-up failed: {why}")
    if not why:
        def size(m: dict[str, Any]) -> int:
            same = optimized[m["name"]] == m["graph"]
            return m["nodes"] + (0 if same else len(list(optimized[m["name"]].compute_nodes())))
        for m in sorted((m for m in models if m["name"] in refs), key=size):
            name = m["name"]
            nodes = size(m)
            guess = times.predict(nodes)
            room = clock.left() - reserve
            if room < 10 or (guess is not None and guess > min(args.compile_cap, room)):
                skipped.append(f"{name} under torch.compile (predicted "
                               f"{fmt(guess, 0)} s of compilation; {max(room, 0):.0f} s left, "
                               f"cap {args.compile_cap:.0f} s)")
                continue
            if pool is not None:        # its graphs compiled in the background first
                ids = [f"{name}/original", f"{name}/optimized"]
                warmed = all(pool.wait(j, min(args.compile_cap, room - 10)) for j in ids
                             if j in pool.done)
                guess = times.predict(nodes)
                if guess is not None and guess > min(args.compile_cap, clock.left() - reserve):
                    skipped.append(f"{name} under torch.compile (predicted {guess:.0f} s of "
                                   "compilation after waiting for the background compile)")
                    continue
            t = clock.elapsed()
            try:
                comp = run_compiled(m, optimized[name], refs[name], e2e_p, dev, args, clock)
            except Exception as e:      # Inductor's errors have no common base class
                msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e) else ''}"
                skipped.append(f"{name} under torch.compile ({msg})")
                log(clock, f"{name}: torch.compile failed: {msg}")
                torch._dynamo.reset()
                continue
            times.add(sum(comp["compile_s"].values()), nodes)
            if pool is not None:
                comp["cache_warmed"] = warmed
                comp["background_compile_s"] = {
                    n: pool.cold.get(f"{name}/{n}") for n in ("original", "optimized")}
                errors = {j: e for j, e in pool.errors.items() if j.startswith(name + "/")}
                if errors:
                    comp["background_errors"] = errors
            rows[name]["e2e"]["compiled"] = comp
            update_summary(rows[name], e2e_p)
            log(clock, f"{name}: under torch.compile est. {rows[name]['est'][e2e_p]['pct']:.1f} "
                f"%, measured {fmt(comp['pct'])} %; compiled in "
                f"{sum(comp['compile_s'].values()):.1f} s; {clock.elapsed() - t:.1f} s in all")
            write_json(out / "gpu_truth.json", doc)
    if pool is not None:
        pool.close()
    doc["phases_s"]["compile"] = clock.elapsed() - t_phase

    # phase 5: the other precisions' estimates
    t_phase = clock.elapsed()
    left_out = []
    for p in others:
        for i, m in enumerate(models):
            if m["name"] not in optimized:
                continue
            if clock.left() < 3:
                left_out.append(f"{m['name']} {p}")
                continue
            ilp = min(args.ilp_time_limit, max(1.0, clock.left() / (2 * (len(models) - i))))
            estimate(m, p, ilp)
        write_json(out / "gpu_truth.json", doc)
    if left_out:
        skipped.append("estimates (budget; `run --device <gpu> --precision P` computes them "
                       "from the tables): " + ", ".join(left_out))
    doc["phases_s"]["estimates"] = clock.elapsed() - t_phase
    doc["total_s"] = clock.elapsed()
    write_json(out / "gpu_truth.json", doc)
    text = markdown(doc)
    (out / "gpu_truth.md").write_text(text)
    print(text, flush=True)
    log(clock, f"done; wrote {out}/gpu_truth.json, gpu_truth.md, "
        + ", ".join(v["file"] for v in doc["tables"].values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
