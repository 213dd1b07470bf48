"""A many-layer model end to end, as a user runs it: `eqsat-nb run model.onnx --device h100
--onnx out.onnx` in a fresh process on torch.onnx's export of a small Llama (tests/data/
llama_small, fp16, external data) stacked to 16 layers by tools/llama_stack.py, its weights read
mapped (EQSAT_NB_MAP_BYTES=0) and optimized and checked layer by layer (`--layers on`), as a
12 GB model is. The benchmark times the whole command;
`extra_info` holds its peak resident memory (`peak_rss_mib`, from the kernel's accounting of
the child), the layers found and the checks that ran, so that a regression in run time or in
memory shows (tools/perf_compare.py flags peak memory grown by more than a quarter)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from benchutil import ROOT, Rounds

pytestmark = pytest.mark.usefixtures("warm_jit")

LAYERS = 16
DATA = ROOT / "tests" / "data" / "llama_small"


@pytest.fixture(scope="module")
def stacked_model(tmp_path_factory) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from tool_module import load_tool

    d = tmp_path_factory.mktemp("llama_small")
    for f in DATA.iterdir():
        target = d / (f.stem if f.suffix == ".gz" else f.name)
        target.write_bytes(gzip.decompress(f.read_bytes()) if f.suffix == ".gz"
                           else f.read_bytes())
    out = d / f"n{LAYERS}" / "model.onnx"
    load_tool("llama_stack").stack(d, out, LAYERS)
    return out


def _run_measured(model: Path, out: Path, report: Path) -> int:
    """Run the command in a child; its peak resident memory in KiB."""
    env = dict(os.environ, EQSAT_NB_MAP_BYTES="0")
    proc = subprocess.Popen([sys.executable, "-m", "eqsat_nb", "run", str(model), "--device",
                             "h100", "--onnx", str(out), "--report", str(report), "-q",
                             "--force", "--layers", "on"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert os.waitstatus_to_exitcode(status) == 0, err
    return usage.ru_maxrss


def test_many_layer_model_run(bench, benchmark, tmp_path, stacked_model):
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    peaks: list[int] = []
    bench(lambda: peaks.append(_run_measured(stacked_model, out, report)),
          rounds=Rounds(2, 5), warmup=0)
    r = json.loads(report.read_text())
    layers = r.get("layers") or {}
    benchmark.extra_info.update(
        layers=layers.get("layers"), distinct=layers.get("distinct"),
        written=r["onnx_output"]["written"], peak_rss_mib=round(max(peaks) / 1024),
        copies_checked=((layers.get("checks") or {}).get("copies_checked")),
        ops_before=r["ops_before"], ops_after=r["ops_after"])
    shutil.rmtree(tmp_path, ignore_errors=True)
