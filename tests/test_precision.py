"""Half-precision models: imported, optimized, checked by their precision's rule, written.

Models are built with onnx.helper as torch.onnx writes a `model.half()` export (FLOAT16
initializers, inputs and outputs; MatMul on the stored weight, then Add of the bias) and as a
mixed-precision fp32 model with Casts to fp16 around its projections. The rule itself
(`precision.tolerance`, `check_outputs.compare_relative`) is tested on arrays.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from eqsat_nb.check_outputs import compare_relative
from eqsat_nb.cli import main
from eqsat_nb.onnx_io.check import check_models
from eqsat_nb.onnx_io.measure import random_feeds
from eqsat_nb.onnx_io.widen import widen
from eqsat_nb.precision import check_precision, onnx_precision, tolerance
from eqsat_nb.runtime import session

D, S = 256, 128


def _weights(seed: int, dtype) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for n in "qkv":
        out[f"{n}.weight"] = (rng.standard_normal((D, D)) / np.sqrt(D)).astype(dtype)
        out[f"{n}.bias"] = (rng.standard_normal(D) / 4).astype(dtype)
    return out


def half_qkv(seed: int = 0, swap: bool = False) -> onnx.ModelProto:
    """Three fp16 projections of one activation, as torch.onnx writes Linear layers of a
    `model.half()` module, the query scaled by 1/sqrt(96) as attention does (a scale the
    optimizer folds into the weights, which rounds differently in fp16); `swap`: k reads v's
    weight (a wrong rewrite of the same model)."""
    w = _weights(seed, np.float16)
    nodes = []
    for n in "qkv":
        weight = "v.weight" if swap and n == "k" else f"{n}.weight"
        nodes += [h.make_node("MatMul", ["hidden_states", weight], [f"/{n}/MatMul_output_0"],
                              name=f"/{n}/MatMul"),
                  h.make_node("Add", [f"/{n}/MatMul_output_0", f"{n}.bias"],
                              [n if n != "q" else "/q/Add_output_0"], name=f"/{n}/Add")]
    nodes += [h.make_node("Constant", [], ["/Constant_output_0"], name="/Constant",
                          value=nh.from_array(np.array(1 / np.sqrt(96), np.float16))),
              h.make_node("Mul", ["/q/Add_output_0", "/Constant_output_0"], ["q"], name="/Mul")]
    g = h.make_graph(nodes, "main_graph",
                     [h.make_tensor_value_info("hidden_states", T.FLOAT16, [1, S, D])],
                     [h.make_tensor_value_info(n, T.FLOAT16, [1, S, D]) for n in "qkv"],
                     [nh.from_array(a, k) for k, a in w.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="pytorch")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def mixed_qkv() -> onnx.ModelProto:
    """An fp32 model whose projections run in fp16 between Casts (autocast-style export)."""
    w = _weights(1, np.float16)
    nodes = [h.make_node("Cast", ["x"], ["/Cast_output_0"], name="/Cast", to=T.FLOAT16)]
    for n in "qkv":
        nodes += [h.make_node("MatMul", ["/Cast_output_0", f"{n}.weight"],
                              [f"/{n}/MatMul_output_0"], name=f"/{n}/MatMul"),
                  h.make_node("Add", [f"/{n}/MatMul_output_0", f"{n}.bias"],
                              [f"/{n}/Add_output_0"], name=f"/{n}/Add"),
                  h.make_node("Cast", [f"/{n}/Add_output_0"], [n], name=f"/{n}/Cast",
                              to=T.FLOAT)]
    g = h.make_graph(nodes, "main_graph", [h.make_tensor_value_info("x", T.FLOAT, [1, S, D])],
                     [h.make_tensor_value_info(n, T.FLOAT, [1, S, D]) for n in "qkv"],
                     [nh.from_array(a, k) for k, a in w.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="pytorch")
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def test_precision_of_a_model_is_its_float_type():
    assert onnx_precision(half_qkv()) == "fp16" == check_precision(half_qkv())
    assert onnx_precision(mixed_qkv()) == "fp16"        # its weights are fp16
    assert tolerance("fp32").relative is False
    t = tolerance("fp16")
    assert t.relative and t.factor == 4 and t.floor == pytest.approx(4 * 2.0 ** -11)
    assert tolerance("bf16").floor == pytest.approx(4 * 2.0 ** -8)
    with pytest.raises(ValueError, match="unknown precision"):
        tolerance("fp8")


def test_relative_rule_on_arrays():
    ref = [np.linspace(-1, 1, 1000)]
    base = [ref[0] + 1e-3]                      # the original's own error: 1e-3
    tol = tolerance("fp16")                     # allowed: 4 * 1e-3 + 2e-3 * 1 = 6e-3
    ok, = compare_relative(ref, base, [ref[0] + 5e-3], ["y"], tol)
    bad, = compare_relative(ref, base, [ref[0] + 7e-3], ["y"], tol)
    assert ok.ok and ok.base_err == pytest.approx(1e-3) and not bad.ok
    nan = ref[0].copy()
    nan[3] = np.nan
    assert not compare_relative(ref, base, [nan], ["y"], tol)[0].ok
    assert not compare_relative(ref, base, [ref[0][:10]], ["y"], tol)[0].ok   # shape


def test_widened_model_is_the_same_function_in_float32():
    m = half_qkv()
    w = widen(m)
    assert {t.data_type for t in w.graph.initializer} == {T.FLOAT}
    assert w.graph.input[0].type.tensor_type.elem_type == T.FLOAT
    assert m.graph.initializer[0].data_type == T.FLOAT16          # the input is untouched
    feeds = random_feeds(m)
    got = session(w).run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    x = feeds["hidden_states"].astype(np.float32)
    wk = nh.to_array(m.graph.initializer[2]).astype(np.float32)
    bk = nh.to_array(m.graph.initializer[3]).astype(np.float32)
    np.testing.assert_allclose(got[1], x @ wk + bk, rtol=1e-5, atol=1e-5)


def test_a_wrong_rewrite_is_refused_in_fp16():
    m = half_qkv()
    feeds = [random_feeds(m, seed=s) for s in (0, 1)]
    assert check_models(m, half_qkv(), feeds).ok
    v = check_models(m, half_qkv(swap=True), feeds)
    assert not v.ok and "MISMATCH in k" in v.summary() and "fp16 rule" in v.summary()


@pytest.mark.parametrize("make, io_type", [(half_qkv, T.FLOAT16), (mixed_qkv, T.FLOAT)])
def test_half_precision_projections_are_merged_checked_and_written(tmp_path, capsys, make,
                                                                   io_type):
    src, out, rep = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    model = make()
    onnx.save(model, str(src))
    assert main(["run", str(src), "--device", "h100", "--onnx", str(out), "--report", str(rep),
                 "-q", "--verify-seeds", "2"]) == 0
    report = json.loads(rep.read_text())
    assert report["onnx_output"]["written"] == "optimized"
    assert "fp16 rule" in report["onnx_output"]["onnxruntime_check"]
    got = onnx.load(str(out))
    matmuls = [n for n in got.graph.node if n.op_type == "MatMul"]
    assert len(matmuls) == 1                                        # Q/K/V merged
    assert [i.type.tensor_type.elem_type for i in got.graph.input] == [io_type]
    assert [o.type.tensor_type.elem_type for o in got.graph.output] == [io_type] * 3
    assert [o.name for o in got.graph.output] == ["q", "k", "v"]
    # the merged weight is the input's weights concatenated (onnxruntime folds the Concat):
    # nothing is converted, no float32 copy of a weight is written
    assert {t.data_type for t in got.graph.initializer} == {T.FLOAT16}
    assert [n.op_type for n in got.graph.node].count("Cast") == \
        [n.op_type for n in model.graph.node].count("Cast")
    # independently of the tool: the written model is within fp16 rounding of the input
    feeds = random_feeds(model, seed=7)
    ref = session(widen(model)).run(None, {k: v.astype(np.float32) for k, v in feeds.items()})
    for a, b in zip(ref, session(got).run(None, feeds)):
        assert np.abs(b.astype(np.float32) - a).max() <= 4e-3 * np.abs(a).max()


def test_a_wrong_fp16_rewrite_writes_nothing(tmp_path, capsys, monkeypatch):
    """A splice that produced a wrong model (k reads v's weight) is refused by the fp16 rule:
    exit code 1, nothing written."""
    from eqsat_nb.commands import onnx_out
    from eqsat_nb.onnx_io import splice as splice_mod

    monkeypatch.setattr(splice_mod, "splice", lambda imp, g, *a, **k: half_qkv(swap=True))
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(half_qkv(), str(src))
    assert onnx_out is not None
    assert main(["run", str(src), "--device", "h100", "--onnx", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "does not match the input in onnxruntime" in err and "fp16 rule" in err
    assert not out.exists()
