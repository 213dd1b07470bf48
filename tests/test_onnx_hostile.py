"""The cases of issue 32, one test each: what an ONNX file refers to travels with OUT, and every
invalid input is a located error (file, node, op, what is wrong; exit 1) before anything is
computed. Models are written with onnx.helper as exporters write them."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from eqsat_nb.cli import main
from eqsat_nb.onnx_io import external

RNG = np.random.default_rng(0)
RUN = ["-q", "--no-measure"]
NO_RULES = "none.rules"


def _w(name: str, shape: list[int], dtype=np.float32) -> onnx.TensorProto:
    return nh.from_array(RNG.standard_normal(shape).astype(dtype), name)


def _model(nodes, inputs, outputs, inits=(), opset: int = 17) -> onnx.ModelProto:
    m = h.make_model(h.make_graph(nodes, "main_graph", inputs, outputs, list(inits)),
                     opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _x(shape=(1, 4, 8, 8), dtype=T.FLOAT, name="input") -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, dtype, list(shape))


def _y(name="output", rank=4) -> onnx.ValueInfoProto:
    return h.make_tensor_value_info(name, T.FLOAT, [f"d{i}" for i in range(rank)])


def conv(w_shape=(8, 4, 3, 3), x_shape=(1, 4, 8, 8), x_type=T.FLOAT, **attrs) -> onnx.ModelProto:
    """Conv(+bias) → Relu, as torch.onnx writes it; `attrs` override the Conv's."""
    a = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1)
    a.update(attrs)
    nodes = [h.make_node("Conv", ["input", "conv.weight", "conv.bias"], ["/conv/Conv_output_0"],
                         name="/conv/Conv", **a),
             h.make_node("Relu", ["/conv/Conv_output_0"], ["output"], name="/relu/Relu")]
    return _model(nodes, [_x(x_shape, x_type)], [_y()],
                  [_w("conv.weight", list(w_shape)), _w("conv.bias", [w_shape[0]])])


def matmul_sum() -> onnx.ModelProto:
    """x·W1 + x·W2: optimized into one MatMul (a spliced OUT)."""
    nodes = [h.make_node("MatMul", ["x", "W1"], ["/m1"], name="/m1/MatMul"),
             h.make_node("MatMul", ["x", "W2"], ["/m2"], name="/m2/MatMul"),
             h.make_node("Add", ["/m1", "/m2"], ["y"], name="/Add")]
    return _model(nodes, [_x((2, 64), name="x")], [h.make_tensor_value_info("y", T.FLOAT,
                                                                            [2, 64])],
                  [_w("W1", [64, 64]), _w("W2", [64, 64])])


def to_external(t: onnx.TensorProto, folder: Path, location: str) -> None:
    """Append a tensor's bytes to folder/location and point the tensor there."""
    data = t.raw_data or nh.from_array(nh.to_array(t)).raw_data
    path = folder / location
    offset = path.stat().st_size if path.exists() else 0
    with open(path, "ab") as f:
        f.write(data)
    for fld in ("raw_data", "float_data", "int64_data", "int32_data"):
        t.ClearField(fld)
    t.data_location = T.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
        e = t.external_data.add()
        e.key, e.value = k, v


def run(tmp_path: Path, model: onnx.ModelProto | None, out: str = "out/o.onnx", *extra: str,
        rules: bool = True, src: str = "in/m.onnx") -> int:
    """Write `model` at tmp_path/src (None: already there), run `run --onnx` on it."""
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "out").mkdir(exist_ok=True)
    if model is not None:
        (tmp_path / src).write_bytes(model.SerializeToString())
    args = ["run", str(tmp_path / src), "--onnx", str(tmp_path / out), *RUN, *extra]
    if not rules:
        (tmp_path / NO_RULES).write_text("")
        args += ["--rules", str(tmp_path / NO_RULES)]
    return main(args)


def error_of(capsys) -> str:
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    return err


def assert_equal_in_ort(a: Path, b: Path, shapes: dict[str, tuple] | None = None) -> None:
    """Both files load in onnxruntime (from their paths: data files beside them) and agree."""
    sa = ort.InferenceSession(str(a), providers=["CPUExecutionProvider"])
    sb = ort.InferenceSession(str(b), providers=["CPUExecutionProvider"])
    feeds = {i.name: RNG.standard_normal((shapes or {}).get(i.name, [
        d if isinstance(d, int) else 1 for d in i.shape])).astype(np.float32)
        for i in sa.get_inputs()}
    for x, y in zip(sa.run(None, feeds), sb.run(None, feeds)):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5 * float(np.abs(x).max()))


# ------------------------------------------------------------------ what travels with OUT
def constant_in_external_data(folder: Path) -> onnx.ModelProto:
    """A Constant node whose tensor is in const.bin, read by a MatMul."""
    value = nh.from_array(RNG.standard_normal((64, 64)).astype(np.float32), "value")
    to_external(value, folder, "const.bin")
    nodes = [h.make_node("Constant", [], ["/c/Constant_output_0"], name="/c/Constant",
                         value=value),
             h.make_node("MatMul", ["x", "/c/Constant_output_0"], ["y"], name="/m/MatMul")]
    return _model(nodes, [_x((2, 64), name="x")],
                  [h.make_tensor_value_info("y", T.FLOAT, [2, 64])])


def if_branches_in_external_data(folder: Path) -> onnx.ModelProto:
    """An If whose two branches hold their own initializers, in branch.bin."""
    def branch(name: str) -> onnx.GraphProto:
        w = _w(f"{name}.w", [64, 64])
        to_external(w, folder, "branch.bin")
        return h.make_graph([h.make_node("MatMul", ["x", w.name], [f"{name}_y"])], name, [],
                            [h.make_tensor_value_info(f"{name}_y", T.FLOAT, [2, 64])], [w])
    nodes = [h.make_node("ReduceSum", ["x"], ["/s"], name="/ReduceSum", keepdims=0),
             h.make_node("Greater", ["/s", "zero"], ["/c"], name="/Greater"),
             h.make_node("If", ["/c"], ["y"], name="/If", then_branch=branch("then"),
                         else_branch=branch("else"))]
    return _model(nodes, [_x((2, 64), name="x")],
                  [h.make_tensor_value_info("y", T.FLOAT, [2, 64])],
                  [nh.from_array(np.array(0.0, np.float32), "zero")])


def loop_body_in_external_data(folder: Path) -> onnx.ModelProto:
    """A Loop (two iterations) whose body holds its own initializer, in body.bin."""
    w = _w("body.w", [64, 64])
    to_external(w, folder, "body.bin")
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("MatMul", ["h_in", "body.w"], ["/mm"]),
         h.make_node("Tanh", ["/mm"], ["h_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []),
         h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("h_in", T.FLOAT, [2, 64])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("h_out", T.FLOAT, [2, 64])], [w])
    nodes = [h.make_node("Loop", ["trips", "", "x"], ["y"], name="/Loop", body=body)]
    return _model(nodes, [_x((2, 64), name="x")],
                  [h.make_tensor_value_info("y", T.FLOAT, [2, 64])],
                  [nh.from_array(np.array(2, np.int64), "trips")])


def scan_body_in_external_data(folder: Path) -> onnx.ModelProto:
    """A Scan over x's rows whose body holds its own initializer, in scan.bin."""
    w = _w("scan.w", [64, 64])
    to_external(w, folder, "scan.bin")
    body = h.make_graph(
        [h.make_node("MatMul", ["x_t", "scan.w"], ["/mm"]),
         h.make_node("Add", ["s_in", "/mm"], ["/sum"]),
         h.make_node("Tanh", ["/sum"], ["s_out"]),
         h.make_node("Identity", ["s_out"], ["y_t"])], "body",
        [h.make_tensor_value_info("s_in", T.FLOAT, [64]),
         h.make_tensor_value_info("x_t", T.FLOAT, [64])],
        [h.make_tensor_value_info("s_out", T.FLOAT, [64]),
         h.make_tensor_value_info("y_t", T.FLOAT, [64])], [w])
    nodes = [h.make_node("Scan", ["s0", "x"], ["/final", "y"], name="/Scan", body=body,
                         num_scan_inputs=1)]
    return _model(nodes, [_x((2, 64), name="x")],
                  [h.make_tensor_value_info("y", T.FLOAT, [2, 64])],
                  [nh.from_array(np.zeros(64, np.float32), "s0")])


def constant_of_shape_value_in_external_data(folder: Path) -> onnx.ModelProto:
    """A ConstantOfShape whose fill value (an attribute tensor) is in fill.bin."""
    value = nh.from_array(np.array([0.25], np.float32), "value")
    to_external(value, folder, "fill.bin")
    nodes = [h.make_node("ConstantOfShape", ["/shape"], ["/fill"], name="/f/ConstantOfShape",
                         value=value),
             h.make_node("Add", ["x", "/fill"], ["y"], name="/a/Add")]
    return _model(nodes, [_x((2, 64), name="x")],
                  [h.make_tensor_value_info("y", T.FLOAT, [2, 64])],
                  [nh.from_array(np.array([2, 64], np.int64), "/shape")])


TRAVELLING = [constant_in_external_data, if_branches_in_external_data,
              loop_body_in_external_data, scan_body_in_external_data,
              constant_of_shape_value_in_external_data]


def refused_by_onnxruntime(tmp_path: Path, model: onnx.ModelProto, capsys, **kw) -> bool:
    """Older onnxruntimes cannot read some tensors from external data (1.18: ConstantOfShape's
    value, sparse tensors): then the answer is a located error, nothing written."""
    (tmp_path / "in" / "m.onnx").write_bytes(model.SerializeToString())
    try:
        ort.InferenceSession(str(tmp_path / "in" / "m.onnx"))
        return False
    except Exception:       # noqa: BLE001 - whatever onnxruntime raises
        assert run(tmp_path, None, **kw) == 1
        err = error_of(capsys)
        assert "m.onnx: error: onnxruntime cannot load this model: " in err, err
        assert "onnxruntime_src" not in err, err
        assert not any((tmp_path / "out").iterdir())
        return True


@pytest.mark.parametrize("make", TRAVELLING)
def test_data_of_constants_and_branches_travel_with_an_unchanged_out(tmp_path, make, capsys):
    (tmp_path / "in").mkdir()
    model = make(tmp_path / "in")
    if refused_by_onnxruntime(tmp_path, model, capsys, rules=False):
        return
    assert run(tmp_path, model, rules=False) == 0
    out = tmp_path / "out" / "o.onnx"
    assert out.read_bytes() == (tmp_path / "in" / "m.onnx").read_bytes()
    onnx.checker.check_model(str(out), full_check=True)
    assert_equal_in_ort(tmp_path / "in" / "m.onnx", out)


@pytest.mark.parametrize("make", TRAVELLING)
def test_data_of_constants_and_branches_travel_with_a_spliced_out(tmp_path, make, capsys):
    (tmp_path / "in").mkdir()
    model = make(tmp_path / "in")
    g = model.graph             # and something the optimizer rewrites: + x·W1 + x·W2
    g.initializer.extend([_w("W1", [64, 64]), _w("W2", [64, 64])])
    y = g.output[0].name
    outs = g.node[-1].output
    outs[list(outs).index(y)] = "/before"
    g.value_info.append(h.make_tensor_value_info("/before", T.FLOAT, [2, 64]))
    g.node.extend([h.make_node("MatMul", ["x", "W1"], ["/m1"], name="/m1/MatMul"),
                   h.make_node("MatMul", ["x", "W2"], ["/m2"], name="/m2/MatMul"),
                   h.make_node("Add", ["/m1", "/m2"], ["/mm"], name="/Add"),
                   h.make_node("Add", ["/before", "/mm"], [y], name="/Add2")])
    if refused_by_onnxruntime(tmp_path, model, capsys):
        return
    assert run(tmp_path, model) == 0
    out = tmp_path / "out" / "o.onnx"
    assert out.read_bytes() != (tmp_path / "in" / "m.onnx").read_bytes()
    onnx.checker.check_model(str(out), full_check=True)
    assert_equal_in_ort(tmp_path / "in" / "m.onnx", out)


def test_data_file_named_like_out_is_not_overwritten(tmp_path):
    """The input's weights are in a file called o.onnx; OUT is out/o.onnx."""
    (tmp_path / "in").mkdir()
    model = matmul_sum()
    for t in model.graph.initializer:
        to_external(t, tmp_path / "in", "o.onnx")
    data = (tmp_path / "in" / "o.onnx").read_bytes()
    for rules in (False, True):         # copied unchanged, then optimized
        assert run(tmp_path, model, "out/o.onnx", "--force", rules=rules) == 0
        out = tmp_path / "out" / "o.onnx"
        onnx.checker.check_model(str(out), full_check=True)
        assert_equal_in_ort(tmp_path / "in" / "m.onnx", out)
        assert (tmp_path / "in" / "o.onnx").read_bytes() == data
        if not rules:       # unchanged: the model with its data moved to OUT's own data file
            assert sorted(p.name for p in out.parent.iterdir()) == ["o.onnx", "o.onnx.data"]
    # a data file landing on an existing file beside OUT needs --force
    assert run(tmp_path, None, "out/u.onnx", rules=False) == 1


def test_out_that_is_a_data_file_of_the_input_is_refused(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    model = matmul_sum()
    for t in model.graph.initializer:
        to_external(t, tmp_path / "in", "w.bin")
    data = (tmp_path / "in" / "w.bin").read_bytes()
    assert run(tmp_path, model, "in/w.bin", "--force") == 1
    err = error_of(capsys)
    assert "w.bin: error: the output would replace 'w.bin', a data file the input" in err
    assert (tmp_path / "in" / "w.bin").read_bytes() == data


def test_out_in_place_never_replaces_the_data_it_reads(tmp_path, monkeypatch):
    """`run m.onnx --onnx m.onnx --force` on a model whose data are m.onnx.data: a result
    large enough for external data gets another data file name."""
    from eqsat_nb import external_data
    (tmp_path / "in").mkdir()
    model = matmul_sum()
    for t in model.graph.initializer:
        to_external(t, tmp_path / "in", "m.onnx.data")
    (tmp_path / "in" / "m.onnx").write_bytes(model.SerializeToString())
    (tmp_path / "in" / "ref.onnx").write_bytes(model.SerializeToString())
    monkeypatch.setattr(external_data, "PROTOBUF_LIMIT", 4096)     # any weight goes to a data file
    assert run(tmp_path, None, "in/m.onnx", "--force") == 0
    assert (tmp_path / "in" / "m.onnx.1.data").exists()
    assert_equal_in_ort(tmp_path / "in" / "ref.onnx", tmp_path / "in" / "m.onnx")


def test_sparse_initializer_in_external_data(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    idx = np.unique(RNG.integers(0, 64 * 64, 600))[:400].astype(np.int64)
    values = nh.from_array(RNG.standard_normal(400).astype(np.float32), "W")
    indices = nh.from_array(idx, "")
    to_external(values, tmp_path / "in", "sparse.bin")
    to_external(indices, tmp_path / "in", "sparse.bin")
    model = _model([h.make_node("MatMul", ["x", "W"], ["y"], name="/m/MatMul")],
                   [_x((2, 64), name="x")], [h.make_tensor_value_info("y", T.FLOAT, [2, 64])])
    model.graph.sparse_initializer.append(h.make_sparse_tensor(values, indices, [64, 64]))
    if refused_by_onnxruntime(tmp_path, model, capsys, rules=False):
        return
    assert run(tmp_path, None, rules=False) == 0
    assert (tmp_path / "out" / "sparse.bin").exists()
    assert_equal_in_ort(tmp_path / "in" / "m.onnx", tmp_path / "out" / "o.onnx")


# ------------------------------------------------------------------ invalid inputs: located
INVALID = {
    "graph output listed twice": (
        lambda: _twice(conv()), "graph output 'output' is listed 2 times"),
    "input dim of 0": (
        lambda: conv(x_shape=(1, 4, 0, 8)), "graph input 'input' declares dimension 2 as 0"),
    "Conv strides [0, 0]": (
        lambda: conv(strides=[0, 0]),
        "node '/conv/Conv' (Conv, opset 17): attribute strides [0, 0]: every value must be "
        "positive"),
    "Conv pads 2^40": (
        lambda: conv(pads=[2**40] * 4),
        "node '/conv/Conv' (Conv, opset 17): attribute pads [1099511627776"),
    "Conv negative pads": (
        lambda: conv(pads=[-1] * 4), "node '/conv/Conv' (Conv, opset 17): attribute pads "
        "[-1, -1, -1, -1]: values must not be negative"),
    "Conv dilations 0": (
        lambda: conv(dilations=[0, 1]), "node '/conv/Conv' (Conv, opset 17): attribute "
        "dilations [0, 1]: every value must be positive"),
    "Conv group not dividing the channels": (
        lambda: conv(group=3), "node '/conv/Conv' (Conv, opset 17): weight 'conv.weight' has 8 "
        "output channels, which group 3 does not divide"),
    "Conv input channels != weight channels": (
        lambda: conv(w_shape=(8, 5, 3, 3)), "node '/conv/Conv' (Conv, opset 17): input 'input' "
        "has 4 channels but weight 'conv.weight' expects 5 x group 1 = 5"),
    "Conv weight from ConstantOfShape of 3.9e10 elements": (
        lambda: _constant_of_shape_weight(), "node '/w/ConstantOfShape' (ConstantOfShape): "
        "output 'conv.weight' has dims [8, 4, 34000, 34000]: 3.7e+10 elements"),
    "opset 99": (lambda: _opset(conv(), 99), "imports opset 99"),
    "int64 operand to Conv": (
        lambda: conv(x_type=T.INT64), "node '/conv/Conv' (Conv, opset 17): X typestr: T, has "
        "unsupported type: tensor(int64)"),
    "int64 operands to Gemm": (
        lambda: _gemm_int64(), "onnxruntime cannot load this model: node '/fc/Gemm' (Gemm): "
        "Could not find an implementation for Gemm(13)"),
    "declared shape inconsistent with inference": (
        lambda: _declared(conv(), "/conv/Conv_output_0", [1, 9, 8, 8]),
        "node '/conv/Conv' (Conv, opset 17): Inferred shape and existing shape differ"),
    "weight bytes not matching its dims": (
        lambda: _short_weight(conv()), "tensor 'conv.weight' has dims [8, 4, 3, 3] (1152 "
        "bytes) but holds 1148 bytes"),
    "input dim of -5": (
        lambda: _input_dim(conv(), 0, -5), "graph input 'input' declares dimension 0 as -5: "
        "expected a positive size or a symbolic name (dim_param)"),
    "eqsat-nb.weights naming a missing initializer": (
        lambda: _weights_meta(matmul_sum(), [["W1", "W1", "%W1", "%/m1"],
                                             ["missing", "w2", "%w2", "%/m2"]]),
        "metadata 'eqsat-nb.weights' (this tool's record of weight names) entry 1 names "
        "initializer 'missing', which the model has neither as an initializer nor as a graph "
        "input"),
    "eqsat-nb.weights giving a value name without '%'": (
        lambda: _weights_meta(matmul_sum(), [["W1", "W1", "W1", "%/m1"]]),
        "entry 0 gives 'W1' the value name 'W1', expected '%' and a name"),
    "eqsat-nb.weights naming an initializer twice": (
        lambda: _weights_meta(matmul_sum(), [["W1", "a", "%a", "%/m1"],
                                             ["W1", "b", "%b", "%/m1"]]),
        "entry 1 names initializer 'W1' a second time"),
}


def _input_dim(m: onnx.ModelProto, axis: int, size: int) -> onnx.ModelProto:
    d = m.graph.input[0].type.tensor_type.shape.dim[axis]
    d.Clear()
    d.dim_value = size
    return m


def _weights_meta(m: onnx.ModelProto, entries: list) -> onnx.ModelProto:
    """The metadata the exporter writes for weight names (onnx_io/exporter.py WEIGHTS_KEY)."""
    import json
    h.set_model_props(m, {"eqsat-nb.weights": json.dumps(entries)})
    return m


def _twice(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.output.append(m.graph.output[0])
    return m


def _opset(m: onnx.ModelProto, v: int) -> onnx.ModelProto:
    m.opset_import[0].version = v
    return m


def _declared(m: onnx.ModelProto, name: str, dims: list[int]) -> onnx.ModelProto:
    m.graph.value_info.append(h.make_tensor_value_info(name, T.FLOAT, dims))
    return m


def _short_weight(m: onnx.ModelProto) -> onnx.ModelProto:
    m.graph.initializer[0].raw_data = m.graph.initializer[0].raw_data[:-4]
    return m


def _constant_of_shape_weight() -> onnx.ModelProto:
    m = conv()
    g = m.graph
    del g.initializer[0]
    g.initializer.append(nh.from_array(np.array([8, 4, 34000, 34000], np.int64), "/w/shape"))
    g.node.insert(0, h.make_node("ConstantOfShape", ["/w/shape"], ["conv.weight"],
                                 name="/w/ConstantOfShape",
                                 value=h.make_tensor("v", T.FLOAT, [1], [0.02])))
    return m


def _gemm_int64() -> onnx.ModelProto:
    node = h.make_node("Gemm", ["x", "fc.weight"], ["y"], name="/fc/Gemm", transB=1)
    return _model([node], [_x((2, 8), T.INT64, "x")],
                  [h.make_tensor_value_info("y", T.INT64, [2, 4])],
                  [nh.from_array(np.ones((4, 8), np.int64), "fc.weight")])


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_input_is_a_located_error_and_writes_nothing(tmp_path, capsys, case):
    make, expected = INVALID[case]
    assert run(tmp_path, make()) == 1
    err = error_of(capsys)
    assert f"{tmp_path / 'in' / 'm.onnx'}: error: " in err, err
    assert expected in err, err
    assert not any((tmp_path / "out").iterdir())


def test_matmul_on_int64_is_valid_and_comes_back_equal(tmp_path):
    """int64 MatMul is in the operator's type constraints and onnxruntime runs it."""
    node = h.make_node("MatMul", ["x", "w"], ["y"], name="/m/MatMul")
    model = _model([node], [_x((2, 8), T.INT64, "x")],
                   [h.make_tensor_value_info("y", T.INT64, [2, 4])],
                   [nh.from_array(np.arange(32, dtype=np.int64).reshape(8, 4), "w")])
    assert run(tmp_path, model) == 0
    a = ort.InferenceSession(str(tmp_path / "in" / "m.onnx"))
    b = ort.InferenceSession(str(tmp_path / "out" / "o.onnx"))
    x = {"x": RNG.integers(-5, 5, (2, 8))}
    np.testing.assert_array_equal(a.run(None, x)[0], b.run(None, x)[0])


# ------------------------------------------------------------------ hostile external data
@pytest.mark.parametrize("location,expected", [
    ("../escape.bin", "a path through '..'"),
    ("/etc/hostname", "an absolute path"),
    ("link.bin", "is a symbolic link, which is not followed"),
    ("nothere.bin", "which cannot be read: No such file or directory"),
    (".", "which is not a regular file"),
])
def test_external_data_outside_the_folder_is_refused(tmp_path, capsys, location, expected):
    (tmp_path / "in").mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 16384)
    os.symlink("../secret.bin", tmp_path / "in" / "link.bin")
    model = matmul_sum()
    for t in model.graph.initializer:
        to_external(t, tmp_path / "in", "w.bin")
        t.external_data[0].value = location
    assert run(tmp_path, model) == 1
    err = error_of(capsys)
    assert f"error: tensor 'W1' keeps its data in {location!r} (external data)" in err, err
    assert expected in err, err


@pytest.mark.parametrize("key,value,expected", [
    ("offset", str(2**62), "external data offset 4611686018427387904 is past the end of"),
    ("length", str(2**40), "external data of 1099511627776 bytes at offset 0 runs past the end"),
    ("length", "100", "has dims [64, 64] (16384 bytes) but its external data in 'w.bin' is 100"),
    ("offset", "-4", "external data offset '-4' is not a non-negative integer"),
])
def test_external_data_lengths_and_offsets_are_checked(tmp_path, capsys, key, value, expected):
    (tmp_path / "in").mkdir()
    model = matmul_sum()
    for t in model.graph.initializer:
        to_external(t, tmp_path / "in", "w.bin")
    for e in model.graph.initializer[0].external_data:
        if e.key == key:
            e.value = value
    assert run(tmp_path, model) == 1
    err = error_of(capsys)
    assert "error: tensor 'W1'" in err and expected in err, err


# ------------------------------------------------------------------ writing any size
def test_large_model_is_written_with_its_data_beside_it_and_left_unchanged(tmp_path,
                                                                           monkeypatch):
    """Past the protobuf limit (lowered here) weights go to OUT.data: the file passes
    onnx.checker on its path, loads in onnxruntime, and the model in memory is untouched."""
    import eqsat_nb.runtime as runtime
    from eqsat_nb import external_data
    monkeypatch.setattr(external_data, "PROTOBUF_LIMIT", 10_000)
    model = matmul_sum()
    before = model.SerializeToString()
    out = tmp_path / "o.onnx"
    files = external.write_model(str(out), model)
    assert files == [str(out), str(tmp_path / "o.onnx.data")]
    assert model.SerializeToString() == before
    onnx.checker.check_model(str(out), full_check=True)
    (tmp_path / "ref.onnx").write_bytes(before)
    assert_equal_in_ort(tmp_path / "ref.onnx", out)
    size = (tmp_path / "o.onnx.data").stat().st_size
    external.write_model(str(out), model)          # again: replaced, not appended to
    assert (tmp_path / "o.onnx.data").stat().st_size == size
    with pytest.raises(Exception, match="external data file exists"):
        external.write_model(str(out), model, force=False)
    sess = runtime.session(model)                  # a session of a large model: same
    assert sess.get_inputs()[0].name == "x" and model.SerializeToString() == before


# ------------------------------------------------------------------ runs that never end
def endless_loop(with_matmuls: bool = False) -> onnx.ModelProto:
    """A legal model whose Loop adds 1 to a float 2^40 times (days in onnxruntime), its result
    added to the output; `with_matmuls`: x·W1 + x·W2 beside it, which the rules merge (so an
    optimized model is spliced, checked and timed)."""
    body = h.make_graph(
        [h.make_node("Identity", ["cond_in"], ["cond_out"]),
         h.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []),
         h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []),
         h.make_tensor_value_info("v_out", T.FLOAT, [1])],
        [nh.from_array(np.array([1.0], np.float32), "one")])
    nodes = [h.make_node("Loop", ["trips", "cond", "v0"], ["/loop"], name="/Loop", body=body)]
    inits = [nh.from_array(np.array(2**40, np.int64), "trips"),
             nh.from_array(np.array(True), "cond"),
             nh.from_array(np.array([0.0], np.float32), "v0")]
    if with_matmuls:
        nodes += [h.make_node("MatMul", ["x", "W1"], ["/m1"], name="/m1/MatMul"),
                  h.make_node("MatMul", ["x", "W2"], ["/m2"], name="/m2/MatMul"),
                  h.make_node("Add", ["/m1", "/m2"], ["/s"], name="/Add")]
        inits += [_w("W1", [64, 64]), _w("W2", [64, 64])]
    else:
        nodes.append(h.make_node("Mul", ["x", "x"], ["/s"], name="/Mul"))
    nodes.append(h.make_node("Add", ["/s", "/loop"], ["y"], name="/Add2"))
    m = _model(nodes, [_x((2, 64), name="x")], [h.make_tensor_value_info("y", T.FLOAT, [2, 64])],
               inits)
    onnx.checker.check_model(m, full_check=True)
    return m


def _timed_run(tmp_path: Path, model: onnx.ModelProto, limit: float, *extra: str
               ) -> tuple[int, float]:
    """(exit code, wall seconds less Numba compilation, which --time-limit does not count)."""
    import time

    from eqsat_nb.search.limits import compile_seconds
    t, c = time.perf_counter(), compile_seconds()
    code = run(tmp_path, model, "out/o.onnx", "--time-limit", f"{limit:g}", *extra)
    return code, time.perf_counter() - t - (compile_seconds() - c)


def test_loop_of_2_40_trips_stops_at_the_time_limit(tmp_path, capsys):
    """The import's test run in onnxruntime is stopped at --time-limit: a located error naming
    the run, the node and the option, and nothing written."""
    code, took = _timed_run(tmp_path, endless_loop(), 3)
    err = error_of(capsys)
    assert code == 1, err
    assert (f"{tmp_path / 'in' / 'm.onnx'}: error: onnxruntime's test run of the input model "
            f"was stopped at the time limit after ") in err, err
    assert ("s (in node '/Loop' (Loop)); nothing was written. A larger --time-limit (now 3 s) "
            "leaves it more time") in err, err
    assert 2.0 < took < 6.0, took
    assert not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("verify", ["interpreter", "onnxruntime only"])
def test_endless_loop_past_the_import_check_writes_the_input_unchanged(tmp_path, capsys,
                                                                       monkeypatch, verify):
    """A model too large for the import's test run (the limit lowered here) reaches the
    verification, where the Loop runs as an opaque node in onnxruntime, and the onnxruntime
    comparison of the optimized model with the input: each stops at the time limit, and OUT is
    the input, byte for byte (the optimized model was never checked)."""
    import json

    from eqsat_nb.onnx_io import validate
    monkeypatch.setattr(validate, "RUN_CHECK_BYTES", 0)
    extra = ["--report", str(tmp_path / "r.json")]
    if verify == "onnxruntime only":          # the interpreter's check does not fit: skipped
        from eqsat_nb import check_outputs
        monkeypatch.setattr(check_outputs, "estimate_verification",
                            lambda *a, **k: check_outputs.VerifyCost(1 << 50, 0.1))
    code, took = _timed_run(tmp_path, endless_loop(with_matmuls=True), 4, *extra)
    err = error_of(capsys)
    assert code == 0, err
    assert took < 7.0, took
    report = json.loads((tmp_path / "r.json").read_text())
    out = report["onnx_output"]
    assert out["written"] == "input unchanged", out
    if verify == "interpreter":
        assert "verification was stopped at the time limit" in report["verification"]["summary"]
        assert out["reason"].startswith("onnxruntime's run of the input model for the comparison "
                                        "was not started: the time limit had been reached"), out
    else:
        assert report["verification"]["status"] == "memory"
        assert out["reason"].startswith("onnxruntime's run of the input model for the comparison "
                                        "was stopped at the time limit after "), out
        assert "(in node '/Loop' (Loop))" in out["reason"], out
    assert "a larger --time-limit leaves onnxruntime more time" in out["reason"], out
    assert (tmp_path / "out" / "o.onnx").read_bytes() == (tmp_path / "in" / "m.onnx").read_bytes()


# ------------------------------------------------------------------ folding what is small only
def _generator(kind: str, n: int) -> onnx.ModelProto:
    """An integer value of n (or n*n) elements computed from a few constants, reduced to one
    number that is added to the output: legal, and n elements to build if folded."""
    if kind == "Range":
        inits = [nh.from_array(np.array(v, np.int64), k) for k, v in
                 (("start", 0), ("limit", n), ("delta", 1))]
        gen = [h.make_node("Range", ["start", "limit", "delta"], ["/g"], name="/Range")]
    elif kind == "ConstantOfShape":
        inits = [nh.from_array(np.array([n, n], np.int64), "shape")]
        gen = [h.make_node("ConstantOfShape", ["shape"], ["/g"], name="/ConstantOfShape",
                           value=h.make_tensor("v", T.INT64, [1], [3]))]
    else:                                    # broadcasting [n, 1] + [1, n]
        inits = [nh.from_array(np.arange(n, dtype=np.int64).reshape(n, 1), "a"),
                 nh.from_array(np.arange(n, dtype=np.int64).reshape(1, n), "b")]
        gen = [h.make_node("Add", ["a", "b"], ["/g"], name="/Add0")]
    nodes = gen + [h.make_node("ReduceMax", ["/g"], ["/mx"], name="/ReduceMax", keepdims=0),
                   h.make_node("Cast", ["/mx"], ["/f"], name="/Cast", to=T.FLOAT),
                   h.make_node("Add", ["x", "/f"], ["y"], name="/Add")]
    return _model(nodes, [_x((2, 8), name="x")], [h.make_tensor_value_info("y", T.FLOAT, [2, 8])],
                  inits)


@pytest.mark.parametrize("kind,n", [("Range", 2**31), ("ConstantOfShape", 2**16),
                                    ("Add", 2**15)])
def test_folding_never_builds_a_large_value(monkeypatch, kind, n):
    """Constant folding keeps only small values (FOLD_MAX elements): a node whose result would
    be larger is not evaluated at all (onnx.reference would build its 2^30 to 2^32 elements,
    many GB and minutes, before the size could be checked); small ones still fold."""
    from eqsat_nb.onnx_io import fold

    evaluated: list[str] = []
    real = fold._evaluate

    def record(node, args, opsets):
        evaluated.append(node.op_type)
        if node.op_type == kind:
            raise AssertionError(f"{kind} of {n} elements evaluated")
        return real(node, args, opsets)

    monkeypatch.setattr(fold, "_evaluate", record)
    big = _generator(kind, n)
    known = {t.name: nh.to_array(t) for t in big.graph.initializer}
    folded = fold.fold_model(big, {"x": (2, 8)}, known)
    assert "/g" not in folded.values and kind not in evaluated
    monkeypatch.setattr(fold, "_evaluate", real)
    small = _generator(kind, 16)
    known = {t.name: nh.to_array(t) for t in small.graph.initializer}
    assert "/mx" in fold.fold_model(small, {"x": (2, 8)}, known).values
