"""Cold and warm start of every command: each runs in a fresh process, first with an empty Numba
cache (cold: every kernel it needs is compiled), then again on the cache that run filled (warm).
Reports wall seconds and the command's own Numba compilation time.

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
    "run-squeezenet-cpu": ["run", str(EXAMPLES / "squeezenet.tir"), "-q",
                           "-o", "OUT/squeezenet.tir", "--force"],
}


def run_once(name: str, cache: str, scratch: str) -> float:
    """Wall seconds of one command in a fresh process using Numba cache folder `cache`."""
    argv = [a.replace("OUT", scratch) for a in COMMANDS[name]]
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "eqsat_nb", *argv], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return wall


def measure(name: str, repeat: int) -> tuple[list[float], list[float]]:
    """(cold walls, warm walls): each repeat starts from its own empty cache."""
    cold, warm = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
            cold.append(run_once(name, cache, out))
            warm.append(run_once(name, cache, out))
    return cold, warm


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3, help="cold+warm pairs per command (median)")
    p.add_argument("--only", nargs="+", choices=sorted(COMMANDS), help="these commands only")
    args = p.parse_args()
    print(f"| command | cold s (median of {args.repeat}) | warm s | cold runs |")
    print("|---|---|---|---|")
    for name in args.only or COMMANDS:
        cold, warm = measure(name, args.repeat)
        print(f"| {name} | {statistics.median(cold):.2f} | {statistics.median(warm):.2f} | "
              f"{', '.join(f'{c:.1f}' for c in cold)} |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}; numba cache emptied before every cold run")


if __name__ == "__main__":
    main()
