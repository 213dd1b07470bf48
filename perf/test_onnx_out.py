"""ONNX out is never slower: each of the onnx wheel's model-zoo copies (random weights) goes
through `eqsat-nb run M.onnx --onnx OUT.onnx` with the default target and with `--device a100`;
the benchmark times one onnxruntime inference of OUT (one thread), and `extra_info` holds the
alternating-median latency ratio of OUT against the input, measured here independently of the
run's own guard. The bar: OUT ≥ 0.98× the input's speed on every model (a ratio of
input/OUT latency ≥ 0.98). A file written back unchanged is the input itself (ratio 1 by
construction, not timed). Quick tier: squeezenet, default target."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import onnx
import pytest
from benchutil import Rounds

from eqsat_nb.cli import main
from eqsat_nb.onnx_io.measure import random_feeds, time_pair
from eqsat_nb.onnx_io.zoo import light_models, reseeded
from eqsat_nb.runtime import session

pytestmark = pytest.mark.usefixtures("warm_jit")

ZOO = {p.stem.replace("light_", ""): p for p in light_models()}
CASES = [(m, d) for m in ZOO for d in ("cpu", "a100")]


def _param(model: str, device: str):
    quick = model == "squeezenet" and device == "cpu"
    return pytest.param(model, device, marks=() if quick else pytest.mark.full,
                        id=f"{model}-{device}")


@pytest.mark.skipif(not ZOO, reason="this onnx wheel ships no model-zoo copies")
@pytest.mark.parametrize("model,device", [_param(m, d) for m, d in CASES])
def test_onnx_out_not_slower(bench, benchmark, tmp_path, model, device):
    src, out, rep = tmp_path / "in.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    original = reseeded(ZOO[model])
    onnx.save(original, str(src))
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["run", str(src), "--onnx", str(out), "--report", str(rep), "-q",
                     "--device", device])
    if code != 0:
        pytest.skip(f"does not import yet: {err.getvalue().strip()[:200]}")
    report = json.loads(rep.read_text())
    written = report["onnx_output"]["written"]
    result = onnx.load(str(out))
    same = Path(out).read_bytes() == Path(src).read_bytes()
    feeds = random_feeds(result)
    ratio = 1.0 if same else time_pair(original, result, feeds, threads=1, budget_s=8.0).ratio
    sess = session(result)
    bench(lambda: sess.run(None, dict(feeds)), rounds=Rounds(5, 20), warmup=2)
    benchmark.extra_info.update(
        model=model, device=device, written=written, unchanged_bytes=same,
        ops_before=report["ops_before"], ops_after=report["ops_after"],
        estimated_speedup_pct=round(report["speedup_pct"], 2),
        measured_ratio=round(ratio, 4),
        guard=report["onnx_output"].get("measured"))
    assert ratio >= 0.98, f"{model} ({device}): OUT runs at {ratio:.3f}x the input's speed"
