"""Cold and warm start of the engine: first `import eqsat_nb` plus first call of every e-graph
kernel, in a fresh process, with an empty Numba cache (cold) and then with it filled (warm).

    python tools/startup.py [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SNIPPET = ("import time; t = time.perf_counter(); import eqsat_nb; "
           "from eqsat_nb.warmup import warm_up; warm_up(); "
           "print(time.perf_counter() - t)")


def _run(cache_dir: str) -> tuple[float, float]:
    """(wall seconds of the whole process, seconds inside it for import + warm-up)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", SNIPPET], env=env, check=True,
                         capture_output=True, text=True).stdout
    return time.perf_counter() - start, float(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        cold = _run(cache)
        warm = [_run(cache) for _ in range(args.repeat)]
    print(f"cold start (empty cache): import+warm-up {cold[1]:.2f} s, process {cold[0]:.2f} s")
    print(f"warm start (median of {args.repeat}): import+warm-up "
          f"{statistics.median(w[1] for w in warm):.2f} s, process "
          f"{statistics.median(w[0] for w in warm):.2f} s")


if __name__ == "__main__":
    main()
