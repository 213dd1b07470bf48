"""docs/transformers.md's tables: merged projections priced by the profiles, and the exported
transformers through `run` (docs/data/transformers.json)."""
from __future__ import annotations

import re
from typing import Any, Sequence

from .markdown import table
from .records import load
from .tools import tool

TRANSFORMERS = "docs/data/transformers.json"
ANALYTIC = "eqsat_nb/cost/analytic.py"


def merges(m: dict[str, int]) -> str:
    """"12 × 3-way + 4 × 2-way", as tools/transformer_table.py writes it."""
    return tool("transformer_table").merges_text({int(k): n for k, n in m.items()})


def _run_cells(r: dict[str, Any]) -> list[str]:
    return [r["exporter"], str(r["layers"]), merges(r["merges_a100"]),
            f"{r['a100_speedup_pct']:+.1f} %", f"{r['wall_s']:.0f}", f"{r['peak_rss_gib']:.1f}",
            r["checks"], r["a100_written"]]


def _kept(r: dict[str, Any]) -> str:
    return "yes" if r["cpu_io_kept"] else "NO"


def full_size() -> list[str]:
    rows = []
    for r in load(TRANSFORMERS)["full_size"]["rows"]:
        m = r.get("cpu_measured_pct")
        cpu = r["cpu_written"] + ("" if m is None else f" (measured {m:+.1f} %)")
        rows.append([r["model"]] + _run_cells(r) + [f"{cpu}, {_kept(r)}"])
    return table(["model", "exporter", "layers", "merges found (a100)", "est. a100 speed-up",
                  "`run` wall s", "peak RSS GiB", "checks", "a100 written",
                  "cpu written (measured, 1 thread), I/O kept"], rows)


def small() -> list[str]:
    rows = [[r["label"]] + _run_cells(r) + [f"{r['cpu_written']}, {_kept(r)}"]
            for r in load(TRANSFORMERS)["small"]["rows"]]
    return table(["model", "exporter", "layers", "merges found (a100)", "est. a100 speed-up",
                  "`run` wall s", "peak RSS GiB", "checks", "a100 output",
                  "CPU target: written, names+dims kept"], rows)


# ------------------------------------------------------------------ merged projections, priced
TOKENS = 128
# (label, hidden, output widths, bias, why the a100 profile prices the merge lower)
PROJECTIONS = (
    ("BERT Q/K/V, 3 × 768 x 768 + bias", 768, (768, 768, 768), True,
     "the same 3 GEMM waves in one launch instead of three, one bias add instead of three"),
    ("Llama-1B Q/K/V (GQA), 2048 → 2048 + 256 + 256, no bias", 2048, (2048, 256, 256), False,
     "3 + 1 + 1 partly filled waves become 3 full ones, two launches fewer"),
    ("Llama-1B gate/up, 2 × 2048 x 5632", 2048, (5632, 5632), False,
     "7 + 7 waves either way: one launch fewer"),
)


def _tensor(*dims: int) -> str:
    return f"tensor<{'x'.join(map(str, dims))}xf32>"


def projections_tir(hidden: int, widths: Sequence[int], bias: bool, merged: bool) -> str:
    """One token sequence through the projections, separate or merged as the rules write them
    (one matmul on the concatenated weights, one bias add, one split along the last axis)."""
    outs = [_tensor(1, TOKENS, n) for n in widths]
    lines = [f"func @p(%x: {_tensor(1, TOKENS, hidden)}) -> ({', '.join(outs)}) {{"]
    parts = [(f"w{i}", f"b{i}", n) for i, n in enumerate(widths)]
    if merged:
        parts = [("w", "b", sum(widths))]
    results = []
    for w, b, n in parts:
        lines.append(f"  %{w} = weight @{w} : {_tensor(hidden, n)}")
        lines.append(f"  %y{w} = matmul(%x, %{w}) : {_tensor(1, TOKENS, n)}")
        y = f"%y{w}"
        if bias:
            lines += [f"  %{b} = weight @{b} : {_tensor(n)}",
                      f"  %bb{b} = broadcast(%{b}) {{shape = [1, {TOKENS}, {n}]}} : "
                      f"{_tensor(1, TOKENS, n)}",
                      f"  %z{b} = ewadd(%bb{b}, {y}) : {_tensor(1, TOKENS, n)}"]
            y = f"%z{b}"
        results.append(y)
    if merged:
        results = [f"%s{i}" for i in range(len(widths))]
        lines.append(f"  {', '.join(results)} = split({y}) {{axis = 2, sizes = "
                     f"[{', '.join(map(str, widths))}]}} : {', '.join(outs)}")
    lines += [f"  return {', '.join(results)}", "}"]
    return "\n".join(lines)


def projection_us(device: str, hidden: int, widths: Sequence[int], bias: bool,
                  merged: bool) -> float:
    from eqsat_nb.cost.analytic import AnalyticCostModel
    from eqsat_nb.cost.model import graph_cost
    from eqsat_nb.ir.parse import parse

    return graph_cost(AnalyticCostModel(device),
                      parse(projections_tir(hidden, widths, bias, merged)))


def projections() -> list[str]:
    """Separate and merged projections priced by the a100 and cpu profiles."""
    rows, cpu = [], []
    for label, hidden, widths, bias, why in PROJECTIONS:
        sep, mer = (projection_us("a100", hidden, widths, bias, m) for m in (False, True))
        rows.append([label, f"{sep:.1f} µs", f"{mer:.1f} µs", why])
        cpu.append([projection_us("cpu", hidden, widths, bias, m) for m in (False, True)])
    diff = [(m / s - 1) * 100 for s, m in cpu]
    if min(diff) >= 0:
        why = (f"MLAS is compute-bound and the split a copy: merged {min(diff):.1f}-"
               f"{max(diff):.1f} % dearer, so the CPU target keeps them apart")
    else:
        why = (f"MLAS is compute-bound: within {max(map(abs, diff)):.1f} %, so the CPU target "
               "keeps them apart unless measured faster")
    rows.append(["the same three on the `cpu` profile",
                 " / ".join(f"{s:.0f}" for s, _ in cpu) + " µs",
                 " / ".join(f"{m:.0f}" for _, m in cpu) + " µs", why])
    return table(["projections", "separate", "merged", "why"], rows)


# ------------------------------------------------------------------ large models, streamed
LARGE = "docs/data/large-models.json"


def _run_summary(run: dict[str, Any] | None) -> tuple[str, str]:
    """(wall, peak RSS) cells of one run, or what stopped it."""
    if not run:
        return "–", "–"
    if run.get("stopped"):
        return f"stopped ({run['wall_s']:.0f} s)", f"> {run['peak_rss_gib']:.1f} GiB"
    if run.get("error"):
        return "failed", f"{run['peak_rss_gib']:.1f} GiB"
    return f"{run['wall_s']:.0f} s", f"{run['peak_rss_gib']:.1f} GiB"


def _checks(run: dict[str, Any]) -> str:
    parts = []
    if run.get("layer_check") and "copies checked" in run["layer_check"]:
        m = re.search(r"(\d+) class(?:es)? x ([\d + ]+) cop", run["layer_check"])
        parts.append(f"every copy ({m.group(2)})" if m else "every copy")
    whole = run.get("whole_check") or ""
    parts.append("whole (interp.)" if "max |err|" in whole else "")
    ort_ = run.get("onnxruntime_check") or ""
    parts.append("onnxruntime per layer class" if "one layer at a time" in ort_ else
                 "onnxruntime whole" if "max |err|" in ort_ else "")
    return ", ".join(p for p in parts if p) or "–"


def large_models() -> list[str]:
    rows = []
    for r in load(LARGE)["rows"]:
        now = r["now"]
        wall, rss = _run_summary(now)
        bwall, brss = _run_summary(r.get("before"))
        layers = f"{now.get('layers')} / {now.get('distinct')}" if now.get("layers") else "–"
        rows.append([r["model"], layers, wall, rss, merges(now.get("merges") or {}),
                     _checks(now), now.get("written") or "–", f"{bwall}, {brss}"])
    return table(["model", "layers / distinct", "`run` wall", "peak RSS", "merges",
                  "checks", "written", "previous version: wall, peak RSS"], rows)
