"""`eqsat-nb run MODEL`: load, optimize, verify, write, report.

Nothing is written if verification finds a difference, and files are written atomically (a
temporary file renamed into place, with the mode `open()` would give), so an interrupted or failed
run never leaves a partial or wrong output behind. Existing files are only replaced with `--force`.

Verification is skipped, with a message saying so, when the graph is unchanged (nothing to check),
with `--no-verify`, and when checking would not fit: its estimated peak memory is over
`--verify-memory` (default half the available memory) or its estimated time over what
`--time-limit` leaves. `--time-limit` is the whole command's budget (search/limits.py Budget);
every onnxruntime run of the model stops at its end (stopping.py): in the import, an error and
nothing written; in verification, "not verified"; for ONNX output, the input written unchanged.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Mapping

from ..errors import RunStopped, TirError, VerificationError
from ..extract import METHODS
from ..precision import PRECISIONS
from ..search.limits import Limits
from .files import check_tir_output, check_writable, write_atomic, write_onnx  # noqa: F401 - re-exported

DEFAULT_LIMITS = Limits()


# ------------------------------------------------------------------ loading
def load_model(path: str) -> tuple[Any, dict]:
    """(graph, weight values by name) from a `.tir` or `.onnx` file."""
    graph, weights, _ = load_source(path)
    return graph, weights


def load_source(path: str, dims: Mapping[str, int] | None = None,
                input_shapes: Mapping[str, tuple[int, ...]] | None = None
                ) -> tuple[Any, dict, Any]:
    """(graph, weight values, the OnnxImport or None for `.tir`) from a file."""
    p = Path(path)
    if p.suffix.lower() == ".onnx":
        from ..onnx_io import read_onnx
        imp = read_onnx(p, dims, input_shapes)
        return imp.graph, imp.weights, imp
    if dims or input_shapes:
        raise TirError("--dim and --input-shape apply to ONNX models only", file=path)
    from ..ir.parse import load
    return load(path), {}, None


# ------------------------------------------------------------------ options
def add_search_options(c: argparse.ArgumentParser) -> None:
    """Search, extraction and cost options shared by `run` and `bench`."""
    s = c.add_argument_group("search")
    s.add_argument("--search", choices=("saturate", "mcts"), default="saturate",
                   help="saturate: TENSAT's schedule (default); mcts: Monte Carlo tree search "
                   "over rule applications")
    s.add_argument("--rules", action="append", metavar="FILE_OR_DIR",
                   help="rule files or folders (repeatable; default: the shipped rules)")
    s.add_argument("--node-limit", type=int, default=None,
                   help=f"e-graph node limit (default {DEFAULT_LIMITS.node_limit} for saturate, "
                   "2000 for mcts)")
    s.add_argument("--iter-limit", type=int, default=DEFAULT_LIMITS.iter_limit,
                   help=f"saturation iterations (default {DEFAULT_LIMITS.iter_limit})")
    s.add_argument("--k-multi", type=int, default=DEFAULT_LIMITS.k_multi,
                   help="iterations in which multi-pattern rules run "
                   f"(default {DEFAULT_LIMITS.k_multi})")
    s.add_argument("--match-limit", type=int, default=DEFAULT_LIMITS.match_limit,
                   help="saturate: matches a rule may have in an iteration before it is banned "
                   "for a few iterations (egg's BackoffScheduler; default %(default)s); 0: every "
                   "rule in every iteration, no bans (TENSAT's schedule)")
    s.add_argument("--time-limit", type=float, default=DEFAULT_LIMITS.time_limit,
                   help="seconds (default %(default)g): for run, the wall-clock budget that "
                   "search, extraction and verification share (Numba compilation on a first run "
                   "not counted); for bench, the search's")
    s.add_argument("--seed", type=int, default=0, help="seed for MCTS and verification inputs")
    s.add_argument("--budget", type=int, default=128, help="MCTS simulations per decision")
    s.add_argument("--depth", type=int, default=10, help="MCTS simulation depth")
    s.add_argument("--c-uct", type=float, default=None, help="MCTS exploration constant")
    s.add_argument("--workers", type=int, default=1, help="MCTS root-parallel processes")
    e = c.add_argument_group("extraction and costs")
    e.add_argument("--extract", choices=METHODS, default="ilp",
                   help="ilp (default; exact, with a time limit, warm-started from ocf+switch, "
                        "its fallback), ocf+switch (ocf, then the joint-switch pass: no solver, "
                        "the same answer on every machine), ocf, greedy")
    e.add_argument("--ilp-time-limit", type=float, default=10.0,
                   help="seconds of wall time, the ILP worker's start-up included, within 1 s "
                        "(default 10: on the benchmark e-graphs, up to 34 000 nodes, the answer "
                        "it keeps comes within 5 s; longer proves the bound)")
    # defaults None: Options' own (extract.ilp.STALL_SECONDS, GAP_PERCENT and GAP_WAIT, which the
    # help repeats), so that parsing the command line does not load numpy
    e.add_argument("--ilp-stall", type=float, default=None, metavar="SECONDS",
                   help="stop the ILP early when it has stalled: over the last max(SECONDS, "
                        "a quarter of its elapsed time) neither its answer improved nor its bound "
                        "closed the gap at 5 %% per 8 s (status 'stalled', with its gap; "
                        "default 3; 0: only --ilp-time-limit stops it)")
    e.add_argument("--ilp-gap", type=float, default=None, metavar="PERCENT",
                   help="stop the ILP once its answer is proven within PERCENT of the optimum "
                        "(HiGHS's bound) and has not improved for 0.5 s (status 'within_gap', "
                        "with its gap; default 2; 0: prove optimality or reach "
                        "--ilp-time-limit)")
    e.add_argument("--cost", default="analytic", choices=("analytic", "ort", "trt", "torch"),
                   help="cost backend (default analytic: instant roofline model)")
    e.add_argument("--device", default=None,
                   help="device for the analytic backend: cpu (default), a100, h100 or h200 "
                   "(times measured on that GPU), h100-roofline, a profile .json, or a "
                   "measured cost table (TABLE.json)")
    e.add_argument("--precision", default=None, choices=PRECISIONS,
                   help="the precision the model is priced in as deployed: fp32, tf32 (fp32 "
                   "with tensor-core GEMMs), fp16, bf16 (default: the model's own float type)")
    e.add_argument("--cost-db", default=None, metavar="PATH",
                   help="SQLite cost cache for measuring backends (default: user cache dir)")


def options_from_args(args: argparse.Namespace):
    """`optimize.Options` from the parsed command line."""
    from ..optimize import Options

    every_rule = args.match_limit is not None and args.match_limit <= 0
    limits = Limits(node_limit=args.node_limit or DEFAULT_LIMITS.node_limit,
                    iter_limit=args.iter_limit, k_multi=args.k_multi, time_limit=args.time_limit,
                    match_limit=None if every_rule else args.match_limit,
                    budget_share=None if every_rule else DEFAULT_LIMITS.budget_share)
    mcts = None
    if args.search == "mcts":
        from ..search.mcts import MctsOptions
        fields = dict(seed=args.seed, budget=args.budget, depth=args.depth,
                      node_limit=args.node_limit or 2000, workers=args.workers,
                      final_extract=args.extract if args.extract != "greedy" else "ocf")
        if args.c_uct is not None:
            fields["c_uct"] = args.c_uct
        mcts = MctsOptions(**fields)
    ilp = {k: v for k, v in (("ilp_stall", args.ilp_stall), ("ilp_gap", args.ilp_gap))
           if v is not None}
    from ..confirm import is_device
    return Options(search=args.search, limits=limits, mcts=mcts, extract=args.extract,
                   ilp_time_limit=args.ilp_time_limit,
                   alternatives=is_device(getattr(args, "device", None)), **ilp)


def cost_model_from_args(args: argparse.Namespace, graph: Any = None):
    """The cost model the options name, pricing `graph`'s precision unless --precision says
    another (fp32 for a graph of no floats)."""
    from ..confirm import is_device, require_device
    from ..cost.select import make_cost_model
    from ..precision import graph_precision
    if is_device(args.device):      # measured on this machine's GPU, each configuration once
        require_device(args.device)
        return make_cost_model("torch", args.device, args.cost_db, progress=not args.quiet)
    precision = getattr(args, "precision", None)
    if precision is None and graph is not None:
        precision = graph_precision(graph.types().values())
    return make_cost_model(args.cost, args.device, args.cost_db, progress=not args.quiet,
                           precision=precision)


def describe_cost_model(model: Any) -> str:
    """e.g. 'analytic cpu', 'table h100-measured (41 of 43 configurations measured, the rest
    by the h100 roofline)'."""
    device = getattr(model, "device", None) or getattr(getattr(model, "profile", None), "name",
                                                       None)
    text = f"{model.name} {device}" if device else str(model.name)
    precision = getattr(model, "precision", None)
    if isinstance(precision, str):
        text += f", {precision}"
    hits, misses = getattr(model, "hits", None), getattr(model, "misses", None)
    if isinstance(hits, int) and isinstance(misses, int) and hits + misses:
        text += (f" ({hits} of {hits + misses} configurations measured"
                 + (f", the rest by the {model.table.base_profile} roofline)" if misses else ")"))
    note = getattr(model, "note", None)
    if isinstance(note, str) and note:
        text += f" ({note})"
    return text


def shape_options(args: argparse.Namespace) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """--dim SYMBOL=VALUE and --input-shape NAME=AxBxC, checked."""
    dims: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for text in getattr(args, "dim", None) or ():
        name, _, value = text.rpartition("=")
        if not name or not value.isdigit() or int(value) <= 0:
            raise TirError(f"--dim {text}: expected SYMBOL=VALUE with a positive integer value")
        dims[name] = int(value)
    for text in getattr(args, "input_shape", None) or ():
        name, _, value = text.rpartition("=")
        parts = value.lower().split("x")
        if not name or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise TirError(f"--input-shape {text}: expected NAME=1x3x224x224 (positive sizes)")
        shapes[name] = tuple(int(p) for p in parts)
    return dims, shapes


# ------------------------------------------------------------------ the command
def add_parser(sub: Any) -> None:
    c = sub.add_parser("run", help="optimize a model (.tir or .onnx): search, extract, verify, "
                       "write, report")
    c.add_argument("model", metavar="MODEL")
    c.add_argument("-o", "--output", metavar="OUT.tir", help="write the optimized graph as .tir")
    c.add_argument("--onnx", metavar="OUT.onnx", help="write the optimized graph as ONNX")
    c.add_argument("--report", metavar="REPORT.json", help="write the report as JSON")
    c.add_argument("--force", action="store_true", help="overwrite existing output files")
    c.add_argument("--no-verify", action="store_true",
                   help="skip checking the optimized graph against the original")
    c.add_argument("--verify-seeds", type=int, default=1,
                   help="random input sets for verification (default 1)")
    c.add_argument("--verify-memory", type=parse_size, default=None, metavar="SIZE",
                   help="memory verification may use, e.g. 4G or 512M (default: half of the "
                   "available memory); a verification estimated to need more is skipped, "
                   "with a message")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    c.add_argument("--layers", choices=("auto", "on", "off"), default="auto",
                   help="where the model repeats a layer (same operators, shapes and wiring, "
                   "other weights), optimize one copy per distinct layer and repeat its rewrite "
                   "on every copy, each checked with its own weights: auto (default) where that "
                   "pays (at most half of the graph's nodes optimized, a whole e-graph of 10 000 "
                   "nodes or more) or where the whole graph's check would not fit "
                   "--verify-memory, on whenever layers repeat; off: optimize the graph as one")
    o = c.add_argument_group("ONNX models")
    o.add_argument("--measure", dest="measure", action="store_true", default=None,
                   help="time the optimized ONNX model against the input in onnxruntime and "
                   "keep it only if faster (default: on for ONNX output)")
    o.add_argument("--no-measure", dest="measure", action="store_false",
                   help="write the optimized ONNX model without timing it")
    o.add_argument("--measure-time", type=float, default=20.0, metavar="S",
                   help="seconds the measurement may take (default 20)")
    o.add_argument("--input-shape", action="append", default=[], metavar="NAME=1x3x224x224",
                   help="fix a graph input's shape (repeatable); the result is for that shape")
    o.add_argument("--dim", action="append", default=[], metavar="SYMBOL=VALUE",
                   help="fix a symbolic dimension wherever it occurs (repeatable)")
    o.add_argument("--share-data", action="store_true",
                   help="OUT refers to the large input's external data files instead of copying "
                   "them into its own (OUT in the input's folder; those files must stay)")
    add_search_options(c)
    c.set_defaults(func=run_command)


def parse_size(text: str) -> int:
    """'4G', '512M', '1.5GB', '2GiB', '1000000' → bytes (K, M, G, T are powers of 1024)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = 1
    if t[-1:] in _UNITS:
        scale, t = _UNITS[t[-1]], t[:-1]
    try:
        value = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4G, 512M)") from None
    if not value > 0 or value * scale > 2**62:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 4G, 512M)")
    return int(value * scale)


_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def run_command(args: argparse.Namespace) -> int:
    from ..search.limits import Budget, track_compilation
    from ..stopping import time_limit

    track_compilation()
    budget = Budget(args.time_limit)        # the whole command's, loading included
    # every onnxruntime run of the model (the import's checks, opaque nodes in verification,
    # the comparison and timing of ONNX output) stops at the budget's end (stopping.py)
    with time_limit(budget.deadline):
        return _run_command(args, budget)


def _stopped_error(e: RunStopped, args: argparse.Namespace, file: str) -> TirError:
    """A located error for an onnxruntime run stopped at the time limit: nothing is written."""
    return TirError(f"{e}; nothing was written. A larger --time-limit (now {args.time_limit:g} "
                    f"s) leaves it more time", file=file)


def _run_command(args: argparse.Namespace, budget: Any) -> int:
    check_tir_output(args.output, "--onnx")
    for out in (args.output, args.onnx, args.report):
        check_writable(out, args.force)
    t = time.perf_counter()
    dims, shapes = shape_options(args)
    try:
        graph, weights, imp = load_source(args.model, dims, shapes)
    except RunStopped as e:
        raise _stopped_error(e, args, args.model) from None
    if imp is not None:         # no output may replace a data file the input reads
        from ..onnx_io.external import check_output
        for out in (args.output, args.onnx, args.report):
            if out:
                check_output(args.model, out)
    if getattr(args, "share_data", False) and args.onnx and \
            Path(args.onnx).resolve().parent != Path(args.model).resolve().parent:
        raise TirError("--share-data writes OUT beside the input (it refers to the input's data "
                       "files by their names in that folder)", file=args.onnx)
    from ..mapped_data import use
    with use(imp.data if imp is not None else None):     # a large model's weights, mapped
        return _optimize_and_write(args, budget, graph, weights, imp, dims, shapes, t)


def _optimize_and_write(args: argparse.Namespace, budget: Any, graph: Any, weights: Any,
                        imp: Any, dims: Any, shapes: Any, t: float) -> int:
    from ..rules.parse import load_rules

    rules = load_rules(args.rules or None)
    if imp is not None and not args.rules:    # idioms import left decomposed (rules/idioms/)
        from ..rules.graph_rewrite import idioms_for_search
        rules += idioms_for_search(graph, rules)
    dropped: dict[str, str] = {}
    if imp is not None and args.onnx:     # only rewrites the model's opset can express
        from ..onnx_io.importer import default_opset
        from ..onnx_io.splice import rules_for_opset
        rules, dropped = rules_for_opset(list(rules), default_opset(imp.model))
    load_s = time.perf_counter() - t
    too_big = False             # the written model's check in onnxruntime needs layers
    if imp is not None and args.onnx and not args.no_verify:
        from .onnx_out import whole_check_too_big
        too_big = whole_check_too_big(imp.model, args) is not None
    cost_model = cost_model_from_args(args, graph)
    result, check = optimize_and_verify(graph, weights, cost_model, rules, args, budget,
                                        whole_too_big=too_big)
    result.times = {"load": load_s, **result.times}
    report = make_report(args.model, result, check, describe_cost_model(cost_model), budget)
    if dropped:
        report["rules_not_used"] = dropped
    if imp is not None and imp.size_note:
        from .onnx_out import import_shapes
        report["symbolic_sizes"] = imp.size_note
        report["analysed_shapes"] = {k: list(v) for k, v in import_shapes(imp).items()}
    if args.onnx and imp is not None:
        from .onnx_out import write_onnx_result
        if args.measure is None:
            args.measure = True
        args.measure_time = max(2.0, min(args.measure_time, budget.left()))
        t = time.perf_counter()
        gpu = args.cost in ("trt", "torch") or (args.device or "cpu") not in ("cpu",
                                                                                "cpu-calibrated")
        try:
            outcome = write_onnx_result(args, imp, result, gpu_target=gpu,
                                        fixed=bool(dims or shapes))
        except TirError as e:
            raise e if e.file else TirError(f"cannot write the result: {e.message}",
                                            file=args.onnx) from None
        result.times["onnx_out"] = time.perf_counter() - t
        report["onnx_output"] = outcome.as_dict()
    elif args.onnx:
        from ..onnx_io import to_onnx
        model = to_onnx(result.optimized, weights, seed=args.seed)
        if not args.no_verify and not getattr(check, "limited", False):
            from ..check_outputs import verify_onnx
            from ..onnx_io.exporter import written_weights
            from ..precision import half_precision
            t = time.perf_counter()
            half = half_precision(graph.types().values()) is not None
            try:
                onnx_check = verify_onnx(graph, model,
                                         written_weights(model) if half else weights,
                                         seeds=check.seeds, wide=half)
            except RunStopped as e:
                raise _stopped_error(e, args, args.onnx) from None
            result.times["verify_onnx"] = time.perf_counter() - t
            report["verification"]["onnxruntime"] = onnx_check.summary()
            if not onnx_check.ok:
                raise VerificationError(
                    f"the exported ONNX model does not match the original in onnxruntime: "
                    f"{onnx_check.summary()}. Nothing was written.", file=args.onnx)
        write_onnx(args.onnx, model, args.force)
    if args.output:
        from ..ir.printer import print_graph
        text = print_graph(result.optimized)
        write_atomic(args.output, lambda p: p.write_text(text, encoding="utf-8"))
    if args.report:
        body = json.dumps(report, indent=2) + "\n"
        write_atomic(args.report, lambda p: p.write_text(body, encoding="utf-8"))
    print(format_report(report, written=[p for p in (args.output, args.onnx) if p]))
    return 0


def optimize_and_verify(graph, weights, cost_model, rules, args: argparse.Namespace,
                        budget=None, whole_too_big: bool = False):
    """Optimize with progress output, then verify (unless --no-verify, an unchanged graph, or a
    verification that would not fit `--verify-memory` or the `budget`: then `check` is a
    NotVerified saying so); raises on a mismatch. `whole_too_big`: the written model's
    whole check does not fit either (`--layers auto` then optimizes by layers)."""
    import dataclasses

    from ..layers import optimize_model
    from ..progress import CompileNotice, Progress

    options = options_from_args(args)
    seeds = tuple(range(args.seed, args.seed + args.verify_seeds))
    reserve = 0.0
    layers = getattr(args, "layers", "off")
    if not args.no_verify:      # the optimized graph is not known yet: plan for the worst case
        whole, reserve = plan_verification(graph, None, weights, args, budget, seeds)
        whole_too_big = whole_too_big or (whole is not None and whole.reason == "memory")
    if layers == "auto" and whole_too_big:
        layers = "on"           # the whole graph's check does not fit: one layer's does
    if budget is not None:
        options = dataclasses.replace(options, budget=budget, reserve=reserve)
    total = options.limits.iter_limit if options.search == "saturate" else None
    with Progress(f"{Path(args.model).name}: {options.search}", total,
                  quiet=args.quiet) as bar, CompileNotice(quiet=args.quiet):
        result, layered = optimize_model(
            graph, cost_model, rules, options, layers,
            on_iteration=lambda it: bar.update(it.index, f"{it.nodes} nodes, "
                                                         f"{it.classes} classes"),
            on_decision=lambda d: bar.update(d.index, f"{d.action}, {d.nodes} nodes"))
    if result.alternatives:
        result = confirm_choice(result, weights, cost_model, args)
    if args.no_verify:
        return result, None
    from ..check_outputs import NotVerified, VerificationStopped, verify_graphs
    from ..mapped_data import release
    if not result.improved:
        return result, NotVerified("unchanged", "unchanged, nothing to verify", seeds)
    if layered is not None:
        check_layer_copies(result, weights, args, budget, seeds)
    # plan again with the graph that came out and the time actually left: the first plan only
    # set the search's reserve, for a graph sharing nothing with the original (ViT-Huge: 29 s
    # planned, 23 s for its optimized graph, 10 s measured), so a limit it ruled out may fit
    checks = None if layered is None else result.layers.check
    covered = checks is not None and checks.ok and not checks.skipped and checks.copies_checked
    skip, _ = plan_verification(graph, result.optimized, weights, args, budget, seeds,
                                layers_checked=bool(covered))
    if skip is not None:
        if not covered:
            warn(skip.message)
        return result, skip
    t = time.perf_counter()
    try:
        check = verify_graphs(graph, result.optimized, weights, seeds=seeds,
                              deadline=None if budget is None else budget.deadline)
    except (VerificationStopped, RunStopped):   # the interpreter, or an opaque node in it
        check = NotVerified("time", f"not verified: verification was stopped at the time limit "
                            f"after {time.perf_counter() - t:.1f} s; the optimized graph's outputs "
                            f"were not compared with the original's. A larger --time-limit "
                            f"leaves it more time", seeds)
    except MemoryError:
        check = NotVerified("memory", "not verified: verification ran out of memory; the "
                            "optimized graph's outputs were not compared with the original's. "
                            "--verify-memory sets the memory verification may plan to use", seeds)
    release()           # a mapped model's weights read by the check leave memory
    result.times["verify"] = time.perf_counter() - t
    if isinstance(check, NotVerified):
        warn(check.message)
    elif not check.ok:
        fired = ", ".join(sorted(result.rules_fired)) or "none"
        raise VerificationError(
            f"the optimized graph does not match the original: {check.summary()}. "
            f"Nothing was written. Rules that fired: {fired}. Please report this "
            f"(`eqsat-nb verify-rules` checks the rules one by one).", file=args.model)
    return result, check


def confirm_choice(result, weights, cost_model, args: argparse.Namespace):
    """`--device cuda`: the extracted graph, the other extractors' answers and the original run
    end to end on the GPU (`confirm.confirm`); the fastest measured one becomes the result."""
    import dataclasses

    from ..confirm import confirm
    from ..cost.model import graph_cost

    candidates = [("extracted", result.optimized)] if result.improved else []
    candidates += result.alternatives
    t = time.perf_counter()
    chosen, how = confirm(result.original, candidates, weights, args.device)
    times = {**result.times, "confirm": time.perf_counter() - t}
    changes = result.changes if chosen is result.optimized else []
    return dataclasses.replace(result, optimized=chosen, improved=chosen is not result.original,
                               cost_after=graph_cost(cost_model, chosen), changes=changes,
                               times=times, confirmed=how.describe())


def check_layer_copies(result, weights, args: argparse.Namespace, budget, seeds) -> None:
    """Check every rewritten layer copy of `result` with its own weights, one at a time
    (layers.check); raises on a mismatch. Checks stopped by the time limit are reported, as the
    whole graph's are."""
    from ..check_outputs import VerificationStopped, memory_budget
    from ..layers.check import check_copies

    memory, _ = memory_budget(getattr(args, "verify_memory", None))
    t = time.perf_counter()
    try:
        check = check_copies(result.layers, weights, seeds,
                             None if budget is None else budget.deadline, memory,
                             None if budget is None else VERIFY_SHARE * budget.left())
    except VerificationStopped:
        result.layers.check.skipped = (f"the copies' checks were stopped at the time limit "
                                       f"after {time.perf_counter() - t:.1f} s")
        warn("not verified layer by layer: " + result.layers.check.skipped)
        return
    finally:
        result.times["verify_layers"] = time.perf_counter() - t
    if not check.ok:
        raise VerificationError(
            f"a rewritten layer does not match the original: {check.failed}. Nothing was "
            f"written. Please report this (`eqsat-nb verify-rules` checks the rules one by "
            f"one; --layers off optimizes the graph as one).", file=args.model)
    if check.skipped:
        warn("not verified layer by layer: " + check.skipped)


VERIFY_SHARE = 0.6      # verification may take at most this share of the time budget left


def plan_verification(original, optimized, weights, args: argparse.Namespace, budget, seeds,
                      layers_checked: bool = False) -> tuple[Any, float]:
    """(NotVerified when checking `optimized` against `original` would not fit the memory
    budget or the time left, else None; the seconds to keep for it). `optimized` None: not
    known yet, planned as a graph that shares nothing with the original. `layers_checked`:
    every rewritten layer was checked with its own weights (the message says so)."""
    from ..check_outputs import (NotVerified, memory_budget, estimate_verification,
                                 human_bytes)

    cost = estimate_verification(original, optimized, weights, len(seeds))
    limit, whose = memory_budget(getattr(args, "verify_memory", None))  # (bench has none)
    not_checked = "the optimized graph's outputs were not compared with the original's"
    if limit is not None and cost.peak_bytes > limit:
        if layers_checked:
            return NotVerified("memory", (
                f"the whole graph was not run in the interpreter: that would need about "
                f"{human_bytes(cost.peak_bytes)}, over its budget of {human_bytes(limit)} "
                f"({whose}); every rewritten layer was checked with its own weights instead. "
                f"--verify-memory {_size_arg(cost.peak_bytes)} runs it too (if the machine has "
                f"that much memory)"), seeds), 0.0
        return NotVerified("memory", (
            f"not verified: verification would need about {human_bytes(cost.peak_bytes)} "
            f"(the reference interpreter runs both graphs in float32), over its budget of "
            f"{human_bytes(limit)} ({whose}); {not_checked}. To check anyway, pass "
            f"--verify-memory {_size_arg(cost.peak_bytes)} (if the machine has that much "
            f"memory)"), seeds), 0.0
    if budget is not None:
        left = budget.left()
        if cost.seconds > VERIFY_SHARE * left:
            need = budget.seconds - left + cost.seconds / VERIFY_SHARE
            return NotVerified("time", (
                f"not verified: verification would take about {cost.seconds:.0f} s "
                f"(estimated), more than the time limit leaves ({max(left, 0):.1f} s of "
                f"{budget.seconds:g} s); {not_checked}. To check it, pass --time-limit "
                f"{_round_up(need)} or more"), seeds), 0.0
        return None, cost.seconds
    return None, 0.0


def _size_arg(n: int) -> str:
    """A --verify-memory value a little above `n` bytes, e.g. '13G'."""
    gib = n / (1 << 30)
    return f"{int(gib) + 1}G" if gib >= 1 else f"{int(n / (1 << 20)) + 1}M"


def _round_up(seconds: float) -> str:
    for step in (1, 5, 10, 60, 600):
        if seconds <= 20 * step:
            return f"{-(-seconds // step) * step:g}"
    return f"{-(-seconds // 3600) * 3600:g}"


def warn(message: str) -> None:
    import sys
    print(f"warning: {message}", file=sys.stderr)


def make_report(model: str, result, check, cost_name: str, budget=None) -> dict[str, Any]:
    from ..check_outputs import NotVerified
    from ..ir.stats import graph_stats

    before, after = graph_stats(result.original), graph_stats(result.optimized)
    return {
        "model": model,
        "cost_model": cost_name,
        "cost_before_us": result.cost_before,
        "cost_after_us": result.cost_after,
        "speedup_pct": result.speedup_pct,
        "ops_before": before.compute_ops,
        "ops_after": after.compute_ops,
        "op_counts_before": before.op_counts,
        "op_counts_after": after.op_counts,
        "egraph": {"nodes": result.egraph_nodes, "classes": result.egraph_classes,
                   "iterations": result.iterations, "stop_reason": result.stop_reason},
        "extraction": result.extraction,
        "improved": result.improved,
        "changes": [c.as_dict() for c in result.changes],
        "confirmed": result.confirmed or None,
        "rules_fired": dict(sorted(result.rules_fired.items(), key=lambda kv: (-kv[1], kv[0]))),
        "rules_banned": dict(sorted(result.rules_banned.items())),
        "times_s": result.times,
        "time_budget": None if budget is None else {
            "limit_s": budget.seconds, "used_s": budget.elapsed(),
            "numba_compile_s": budget.compile_spent()},     # not counted in used_s
        "verification": None if check is None else {
            "status": check.reason, "ok": None, "seeds": list(check.seeds),
            "summary": check.summary()} if isinstance(check, NotVerified) else {
            "status": "verified", "ok": check.ok, "seeds": list(check.seeds),
            "rtol": check.rtol, "atol_rel": check.atol_rel, "rule": check.rule,
            "max_relative_err": check.max_relative_err, "summary": check.summary()},
        "layers": None if getattr(result, "layers", None) is None else result.layers.summary(),
    }


WHY_SHOWN = 3      # changes named one by one in the report; the rest in one line


def layers_line(layers: dict[str, Any]) -> str:
    """e.g. 'layers: 12 (1 distinct), each distinct layer optimized once and its rewrite
    repeated on every copy; 4 ops outside them'."""
    n, d = layers["layers"], layers["distinct"]
    if layers.get("optimized_as_one_graph"):
        return f"layers: {n} ({d} distinct), optimized as one graph: " + \
            layers["optimized_as_one_graph"]
    return (f"layers: {n} ({d} distinct), each distinct layer optimized once and its rewrite "
            f"repeated on every copy; {layers['ops_outside']} ops outside them")


def _why_lines(changes: list[dict[str, Any]]) -> list[str]:
    """The largest cost differences that decided the extraction (report["changes"] is sorted
    by size), then one line for the rest."""
    lines = [c["summary"] for c in changes[:WHY_SHOWN]]
    rest = changes[WHY_SHOWN:]
    if rest:
        n = sum(c["count"] for c in rest)
        saved = sum(c["before_us"] - c["after_us"] for c in rest)
        what = f"{saved:.1f} us saved" if saved >= 0 else f"{-saved:.1f} us added"
        lines.append(f"{n} more change{'s' if n != 1 else ''}: {what} together")
    return lines


def format_report(r: dict[str, Any], written: list[str] = ()) -> str:
    """The few lines a user reads after a run."""
    eg = r["egraph"]
    lines = [f"{r['model']}: {r['ops_before']} ops -> {r['ops_after']} ops"
             + (f", written to {', '.join(written)}" if written else "")]
    lines.append(f"  estimated cost ({r['cost_model']}): {r['cost_before_us']:.1f} us -> "
                 f"{r['cost_after_us']:.1f} us, speed-up {r['speedup_pct']:.1f} %")
    if r.get("layers"):
        lines.append("  " + layers_line(r["layers"]))
    lines.append(f"  e-graph: {eg['nodes']} nodes, {eg['classes']} classes after "
                 f"{eg['iterations']} step{'' if eg['iterations'] == 1 else 's'} "
                 f"({eg['stop_reason']}); extraction: {r['extraction']}")
    total = f"total {sum(r['times_s'].values()):.2f} s"
    b = r.get("time_budget")
    if b:
        total = f"{b['used_s']:.2f} s of the {b['limit_s']:g} s limit"
        if b["numba_compile_s"] >= 0.05:
            total += f"; Numba compilation {b['numba_compile_s']:.1f} s, not counted"
    if r.get("symbolic_sizes"):
        lines.append("  " + r["symbolic_sizes"])
    lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in r["times_s"].items())
                 + f" ({total})")
    changes = r.get("changes") or []
    for line in _why_lines(changes):
        lines.append("  why: " + line)
    if r.get("confirmed"):
        lines.append("  " + r["confirmed"])
    fired = r["rules_fired"]
    if fired:
        shown = ", ".join(f"{k} x{v}" for k, v in list(fired.items())[:8])
        more = f", ... ({len(fired)} rules)" if len(fired) > 8 else ""
        lines.append(f"  rules fired: {shown}{more}")
    banned = r.get("rules_banned")
    if banned:
        shown = ", ".join(list(banned)[:6]) + (f", ... ({len(banned)} rules)"
                                               if len(banned) > 6 else "")
        lines.append(f"  rules held back by the scheduler (too many matches): {shown}")
    v = r["verification"]
    if not v:
        lines.append("  not verified (--no-verify)")
    elif v["status"] == "verified":
        lines.append("  verified: " + v["summary"])
    else:
        lines.append("  " + v["summary"])
    checks = (r.get("layers") or {}).get("checks")
    if checks:
        lines.append(("  verified " if checks["ok"] and checks["copies_checked"] else "  ")
                     + checks["summary"])
    if v and v.get("onnxruntime"):
        lines.append("  verified in onnxruntime: " + v["onnxruntime"])
    o = r.get("onnx_output")
    if o:
        if o.get("onnxruntime_check"):
            lines.append("  onnxruntime, input vs optimized model: " + o["onnxruntime_check"])
        for m in o.get("measured", ()):
            lines.append("  measured in onnxruntime, " + m)
        lines.append(f"  ONNX written: {o['written']} ({o['reason']})")
    if r.get("rules_not_used"):
        lines.append(f"  {len(r['rules_not_used'])} rules not used: the model's opset cannot "
                     f"express what they make (e.g. " + next(iter(r["rules_not_used"].values()))
                     + ")")
    return "\n".join(lines)
