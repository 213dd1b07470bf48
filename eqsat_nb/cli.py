"""The `eqsat-nb` command. Only commands that really work are listed."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from . import __version__
from .errors import TirError

# larger commands live in eqsat_nb/commands/<name>.py, each with add_parser(sub)
COMMAND_MODULES: tuple[str, ...] = ("run", "bench", "profile")


def _quantity(number: str, unit: str) -> str:
    """'1.23 M' + 'params' → '1.23 Mparams'; '144' + 'params' → '144 params'."""
    return f"{number}{unit}" if number[-1:].isalpha() else f"{number} {unit}"


def _cmd_check(args: argparse.Namespace) -> int:
    from .ir.parse import load
    from .ir.stats import graph_stats, human

    failed = 0
    for path in args.files:
        try:
            graph = load(path)
        except TirError as e:
            print(e, file=sys.stderr)
            failed += 1
            continue
        s = graph_stats(graph)
        mix = ", ".join(f"{n} {op}" for op, n in s.op_counts.items())
        print(f"{path}: ok: {s.compute_ops} op{'' if s.compute_ops == 1 else 's'} ({mix}); "
              f"{_quantity(human(s.params), 'params')}, {_quantity(human(s.flops), 'FLOPs')}")
    return 1 if failed else 0


def _cmd_print(args: argparse.Namespace) -> int:
    from .commands.files import check_tir_output
    from .ir.parse import load
    from .ir.printer import print_graph

    check_tir_output(args.output)
    text = print_graph(load(args.file))
    if args.output:
        out = Path(args.output)
        if out.exists() and not args.force:
            raise TirError("file exists; pass --force to overwrite it", file=str(out))
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as e:
            raise TirError(f"cannot write file: {e.strerror}", file=str(out)) from None
    else:
        sys.stdout.write(text)
    return 0


def _cmd_interp(args: argparse.Namespace) -> int:
    import numpy as np

    from .ir.interp import run
    from .ir.parse import load

    graph = load(args.file)
    start = time.perf_counter()
    outs = run(graph, seed=args.seed, dtype=args.dtype)
    elapsed = time.perf_counter() - start
    for name, ty, arr in zip(graph.outputs, graph.output_types(), outs):
        a = np.asarray(arr, dtype=np.float64)
        print(f"{name}: {ty}  sum={a.sum():.6e}  mean|x|={np.abs(a).mean():.6e}  "
              f"max|x|={np.abs(a).max():.6e}")
    n_ops = sum(1 for _ in graph.compute_nodes())
    print(f"ran {n_ops} op{'' if n_ops == 1 else 's'} in {elapsed:.3f} s "
          f"(seed {args.seed}, {args.dtype})")
    return 0


def _cmd_verify_rules(args: argparse.Namespace) -> int:
    from .rules.parse import load_rules
    from .rules.verify import verify_rules

    if args.paths:
        rules = load_rules(args.paths)
    else:                           # the shipped rules and the idioms ONNX import applies
        from .rules.graph_rewrite import idiom_rules
        rules = load_rules() + list(idiom_rules())
    start = time.perf_counter()

    def report(v) -> None:
        if v.problems:
            print(f"{v.where()}: {v.rule.name}: {'; '.join(v.problems)}")
        elif args.verbose:
            print(f"{v.where()}: {v.rule.name}: ok ({v.instances} instances, {v.seconds:.2f} s)")

    verdicts = verify_rules(rules, draws=args.draws, seed=args.seed, progress=report)
    failed = sum(not v.ok for v in verdicts)
    print(f"{len(verdicts)} rules verified, {failed} failed "
          f"({time.perf_counter() - start:.1f} s)")
    return 1 if failed else 0


def _read_egraph_json(path: str):
    """(EGraph, costs) from an egraph-serialize file, gzip-compressed or not."""
    import gzip
    import json
    import zlib
    from pathlib import Path

    from .egraph.serialize import from_json

    try:
        raw = Path(path).read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror or e}", file=path) from None
    except (EOFError, zlib.error) as e:
        raise TirError(f"invalid gzip data: {e}", file=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TirError(f"invalid JSON: {getattr(e, 'msg', e)}", file=path) from None
    return from_json(data, path)


def _cmd_extract(args: argparse.Namespace) -> int:
    from .extract.dag import dag_cost
    from .extract.ilp import GAP_PERCENT, STALL_SECONDS
    from .extract.problem import from_egraph
    from .extract.run import extract

    eg, costs = _read_egraph_json(args.file)
    problem = from_egraph(eg, costs)
    stall = STALL_SECONDS if args.ilp_stall is None else max(args.ilp_stall, 0.0)
    gap = GAP_PERCENT if args.ilp_gap is None else max(args.ilp_gap, 0.0)
    start = time.perf_counter()
    result = extract(problem, args.method, time_limit=args.time_limit, stall=stall,
                     stop_gap=gap / 100)
    elapsed = time.perf_counter() - start
    cost = dag_cost(problem, result.choice)
    line = (f"{args.file}: {args.method}: DAG cost {cost:.6g} ({problem.n_classes} classes, "
            f"{problem.n_nodes} nodes), {elapsed:.3f} s")
    if result.bound is not None:
        line += (f"; bound {result.bound:.6g}, gap {100 * result.gap:.2f} %; stopped: "
                 f"{_STOPPED.get(result.status, result.status)}")
    print(line)
    return 0


# what ended an ILP, in the words `extract` prints (the statuses of extract.ilp.IlpResult)
_STOPPED = {"optimal": "optimal (the bound meets the answer)",
            "within_gap": "within gap (the answer is proven within --ilp-gap of the optimum)",
            "stalled": "stalled (neither the answer nor the bound moved for --ilp-stall)",
            "time_limit": "time limit", "killed": "time limit (the solver was killed)"}


class _Version(argparse.Action):
    """--version: the version, and whether the kernels were compiled ahead of time (loading
    numba to say so, which only this flag needs)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from .kernels import aot_status
        print(f"eqsat-nb {__version__}\nkernels: {aot_status()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqsat-nb", description="Tensor-graph superoptimizer "
                                "(equality saturation over e-graphs).")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="show the version and which kernels run (compiled ahead of time or "
                   "just in time), then exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    c = sub.add_parser("check", help="parse and shape-check .tir files; print a summary per file")
    c.add_argument("files", nargs="+", metavar="FILE")
    c.set_defaults(func=_cmd_check)

    c = sub.add_parser("print", help="print a .tir file in canonical form")
    c.add_argument("file", metavar="FILE")
    c.add_argument("-o", "--output", help="write to this file instead of standard output")
    c.add_argument("--force", action="store_true", help="overwrite an existing output file")
    c.set_defaults(func=_cmd_print)

    c = sub.add_parser("interp", help="run a .tir file on random inputs with the NumPy reference "
                       "interpreter; print output shapes and checksums")
    c.add_argument("file", metavar="FILE")
    c.add_argument("--seed", type=int, default=0, help="seed for inputs and weights (default 0)")
    c.add_argument("--dtype", choices=("f32", "f64"), default="f32")
    c.set_defaults(func=_cmd_interp)

    c = sub.add_parser("verify-rules", help="check rules numerically: both sides of every rule "
                       "on random shapes with the reference interpreter (default: shipped rules "
                       "and rules/idioms/)")
    c.add_argument("paths", nargs="*", metavar="FILE_OR_DIR")
    c.add_argument("--draws", type=int, default=4, help="instantiations per rule and direction "
                   "(default 4)")
    c.add_argument("--seed", type=int, default=0, help="seed for shapes and values (default 0)")
    c.add_argument("-v", "--verbose", action="store_true", help="also list the rules that pass")
    c.set_defaults(func=_cmd_verify_rules)

    from .extract import METHODS
    c = sub.add_parser("extract", help="extract from a serialized e-graph (egraph-serialize JSON, "
                       "gzip-compressed or not, node costs from the file); print the DAG cost "
                       "and the time (ilp: its bound, gap and what stopped it)")
    c.add_argument("file", metavar="FILE.json[.gz]")
    c.add_argument("--method", choices=METHODS, default=METHODS[0])
    c.add_argument("--time-limit", type=float, default=60.0,
                   help="ilp: seconds of wall time it returns within, its warm start included "
                   "(default 60)")
    c.add_argument("--ilp-stall", type=float, default=None, metavar="SECONDS",
                   help="ilp: stop when neither its answer nor its bound has moved (as run; "
                   "default 3; 0: off)")
    c.add_argument("--ilp-gap", type=float, default=None, metavar="PERCENT",
                   help="ilp: stop once the answer is proven within PERCENT of the optimum (as "
                   "run; default 2; 0: prove optimality or reach --time-limit)")
    c.set_defaults(func=_cmd_extract)

    import importlib
    for name in COMMAND_MODULES:
        importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
    return p


# exit codes (README "Exit codes")
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_MEMORY, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 70, 130


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure ends in a one-paragraph message on stderr and an exit code
    (README "Exit codes"), never a Python traceback (EQSAT_NB_TRACEBACK=1 shows the traceback of
    an internal error)."""
    _watch_ctrl_c()
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)     # what records name
        return args.func(args)
    except TirError as e:
        print(e, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("eqsat-nb: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except MemoryError:
        print("eqsat-nb: error: out of memory. A smaller --node-limit lowers the search's "
              "memory; --verify-memory bounds verification's", file=sys.stderr)
        return EXIT_MEMORY
    except BrokenPipeError:
        # the reader went away (`eqsat-nb print f.tir | head`): no traceback; silence the final
        # flush of stdout as the Python docs recommend
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):       # stdout is not a real file (tests, embedding)
            pass
        return EXIT_ERROR
    except Exception as e:      # a bug: say so in one paragraph rather than a traceback
        if _interrupted(e):     # Ctrl-C inside a compiled kernel: older Numba reports it as a
            print("eqsat-nb: interrupted", file=sys.stderr)     # SystemError of the dispatcher
            return EXIT_INTERRUPTED
        if os.environ.get("EQSAT_NB_TRACEBACK"):
            raise
        text = str(e).strip().splitlines()
        print(f"eqsat-nb: internal error: {type(e).__name__}"
              + (f": {text[0]}" if text else "")
              + ". This is a bug in eqsat-nb; please report it with the command and input "
              "(EQSAT_NB_TRACEBACK=1 shows the Python traceback).", file=sys.stderr)
        return EXIT_INTERNAL


_CTRL_C = [False]       # set by the SIGINT handler _watch_ctrl_c installs


def entry() -> None:
    """The `eqsat-nb` program: `main`, and after Ctrl-C an exit that runs the atexit handlers
    (the spare ILP worker is killed) but not the interpreter's final collection, where an
    llvmlite object left by a Numba compilation that Ctrl-C cut short prints a traceback of its
    own ("Exception ignored in ... __del__")."""
    code = main()
    if code != EXIT_INTERRUPTED:
        sys.exit(code)
    import atexit
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_handlers is not None:
        run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _watch_ctrl_c() -> None:
    """Python's own Ctrl-C handler, which also notes that Ctrl-C came: C code that swallows the
    KeyboardInterrupt it raises can turn it into another error (NumPy comparing structured
    arrays reports "Cannot compare structured arrays"), which is then still an interruption.
    Left alone where SIGINT is ignored or handled by someone else."""
    def note(signum: int, frame: object) -> None:
        _CTRL_C[0] = True
        signal.default_int_handler(signum, frame)
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, note)
    except ValueError:          # not the main thread: leave it
        pass


def _interrupted(e: BaseException) -> bool:
    """Was this exception raised on the way out of a KeyboardInterrupt (or while Ctrl-C was
    being handled)?"""
    if _CTRL_C[0]:
        return True
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
