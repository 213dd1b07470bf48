"""Tables of earlier a100 profiles run through the benchmark models
(docs/data/a100-profile-history.json) and of MCTS against saturation
(docs/data/mcts-compare.json): docs/performance.md and docs/gpu-costs.md."""
from __future__ import annotations

from typing import Any

from .markdown import num, table
from .records import load
from .tools import tool

HISTORY = "docs/data/a100-profile-history.json"
MCTS = "docs/data/mcts-compare.json"
PUBLISHED = "eqsat_nb/commands/bench.py"


def _papers() -> tuple[dict[str, float], dict[str, float]]:
    """The papers' measured speed-ups, as `eqsat-nb bench` prints them beside its own."""
    from eqsat_nb.commands.bench import PUBLISHED_MCTS, PUBLISHED_TENSAT
    return PUBLISHED_TENSAT, PUBLISHED_MCTS


def bench_4us_floor() -> list[str]:
    """docs/performance.md: `bench --device a100` with the single 4 µs per-kernel floor."""
    tensat, mcts = _papers()
    rows = []
    for r in load(HISTORY)["bench_4us_floor"]["rows"]:
        mark = f" {r['footnote']}" if r.get("footnote") else ""
        wall = r["run_wall_s"]
        wall = f"{wall[0]}–{wall[1]}" if isinstance(wall, list) else f"{wall:.1f}"
        rows.append([r["model"], f"{r['est_before_ms']:.3f} → {r['est_after_ms']:.3f}",
                     num(r["est_speedup_pct"], 2), num(tensat.get(r["model"])),
                     num(mcts.get(r["model"]), 2),
                     f"{r['egraph_nodes']}, {r['iterations']} ({r['stop']})",
                     r["extraction"] + mark,
                     f"{r['search_s']:.2f} / {r['extract_s']:.2f} / {r['verify_s']:.2f}{mark}",
                     wall + mark])
    return table(["model", "est. before → after ms", "speed-up %", "paper TENSAT % (T4)",
                  "paper MCTS % (A100)", "e-graph nodes, iterations (stop)", "extraction",
                  "search / extract / verify s", "`run` wall s"], rows)


def rule_effects() -> list[str]:
    """docs/gpu-costs.md: the a100 profile before and after its split, concat and grouped-conv
    rules, and with each half alone."""
    tensat, mcts = _papers()
    rows = [[r["model"], num(r["before_pct"]), num(r["after_pct"]),
             num(r["split_concat_only_pct"]), num(r["grouped_only_pct"]),
             num(tensat.get(r["model"])), num(mcts.get(r["model"])), r["what_moved_it"]]
            for r in load(HISTORY)["rule_effects"]["rows"]]
    return table(["model", "before %", "after %", "split/concat only %", "grouped only %",
                  "paper TENSAT % (T4)", "paper MCTS % (A100)", "what moved it"], rows)


def _est(v: list[Any]) -> str:
    before, after, pct = v
    return num(pct) if before is None else f"{before:.3f} → {after:.3f}, {num(pct)}"


def floor_effects() -> list[str]:
    """docs/gpu-costs.md: one 4 µs floor for every kernel against 2 µs for non-GEMM kernels."""
    rows = []
    for r in load(HISTORY)["floor_effects"]["rows"]:
        if len(r["models"]) == 1:
            rows.append([r["models"][0], _est(r["before"]), _est(r["after"]), r["why_it_moved"]])
        else:
            rows.append([", ".join(r["models"]), ", ".join(_est(v) for v in r["before"]),
                         ", ".join(_est(v) for v in r["after"]), r["why_it_moved"]])
    return table(["model", "before: est. ms, %", "after: est. ms, %", "why it moved"], rows)


def _cheaper(ours: float, theirs: float) -> str:
    """How MCTS's result compares, as tools/mcts_compare.py marks it (<: cheaper graph)."""
    return "<" if ours > theirs else "=" if ours == theirs else ">"


def mcts_compare() -> list[str]:
    """docs/performance.md: TENSAT mode, TENSAT's schedule and MCTS at the paper's setting."""
    paper = tool("mcts_compare").PAPER
    rows = []
    for r in load(MCTS)["rows"]:
        name, p_pct, p_s = paper[r["model"]][:3]
        rows.append([name, f"{r['before_us']:.1f}", num(r["tensat_mode_pct"], 2),
                     num(r["tensat_schedule_pct"], 2), num(r["mcts_pct"], 2),
                     f"{_cheaper(r['mcts_pct'], r['tensat_mode_pct'])} / "
                     f"{_cheaper(r['mcts_pct'], r['tensat_schedule_pct'])}",
                     f"{r['mcts_s']:.2f}", num(p_pct, 2), f"{p_s:.1f}"])
    return table(["model", "before µs", "TENSAT mode %", "TENSAT's schedule %", "MCTS %",
                  "MCTS vs mode / schedule", "MCTS s", "paper MCTS %", "paper OCF/ILP s"], rows)
