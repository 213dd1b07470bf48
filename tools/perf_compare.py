"""Compare a benchmark run with the saved baseline; fail on a regression.

Runs the `perf/` suites (quick tier, or `--full`) into a JSON file, or reads one a
`pytest perf --benchmark-json=FILE` run wrote, and compares it with the newest baseline in
`perf/baselines/<machine id>/` (or `--baseline FILE`): one row per benchmark present in both,
with the baseline median, the current median, their ratio, the eqsat-nb / egglog ratio of both
runs where measured, and every change of a domain figure from `extra_info` (nodes, classes,
matches, DAG cost, speed-up). Exit status 1 when a benchmark got slower by more than the
threshold (default 25 %) in both its median and its fastest round, or a quality figure got worse (a higher DAG cost, a lower speed-up), 0 otherwise,
2 when nothing could be compared, 3 when the benchmarks themselves failed.

Why the fastest round too: on a shared machine other processes inflate some rounds, which moves
a median by 30-60 % on an unchanged tree (measured here), while the fastest round stays put; a
real slow-down moves both.

    python tools/perf_compare.py                       # quick tier vs the newest baseline
    python tools/perf_compare.py --full                # full tier
    python tools/perf_compare.py run.json              # a saved run
    python tools/perf_compare.py --threshold 10 -- -k saturation   # pytest args after --
    python tools/perf_compare.py --save-baseline       # full tier saved as the next baseline
    python tools/perf_compare.py --headline            # headline numbers of the newest baseline
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
STORAGE = ROOT / "perf" / "baselines"

#: extra_info keys whose increase / decrease is a loss of quality (fails the comparison)
LOWER_IS_BETTER = frozenset({"dag_cost", "cost_after_us", "ocf_dag_cost_us"})
HIGHER_IS_BETTER = frozenset({"speedup_pct"})
#: measured figures that are worse only beyond a share of noise (peak memory of a process)
LOWER_IS_BETTER_WITHIN = {"peak_rss_mib": 0.25}
#: extra_info keys that are timings themselves (shown elsewhere or too noisy to list)
NOT_FIGURES = frozenset({"ratio_vs_egglog", "egglog_run_s", "m_inserts_per_s", "phase_s"})


def machine_id() -> str:
    """pytest-benchmark's storage folder for this interpreter (Linux-CPython-3.11-64bit)."""
    return "-".join((platform.system(), platform.python_implementation(),
                     ".".join(platform.python_version_tuple()[:2]), platform.architecture()[0]))


def baselines(storage: Path = STORAGE) -> list[Path]:
    """Saved runs (NNNN_*.json) of this machine id, oldest first."""
    return sorted((storage / machine_id()).glob("[0-9][0-9][0-9][0-9]_*.json"))


def load_run(path: Path) -> dict[str, dict[str, Any]]:
    """A pytest-benchmark JSON file as {fullname: benchmark} (benchmarks that ran)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    return {b["fullname"]: b for b in doc.get("benchmarks", []) if b.get("stats")}


@dataclass
class Row:
    """One benchmark in both runs."""

    name: str
    base_median: float
    median: float
    egglog: tuple[float | None, float | None] = (None, None)     # ratio_vs_egglog base, now
    changes: list[str] = field(default_factory=list)
    worse_quality: list[str] = field(default_factory=list)
    base_min: float = 0.0          # fastest round of each run (0: unknown, medians decide alone)
    min: float = 0.0

    @property
    def ratio(self) -> float:
        return self.median / self.base_median if self.base_median > 0 else math.inf

    @property
    def min_ratio(self) -> float:
        return self.min / self.base_min if self.base_min > 0 and self.min > 0 else self.ratio

    def slower(self, threshold_pct: float) -> bool:
        limit = 1.0 + threshold_pct / 100.0
        return self.ratio > limit and self.min_ratio > limit

    def status(self, threshold_pct: float) -> str:
        flags = []
        if self.slower(threshold_pct):
            flags.append("SLOWER")
        if self.worse_quality:
            flags.append("WORSE")
        if not flags and self.ratio < 1.0 / (1.0 + threshold_pct / 100.0):
            flags.append("faster")
        return " ".join(flags) or "ok"


def _figure_changes(base: dict, cur: dict) -> tuple[list[str], list[str]]:
    """(every changed domain figure as 'key a→b', those that got worse)."""
    changes, worse = [], []
    for key in sorted(set(base) & set(cur)):        # figures added or dropped are not changes
        if key in NOT_FIGURES:
            continue
        a, b = base.get(key), cur.get(key)
        if a == b:
            continue
        changes.append(f"{key} {a}→{b}")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if (key in LOWER_IS_BETTER and b > a * (1 + 1e-9)) or \
                    (key in HIGHER_IS_BETTER and b < a - 1e-9) or \
                    (key in LOWER_IS_BETTER_WITHIN and b > a * (1 + LOWER_IS_BETTER_WITHIN[key])):
                worse.append(key)
    return changes, worse


def compare(base: dict[str, dict], cur: dict[str, dict]) -> list[Row]:
    """Rows for the benchmarks present in both runs, in the current run's order."""
    rows = []
    for name, b in cur.items():
        a = base.get(name)
        if a is None:
            continue
        ea, eb = a.get("extra_info") or {}, b.get("extra_info") or {}
        changes, worse = _figure_changes(ea, eb)
        rows.append(Row(name, float(a["stats"]["median"]), float(b["stats"]["median"]),
                        (ea.get("ratio_vs_egglog"), eb.get("ratio_vs_egglog")), changes, worse,
                        float(a["stats"].get("min", 0.0)), float(b["stats"].get("min", 0.0))))
    return rows


def fmt_time(s: float) -> str:
    """Seconds with a unit that keeps three significant digits."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def render(rows: Sequence[Row], threshold_pct: float) -> str:
    """A markdown table of the rows."""
    def egg(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    out = ["| benchmark | baseline median | current median | ratio | min ratio | eqsat-nb/egglog "
           "(base → now) | status | domain figures changed |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eg = "" if r.egglog == (None, None) else f"{egg(r.egglog[0])} → {egg(r.egglog[1])}"
        out.append(f"| {r.name.removeprefix('perf/')} | {fmt_time(r.base_median)} | "
                   f"{fmt_time(r.median)} | {r.ratio:.2f} | {r.min_ratio:.2f} | {eg} | "
                   f"{r.status(threshold_pct)} | "
                   f"{'; '.join(r.changes)} |")
    return "\n".join(out)


def run_benchmarks(json_path: Path, full: bool, pytest_args: Sequence[str],
                   save: str | None = None) -> int:
    """Run the perf suites (quick tier unless `full`) writing `json_path`; pytest's exit code."""
    cmd = [sys.executable, "-m", "pytest", "perf", "-q", "-p", "no:cacheprovider",
           f"--benchmark-json={json_path}", *(["--full"] if full else [])]
    if save:
        cmd += [f"--benchmark-storage=file://{STORAGE}", f"--benchmark-save={save}"]
    cmd += list(pytest_args)
    print("running:", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


# ------------------------------------------------------------------ headline numbers

def _median(run: dict[str, dict], name: str) -> float | None:
    b = run.get(f"perf/{name}")
    return None if b is None else float(b["stats"]["median"])


def _info(run: dict[str, dict], name: str) -> dict:
    return (run.get(f"perf/{name}") or {}).get("extra_info") or {}


def headline(path: Path) -> str:
    """The headline numbers (docs/performance.md), as markdown bullets, from one saved run."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    run = load_run(path)
    m = (doc.get("machine_info") or {}).get("eqsat_nb") or {}
    lines = [f"Baseline `{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}` "
             f"({m.get('date', doc.get('datetime', '?')[:10])}, {m.get('cpu_model', '?')}, "
             f"{m.get('usable_cores', '?')} usable cores, {m.get('ram_gib', '?')} GiB, Python "
             f"{m.get('python', '?')}, numba {m.get('numba', '?')}, numpy {m.get('numpy', '?')}; "
             f"load average at start {m.get('loadavg_at_start', '?')}; medians, warm JIT):", ""]

    def item(label: str, name: str, extra: str = "") -> None:
        t = _median(run, name)
        if t is not None:
            lines.append(f"- {label}: {fmt_time(t)}{extra}")

    item("parse + shape-check of ViT-Huge", "test_parse.py::test_parse_check_largest")
    ins = _median(run, "test_egraph_core.py::test_insert_100k")
    item("100 000 hash-cons insertions", "test_egraph_core.py::test_insert_100k",
         "" if ins is None else f" ({0.1 / ins:.1f} M/s)")
    item("10 000 unions + rebuild on a 100 000-node e-graph",
         "test_egraph_core.py::test_union_rebuild_10k_on_100k")
    item("snapshot of a 2 000-node e-graph", "test_egraph_core.py::test_snapshot_2000")
    em = _info(run, "test_saturation.py::test_ematch_all_rules[bert]")
    item("e-matching every rule on saturated BERT",
         "test_saturation.py::test_ematch_all_rules[bert]",
         f" ({em['matches']} matches of {em['patterns']} patterns)" if em else "")
    sat = {k.split("[")[1].rstrip("]"): float(b["stats"]["median"]) for k, b in run.items()
           if "::test_tensat_model[" in k}
    if sat:
        lo, hi = min(sat, key=sat.get), max(sat, key=sat.get)
        lines.append(f"- saturation at TENSAT's settings: {fmt_time(sat[lo])} ({lo}) to "
                     f"{fmt_time(sat[hi])} ({hi}) per model")
    item("OCF extraction, 2 000-node problem", "test_extract.py::test_ocf_2000_nodes")
    item("ILP extraction on saturated NasNet-A",
         "test_extract.py::test_extract_saturated[nasneta-ilp]")
    item("analytic CPU costs of every node of saturated NasNet-A",
         "test_costs.py::test_analytic_egraph_costs[nasneta]")
    item("cost cache, every signature of NasRNN in one read",
         "test_costs.py::test_cost_cache_get_many")
    e2e = {k.split("[")[1].rstrip("]"): b for k, b in run.items() if "::test_optimize[" in k}
    if e2e:
        parts = [f"{k} {fmt_time(float(b['stats']['median']))} "
                 f"({b['extra_info'].get('speedup_pct', '?')} %)" for k, b in sorted(e2e.items())]
        lines.append("- end to end (`optimize`, analytic cpu costs, ocf; estimated speed-up): "
                     + ", ".join(parts))
    egg = {k.split("[")[1].rstrip("]"): b["extra_info"].get("ratio_vs_egglog")
           for k, b in run.items() if "::test_egglog_side_by_side[" in k}
    if egg:
        lines.append("- eqsat-nb / egglog run time, same workload, same run: "
                     + ", ".join(f"{k} {v}" for k, v in egg.items()))
    item("cold `run nasrnn.tir --device a100` (empty Numba cache: compile every kernel it needs)",
         "test_compile.py::test_cold_run_nasrnn")
    item("warm `run nasrnn.tir --device a100` (fresh process, kernels from the cache)",
         "test_compile.py::test_warm_run_nasrnn")
    return "\n".join(lines)


def describe_machine(path: Path) -> Path:
    """Write NNNN_name.md beside a saved run: the machine and versions it was measured with."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    mi = doc.get("machine_info") or {}
    m = mi.get("eqsat_nb") or {}
    ci = doc.get("commit_info") or {}
    out = path.with_suffix(".md")
    rows = [("date", m.get("date")), ("tier", m.get("tier")), ("CPU", m.get("cpu_model")),
            ("usable cores", m.get("usable_cores")), ("RAM (GiB)", m.get("ram_gib")),
            ("load average at start (1, 5, 15 min)", m.get("loadavg_at_start")),
            ("OS", f"{mi.get('system')} {mi.get('release')} {mi.get('machine')}"),
            ("Python", m.get("python")), ("numba", m.get("numba")), ("numpy", m.get("numpy")),
            ("highspy", m.get("highspy")), ("egglog", m.get("egglog") or "not installed"),
            ("pytest-benchmark", m.get("pytest_benchmark")),
            ("commit", f"{ci.get('id', '?')[:12]}{' (dirty tree)' if ci.get('dirty') else ''}")]
    text = [f"# Machine of `{path.name}`", "", "| | |", "|---|---|"]
    text += [f"| {k} | {v} |" for k, v in rows]
    text += ["", "## Headline numbers", "", headline(path), ""]
    out.write_text("\n".join(text), encoding="utf-8")
    return out


# ------------------------------------------------------------------ command line

def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="pytest arguments may follow `--`.")
    p.add_argument("current", nargs="?", type=Path,
                   help="a pytest-benchmark JSON file (default: run the benchmarks now)")
    p.add_argument("--baseline", type=Path,
                   help="baseline JSON (default: the newest in perf/baselines/<machine id>/)")
    p.add_argument("--threshold", type=float, default=25.0,
                   help="allowed growth of a median, percent (default 25)")
    p.add_argument("--full", action="store_true", help="run the full tier (default: quick)")
    p.add_argument("--json", type=Path, help="where to keep the run's JSON (default: temporary)")
    p.add_argument("--speed-only", action="store_true",
                   help="do not fail on worse quality figures (DAG cost, speed-up)")
    p.add_argument("--save-baseline", action="store_true",
                   help="run the full tier and save it as the next baseline, with the machine "
                        "described beside it")
    p.add_argument("--headline", action="store_true",
                   help="print the headline numbers of the baseline and exit")
    args = p.parse_args(argv)

    if args.save_baseline:
        return save_baseline(extra)
    saved = baselines()
    base_path = args.baseline or (saved[-1] if saved else None)
    if base_path is None:
        print(f"no baseline in {STORAGE / machine_id()} (python tools/perf_compare.py "
              "--save-baseline)", file=sys.stderr)
        return 2
    if args.headline:
        print(headline(base_path))
        return 0

    rc = 0
    with tempfile.TemporaryDirectory() as tmp:
        cur_path = args.current
        if cur_path is None:
            cur_path = args.json or Path(tmp) / "current.json"
            rc = run_benchmarks(cur_path, args.full, extra)
            if not cur_path.exists():
                print(f"the benchmarks wrote no results (pytest exit {rc})", file=sys.stderr)
                return 3
        rows = compare(load_run(base_path), load_run(cur_path))
    print(f"\nbaseline: {base_path}\nthreshold: median and fastest round +{args.threshold:g} %\n")
    if not rows:
        print("no benchmark in common with the baseline", file=sys.stderr)
        return 2
    print(render(rows, args.threshold))
    slow = [r.name for r in rows if r.slower(args.threshold)]
    worse = [] if args.speed_only else [r.name for r in rows if r.worse_quality]
    print(f"\n{len(rows)} compared; {len(slow)} slower than +{args.threshold:g} %; "
          f"{len(worse)} with worse quality figures")
    for name in slow:
        print(f"REGRESSION (speed): {name}")
    for name in worse:
        print(f"REGRESSION (quality): {name}")
    if rc not in (0, 5):
        print(f"pytest failed (exit {rc})", file=sys.stderr)
        return 3
    return 1 if slow or worse else 0


def save_baseline(extra: Sequence[str]) -> int:
    """Run the full tier into the next NNNN_baseline.json and describe the machine beside it."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0))
        if load > 0.5 * cores:
            print(f"warning: load average {load:.1f} on {cores} cores; timings will be inflated",
                  file=sys.stderr)
    except (AttributeError, OSError):
        pass
    before = set(baselines())
    with tempfile.TemporaryDirectory() as tmp:
        rc = run_benchmarks(Path(tmp) / "run.json", True, extra, save="baseline")
    new = [p for p in baselines() if p not in before]
    if rc != 0:
        for p in new:
            p.unlink()
        print(f"benchmarks failed (pytest exit {rc}); no baseline saved", file=sys.stderr)
        return 3
    if not new:
        print("pytest-benchmark saved no file", file=sys.stderr)
        return 3
    md = describe_machine(new[-1])
    print(f"\nsaved {new[-1].relative_to(ROOT)} and {md.relative_to(ROOT)}\n")
    print(headline(new[-1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
