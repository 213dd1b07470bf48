"""bfloat16 models: imported, optimized, verified and written as the user wrote them.

Models are built with onnx.helper as torch.onnx's dynamo exporter writes bf16 models
(initializers BFLOAT16 in raw_data, bf16 graph inputs and outputs, no Casts), plus an fp32
model whose projections run in bf16 between Casts. NumPy has no bfloat16, so bit patterns are
made and read here by hand (uint16 arrays), independently of the package's own conversions.
onnxruntime's CPU has no bfloat16 MatMul: every comparison in onnxruntime runs the models
widened to float32 (widen.py), which the check must say.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from eqsat_nb.check_outputs import verify_graphs
from eqsat_nb.cli import main
from eqsat_nb.ir.bfloat16 import from_bits, round_bf16, to_bits
from eqsat_nb.ir.graph import Node, TensorType
from eqsat_nb.ir.interp import eval_opaque
from eqsat_nb.ir.opaque import encode_node
from eqsat_nb.ir.parse import parse
from eqsat_nb.ir.printer import print_graph
from eqsat_nb.ir.tensors import from_array, to_array
from eqsat_nb.onnx_io import import_onnx, to_onnx
from eqsat_nb.onnx_io.check import check_models
from eqsat_nb.onnx_io.measure import random_feeds
from eqsat_nb.onnx_io.widen import widen
from eqsat_nb.runtime import session

RNG = np.random.default_rng(0)
D = 256


def _bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32 values by truncation: exact for bfloat16 numbers; the
    random weights made here are defined by these patterns."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _random_bits(shape: list[int], scale: float) -> np.ndarray:
    return _bits(RNG.standard_normal(shape).astype(np.float32) * np.float32(scale))


def _bf16_init(name: str, bits: np.ndarray) -> onnx.TensorProto:
    t = onnx.TensorProto()
    t.name, t.data_type = name, T.BFLOAT16
    t.dims.extend(bits.shape)
    t.raw_data = bits.astype("<u2").tobytes()
    return t


def _init_bits(t: onnx.TensorProto) -> np.ndarray:
    assert t.data_type == T.BFLOAT16 and t.HasField("raw_data")
    return np.frombuffer(t.raw_data, "<u2").reshape(tuple(t.dims))


def _model(nodes, inputs, outputs, inits, opset: int = 18) -> onnx.ModelProto:
    g = h.make_graph(nodes, "main_graph", inputs, outputs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="pytorch",
                     producer_version="2.5")
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return m


def bf16_qkv_model(weights: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """Three MatMul + Add projections of one [1, 128, 256] bf16 activation, each an output:
    dynamo's bf16 nn.Linear (weights stored transposed as [in, out])."""
    weights = weights or QKV_BITS
    nodes, inits = [], []
    for q in "qkv":
        nodes += [h.make_node("MatMul", ["hidden", f"w_{q}"], [f"mm_{q}"], name=f"node_mm_{q}"),
                  h.make_node("Add", [f"mm_{q}", f"b_{q}"], [q], name=f"node_add_{q}")]
        inits += [_bf16_init(f"w_{q}", weights[f"w_{q}"]),
                  _bf16_init(f"b_{q}", weights[f"b_{q}"])]
    return _model(nodes, [h.make_tensor_value_info("hidden", T.BFLOAT16, [1, 128, D])],
                  [h.make_tensor_value_info(q, T.BFLOAT16, [1, 128, D]) for q in "qkv"], inits)


QKV_BITS = {**{f"w_{q}": _random_bits([D, D], D ** -0.5) for q in "qkv"},
            **{f"b_{q}": _random_bits([D], 0.1) for q in "qkv"}}


def mixed_model() -> onnx.ModelProto:
    """An fp32 model whose three projections run in bf16: Cast to bf16, MatMul with bf16
    weights, Cast back to float (autocast's form)."""
    nodes = [h.make_node("Cast", ["x"], ["x_bf16"], name="cast_in", to=T.BFLOAT16)]
    inits = []
    for q in "qkv":
        nodes += [h.make_node("MatMul", ["x_bf16", f"w_{q}"], [f"mm_{q}"], name=f"mm_{q}"),
                  h.make_node("Cast", [f"mm_{q}"], [q], name=f"cast_{q}", to=T.FLOAT)]
        inits.append(_bf16_init(f"w_{q}", QKV_BITS[f"w_{q}"]))
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 128, D])],
                  [h.make_tensor_value_info(q, T.FLOAT, [1, 128, D]) for q in "qkv"], inits)


def _value_bits(model: onnx.ModelProto, name: str) -> np.ndarray:
    """The bits of a weight-only value of a written model: an initializer, or a Concat of
    such values (a merged weight written as the Concat of the model's own initializers)."""
    inits = {t.name: t for t in model.graph.initializer}
    if name in inits:
        return _init_bits(inits[name])
    node = next(n for n in model.graph.node if name in n.output)
    if node.op_type == "Identity":
        return _value_bits(model, node.input[0])
    assert node.op_type == "Concat", f"weight {name} comes from a {node.op_type}"
    axis = next(a.i for a in node.attribute if a.name == "axis")
    return np.concatenate([_value_bits(model, v) for v in node.input], axis=axis)


def _assert_merged_bits(merged: np.ndarray) -> None:
    """The merged weight is the three projections' weights side by side, each bit for bit."""
    assert merged.shape == (D, 3 * D)
    blocks = np.split(merged, 3, axis=1)
    found = [next((q for q in "qkv" if np.array_equal(b, QKV_BITS[f"w_{q}"])), None)
             for b in blocks]
    assert sorted(q for q in found if q) == ["k", "q", "v"], found


def _run(tmp_path, model: onnx.ModelProto, *args: str) -> tuple[onnx.ModelProto, dict]:
    src, out, rep = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "-q", *args]) == 0
    return onnx.load(str(out)), json.loads(rep.read_text())


# ------------------------------------------------------------------ host representation
def test_rounding_to_bfloat16_is_to_nearest_even():
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -7)                    # spacing of bfloat16 numbers at 1
    x = np.array([one, one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 2 ** -20,
                  -(one + ulp / 2), 3.4e38, -3.4e38, np.inf, -np.inf, 0.0, -0.0, 1e-40],
                 np.float32)
    bits = to_bits(x)
    assert list(bits[:5]) == [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xBF80]   # ties to even
    assert list(bits[5:11]) == [0x7F80, 0xFF80, 0x7F80, 0xFF80, 0x0000, 0x8000]   # overflow
    assert bits[11] == _bits(x[11:12])[0]          # a subnormal keeps its upper bits
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0x7F80FFFF], np.uint32)
    assert np.isnan(from_bits(to_bits(nans.view(np.float32)))).all()   # never an infinity
    values = from_bits(_random_bits([1000], 3.0))
    assert np.array_equal(to_bits(values), _bits(values))    # bfloat16 numbers: exact
    assert np.array_equal(round_bf16(values), values)


def test_bfloat16_tensors_read_and_write_by_their_bits():
    bits = _random_bits([3, 5], 1.0)
    t = _bf16_init("w", bits)
    a = to_array(t)
    assert a.dtype == np.float32 and a.shape == (3, 5)
    assert np.array_equal(_bits(a), bits)
    back = from_array(a, "w", "bf16")
    assert back.data_type == T.BFLOAT16 and _init_bits(back).tolist() == bits.tolist()
    legacy = onnx.TensorProto(name="w", data_type=T.BFLOAT16, dims=[3, 5],
                              int32_data=bits.reshape(-1).tolist())    # bit patterns, one a number
    assert np.array_equal(to_array(legacy), a)
    assert from_array(a, "w").data_type == T.FLOAT  # the type is said, never guessed


# ------------------------------------------------------------------ bf16 models end to end
def test_bf16_model_is_merged_verified_and_written_in_bf16(tmp_path):
    model = bf16_qkv_model()
    got, report = _run(tmp_path, model, "--device", "h100")
    assert report["onnx_output"]["written"] == "optimized"
    assert "merge_projections" in report["rules_fired"]
    onnx.checker.check_model(got, full_check=True)
    assert [(v.name, v.type.tensor_type.elem_type) for v in got.graph.input] == \
        [("hidden", T.BFLOAT16)]
    assert [(v.name, v.type.tensor_type.elem_type) for v in got.graph.output] == \
        [(q, T.BFLOAT16) for q in "qkv"]
    assert all(t.data_type in (T.BFLOAT16, T.INT64) for t in got.graph.initializer)
    orig = {t.name: t for t in model.graph.initializer}
    for t in got.graph.initializer:                # the model's own weights, unchanged
        if t.name in orig:
            assert t.SerializeToString() == orig[t.name].SerializeToString()
    (mm,) = [n for n in got.graph.node if n.op_type == "MatMul"]
    _assert_merged_bits(_value_bits(got, mm.input[1]))
    assert report["verification"]["ok"]
    assert report["verification"]["rule"].startswith("bf16 rule")
    assert "widened to float32" in report["onnx_output"]["onnxruntime_check"]
    # the written model, run widened in onnxruntime, computes what the input computes
    feeds = random_feeds(model, seed=3)
    a, b = session(widen(model)).run(None, feeds), session(widen(got)).run(None, feeds)
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5 * float(np.abs(x).max()))


def test_mixed_model_with_bf16_projections_is_merged_and_written(tmp_path):
    model = mixed_model()
    got, report = _run(tmp_path, model, "--device", "h100")
    assert report["onnx_output"]["written"] == "optimized"
    assert "merge_projections" in report["rules_fired"]
    onnx.checker.check_model(got, full_check=True)
    assert [v.type.tensor_type.elem_type for v in got.graph.input] == [T.FLOAT]
    assert [v.type.tensor_type.elem_type for v in got.graph.output] == [T.FLOAT] * 3
    (mm,) = [n for n in got.graph.node if n.op_type == "MatMul"]
    _assert_merged_bits(_value_bits(got, mm.input[1]))
    assert report["verification"]["ok"]
    assert report["verification"]["rule"].startswith("bf16 rule")
    assert "widened to float32" in report["onnx_output"]["onnxruntime_check"]


def gemm_qkv_model() -> onnx.ModelProto:
    """TorchScript's bf16 nn.Linear on a rank-2 input: Gemm(transB=1) of the weight as stored,
    [out, in]; the import transposes it once, a weight the model has no name for."""
    nodes, inits = [], []
    for q in "qkv":
        nodes.append(h.make_node("Gemm", ["hidden", f"w_{q}", f"b_{q}"], [q], name=f"gemm_{q}",
                                 transB=1))
        inits += [_bf16_init(f"w_{q}", np.ascontiguousarray(QKV_BITS[f"w_{q}"].T)),
                  _bf16_init(f"b_{q}", QKV_BITS[f"b_{q}"])]
    return _model(nodes, [h.make_tensor_value_info("hidden", T.BFLOAT16, [128, D])],
                  [h.make_tensor_value_info(q, T.BFLOAT16, [128, D]) for q in "qkv"], inits)


def test_bf16_gemm_weights_transposed_at_import_are_written_bit_exact(tmp_path):
    model = gemm_qkv_model()
    got, report = _run(tmp_path, model, "--device", "h100")
    assert report["onnx_output"]["written"] == "optimized"
    onnx.checker.check_model(got, full_check=True)
    assert all(t.data_type == T.BFLOAT16 for t in got.graph.initializer)
    (mm,) = [n for n in got.graph.node if n.op_type == "MatMul"]
    _assert_merged_bits(_value_bits(got, mm.input[1]))
    feeds = random_feeds(model, seed=2)
    a, b = session(widen(model)).run(None, feeds), session(widen(got)).run(None, feeds)
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5 * float(np.abs(x).max()))


def test_cpu_target_keeps_a_bf16_model_it_cannot_time(tmp_path):
    """The CPU target writes a rewrite only when onnxruntime measures it faster; onnxruntime's
    CPU has no bfloat16 MatMul, so the input comes back, byte for byte, and the report says why."""
    got, report = _run(tmp_path, bf16_qkv_model())
    out = report["onnx_output"]
    assert out["written"] == "input unchanged"
    assert "onnxruntime cannot run the model on this CPU" in out["reason"]
    assert (tmp_path / "o.onnx").read_bytes() == (tmp_path / "m.onnx").read_bytes()


def test_bf16_constants_import_and_export_as_bf16():
    """Constant nodes, scalar arithmetic on them and a ConstantOfShape (which shape folding
    would evaluate, into types that depend on the onnx version) stay bf16 values: weights and
    written constants of bf16 type, the same function."""
    def const(name: str, bits: np.ndarray) -> onnx.NodeProto:
        return h.make_node("Constant", [], [name], name=f"node_{name}",
                           value=_bf16_init(f"{name}_value", bits))
    nodes = [const("half", _bits(np.float32(0.5)).reshape(())),
             const("three", _bits(np.float32(3.0)).reshape(())),
             const("bias", _random_bits([D], 0.5)),
             h.make_node("Constant", [], ["dims"], name="node_dims",
                         value=h.make_tensor("dims_value", T.INT64, [1], [D])),
             h.make_node("ConstantOfShape", ["dims"], ["fill"], name="node_fill",
                         value=_bf16_init("fill_value", _bits(np.float32([0.25])))),
             h.make_node("Mul", ["half", "three"], ["factor"], name="node_factor"),
             h.make_node("Mul", ["x", "factor"], ["scaled"], name="node_scaled"),
             h.make_node("Add", ["scaled", "bias"], ["biased"], name="node_biased"),
             h.make_node("Add", ["biased", "fill"], ["y"], name="node_y")]
    model = _model(nodes, [h.make_tensor_value_info("x", T.BFLOAT16, [4, D])],
                   [h.make_tensor_value_info("y", T.BFLOAT16, [4, D])], [], opset=20)
    imp = import_onnx(model, "consts")
    types = imp.graph.types()
    assert types["%bias"].dtype == types["%fill"].dtype == types["%y"].dtype == "bf16"
    assert {t.dtype for t in types.values()} == {"bf16", "i64"}      # i64: the fill's dims
    written = to_onnx(imp.graph, imp.weights)
    onnx.checker.check_model(written, full_check=True)
    tensors = list(written.graph.initializer) + [
        a.t for n in written.graph.node for a in n.attribute if a.HasField("t")]
    assert {t.data_type for t in tensors} <= {T.BFLOAT16, T.INT64}
    feeds = random_feeds(model, seed=1)
    (want,) = session(widen(model)).run(None, feeds)
    (got,) = session(widen(written)).run(None, feeds)
    np.testing.assert_array_equal(got, want)


def test_a_bf16_model_onnxruntime_loads_but_cannot_be_fed_imports(tmp_path, capsys):
    """onnxruntime's CPU casts bfloat16, so this model loads; NumPy cannot feed its bf16 input,
    so the import's run check runs it widened to float32 instead of refusing the file."""
    model = _model([h.make_node("Cast", ["x"], ["y"], name="node_cast", to=T.FLOAT),
                    h.make_node("Relu", ["y"], ["z"], name="node_relu")],
                   [h.make_tensor_value_info("x", T.BFLOAT16, [4, D])],
                   [h.make_tensor_value_info("z", T.FLOAT, [4, D])], [])
    session(model)                                      # loads in its own precision
    got, report = _run(tmp_path, model, "--device", "h100")
    assert report["onnx_output"]["written"] == "input unchanged"
    assert "error" not in capsys.readouterr().err


# ------------------------------------------------------------------ wrong rewrites refused
def test_check_refuses_swapped_projection_weights():
    before = bf16_qkv_model()
    swapped = dict(QKV_BITS, w_q=QKV_BITS["w_k"], w_k=QKV_BITS["w_q"])
    feeds = [random_feeds(before, seed=0)]
    same = check_models(before, bf16_qkv_model(), feeds)
    assert same.ok and "widened to float32" in same.summary()
    wrong = check_models(before, bf16_qkv_model(swapped), feeds)
    assert not wrong.ok


def test_interpreter_check_refuses_a_wrong_bf16_graph():
    src = """
func @m(%x: tensor<4x16xbf16>) -> tensor<4x8xbf16> {
  %w = weight @w : tensor<16x8xbf16>
  %v = weight @v : tensor<16x8xbf16>
  %0 = matmul(%x, %w) : tensor<4x8xbf16>
  %1 = matmul(%x, %v) : tensor<4x8xbf16>
  %2 = ewadd(%0, %1) : tensor<4x8xbf16>
  return %2
}"""
    g = parse(src)
    right = parse(src.replace("%2 = ewadd(%0, %1)", "%2 = ewadd(%1, %0)"))
    wrong = parse(src.replace("%1 = matmul(%x, %v)", "%1 = matmul(%x, %w)"))
    assert verify_graphs(g, right).ok
    assert not verify_graphs(g, wrong).ok


# ------------------------------------------------------------------ the interpreter
def _cast_node(to: int, dst: str) -> Node:
    onnx_node = h.make_node("Cast", ["x"], ["y"], to=to)
    attrs = (("op", "Cast"), ("domain", ""), ("opset", 18),
             ("onnx", encode_node(onnx_node, [True], [True])))
    return Node("opaque", ("%x",), attrs, ("%y",), (TensorType((64,), dst),))


def test_opaque_bf16_results_are_rounded_unless_wide():
    """onnxruntime's CPU runs the node widened to float32; its bf16 result is rounded to
    bfloat16 as the model's own Cast would, and left unrounded in a wide run."""
    x = RNG.standard_normal(64).astype(np.float32)
    assert not np.array_equal(round_bf16(x), x)
    cast = _cast_node(T.BFLOAT16, "bf16")
    (y,) = eval_opaque(cast, [x], [TensorType((64,), "f32")])
    assert np.array_equal(y, round_bf16(x))
    (wide,) = eval_opaque(cast, [x], [TensorType((64,), "f32")], wide=True)
    assert np.array_equal(wide, x)
    back = _cast_node(T.FLOAT, "f32")          # its bf16 operand is rounded first
    (z,) = eval_opaque(back, [x], [TensorType((64,), "bf16")])
    assert np.array_equal(z, round_bf16(x))


# ------------------------------------------------------------------ .tir
TIR = """func @proj(%x: tensor<2x8xbf16>) -> tensor<2x4xbf16> {
  %w = weight @w : tensor<8x4xbf16>
  %0 = matmul(%x, %w) : tensor<2x4xbf16>
  %1 = relu(%0) : tensor<2x4xbf16>
  return %1
}
"""


def test_tir_round_trip_with_bf16():
    g = parse(TIR)
    assert print_graph(g) == TIR and parse(print_graph(g)) == g
    w = from_bits(_random_bits([8, 4], 0.5))
    m = to_onnx(g, {"w": w})
    assert [t.data_type for t in m.graph.initializer] == [T.BFLOAT16]
    assert np.array_equal(_init_bits(m.graph.initializer[0]), _bits(w))
    assert m.graph.input[0].type.tensor_type.elem_type == T.BFLOAT16
    back = import_onnx(m, "proj")
    assert back.graph == g
    assert np.array_equal(back.weights["w"], w) and back.weights["w"].dtype == np.float32


def test_bf16_tir_written_as_onnx_is_checked_widened(tmp_path):
    """A .tir graph of bf16 values becomes a bf16 ONNX model; onnxruntime checks it widened to
    float32 against the interpreter on the weights as written."""
    src, out, rep = tmp_path / "m.tir", tmp_path / "o.onnx", tmp_path / "r.json"
    src.write_text(TIR.replace("2x8", "64x128").replace("8x4", "128x64")
                   .replace("2x4", "64x64"))
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "-q"]) == 0
    m = onnx.load(str(out))
    assert m.graph.input[0].type.tensor_type.elem_type == T.BFLOAT16
    assert [t.data_type for t in m.graph.initializer] == [T.BFLOAT16]
    check = json.loads(rep.read_text())["verification"]["onnxruntime"]
    assert "widened to float32" in check


@pytest.mark.parametrize("bad", ["bfloat16", "b16"])
def test_unknown_element_type_is_a_located_error(bad):
    from eqsat_nb.errors import TirError
    with pytest.raises(TirError, match="bf16"):
        parse(TIR.replace("2x8xbf16", f"2x8x{bad}"))
