"""Side by side with egglog on the EGGLOG_WORKLOADS.md workloads, in one process.

For each workload and size: egglog (via shared/tools/egglog_anchor.py, `pip install egglog`) and
eqsat-nb build the same term with the same rules and run the same schedule; the table shows the
(nodes, classes) of both (they must be equal) and the median run times (building excluded).

    python tools/egglog_compare.py [--anchor ../shared/tools/egglog_anchor.py] [--repeats 3]
        [--plan mm_chain:20,40 add_ac:8 ...]
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

from eqsat_nb.search.saturate import saturate
from eqsat_nb.search.workloads import (ITERATION_CAP, build_workload, egglog_limits,
                                       tensor_counts, workload_rules)
from eqsat_nb.warmup import warm_up

DEFAULT_PLAN = {"mm_chain": [20, 40, 80], "add_ac": [8, 10, 11], "mlp": [100, 1000, 10000],
                "mlp2": [100, 1000]}


def ours(kind: str, size: int, repeats: int) -> tuple[tuple[int, int], float]:
    times, counts = [], None
    for _ in range(repeats):
        eg = build_workload(kind, size)
        rules = workload_rules(kind)
        limits = egglog_limits(kind)
        start = time.perf_counter()
        saturate(eg, rules, limits)
        times.append(time.perf_counter() - start)
        counts = tensor_counts(eg)
    return counts, statistics.median(times)


def main() -> None:
    here = Path(__file__).resolve().parent.parent
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--anchor", default=str(here.parent / "shared" / "tools" / "egglog_anchor.py"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--plan", nargs="*", help="workload:size,size ...")
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("egglog_anchor", args.anchor)
    anchor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(anchor)
    plan = DEFAULT_PLAN
    if args.plan:
        plan = {w: [int(s) for s in sizes.split(",")]
                for w, sizes in (item.split(":") for item in args.plan)}
    warm_up()
    print("| workload | size | nodes, classes (egglog) | nodes, classes (eqsat-nb) | egglog s "
          "| eqsat-nb s | eqsat-nb / egglog |")
    print("|---|---|---|---|---|---|---|")
    for kind, sizes in plan.items():
        for size in sizes:
            ref = anchor.bench(kind, size, ITERATION_CAP[kind], args.repeats)
            counts, t = ours(kind, size, args.repeats)
            same = "" if counts == (ref["nodes"], ref["classes"]) else " MISMATCH"
            print(f"| {kind} | {size} | {ref['nodes']}, {ref['classes']} | {counts[0]}, "
                  f"{counts[1]}{same} | {ref['run_s']:.3f} | {t:.3f} | {t / ref['run_s']:.2f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
