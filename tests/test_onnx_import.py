"""ONNX import: the ONNX project's operator test cases, old-format models, malformed input.

The sweep (`eqsat_nb.onnx_io.cases`) imports every case, evaluates it with the reference
interpreter (opaque nodes in onnxruntime), compares with the expected outputs, re-exports and runs
the export in onnxruntime. The default tier sweeps the cases built only from the operator table's
ops (about 400 of 1 900); the slow tier (`--slow`) sweeps them all, most of them opaque nodes run
in onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.errors import TirError
from eqsat_nb.ir.interp import run
from eqsat_nb.onnx_io import from_onnx, load_onnx
from eqsat_nb.onnx_io.cases import FAILED, MAPPED, OPAQUE, SKIPPED, collect, sweep
from eqsat_nb.onnx_io.importer import MAPPED_OPS


@pytest.fixture(scope="module")
def cases() -> list:
    return collect()


@pytest.fixture(scope="module")
def table_report(cases):
    """The sweep of the cases whose ops are all in the operator table."""
    return sweep([c for c in cases if {n.op_type for n in c.model.graph.node} <= MAPPED_OPS])


@pytest.fixture(scope="module")
def report(cases):
    """The sweep of every case."""
    return sweep(cases)


@pytest.mark.slow
def test_sweep_counts(report):
    counts = report.counts()
    total = sum(counts.values())
    print(f"\nONNX node cases: {total} total, {counts[MAPPED]} mapped (no opaque node), "
          f"{counts[OPAQUE]} with opaque nodes, {counts[SKIPPED]} skipped, {counts[FAILED]} failed")
    for reason, n in report.reasons(SKIPPED).most_common():
        print(f"  skipped {n}: {reason}")
    # the suite grows with onnx: 1 286 cases in 1.16 (setup.cfg's floor), over 1 500 in 1.23
    version = tuple(int(x) for x in onnx.__version__.split(".")[:2])
    assert total > (1500 if version >= (1, 23) else 1250)
    assert counts[MAPPED] >= 140 and counts[OPAQUE] >= 700


def test_every_table_case_maps_and_passes(table_report):
    """Cases built only from table ops: each is mapped (or opaque for a documented reason: an
    attribute or extra output the IR lacks), evaluates to the expected outputs, round-trips."""
    table = table_report.results
    assert len(table) > 200 and all(set(r.ops) <= MAPPED_OPS for r in table)
    bad = [(r.name, r.reason) for r in table if r.kind == FAILED]
    assert not bad
    assert all(r.roundtrip for r in table if r.kind in (MAPPED, OPAQUE))
    mapped = {r.name for r in table if r.kind == MAPPED}
    for must in ("test_conv_with_strides_padding", "test_gemm_all_attributes", "test_matmul_4d",
                 "test_add_bcast", "test_batchnorm_example", "test_softmax_axis_1",
                 "test_gelu_default_1",
                 "test_maxpool_2d_same_upper", "test_averagepool_2d_pads_count_include_pad",
                 "test_globalaveragepool", "test_split_equal_parts_1d_opset18",
                 "test_reshape_negative_dim", "test_flatten_axis1", "test_transpose_default",
                 "test_slice", "test_constant_pad", "test_expand_dim_changed"):
        if must in {r.name for r in table}:
            assert must in mapped, must


@pytest.mark.slow
def test_opaque_cases_only_fail_where_onnxruntime_disagrees(report):
    bad = [(r.name, r.reason) for r in report.results if r.kind == FAILED
           and not r.reason.startswith("onnxruntime differs")]
    assert not bad
    assert sum(r.kind == FAILED for r in report.results) <= 10


def _mlp_model(old_format: bool) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    b = numpy_helper.from_array(np.array([1, 2, 3], np.float32), "b")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])]
    if old_format:        # pre-IR-4 style: initializers also listed as graph inputs
        inputs += [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]),
                   helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"]),
         helper.make_node("Relu", ["y"], ["z"])], "mlp", inputs,
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])], initializer=[w, b])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 7 if not old_format else 3
    return m


@pytest.mark.parametrize("old_format", [False, True])
def test_initializers_are_weights(old_format, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp_model(old_format), path)
    graph, weights = load_onnx(path, dims={"N": 2})
    assert [n for n, _ in graph.inputs] == ["%x"]
    assert graph.inputs[0][1].shape == (2, 4)
    assert sorted(weights) == ["b", "w"]
    assert [n.op for n in graph.nodes] == ["weight", "matmul", "weight", "broadcast", "ewadd",
                                           "relu"]
    x = np.array([[1, -2, 3, 0.5], [0, 0, 0, 0]], np.float32)
    (z,) = run(graph, {"%x": x, **{"@" + k: v for k, v in weights.items()}})
    np.testing.assert_allclose(z, np.maximum(x @ weights["w"] + weights["b"], 0), rtol=1e-6)
    assert load_onnx(path)[0].inputs[0][1].shape == (1, 4)    # DEFAULT_DIM for the batch


def test_matmul_keeps_the_weight_a_weight():
    """A Linear as torch.onnx writes it on a [B, S, H] activation: MatMul on the rank-2
    initializer. The IR's matmul is ONNX MatMul, so no broadcast sits between weight and matmul;
    a rank-1 operand is reshaped to a matrix and the result back, as ONNX defines it."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    v = numpy_helper.from_array(np.arange(4, dtype=np.float32), "v")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("MatMul", ["x", "v"], ["z"])],
        "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 3]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5])], initializer=[w, v])
    graph, weights = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    ops = [n.op for n in graph.nodes if n.op != "weight"]
    assert ops == ["matmul", "reshape", "matmul", "reshape"]
    mm = next(n for n in graph.nodes if n.op == "matmul")
    assert [graph.producers()[v].op for v in mm.inputs[1:]] == ["weight"]
    x = np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)
    y, z = run(graph, {"%x": x, **{"@" + k: a for k, a in weights.items()}})
    np.testing.assert_allclose(y, x @ weights["w"], rtol=1e-6)
    np.testing.assert_allclose(z, x @ weights["v"], rtol=1e-6)


def test_constant_nodes_and_identity():
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
            np.full((2, 3), 2, np.float32), "c")),
         helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Mul", ["i", "c"], ["y"])],
        "k", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    graph, weights = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    assert [n.op for n in graph.nodes] == ["weight", "ewmul"]
    np.testing.assert_array_equal(weights["c"], np.full((2, 3), 2, np.float32))


def test_erf_gelu_pattern_becomes_gelu():
    c = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(  # noqa
        np.asarray(v, np.float32), name))
    nodes = [c("s", np.sqrt(2.0)), c("one", 1.0), c("half", 0.5),
             helper.make_node("Div", ["x", "s"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    t = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 5]) for n in ("x", "y")]
    graph, _ = from_onnx(helper.make_model(helper.make_graph(nodes, "g", t[:1], t[1:]),
                                         opset_imports=[helper.make_opsetid("", 21)]))
    assert [n.op for n in graph.nodes] == ["gelu"]


def test_unmappable_attribute_becomes_opaque():
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], dilations=[2, 2])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])],
        initializer=[numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")])
    graph, weights = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    assert [n.op for n in graph.nodes] == ["weight", "opaque"]
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    (y,) = run(graph, {"%x": x, "@w": weights["w"]})
    want = sum(x[0, 0, 2 * i:2 * i + 2, 2 * j:2 * j + 2] for i in range(3) for j in range(3))
    np.testing.assert_allclose(y[0, 0], want)


@pytest.mark.parametrize("content, message", [
    (b"", "graph"),
    (b"\x00\x01garbage\xff\xfe", "not an ONNX model"),
])
def test_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(TirError) as e:
        load_onnx(path)
    assert str(e.value).startswith(f"{path}: error:") and message in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(TirError, match="cannot read file"):
        load_onnx(tmp_path / "nope.onnx")


def test_unsupported_dtype_and_unknown_shape_name_the_node(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="act1")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [2])])
    with pytest.raises(TirError, match="m.onnx: error: 'x' has element type uint8"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "m.onnx")
    g = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"], name="nz")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [1, "n"])])
    with pytest.raises(TirError) as e:
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "m.onnx")
    assert str(e.value).startswith("m.onnx: error: node 'nz' (NonZero, opset 21)") and "shape" in str(e.value)


def test_invalid_model_is_reported():
    g = helper.make_graph([helper.make_node("Relu", ["missing"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(TirError, match="not a valid ONNX model"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), "m.onnx")
