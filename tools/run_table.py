"""`eqsat-nb run` on large models as a user runs it, measured: wall time and peak memory of the
whole command, layers found, merges, checks. The record behind docs/transformers.md's table of
large models (tools/doc_renderers/transformers.py).

    python tools/run_table.py LABEL=MODEL.onnx [...] --json docs/data/large-models.json
    python tools/run_table.py LABEL=MODEL.onnx --as-before "PYTHONPATH=/old/checkout" \\
        --update docs/data/large-models.json        # the same runs with an older checkout

Each model runs alone, `eqsat-nb run MODEL --device DEVICE --onnx OUT --report R` in a fresh
process; its peak resident memory is the kernel's accounting of the child (wait4's ru_maxrss).
`--stop-above SIZE` stops a run whose resident memory passes SIZE (sampled every 0.2 s, the
whole process tree) and records where it stopped: how an older version that cannot hold a model
is measured without taking the machine down.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _rss_tree(pid: int) -> int:
    """Resident bytes of a process and its children (from /proc)."""
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def run_one(model: Path, device: str, env_prefix: str, stop_above: int | None) -> dict[str, Any]:
    """One measured run: wall s, peak RSS GiB, and what the report says (or where it stopped)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, report = Path(tmp) / "out.onnx", Path(tmp) / "report.json"
        env = dict(os.environ)
        for word in shlex.split(env_prefix or ""):
            key, _, value = word.partition("=")
            env[key] = value
        cmd = [sys.executable, "-m", "eqsat_nb", "run", str(model), "--device", device,
               "--onnx", str(out), "--report", str(report), "-q"]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=tmp)
        stopped = None
        peak_seen = 0
        while proc.poll() is None:
            rss = _rss_tree(proc.pid)
            peak_seen = max(peak_seen, rss)
            if stop_above is not None and rss > stop_above:
                stopped = rss
                proc.kill()
                break
            time.sleep(0.2)
        _, _, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, None)
        wall = time.perf_counter() - start
        stdout, stderr = proc.communicate()
        peak = max(peak_seen, usage.ru_maxrss * 1024 if usage is not None else 0)
        row: dict[str, Any] = {"wall_s": round(wall, 1), "peak_rss_gib": round(peak / 2**30, 2)}
        if stopped is not None:
            row["stopped"] = (f"stopped at {stopped / 2**30:.1f} GiB resident, {wall:.0f} s "
                              f"in")
            return row
        if proc.returncode != 0 or not report.exists():
            row["error"] = (stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
            return row
        r = json.loads(report.read_text())
    layers = r.get("layers") or {}
    checks = (layers.get("checks") or {})
    v = r.get("verification") or {}
    o = r.get("onnx_output") or {}
    row.update(layers=layers.get("layers"), distinct=layers.get("distinct"),
               merges=merge_counts(r), written=o.get("written"),
               whole_check=v.get("summary"), layer_check=checks.get("summary"),
               onnxruntime_check=o.get("onnxruntime_check"),
               estimated_speedup_pct=round(r.get("speedup_pct", 0.0), 1))
    return row


def merge_counts(report: dict[str, Any]) -> dict[str, int]:
    """Matmuls merged, by width: {"3": 32} for "merged 3 matmul into 1, 32 times"."""
    out: dict[str, int] = {}
    for c in report.get("changes", []):
        k = c.get("removed", {}).get("matmul", 0)
        if k >= 2 and c.get("added", {}).get("matmul") == 1:
            out[str(k)] = out.get(str(k), 0) + c.get("count", 1)
    return out


def checkout_commit(env_prefix: str) -> str:
    """The commit of the checkout an `--as-before` PYTHONPATH names ("?" if none)."""
    for word in shlex.split(env_prefix):
        key, _, value = word.partition("=")
        if key == "PYTHONPATH":
            done = subprocess.run(["git", "-C", value.split(os.pathsep)[0], "rev-parse",
                                   "--short", "HEAD"], capture_output=True, text=True)
            if done.returncode == 0:
                return done.stdout.strip()
    return "?"


def machine() -> tuple[dict[str, Any], dict[str, str]]:
    """(the machine, the versions) a record names."""
    import numba
    import numpy
    import onnxruntime
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    mem = next((int(line.split()[1]) for line in open("/proc/meminfo")
                if line.startswith("MemTotal")), 0)
    return ({"cpu": cpu, "cpus": os.cpu_count(), "memory_gib": round(mem / 2**20)},
            {"python": platform.python_version(), "numba": numba.__version__,
             "numpy": numpy.__version__, "onnxruntime": onnxruntime.__version__})


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(float(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", metavar="LABEL=MODEL.onnx")
    p.add_argument("--device", default="h100")
    p.add_argument("--json", type=Path, help="write a new record")
    p.add_argument("--update", type=Path, help="add these runs to a record")
    p.add_argument("--as-before", default="", metavar="ENV",
                   help="environment of the older checkout (e.g. PYTHONPATH=DIR); the runs go "
                   "in the record as `before`")
    p.add_argument("--stop-above", type=parse_size, default=None, metavar="SIZE")
    args = p.parse_args(argv)
    key = "before" if args.as_before else "now"
    path = args.update or args.json
    machine_, versions = machine()
    record = json.loads(path.read_text()) if args.update and path.exists() else {
        "command": "python tools/run_table.py " + shlex.join(sys.argv[1:]),
        "measures": "eqsat-nb run MODEL --device DEVICE --onnx OUT, one at a time, fresh "
                    "process; peak RSS from wait4", "machine": machine_, "versions": versions,
        "rows": []}
    rows = {r["model"]: r for r in record["rows"]}
    for spec in args.models:
        label, _, model = spec.partition("=")
        row = run_one(Path(model), args.device, args.as_before, args.stop_above)
        rows.setdefault(label, {"model": label})[key] = row
        rows[label]["device"] = args.device
        print(label, key, json.dumps(row), flush=True)
    record["rows"] = list(rows.values())
    if key == "before":
        record["before"] = f"the previous version, commit {checkout_commit(args.as_before)}"
    if path is not None:
        path.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
