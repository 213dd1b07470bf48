"""A model whose weights stay in their files (mapped_data.py) is optimized as one read whole:
the same rewrites, every tensor it does not touch copied byte for byte, names, types and dims
kept; and when the whole model's check in onnxruntime does not fit --verify-memory, each
rewritten layer class is checked in onnxruntime one layer at a time instead, and the report
says so.

The model is torch.onnx's export of a small Llama (tests/data/llama_small, fp16, external data)
stacked to 6 layers by tools/llama_stack.py; MAP_BYTES is lowered so that its 2 MB of weights
are read mapped as a 12 GB model's are.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from eqsat_nb import mapped_data
from eqsat_nb.cli import main
from test_make_llama import stacked, template  # noqa: F401 - the fixture is used by name

LAYERS = 6


@pytest.fixture(scope="module")
def model(template, tmp_path_factory) -> Path:  # noqa: F811 - the fixture above
    out, _ = stacked(template, tmp_path_factory.mktemp("mapped"), LAYERS)
    return out


@pytest.fixture
def mapped(monkeypatch) -> list:
    """Every model read mapped, whatever its size; the tensors read through a map, listed."""
    monkeypatch.setattr(mapped_data, "MAP_BYTES", 0)
    monkeypatch.setattr(mapped_data, "MIN_TENSOR_BYTES", 1024)
    seen: list[str] = []
    real = mapped_data.MappedData.array

    def array(self, t):
        seen.append(t.name)
        return real(self, t)
    monkeypatch.setattr(mapped_data.MappedData, "array", array)
    return seen


def _run(model: Path, out: Path, *extra: str) -> dict:
    report = out.with_suffix(".json")
    assert main(["run", str(model), "--device", "h100", "--onnx", str(out), "--report",
                 str(report), "-q", *extra]) == 0
    return json.loads(report.read_text())


def _tensor_bytes(path: Path) -> dict[str, tuple[int, tuple[int, ...], bytes]]:
    m = onnx.load(str(path))
    return {t.name: (t.data_type, tuple(t.dims), onnx.numpy_helper.to_array(t).tobytes())
            for t in m.graph.initializer}


def test_mapped_model_is_optimized_and_its_tensors_copied_byte_for_byte(model, tmp_path,
                                                                        mapped):
    out = tmp_path / "out.onnx"
    report = _run(model, out)
    assert mapped, "no tensor was read through a map"
    assert report["onnx_output"]["written"] == "optimized"
    assert "merged 3 matmul into 1" in json.dumps(report)      # Q/K/V
    assert "merged 2 matmul into 1" in json.dumps(report)      # gate/up
    before, after = _tensor_bytes(model), _tensor_bytes(out)
    weights = {k for k, (_, _, raw) in before.items() if len(raw) >= 1024}
    assert weights and weights <= set(after)        # (small constants of replaced nodes go)
    for name in set(before) & set(after):
        assert after[name] == before[name], name
    a = onnx.load(str(model), load_external_data=False)
    b = onnx.load(str(out), load_external_data=False)
    assert [(i.name, i.type) for i in a.graph.input] == [(i.name, i.type) for i in b.graph.input]
    assert [o.name for o in a.graph.output] == [o.name for o in b.graph.output]
    assert b.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    # onnxruntime agrees, on the files as written
    ids = np.random.default_rng(1).integers(0, 128, (1, 1024), dtype=np.int64)
    x, y = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids})[0].astype(np.float32) for p in (model, out))
    assert np.abs(x - y).max() <= 2e-2 * np.abs(x).max()


def test_checks_one_layer_at_a_time_when_the_whole_model_does_not_fit(model, tmp_path, mapped,
                                                                      monkeypatch):
    """The whole model's check in onnxruntime estimated far over the budget (as a 7-B model's
    is), each layer's well within it."""
    from eqsat_nb.onnx_io import check
    monkeypatch.setattr(check, "CHECK_MARGIN", 1e5)
    out = tmp_path / "out.onnx"
    report = _run(model, out, "--verify-memory", "2G")
    o = report["onnx_output"]
    assert o["written"] == "optimized"
    check = o["onnxruntime_check"]
    assert "the whole model was not run in onnxruntime" in check
    assert "rewritten layer class" in check and "checked one layer at a time" in check
    assert report["layers"]["checks"]["copies_checked"] == LAYERS


def test_writes_the_input_when_neither_the_model_nor_its_layers_can_be_checked(model, tmp_path,
                                                                               mapped):
    out = tmp_path / "out.onnx"
    report = _run(model, out, "--verify-memory", "1M")
    o = report["onnx_output"]
    assert o["written"] == "input unchanged"
    assert "nothing unchecked is written" in o["reason"]
    assert out.read_bytes() == model.read_bytes()


def test_cpu_target_times_one_layer_per_class_when_the_whole_model_does_not_fit(
        model, tmp_path, mapped, monkeypatch):
    """The CPU target keeps a rewrite only when measured faster; a model too large to run whole
    is timed one rewritten layer class at a time (its representative before and after)."""
    from eqsat_nb.onnx_io import check
    monkeypatch.setattr(check, "CHECK_MARGIN", 1e5)
    out = tmp_path / "out.onnx"
    report = out.with_suffix(".json")
    assert main(["run", str(model), "--onnx", str(out), "--report", str(report), "-q",
                 "--verify-memory", "2G", "--measure-time", "2"]) == 0
    o = json.loads(report.read_text())["onnx_output"]
    assert "too large to time whole, each rewritten layer class was timed" in o["reason"], o
    if o["written"] == "optimized":
        assert o["measured"] and all(m.startswith("layer class") for m in o["measured"])
    else:
        assert out.read_bytes() == model.read_bytes()


def test_bf16_weights_stay_bit_patterns_and_come_back_bit_for_bit(tmp_path, mapped):
    """A bf16 model read mapped holds its weights as their bit patterns (uint16 views: no
    float32 copy of the model), checks them widened one at a time, and writes the merged
    projection from the original bits."""
    from eqsat_nb.mapped_data import is_mapped, use
    from eqsat_nb.onnx_io import read_onnx
    from test_precision_bf16 import _assert_merged_bits, _value_bits, bf16_qkv_model

    src = tmp_path / "m.onnx"
    onnx.save_model(bf16_qkv_model(), str(src), save_as_external_data=True,
                    location="m.onnx.data", size_threshold=1024)
    imp = read_onnx(src)
    with use(imp.data):
        held = {k: v for k, v in imp.weights.items() if k.startswith("w_")}
        assert held and all(v.dtype == np.uint16 and is_mapped(v) for v in held.values())
    out = tmp_path / "o.onnx"
    report = _run(src, out)
    assert report["onnx_output"]["written"] == "optimized", report["onnx_output"]
    assert "merged 3 matmul into 1" in json.dumps(report)
    written = onnx.load(str(out))
    merged = next(n for n in written.graph.node if n.op_type == "MatMul").input[1]
    _assert_merged_bits(_value_bits(written, merged))


def test_share_data_writes_out_referring_to_the_inputs_data_file(model, tmp_path, mapped):
    """--share-data: OUT, beside the input, refers to the input's data file (no copy of it);
    elsewhere it is refused before any work."""
    import shutil

    folder = tmp_path / "beside"
    shutil.copytree(model.parent, folder)
    src, out = folder / "model.onnx", folder / "model.opt.onnx"
    data_before = {p.name for p in folder.iterdir()}
    report = _run(src, out, "--share-data")
    assert report["onnx_output"]["written"] == "optimized"
    assert {p.name for p in folder.iterdir()} - data_before == {"model.opt.onnx",
                                                               "model.opt.json"}
    written = onnx.load(str(out), load_external_data=False)
    locations = {e.value for t in written.graph.initializer for e in t.external_data
                 if e.key == "location"}
    assert locations == {p.name for p in model.parent.iterdir() if p.suffix == ".data"}
    ids = np.random.default_rng(2).integers(0, 128, (1, 1024), dtype=np.int64)
    x, y = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids})[0].astype(np.float32) for p in (src, out))
    assert np.abs(x - y).max() <= 2e-2 * np.abs(x).max()
    elsewhere = tmp_path / "elsewhere.onnx"
    assert main(["run", str(src), "--onnx", str(elsewhere), "--share-data", "-q"]) == 1
    assert not elsewhere.exists()


def test_report_says_layers_stand_in_for_a_whole_graph_check_that_does_not_fit(
        model, tmp_path, mapped, monkeypatch, capsys):
    """The whole graph's interpreter check estimated over the budget, one layer's within it:
    every rewritten copy is checked with its own weights, and the report says they stand in
    for the whole graph's check (no warning that nothing was compared)."""
    from eqsat_nb import check_outputs
    real = check_outputs.estimate_verification

    def estimate(original, *rest, **kw):
        cost = real(original, *rest, **kw)
        big = len(original.nodes) > 500                 # the whole graph, not one layer
        return check_outputs.VerifyCost(1 << 50, cost.seconds) if big else cost
    monkeypatch.setattr(check_outputs, "estimate_verification", estimate)
    report = _run(model, tmp_path / "out.onnx")
    v = report["verification"]
    assert v["status"] == "memory"
    assert v["summary"].startswith("the whole graph was not run in the interpreter"), v
    assert "every rewritten layer was checked with its own weights instead" in v["summary"]
    assert report["layers"]["checks"]["copies_checked"] == LAYERS
    assert "warning: not verified" not in capsys.readouterr().err
