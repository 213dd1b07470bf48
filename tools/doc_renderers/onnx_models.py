"""docs/onnx.md's tables: ONNX models through `run --onnx`, measured against their input
(docs/data/onnx-models.json, from tools/onnx_table.py)."""
from __future__ import annotations

from functools import partial

from .markdown import signed_pct, table
from .records import load

ASCII = partial(signed_pct, minus="-")      # as tools/onnx_table.py prints them

ONNX_MODELS = "docs/data/onnx-models.json"


def zoo() -> list[str]:
    rows = []
    for r in load(ONNX_MODELS)["zoo"]["rows"]:
        slim = r["onnxslim_measured_pct"]
        rows.append([r["model"], f"{r['ops_import']} → {r['ops_cpu']} / {r['ops_a100']}",
                     ASCII(r["est_cpu_pct"]), ASCII(r["est_a100_pct"]),
                     ASCII(r["a100_candidate_measured_pct"]),
                     f"{r['written_cpu']} / {r['written_a100']}",
                     ASCII(r["written_a100_measured_pct"]),
                     "fails" if slim is None else ASCII(slim)])
    return table(["model", "ops (import → cpu / a100 result)", "estimated cpu", "estimated a100",
                  "a100 candidate measured here", "written: cpu / a100",
                  "written a100, measured vs input", "onnxslim measured"], rows)


def user_models() -> list[str]:
    rows = []
    for r in load(ONNX_MODELS)["user_models"]["rows"]:
        ops = r.get("ops_text") or f"{r['ops_before']} → {r['ops_after']}"
        written = r["written"] + (f" ({r['written_why']})" if r.get("written_why") else "")
        rows.append([r["model"], r["exporter_opset"], ops, ASCII(r["est_pct"]), written,
                     ASCII(r["written_vs_input_pct"])])
    return table(["model", "exporter, opset", "ops", "estimated", "written", "written vs input"],
                 rows)


def zoo_cpu_summary() -> tuple[int, float, float]:
    """(models, lowest and highest cpu estimate) of the zoo models, all written unchanged on
    the CPU; a zoo model written optimized there needs its own README row."""
    rows = load(ONNX_MODELS)["zoo"]["rows"]
    changed = [r["model"] for r in rows if r["written_cpu"] != "input"]
    if changed:
        raise ValueError(f"zoo models written optimized on the CPU: {changed}; the README's "
                         f"one-row summary no longer holds")
    est = [r["est_cpu_pct"] for r in rows]
    return len(rows), min(est), max(est)

