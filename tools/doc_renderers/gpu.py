"""Tables from the GPU truth runs (docs/gpu_truth/*_run.json, written by tools/gpu_truth.py) and
the shipped measured cost tables."""
from __future__ import annotations

from typing import Any

from .markdown import NONE, num, pct, ratio, table
from .records import GPU_TRUTH, ROOT, load
from .tools import tool

H100 = f"{GPU_TRUTH}/h100_run.json"
H200 = f"{GPU_TRUTH}/h200_run.json"
H100_TABLE = "eqsat_nb/cost/tables/h100-measured.json"

EXPORTED = ("bert_ts", "distilbert_ts", "vit_base_ts", "gpt2_ts")    # torch.onnx exports


def models(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in run["models"]}


def order(*runs: dict[str, Any]) -> list[str]:
    """The benchmark models, then the exported ones, then any other model a run holds."""
    from eqsat_nb.examples import BENCHMARK_MODELS

    names = {n for r in runs for n in models(r)}
    known = [n for n in BENCHMARK_MODELS + EXPORTED if n in names]
    return known + sorted(names - set(known))


def measured_pct(m: dict[str, Any] | None, choice: str) -> float | None:
    """Whole-graph speed-up of `choice`'s graph (analytic or table) over the original, measured
    as CUDA graphs; None where the model was not run whole."""
    e2e = (m or {}).get("e2e") or {}
    return pct(e2e.get("original", {}).get("graph_us"), e2e.get(choice, {}).get("graph_us"))


def whole_graph_ms(m: dict[str, Any] | None) -> float | None:
    us = ((m or {}).get("e2e") or {}).get("original", {}).get("graph_us")
    return None if us is None else us / 1e3


def pair(m: dict[str, Any] | None, est_key: str, choice: str) -> list[str]:
    """[estimated %, measured %] of one choice; both empty where nothing was measured whole."""
    meas = measured_pct(m, choice)
    if meas is None:
        return [NONE, NONE]
    return [num(m.get(est_key)), num(meas)]


def readme_h100_h200() -> list[str]:
    """README: the measured table's estimate and the whole-graph measurement, per GPU."""
    h100, h200 = models(load(H100)), models(load(H200))
    labels = {"bert_ts": "bert_ts (HF BERT-base)", "vit_base_ts": "vit_base_ts (HF ViT-base)"}
    rows = []
    for name in order(load(H100), load(H200)):
        rows.append([labels.get(name, name)]
                    + pair(h100.get(name), "est_table_pct", "table")
                    + pair(h200.get(name), "est_table_pct", "table"))
    return table(["model", "H100 estimated %", "H100 measured %", "H200 estimated %",
                  "H200 measured %"], rows)


def whole_graphs() -> list[str]:
    """gpu-costs.md: each GPU's roofline and table estimates against the measurements."""
    h100, h200 = models(load(H100)), models(load(H200))
    labels = {"bert_ts": "bert_ts (torch.onnx, HF BERT-base)",
              "vit_base_ts": "vit_base_ts (HF ViT-base)"}
    rows = []
    for name in order(load(H100), load(H200)):
        a, b = h100.get(name), h200.get(name)
        cells = [labels.get(name, name)]
        for m in (a, b):
            cells += pair(m, "est_analytic_pct", "analytic") + pair(m, "est_table_pct", "table")
        ms = [whole_graph_ms(a), whole_graph_ms(b)]
        cells.append(" / ".join(num(x, 3) for x in ms))
        cells.append(num(pct((b or {}).get("sum_measured_us"), ms[1] and ms[1] * 1e3)))
        rows.append(cells)
    return table(["model", "H100: est. datasheet roofline %", "measured, its choice %",
                  "est. by the H100 table %", "measured, table's choice %",
                  "H200: est. fitted roofline %", "measured, its choice %",
                  "est. by the H200 table %", "measured, table's choice %",
                  "original, H100 / H200 ms", "per-op sum / whole − 1, H200 %"], rows)


# ------------------------------------------------------------------ per-operator error
ZERO_WHY = {"concat": "in place", "split": "a view"}    # why a profile prices an op at 0
NO_KERNEL = ("dropout", "reshape")      # no kernel at inference: 0 in every profile, not shown


def fitted_h100_errors() -> dict[str, dict[str, Any]]:
    """Per-op error of the shipped `h100` profile (the fit of the H100 table) on that table."""
    from eqsat_nb.cost.analytic import AnalyticCostModel, profile
    from eqsat_nb.cost.table import load_table

    samples = load_table(ROOT / H100_TABLE).samples()
    measured = {i: (sig, us) for i, (sig, us) in enumerate(samples)}
    return tool("gpu_truth").op_errors(measured, AnalyticCostModel(profile("h100")))


def _cell(op: str, s: dict[str, Any] | None) -> str:
    if s is None:
        return NONE
    med, worst = s["median_ratio"], s["worst_ratio"]
    if med == 0:
        why = f" ({ZERO_WHY[op]})" if op in ZERO_WHY else ""
        return f"0{why}, {ratio(worst) if worst else 0}"
    return f"{med:.2f}, {ratio(worst)}"


def op_errors() -> list[str]:
    """gpu-costs.md: estimated / measured per operator kind, median and worst configuration:
    the datasheet profile on the H100 (its run), the fitted one on the H100 table and on the
    H200 (its run, which priced by the fitted profile)."""
    datasheet, h200 = load(H100)["op_errors"], load(H200)["op_errors"]
    fitted = fitted_h100_errors()
    rows = []
    for op, s in sorted(datasheet.items()):
        if s["configs"] < 2 or op in NO_KERNEL:
            continue
        rows.append([op, str(s["configs"]), _cell(op, s), _cell(op, fitted.get(op)),
                     _cell(op, h200.get(op))])
    if rows:                                # the first row names its second number
        rows[0][2] = rows[0][2].replace(", ", ", worst ", 1)
    return table(["op", "configs", "datasheet / H100", "fitted / H100", "fitted / H200"], rows)
