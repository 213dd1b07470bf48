"""GPU truth: measure what the analytic GPU profiles claim, in one call on a machine with a GPU.

    python tools/gpu_truth.py [MODEL ...] [--out DIR] [--budget S] [--device-kind cuda|cpu]

MODEL: names of shipped examples (default: the 13 benchmark models) or .tir / .onnx files. The
command for a GPU machine without network access, and how the project travels there, are in tools/GPU_TRUTH.md.

Phases, in priority order within one time budget (`--budget`, default 420 s; a phase that would
not fit is cut short and says so, and the results so far are written after each phase):

1. Saturate every model's e-graph as `run` and `bench` do (the shipped rules, TENSAT's limits)
   and collect every distinct operator configuration it holds (`cost.model.egraph_signatures`).
2. Measure each configuration with the `torch` backend (`cost/torch_backend.py`: cuDNN
   benchmark mode, TF32 off unless `--tf32`, a CUDA graph of back-to-back calls timed with CUDA
   events, median over replays), the configurations of the original graphs first; write them as
   a cost table (`cost/table.py`) that `--device TABLE.json` (or, once committed to
   `eqsat_nb/cost/tables/`, `--device h100-measured`) loads. Stops at `--measure-share` of the
   budget; what is left unmeasured is priced by the analytic profile (counted in the report).
3. Per model: extract with the analytic profile (`--profile`, default h100 on a GPU) and with
   the measured table (`optimize`, ILP as `bench`), then run the original graph and both
   optimized graphs end to end in PyTorch on the device (`cost/torch_graph.py`: weights folded,
   each graph captured as a CUDA graph, the three timed alternately in rounds, medians; also a
   synchronised eager loop, `--eager-rounds`), after checking that the optimized graphs compute
   what the original does on the device (relative error).
4. Per-op estimate error (analytic profile / measured, per operator kind: median and worst),
   sum of per-op times against the whole-graph time, and the tables of docs/gpu-costs.md.

Writes under `--out` (default $OUT, else ./gpu_truth_out): `gpu_truth.json` (everything),
`gpu_truth.md` (the tables), `TABLE.json` (the measured cost table, named after the GPU, e.g.
`h100-measured.json`). `--device-kind cpu` is the dry run: torch on the CPU, one thread,
perf_counter, no CUDA graphs. `--plan` only saturates and counts configurations (no torch).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eqsat_nb.errors import TirError  # noqa: E402

BENCHMARK = ("bert", "inceptionv3", "mobilenetv2", "nasneta", "nasrnn", "resnet50", "resnext50",
             "squeezenet", "vgg19", "transformer_transducer", "vit_base", "vit_large", "vit_huge")
MISMATCH = 1e-3          # relative error above which an optimized graph is reported as different


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
def load_models(names: list[str]) -> list[dict[str, Any]]:
    """[{name, path, graph, weights}] for example names and .tir/.onnx paths."""
    from eqsat_nb.commands.run import load_source
    from eqsat_nb.resources import data_dir

    out = []
    for name in names:
        p = Path(name)
        if not p.exists():
            p = data_dir("ir_examples") / f"{name}.tir"
        if not p.exists():
            raise TirError(f"no such model file or shipped example {name!r}")
        graph, weights, _ = load_source(str(p))
        out.append({"name": p.stem, "path": str(p), "graph": graph, "weights": weights})
    return out


def saturated_signatures(graph, rules) -> tuple[list, dict[str, Any]]:
    """Distinct signatures of the saturated e-graph (as `run` builds it) and its figures."""
    from eqsat_nb.cost.model import egraph_signatures
    from eqsat_nb.egraph.convert import graph_to_egraph
    from eqsat_nb.search.saturate import Limits, saturate

    t = time.perf_counter()
    eg = graph_to_egraph(graph)
    report = saturate(eg, rules, Limits())
    seen: dict = {}
    for _, sig in egraph_signatures(eg):
        if sig is not None:
            seen.setdefault(sig, None)
    return list(seen), {"egraph_nodes": eg.num_nodes, "stop": report.stop_reason,
                        "saturate_s": time.perf_counter() - t}


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


# ------------------------------------------------------------------ phase 2: per-op times
def measure_configs(order: list, model, clock: Clock, stop_at: float) -> dict:
    """{config key: (signature, µs)} for the configurations of `order` measured before the
    clock reaches `stop_at` seconds."""
    from eqsat_nb.cost.model import FREE_OPS

    out: dict = {}
    last = 0.0
    for i, sig in enumerate(order):
        if clock.elapsed() > stop_at:
            log(clock, f"measure: budget share reached after {len(out)} of {len(order)} "
                f"configurations; the rest are priced by the analytic profile")
            break
        if sig.op in FREE_OPS or sig.op == "opaque":
            continue
        k = config_key(sig)
        if k in out:
            continue
        try:
            us = model.measure(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
        except (TirError, NotImplementedError) as e:
            log(clock, f"measure: skipped {describe(sig)}: {e}")
            continue
        out[k] = (sig, us)
        if clock.elapsed() - last > 15 or i + 1 == len(order):
            last = clock.elapsed()
            log(clock, f"measure: {len(out)} of {len(order)} configurations")
    return out


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


# ------------------------------------------------------------------ phase 3: end to end
def optimize_with(graph, cost_model, rules, ilp_time_limit: float):
    from eqsat_nb.optimize import Options, optimize
    return optimize(graph, cost_model, rules, Options(ilp_time_limit=ilp_time_limit))


def run_end_to_end(m: dict, variants: dict, device: str, args, clock: Clock) -> dict[str, Any]:
    """Check and time the variant graphs of one model in PyTorch (see the module doc)."""
    import torch

    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, relative_error, time_alternately

    leaves = Leaves(device, m["weights"], seed=0)
    out: dict[str, Any] = {}
    names = list(variants)
    graphs = {n: TorchGraph(variants[n], leaves) for n in names}
    ref = graphs["original"].outputs()
    for n in names:
        out.setdefault(n, {})["kernels"] = graphs[n].kernels
        if n != "original":
            err = relative_error(ref, graphs[n].outputs())
            out[n]["rel_error"] = err
            if not err <= MISMATCH:
                log(clock, f"{m['name']}: {n} differs from the original on the device "
                    f"(relative error {err:.2e})")
    distinct = []           # identical graphs are timed once
    same_as: dict[str, str] = {}
    for n in names:
        twin = next((d for d in distinct if variants[d] == variants[n]), None)
        if twin is None:
            distinct.append(n)
        else:
            same_as[n] = twin
    per = max(1.0, min(args.e2e_budget, clock.left() / 3))
    methods = [("graph", args.rounds)] if device.startswith("cuda") else []
    if args.eager_rounds > 0:
        methods.append(("eager", args.eager_rounds))
    for method, rounds in methods:
        try:
            samples = time_alternately([graphs[n] for n in distinct], method, rounds=rounds,
                                       budget_s=per)
        except RuntimeError as e:           # capture refused: say so, keep the rest
            log(clock, f"{m['name']}: {method} timing failed: {e}")
            continue
        for n, xs in zip(distinct, samples):
            out[n][f"{method}_us"] = statistics.median(xs)
            out[n][f"{method}_rounds"] = len(xs)
            out[n][f"{method}_spread"] = (max(xs) - min(xs)) / statistics.median(xs)
        for n, twin in same_as.items():
            for k in ("us", "rounds", "spread"):
                out[n][f"{method}_{k}"] = out[twin].get(f"{method}_{k}")
    for g in graphs.values():
        g.release()
    del graphs, leaves
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


# ------------------------------------------------------------------ phase 4: analysis
def op_errors(measured: dict, analytic) -> dict[str, dict[str, Any]]:
    """Per operator kind: configurations, median and worst ratio analytic / measured."""
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


def by_op_sum(model, graph) -> Counter:
    from eqsat_nb.cost.model import graph_signatures
    c: Counter = Counter()
    for sig in graph_signatures(graph):
        c[sig.op] += model.cost(sig)
    return c


def difference_line(orig, opt, analytic, table) -> str:
    """The operator kind whose estimated and measured cost changes (original -> optimized)
    disagree most: what made the speed-up differ from its estimate."""
    est = by_op_sum(analytic, orig)
    est.subtract(by_op_sum(analytic, opt))
    meas = by_op_sum(table, orig)
    meas.subtract(by_op_sum(table, opt))
    ops = set(est) | set(meas)
    if not ops:
        return ""
    op = max(ops, key=lambda o: abs(est[o] - meas[o]))
    return (f"{op}: the rewrite saves {est[op]:.1f} us estimated, {meas[op]:.1f} us by the "
            f"measured per-op times")


def pct(before: float | None, after: float | None) -> float | None:
    if not before or not after:
        return None
    return (before / after - 1.0) * 100.0


def fmt(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def markdown(doc: dict[str, Any]) -> str:
    rows = doc["models"]
    lines = [f"Device: {doc['device']}; analytic profile: {doc['profile']}; measured table: "
             f"{doc['table']['name']} ({doc['table']['measured']} of "
             f"{doc['table']['configs']} configurations measured); TF32 "
             f"{'on' if doc['tf32'] else 'off'}. End to end: "
             + ("CUDA graph replays" if doc["method"] == "graph" else "a synchronised loop of "
                "PyTorch calls (no GPU: the dry run)")
             + " (eager: a synchronised loop of PyTorch calls), original and optimized graphs "
             "alternated, medians. Estimates: the graph the profile (or table) chose against the "
             "original, by that profile (table).", "",
             "| model | est. analytic % | est. measured table % | measured e2e %, analytic "
             "choice | measured e2e %, table choice | eager e2e %, analytic choice | original "
             "e2e ms | sum of per-op ms | sum / e2e − 1 % | max rel. error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = r.get("e2e", {})
        orig = e.get("original", {})
        a, t = e.get("analytic", {}), e.get("table", {})
        key = "graph_us" if "graph_us" in orig else "eager_us"
        errs = [v.get("rel_error") for v in (a, t) if v.get("rel_error") is not None]
        lines.append("| " + " | ".join([
            r["name"], fmt(r.get("est_analytic_pct")), fmt(r.get("est_table_pct")),
            fmt(pct(orig.get(key), a.get(key))), fmt(pct(orig.get(key), t.get(key))),
            fmt(pct(orig.get("eager_us"), a.get("eager_us"))),
            fmt(orig[key] / 1e3 if orig.get(key) else None, 3),
            fmt(r.get("sum_measured_us", 0) / 1e3 if r.get("sum_measured_us") else None, 3),
            fmt(pct(r.get("sum_measured_us"), orig.get(key)) if orig.get(key) else None),
            "–" if not errs else f"{max(errs):.1e}"]) + " |")
    lines += ["", "| op | configs | median est./meas. | worst est./meas. | worst configuration "
              "(est. / meas. µs) |", "|---|---|---|---|---|"]
    for op, s in doc["op_errors"].items():
        lines.append(f"| {op} | {s['configs']} | {s['median_ratio']:.2f} | "
                     f"{s['worst_ratio']:.2f} | {s['worst_config']} "
                     f"({s['worst_estimated_us']:.1f} / {s['worst_measured_us']:.1f}) |")
    notes = [r for r in rows if r.get("note")]
    if notes:
        lines += ["", "Models whose measured speed-up differs from the analytic estimate by more "
                  "than a third:"]
        lines += [f"- {r['name']}: {r['note']}" for r in notes]
    skipped = doc.get("skipped") or []
    if skipped:
        lines += ["", "Not done within the budget or not runnable: " + "; ".join(skipped)]
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", metavar="MODEL",
                    help="shipped example names or .tir/.onnx files (default: the 13 benchmarks)")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_truth_out",
                    help="output folder (default $OUT, else ./gpu_truth_out)")
    ap.add_argument("--device-kind", choices=("cuda", "cpu"), default=None,
                    help="cuda (default when PyTorch sees a GPU) or cpu (the dry run)")
    ap.add_argument("--profile", default=None,
                    help="analytic profile to compare with (default h100 on a GPU, cpu on the CPU)")
    ap.add_argument("--table-name", default=None, help="default: from the GPU, e.g. h100-measured")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for everything (420)")
    ap.add_argument("--measure-share", type=float, default=0.5,
                    help="share of the budget per-op measurement may use (0.5)")
    ap.add_argument("--ilp-time-limit", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=50, help="most timed replays per op (50)")
    ap.add_argument("--warmups", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph of one op (20)")
    ap.add_argument("--target-s", type=float, default=0.03,
                    help="seconds of timed replays per op configuration (0.03)")
    ap.add_argument("--rounds", type=int, default=20, help="end-to-end rounds (CUDA graphs)")
    ap.add_argument("--eager-rounds", type=int, default=5, help="end-to-end rounds, eager loop")
    ap.add_argument("--e2e-budget", type=float, default=8.0, help="seconds per model and method")
    ap.add_argument("--tf32", action="store_true", help="let cuBLAS/cuDNN use TF32")
    ap.add_argument("--plan", action="store_true",
                    help="only saturate and count configurations; no torch needed")
    args = ap.parse_args(argv)
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
    models = load_models(args.models or list(BENCHMARK))
    rules = load_rules(None)
    log(clock, f"{len(models)} models; saturating")
    union: dict = {}
    first: list = []                 # original graphs' configurations first
    from eqsat_nb.cost.model import graph_signatures
    for m in models:
        sigs, info = saturated_signatures(m["graph"], rules)
        m.update(info)
        m["configs"] = len({config_key(s) for s in sigs})
        for s in graph_signatures(m["graph"]):
            first.append(s)
        for s in sigs:
            union.setdefault(config_key(s), s)
        log(clock, f"{m['name']}: {m['egraph_nodes']} e-graph nodes ({m['stop']}), "
            f"{m['configs']} configurations, {info['saturate_s']:.1f} s")
    order = list({config_key(s): s for s in first}.values())
    seen = {config_key(s) for s in order}
    order += [s for k, s in union.items() if k not in seen]
    profile_name = args.profile or ("cpu" if args.device_kind == "cpu" else "h100")
    analytic = AnalyticCostModel(profile_name)
    est_one_call = sum(analytic.cost(s) for s in order) / 1e6
    log(clock, f"{len(order)} distinct configurations; the {profile_name} profile estimates "
        f"{est_one_call * 1e3:.1f} ms for one call of each; measuring them all should take "
        f"about {plan_seconds(order, analytic, args):.0f} s on a GPU (plan_seconds)")
    if args.plan:
        return 0
    out.mkdir(parents=True, exist_ok=True)

    import torch

    from eqsat_nb.cost.table import CostTable, TableCostModel, table_json, table_rows
    from eqsat_nb.cost.torch_backend import TorchCostModel, set_tf32

    kind = args.device_kind or ("cuda" if torch.cuda.is_available() else None)
    if kind is None:
        raise TirError("PyTorch sees no GPU; pass --device-kind cpu for the dry run")
    device_name = torch.cuda.get_device_name(0) if kind == "cuda" else "cpu"
    name = args.table_name or table_name(device_name)
    if kind == "cuda":
        set_tf32(torch, args.tf32)
        torch.backends.cudnn.benchmark = True
    tm = TorchCostModel(None, device=kind, repeats=args.repeats, warmups=args.warmups,
                        calls=args.calls, target_s=args.target_s, tf32=args.tf32)
    log(clock, f"device {device_name}: {tm.device}")

    # phase 2: a share of what phase 1 (saturation, and Numba's compilation on a fresh
    # machine) left of the budget
    t = clock.elapsed()
    measured = measure_configs(order, tm, clock, t + args.measure_share * clock.left())
    measure_s = clock.elapsed() - t
    notes = {"method": tm.method, "calls": args.calls, "tf32": args.tf32,
             "uncaptured": tm.uncaptured, "measured": len(measured), "configs": len(order),
             "models": [m["name"] for m in models], "torch": torch.__version__}
    body = table_json(name, table_rows(measured.values()), "torch", tm.device, profile_name,
                      notes)
    (out / f"{name}.json").write_text(body)
    table = TableCostModel(CostTable(json.loads(body), str(out / f"{name}.json")))
    log(clock, f"measured {len(measured)} configurations in {measure_s:.1f} s; "
        f"wrote {out / (name + '.json')}")
    doc: dict[str, Any] = {
        "device": device_name, "fingerprint": tm.device, "profile": profile_name,
        "method": "graph" if kind == "cuda" else "eager",
        "tf32": args.tf32, "budget_s": args.budget,
        "table": {"name": name, "file": f"{name}.json", "measured": len(measured),
                  "configs": len(order), "measure_s": measure_s, "uncaptured": tm.uncaptured},
        "models": [], "op_errors": op_errors(measured, analytic), "skipped": []}
    write_json(out / "gpu_truth.json", doc)

    # phase 3
    dev = "cuda" if kind == "cuda" else "cpu"
    for m in models:
        if clock.left() < 10:
            doc["skipped"].append(f"{m['name']} (budget)")
            continue
        row: dict[str, Any] = {k: m[k] for k in ("name", "egraph_nodes", "stop", "configs")}
        t = clock.elapsed()
        ilp = min(args.ilp_time_limit, max(1.0, clock.left() / 6))
        ra = optimize_with(m["graph"], analytic, rules, ilp)
        table.misses = 0
        rt = optimize_with(m["graph"], table, rules, ilp)
        row.update(est_analytic_pct=ra.speedup_pct, est_table_pct=rt.speedup_pct,
                   extraction_analytic=ra.extraction, extraction_table=rt.extraction,
                   ops={"original": len(list(m["graph"].compute_nodes())),
                        "analytic": len(list(ra.optimized.compute_nodes())),
                        "table": len(list(rt.optimized.compute_nodes()))},
                   table_misses=table.misses, optimize_s=clock.elapsed() - t,
                   est_analytic_us={"original": ra.cost_before, "analytic": ra.cost_after},
                   sum_measured_us=rt.cost_before,
                   sum_measured_opt_us={"analytic": None, "table": rt.cost_after},
                   why_analytic=ra.changes[0].summary() if ra.changes else "")
        from eqsat_nb.cost.model import graph_cost
        row["sum_measured_opt_us"]["analytic"] = graph_cost(table, ra.optimized)
        variants = {"original": m["graph"], "analytic": ra.optimized, "table": rt.optimized}
        try:
            row["e2e"] = run_end_to_end(m, variants, dev, args, clock)
        except (NotImplementedError, ValueError, RuntimeError) as e:
            doc["skipped"].append(f"{m['name']} end to end ({e})")
            log(clock, f"{m['name']}: end to end not run: {e}")
        e2e = row.get("e2e", {})
        key = "graph_us" if "graph_us" in e2e.get("original", {}) else "eager_us"
        meas = pct(e2e.get("original", {}).get(key), e2e.get("analytic", {}).get(key))
        est = row["est_analytic_pct"]
        if meas is not None and abs(meas - est) > abs(est) / 3 and abs(meas - est) > 1.0:
            row["note"] = (f"estimated {est:.1f} %, measured {meas:.1f} %; "
                           + difference_line(m["graph"], ra.optimized, analytic, table))
        doc["models"].append(row)
        log(clock, f"{m['name']}: est. {est:.1f} % (analytic), {row['est_table_pct']:.1f} % "
            f"(table); measured {fmt(meas)} % ({key}); {clock.elapsed() - t:.1f} s")
        write_json(out / "gpu_truth.json", doc)
    doc["total_s"] = clock.elapsed()
    write_json(out / "gpu_truth.json", doc)
    text = markdown(doc)
    (out / "gpu_truth.md").write_text(text)
    print(text, flush=True)
    log(clock, f"done; wrote {out}/gpu_truth.json, gpu_truth.md, {name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
