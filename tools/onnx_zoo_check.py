"""Import every ONNX model given (default: the model-zoo copies the onnx wheel ships under
onnx/backend/test/data/light) and report, per model: opset, ONNX nodes, IR ops after import
(weights apart), opaque ops, symbolic inputs, and whether the import agrees with onnxruntime on
the original model (interpreter, and the re-export when --export).

    PYTHONPATH=. python tools/onnx_zoo_check.py [--export] [--shape NAME=1x3x224x224] [FILE ...]
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path


def zoo_models() -> list[Path]:
    import onnx
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(root.glob("*.onnx"))


def main(argv: list[str] | None = None) -> int:
    import onnx

    from eqsat_nb.errors import TirError
    from eqsat_nb.onnx_io import read_onnx
    from eqsat_nb.onnx_io.compare import compare, inputs_for

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--export", action="store_true", help="also run the to_onnx re-export")
    ap.add_argument("--no-run", action="store_true", help="import only, no comparison")
    ap.add_argument("--shape", action="append", default=[], help="NAME=1x3x224x224")
    ap.add_argument("--dim", action="append", default=[], help="SYMBOL=VALUE")
    args = ap.parse_args(argv)
    shapes = {k: tuple(int(d) for d in v.split("x")) for k, v in
              (s.split("=", 1) for s in args.shape)}
    dims = {k: int(v) for k, v in (s.split("=", 1) for s in args.dim)}
    files = args.files or zoo_models()
    print("| model | opset | ONNX nodes | IR ops | opaque | symbolic inputs | result |")
    print("|---|---|---|---|---|---|---|")
    bad = 0
    for f in files:
        m = onnx.load(str(f), load_external_data=False)
        opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), "?")
        t = time.perf_counter()
        try:
            r = read_onnx(f, dims=dims, input_shapes={k: v for k, v in shapes.items()
                                                      if k in {i.name for i in m.graph.input}})
        except TirError as e:
            bad += 1
            print(f"| {f.name} | {opset} | {len(m.graph.node)} | - | - | - | "
                  f"not imported: {e.message} |")
            continue
        ops = collections.Counter(n.op for n in r.graph.nodes)
        n_ops = sum(v for k, v in ops.items() if k not in ("weight",))
        opq = collections.Counter(n.attr["op"] for n in r.graph.nodes if n.op == "opaque")
        result = f"imported ({time.perf_counter() - t:.1f} s)"
        if not args.no_run:
            try:
                problems = compare(r, inputs_for(r), rtol=1e-3, atol=1e-4, export=args.export)
            except Exception as e:   # noqa: BLE001 - report any failure of the check itself
                problems = [f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"]
            interp = [p for p in problems if p.startswith("interpreter")]
            rest = [p for p in problems if not p.startswith("interpreter")]
            result += "; interpreter " + ("equal to onnxruntime" if not interp else
                                          "; ".join(interp))
            if args.export:
                result += "; re-export " + ("equal" if not rest else "; ".join(rest))
            bad += bool(problems)
        sym = ", ".join(f"{k} {v}" for k, v in r.symbolic.items()) or "-"
        opq_s = ", ".join(f"{k} {v}" for k, v in sorted(opq.items())) or "-"
        print(f"| {f.name} | {opset} | {len(m.graph.node)} | {n_ops} | {opq_s} | {sym} | "
              f"{result} |")
        sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
