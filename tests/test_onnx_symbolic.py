"""Symbolic input dims where 1 is degenerate (issue 28, point 2): the import tries the sizes the
model suggests, then a small search, and says which it used; when nothing works, the error names
the symbolic inputs and the --input-shape line to give. Models are built with onnx.helper as
torch.onnx writes silero-vad's STFT front end (reflect Pad, strided Conv over the audio)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.cli import main
from eqsat_nb.errors import TirError
from eqsat_nb.onnx_io import import_onnx
from eqsat_nb.onnx_io.compare import compare, inputs_for
from eqsat_nb.onnx_io.measure import random_feeds
from eqsat_nb.runtime import session

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def C(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value, dtype), name))


def stft_model(metadata=None):
    """input [batch, samples] → Unsqueeze → reflect Pad 4 → Conv1d (kernel 16, stride 8) →
    Relu → Transpose → MatMul: at samples = 1 the Conv's output is empty."""
    w = numpy_helper.from_array(RNG.standard_normal((6, 1, 16)).astype(np.float32), "stft.w")
    proj = numpy_helper.from_array(RNG.standard_normal((6, 3)).astype(np.float32), "proj")
    nodes = [C("ax", [1]), helper.make_node("Unsqueeze", ["input", "ax"], ["u"], name="/Unsq"),
             C("pads", [0, 0, 0, 0, 0, 4]),
             helper.make_node("Pad", ["u", "pads"], ["p"], name="/stft/Pad", mode="reflect"),
             helper.make_node("Conv", ["p", "stft.w"], ["c"], name="/stft/Conv",
                              kernel_shape=[16], strides=[8]),
             helper.make_node("Relu", ["c"], ["r"], name="/Relu"),
             helper.make_node("Transpose", ["r"], ["t"], name="/T", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["t", "proj"], ["output"], name="/MatMul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", F,
                                                                     ["batch", "samples"])],
                          [helper.make_tensor_value_info("output", F, ["batch", "frames", 3])],
                          initializer=[w, proj])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)],
                          producer_name="pytorch")
    m.ir_version = 8
    if metadata:
        helper.set_model_props(m, metadata)
    onnx.checker.check_model(m)
    return m


def test_a_length_degenerate_at_1_is_searched_and_reported():
    r = import_onnx(stft_model(), "vad.onnx")
    shape = dict(r.graph.inputs)[r.ssa_of["input"]].shape
    assert shape == (1, 16)                 # the batch stays 1, the length the first that works
    assert r.size_note.startswith("symbolic dims analysed at batch=1, samples=16: at 1, ")
    assert "zero-size" in r.size_note
    assert r.defaulted == {"input": [0, 1]}          # still symbolic: re-checked at another size
    assert not compare(r, inputs_for(r))


def test_sizes_from_the_models_metadata_come_first():
    r = import_onnx(stft_model({"input_shape": "[1, 40]"}), "vad.onnx")
    assert dict(r.graph.inputs)[r.ssa_of["input"]].shape == (1, 40)
    assert "samples=40" in r.size_note


def test_nothing_works_names_the_inputs_and_the_line_to_give():
    """A window of 10000 samples: empty at every size the search tries (up to 8192)."""
    w = numpy_helper.from_array(np.ones((2, 1, 10000), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="/Conv", kernel_shape=[10000])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 1, "n"])],
                          [helper.make_tensor_value_info("y", F, [1, 2, "m"])], initializer=[w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    with pytest.raises(TirError) as e:
        import_onnx(m, "m.onnx")
    text = str(e.value)
    assert text.startswith("m.onnx: error: node '/Conv' (Conv, opset 14): ")
    assert "'x' [1, 1, n]" in text and "--input-shape x=1x1x<n>" in text
    assert import_onnx(m, "m.onnx", input_shapes={"x": (1, 1, 10000)}).graph.nodes


def test_the_cli_writes_the_model_and_says_which_size(tmp_path, capsys):
    src, out = tmp_path / "vad.onnx", tmp_path / "out.onnx"
    m = stft_model()
    onnx.save(m, src)
    assert main(["run", str(src), "--onnx", str(out), "--report", str(tmp_path / "r.json"),
                 "-q", "--measure-time", "2"]) == 0
    printed = capsys.readouterr().out
    assert "symbolic dims analysed at batch=1, samples=16" in printed
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["symbolic_sizes"].startswith("symbolic dims analysed at")
    assert report["analysed_shapes"] == {"input": [1, 16]}     # what onnx_table measures at
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    for samples in (16, 100):            # the symbols kept: any length the model takes
        feeds = random_feeds(m, shapes={"input": (2, samples)})
        for a, b in zip(session(m).run(None, feeds), session(written).run(None, feeds)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_a_sequence_is_not_a_size_problem():
    """SplitToSequence on a symbolic length: the error says the value is a sequence, at once
    (no sizes tried: none would help)."""
    nodes = [helper.make_node("SplitToSequence", ["x"], ["seq"], name="/S", keepdims=0),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], name="/C", axis=0)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["n"])],
                          [helper.make_tensor_value_info("y", F, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    with pytest.raises(TirError, match="node '/S' .*'seq' is a sequence, which the IR cannot "
                                       "hold") as e:
        import_onnx(m, "m.onnx")
    assert "no size tried" not in str(e.value)


def _reshaped(rows):
    """input [n] → Reshape (rows, -1): runs only where rows divides n."""
    nodes = [C("shape", [rows, -1]),
             helper.make_node("Reshape", ["input", "shape"], ["output"], name="/Reshape")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", F, ["n"])],
                          [helper.make_tensor_value_info("output", F, [rows, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def test_the_other_size_a_rewrite_is_checked_at_is_one_the_model_runs_at():
    from eqsat_nb.onnx_io.symbolic import another_size

    assert another_size(_reshaped(2), {"input": [0]}, {"input": (4,)}) == {"input": (6,)}
    assert another_size(_reshaped(4), {"input": [0]}, {"input": (4,)}) == {"input": (8,)}
    assert another_size(_reshaped(5), {"input": [0]}, {"input": (5,)}) == {"input": (10,)}
    assert another_size(_reshaped(7), {"input": [0]}, {"input": (1,)}) is None
