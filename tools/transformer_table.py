#!/usr/bin/env python
"""The transformer table of docs/transformers.md: each exported model through `run --device a100` and
`run --device cpu`, with this checkout and (optionally) another one, under /usr/bin/time -v.

    python tools/transformer_table.py MODELS_DIR [NAME ...] [--base CHECKOUT ...] [--out DIR]
                                      [--devices a100,cpu]

MODELS_DIR holds NAME.onnx files (tools/export_transformers.py writes them). For each model and
checkout: the a100 run's merged projections (Splits of a MatMul's result in the written model;
when the input was kept, from the report's changes: "merged 3 matmul into 1, 12 times" is 12
three-way merges), estimated speed-up, wall time and peak RSS of the whole
command, whether both numeric checks passed and what was written; the cpu run's written file and
whether the graph inputs and outputs (names, types, dims) are the input's; one row per checkout
(this one first, then each --base, named by its folder). Runs are sequential
(heavy: run it under the shared lock). A checkout is run as `python -m eqsat_nb` with the
checkout first on PYTHONPATH, from a neutral working directory (python -m puts the working
directory first on sys.path), by the checkout's own .venv/bin/python with NUMBA_CACHE_DIR in
that venv when it has one (else this Python and the caller's NUMBA_CACHE_DIR). Warm each
checkout's kernel cache first (one `run` of anything with the same NUMBA_CACHE_DIR), or its
first model's wall time includes compiling them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAYERS = {"bert": 12, "distilbert": 6, "gpt2": 12, "vit_base": 12, "timm_vit_s": 12, "llama1b": 16}


def run(checkout: Path, model: Path, device: str, out: Path) -> dict:
    rep, onx, tim, log = (out.with_suffix(s) for s in (".json", ".onnx", ".time", ".out"))
    for p in (onx, Path(str(onx) + ".data")):
        p.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(checkout), "OPENBLAS_NUM_THREADS": "1"}
    venv = checkout / ".venv"
    python = str(venv / "bin" / "python") if (venv / "bin" / "python").exists() else sys.executable
    if venv.is_dir():                 # the checkout's own kernels cache beside its own venv
        env["NUMBA_CACHE_DIR"] = str(venv / "numba-cache")
    cmd = ["/usr/bin/time", "-v", "-o", str(tim), python, "-m", "eqsat_nb", "run",
           str(model), "--device", device, "--onnx", str(onx), "--report", str(rep), "-q",
           "--force"] + (["--measure-time", "10"] if device == "cpu" else [])
    with open(log, "w") as f:
        rc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                            cwd=tempfile.gettempdir()).returncode
    t = tim.read_text()
    wall = [float(x) for x in re.search(r"Elapsed \(wall clock\) time.*: (\S+)", t)[1].split(":")]
    secs = sum(v * 60 ** i for i, v in enumerate(reversed(wall)))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)[1]) / 2 ** 20
    if rc or not rep.exists():
        return {"rc": rc, "wall": secs, "rss": rss, "error": log.read_text()[-300:]}
    r = json.loads(rep.read_text())
    merges: dict[int, int] = {}
    for c in r.get("changes", []):
        rm, ad = c["removed"].get("matmul", 0), c["added"].get("matmul", 0)
        if c["summary"].startswith("merged") and ad and rm > ad and rm % ad == 0:
            merges[rm // ad] = merges.get(rm // ad, 0) + c["count"] * ad
    oo = r.get("onnx_output", {})
    checks = ("both pass" if r.get("verification", {}).get("ok")
              and "max |err|" in str(oo.get("onnxruntime_check", "")) else
              "unchanged" if not r.get("improved") else "see report")
    if oo.get("written") == "optimized":      # what the file holds; else what the run found
        merges = written_merges(onx)
    return {"rc": rc, "wall": secs, "rss": rss, "speedup": r["speedup_pct"], "merges": merges,
            "checks": checks, "written": oo.get("written"), "onnx": onx,
            "measured": oo.get("measured_speedup_pct")}


def written_merges(path) -> dict:
    """Merged projections in a written model: Splits of a MatMul's result (or of its Add)."""
    import onnx
    g = onnx.load(str(path), load_external_data=False).graph
    prod = {o: n for n in g.node for o in n.output}
    out: dict = {}
    for n in g.node:
        if n.op_type != "Split":
            continue
        src = prod.get(n.input[0])
        if src is not None and src.op_type == "Add":
            src = next((prod[i] for i in src.input
                        if i in prod and prod[i].op_type == "MatMul"), None)
        if src is not None and src.op_type == "MatMul":
            out[len(n.output)] = out.get(len(n.output), 0) + 1
    return out


def io_kept(model: Path, written: Path) -> str:
    import onnx
    if not written.exists():
        return "?"
    a, b = (onnx.load(str(p), load_external_data=False).graph for p in (model, written))
    sig = lambda g: [(x.name, str(x.type)) for x in list(g.input) + list(g.output)]  # noqa: E731
    return "yes" if sig(a) == sig(b) else "NO"


def merges_text(m: dict[int, int]) -> str:
    return " + ".join(f"{n} × {k}-way" for k, n in sorted(m.items(), reverse=True)) or "0"


def exporter_of(name: str) -> str:
    return {"ts": "TorchScript", "dynamo": "dynamo"}.get(name.rsplit("_", 1)[-1], "?")


def row(name: str, side: str, model: Path, a100: dict, cpu: dict) -> str:
    """One checkout's row: the a100 run, then the cpu run (what it wrote, its measured
    single-thread speed-up when it got that far, graph inputs/outputs kept)."""
    layers = next((n for k, n in sorted(LAYERS.items(), key=lambda kv: -len(kv[0]))
                   if name.startswith(k)), "?")
    head = f"| {name} | {exporter_of(name)} | {layers} | {side} |"
    if "speedup" in a100:
        gpu = (f" {merges_text(a100['merges'])} | {a100['speedup']:+.1f} % | {a100['wall']:.0f} | "
               f"{a100['rss']:.1f} | {a100['checks']} | {a100['written']} |")
    else:
        gpu = f" failed (rc {a100['rc']}) | | {a100['wall']:.0f} | {a100['rss']:.1f} | | |"
    if "speedup" in cpu:
        meas = "" if cpu.get("measured") is None else f" (measured {cpu['measured']:+.1f} %)"
        kept = io_kept(model, cpu["onnx"])
        return head + gpu + f" {cpu['written']}{meas}, {kept} |"
    return head + gpu + f" failed (rc {cpu['rc']}) |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", type=Path)
    ap.add_argument("names", nargs="*")
    ap.add_argument("--base", type=Path, action="append", default=[],
                    help="another checkout to run beside this one (repeatable)")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "transformer_table")
    ap.add_argument("--devices", default="a100,cpu", help="a100,cpu (default) or one of them")
    ap.add_argument("--no-this", action="store_true", help="only the --base checkouts")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    names = a.names or sorted(p.stem for p in a.models.glob("*.onnx"))
    sides = [("this", REPO)][:0 if a.no_this else 1] + [(b.resolve().name, b.resolve())
                                                         for b in a.base]
    devices = a.devices.split(",")
    print("| model | exporter | layers | checkout | merges found (a100) | est. a100 speed-up | "
          "`run` wall s | peak RSS GiB | checks | a100 written | cpu written, I/O kept |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    skipped = {"rc": "-", "wall": 0.0, "rss": 0.0}
    for name in names:
        model = a.models / f"{name}.onnx"
        for label, checkout in sides:
            got = {d: run(checkout, model, d, a.out / f"{name}.{label}.{d}.run")
                   if d in devices else skipped for d in ("a100", "cpu")}
            for d, v in got.items():
                print(f"  {name} {label} {d}: {v.get('error', 'ok')}", file=sys.stderr)
            print(row(name, label, model, got["a100"], got["cpu"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
