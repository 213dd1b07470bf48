"""Cold and warm start of every command: each runs in a fresh process, first with an empty Numba
cache (cold), then again on the cache that run filled (warm). Cold is measured twice: as installed
(the kernels compiled ahead of time, when the install built eqsat_nb._kernels) and with
EQSAT_NB_JIT=1 (every kernel the command needs is compiled just in time, what a first run costs
where the install could not build them). Reports wall seconds.

    python tools/startup.py [--repeat 3] [--only run-nasrnn ...]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "ir_examples"

# name -> command line after `python -m eqsat_nb` (OUT is replaced by a scratch folder)
COMMANDS: dict[str, list[str]] = {
    "check": ["check", str(EXAMPLES / "nasrnn.tir")],
    "interp": ["interp", str(EXAMPLES / "tiny_mlp.tir")],
    "verify-rules": ["verify-rules", str(ROOT / "rules" / "matmul.rules")],
    "run-nasrnn": ["run", str(EXAMPLES / "nasrnn.tir"), "--device", "a100", "-q",
                   "-o", "OUT/nasrnn.tir", "--force"],
    # multi-pattern rules in one iteration only (TENSAT's k_multi 1)
    "run-nasrnn-kmulti1": ["run", str(EXAMPLES / "nasrnn.tir"), "--device", "a100", "-q",
                           "--k-multi", "1", "-o", "OUT/nasrnn.tir", "--force"],
    "run-squeezenet-cpu": ["run", str(EXAMPLES / "squeezenet.tir"), "-q",
                           "-o", "OUT/squeezenet.tir", "--force"],
}


def run_once(name: str, cache: str, scratch: str, jit: bool = False) -> float:
    """Wall seconds of one command in a fresh process using Numba cache folder `cache` (and
    just-in-time kernels only, with `jit`)."""
    argv = [a.replace("OUT", scratch) for a in COMMANDS[name]]
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    env.pop("EQSAT_NB_JIT", None)
    if jit:
        env["EQSAT_NB_JIT"] = "1"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "eqsat_nb", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall


def measure(name: str, repeat: int) -> dict[str, list[float]]:
    """Wall seconds per mode: cold as installed, warm after it, cold just in time, warm after
    it; each cold run starts from its own empty cache, the modes alternate."""
    walls: dict[str, list[float]] = {"cold": [], "warm": [], "cold-jit": [], "warm-jit": []}
    for _ in range(repeat):
        for jit, tag in ((False, ""), (True, "-jit")):
            with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
                walls["cold" + tag].append(run_once(name, cache, out, jit))
                walls["warm" + tag].append(run_once(name, cache, out, jit))
    return walls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="cold+warm pairs per command (median)")
    p.add_argument("--only", nargs="+", choices=sorted(COMMANDS), help="these commands only")
    args = p.parse_args()
    from eqsat_nb.kernels import aot_status
    print(f"kernels as installed: {aot_status()}")
    print(f"| command | cold s (median of {args.repeat}) | warm s | cold s, just in time | "
          "warm s, just in time | cold runs | cold runs, just in time |")
    print("|---|---|---|---|---|---|---|")
    for name in args.only or COMMANDS:
        w = measure(name, args.repeat)
        med = {k: statistics.median(v) for k, v in w.items()}
        print(f"| {name} | {med['cold']:.2f} | {med['warm']:.2f} | {med['cold-jit']:.2f} | "
              f"{med['warm-jit']:.2f} | {', '.join(f'{c:.1f}' for c in w['cold'])} | "
              f"{', '.join(f'{c:.1f}' for c in w['cold-jit'])} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}; numba cache emptied before every cold run")


if __name__ == "__main__":
    main()
