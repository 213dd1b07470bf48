"""Every ONNX model in the given folders/files through `eqsat-nb run --onnx`, measured in
onnxruntime against its input, with onnxslim beside it when installed (the tables of
docs/onnx.md). `--zoo` adds the onnx wheel's model-zoo copies with random weights.

    python tools/onnx_table.py models/ [--zoo] [--device a100] [-- extra run options]

Per model: the exporter that wrote it (producer name and version) and its opset, whether it
imported (or the exact reason it did not), ops before → after, the estimated speed-up, the run's
own measurement of the rewritten candidate (when a rewrite was found), what was written, and the
*measured* onnxruntime speed-up of the written file against the input (alternating medians, one
thread, timed here independently of the run's own guard); onnxslim's measured speed-up beside it
when onnxslim is installed.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import onnx

from eqsat_nb.cli import main as cli_main
from eqsat_nb.onnx_io.importer import default_opset
from eqsat_nb.onnx_io.measure import random_feeds, time_pair
from eqsat_nb.onnx_io.zoo import light_models, reseeded


@dataclass
class Row:
    """One model's line of the table."""

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
    """One model's row: `eqsat-nb run PATH --onnx OUT` with `run_args`, its report read back,
    OUT and onnxslim's result timed against the input (`budget_s` seconds each)."""
    source = onnx.load(str(path), load_external_data=False)
    exporter = " ".join(x for x in (source.producer_name, source.producer_version) if x)
    opset = default_opset(source)
    with tempfile.TemporaryDirectory() as tmp:
        out, rep = Path(tmp) / "out.onnx", Path(tmp) / "report.json"
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli_main(["run", str(path), "--onnx", str(out), "--report", str(rep), "-q",
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
    """The table as Markdown, a header and one line per row."""
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("paths", nargs="*", type=Path)
    p.add_argument("--zoo", action="store_true", help="the onnx wheel's model-zoo copies")
    p.add_argument("--device", default=None)
    p.add_argument("--budget", type=float, default=6.0, help="seconds per timing (default 6)")
    args, extra = p.parse_known_args()
    files: list[Path] = []
    for path in args.paths:
        files += sorted(path.glob("*.onnx")) if path.is_dir() else [path]
    tmp = tempfile.TemporaryDirectory()
    if args.zoo:
        for z in light_models():
            dst = Path(tmp.name) / z.name.replace("light_", "")
            onnx.save(reseeded(z), str(dst))
            files.append(dst)
    run_args = [a for a in extra if a != "--"] + (["--device", args.device] if args.device else [])
    rows = []
    for f in files:
        rows.append(table_row(f, run_args, args.budget))
        print("|", " | ".join(rows[-1].cells()), "|", file=sys.stderr, flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
