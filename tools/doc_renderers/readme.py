"""The README's A100 and CPU results: the benchmark models from `eqsat-nb bench --json`
records, the exported transformers and zoo models from their records."""
from __future__ import annotations

from .markdown import NONE, num, signed_pct, table
from .onnx_models import zoo_cpu_summary
from .records import load
from .transformers import TRANSFORMERS

BENCH_A100 = "docs/data/bench-a100.json"
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
BENCH_H100 = {p: f"docs/data/bench-h100-{p}.json" for p in PRECISIONS}
BENCH_TX_H100 = {p: f"docs/data/bench-tx-h100-{p}.json" for p in PRECISIONS}

# exported transformers shown together in one README row (same model, two exporters or sizes)
GROUPS = (("bert_ts", "bert_dynamo"), ("distilbert_ts",), ("vit_base_ts", "timm_vit_s_ts"),
          ("gpt2_ts",), ("llama1b_dynamo",))
LABELS = {"llama1b_dynamo": "llama1b_dynamo (1.1 B, 16 layers)"}
COUNT = {n: w for n, w in enumerate("zero one two three four five six seven eight nine ten"
                                    .split())}


def _groups(names: list[str]) -> list[tuple[str, ...]]:
    """GROUPS as far as `names` has them, then any other name alone, in `names`' order."""
    out = [tuple(n for n in g if n in names) for g in GROUPS]
    out = [g for g in out if g]
    seen = {n for g in out for n in g}
    return out + [(n,) for n in names if n not in seen]


def a100_estimates() -> list[str]:
    """`--device a100` estimates next to the papers' measured speed-ups."""
    rows = [[r["model"], num(r["est_speedup_pct"]), num(r["paper_tensat_pct"]),
             num(r["paper_mcts_pct"])] for r in load(BENCH_A100)["rows"]]
    exported = {r["model"]: r for r in load(TRANSFORMERS)["full_size"]["rows"]}
    for group in _groups(list(exported)):
        label = " / ".join(group) if len(group) > 1 else LABELS.get(group[0], group[0])
        rows.append([label, " / ".join(num(exported[n]["a100_speedup_pct"]) for n in group),
                     NONE, NONE])
    return table(["model", "estimated %", "paper TENSAT % (T4)", "paper MCTS % (A100)"], rows)


def cpu_results() -> list[str]:
    """What `--device cpu` wrote for the exported transformers and the zoo models."""
    exported = load(TRANSFORMERS)["full_size"]["rows"]
    rows = []
    for r in exported:
        if r["cpu_written"] == "optimized":
            rows.append([r["model"], f"optimized ({r['cpu_change']})",
                         signed_pct(r["cpu_measured_pct"])])
    kept = [r for r in exported if r["cpu_written"] != "optimized"
            and r["cpu_measured_pct"] is not None]
    same = [r for r in exported if r["cpu_written"] != "optimized"
            and r["cpu_measured_pct"] is None]
    if kept:
        rows.append([", ".join(r["model"] for r in kept), "input unchanged (the guard kept it)",
                     ", ".join(signed_pct(r["cpu_measured_pct"]) for r in kept)])
    if same:
        rows.append([", ".join(r["model"] for r in same), "input unchanged (nothing cheaper)",
                     NONE])
    n, lo, hi = zoo_cpu_summary()
    rows.append([f"the onnx wheel's {COUNT.get(n, n)} zoo CNNs",
                 f"input unchanged (estimated {signed_pct(lo)[:-2]} to {signed_pct(hi)}; "
                 f"candidates within the noise)", NONE])
    return table(["model", "written", "candidate vs input, measured at 1 thread"], rows)


def _priced_by(cost_model: str) -> str:
    """What `eqsat-nb bench` says priced a run, in a column header's words."""
    return "measured table" if cost_model.startswith("table") else "roofline"


def h100_precisions() -> list[str]:
    """`--device h100 --precision P` estimates of the benchmark models and the exported
    transformers, one column a precision (`eqsat-nb bench --json` records, one per precision
    and model set)."""
    runs = {p: load(BENCH_H100[p]) for p in PRECISIONS}
    exported = {p: load(BENCH_TX_H100[p]) for p in PRECISIONS}
    by_model = {p: {r["model"]: r for r in runs[p]["rows"] + exported[p]["rows"]}
                for p in PRECISIONS}
    models = [r["model"] for r in runs[PRECISIONS[0]]["rows"] + exported[PRECISIONS[0]]["rows"]]
    rows = [[m] + [num(by_model[p].get(m, {}).get("est_speedup_pct")) for p in PRECISIONS]
            for m in models]
    return table(["model"] + [f"{p} % ({_priced_by(runs[p]['cost_model'])})"
                              for p in PRECISIONS], rows)
