"""The table users trust: every ONNX model of a folder through `eqsat-nb run`, measured.

Per model: the exporter that wrote it (producer name and version) and its opset, whether it
imported (or the exact reason it did not), ops before → after, the
estimated speed-up, the run's own measurement of the rewritten candidate (when a rewrite was
found), what was written, and the *measured* onnxruntime speed-up of the written file
against the input (alternating medians, one thread, timed here independently of the run's own
guard); onnxslim's measured speed-up beside it when onnxslim is installed.
"""
from __future__ import annotations

import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence


@dataclass
class Row:
    model: str
    status: str                      # "ok" or the reason it failed
    exporter: str = ""
    opset: int | None = None
    ops_before: int | None = None
    ops_after: int | None = None
    estimated_pct: float | None = None
    written: str = ""
    measured: float | None = None    # latency ratio input / output (> 1: faster)
    onnxslim: float | None = None
    guard_pct: float | None = None   # the run's own measurement of the rewritten candidate

    def cells(self) -> list[str]:
        def pct(x: float | None) -> str:
            return "" if x is None else f"{(x - 1) * 100:+.1f} %"
        ops = "" if self.ops_before is None else f"{self.ops_before} → {self.ops_after}"
        est = "" if self.estimated_pct is None else f"{self.estimated_pct:+.1f} %"
        guard = "" if self.guard_pct is None else f"{self.guard_pct:+.1f} %"
        return [self.model, self.exporter, "" if self.opset is None else str(self.opset),
                self.status, ops, est, guard, self.written, pct(self.measured),
                pct(self.onnxslim)]


HEADER = ["model", "exporter", "opset", "import", "ops", "estimated", "candidate measured",
          "written", "written measured", "onnxslim"]


def measured_ratio(before: Any, after: Any, budget_s: float = 6.0,
                   shapes: Any = None) -> float:
    """Input latency / output latency in onnxruntime, one thread, alternating medians, on
    random inputs of the given shapes (default: symbolic dims at 1)."""
    from .measure import random_feeds, time_pair

    if after.SerializeToString() == before.SerializeToString():
        return 1.0
    return time_pair(before, after, random_feeds(before, shapes=shapes), threads=1,
                     budget_s=budget_s).ratio


def onnxslim_ratio(model: Any, budget_s: float = 6.0, shapes: Any = None) -> float | None:
    try:
        import onnxslim
    except ImportError:
        return None
    try:
        return measured_ratio(model, onnxslim.slim(model), budget_s, shapes)
    except Exception:      # noqa: BLE001 - onnxslim failing (or writing a model onnxruntime
        return None        # refuses) is a blank cell, not our failure


def table_row(path: Path, run_args: Sequence[str], budget_s: float = 6.0) -> Row:
    import onnx

    from ..cli import main

    from .importer import default_opset

    source = onnx.load(str(path), load_external_data=False)
    exporter = " ".join(x for x in (source.producer_name, source.producer_version) if x)
    opset = default_opset(source)
    with tempfile.TemporaryDirectory() as tmp:
        out, rep = Path(tmp) / "out.onnx", Path(tmp) / "report.json"
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["run", str(path), "--onnx", str(out), "--report", str(rep), "-q",
                         *run_args])
        if code != 0:
            reason = err.getvalue().strip().splitlines()
            return Row(path.name, reason[0] if reason else f"exit code {code}", exporter, opset)
        r = json.loads(rep.read_text())
        before = onnx.load(str(path))
        after = onnx.load(str(out))
        row = Row(path.name, "ok", exporter, opset, r["ops_before"], r["ops_after"],
                  r["speedup_pct"], r["onnx_output"]["written"],
                  guard_pct=r["onnx_output"].get("measured_speedup_pct"))
        shapes = {k: tuple(v) for k, v in r["analysed_shapes"].items()} \
            if r.get("analysed_shapes") else None     # where 1 was degenerate (symbolic.py)
        row.measured = measured_ratio(before, after, budget_s, shapes)
        row.onnxslim = onnxslim_ratio(before, budget_s, shapes)
        return row


def markdown(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)
