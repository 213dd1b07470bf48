"""conv2d's optional bias operand (ONNX Conv's B): the op (Python and Numba shape functions,
interpreter, text form), the importer's mapping of a biased Conv, the exporters, and a ResNet
bottleneck block as torch.onnx writes it (BatchNorm folded into the Conv biases), on which the
Conv+Relu rewrites that fire on ir_examples/resnet50.tir fire in their biased form.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from eqsat_nb.cli import main
from eqsat_nb.errors import ShapeError, TirError
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.interp import run
from eqsat_nb.ir.ops import OPS, infer_types, normalize_attrs
from eqsat_nb.ir.parse import parse
from eqsat_nb.ir.printer import print_graph
from eqsat_nb.onnx_io import import_onnx, to_onnx
from eqsat_nb.onnx_io.measure import random_feeds
from eqsat_nb.runtime import session

RNG = np.random.default_rng(0)

BIASED = """\
func @m(%x: tensor<1x4x6x6xf32>) -> tensor<1x8x6x6xf32> {
  %w = weight @w : tensor<8x4x3x3xf32>
  %b = weight @b : tensor<8xf32>
  %0 = conv2d(%x, %w, %b) {act = "relu"} : tensor<1x8x6x6xf32>
  return %0
}
"""


def _conv_attrs(**kw):
    return normalize_attrs(OPS["conv2d"], kw)


def test_bias_shape_is_checked():
    x, w = TensorType((1, 4, 6, 6), "f32"), TensorType((8, 4, 3, 3), "f32")
    got = infer_types("conv2d", [x, w, TensorType((8,), "f32")], _conv_attrs())
    assert got == [TensorType((1, 8, 6, 6), "f32")]
    for bad in (TensorType((4,), "f32"), TensorType((8, 1, 1), "f32"),
                TensorType((8,), "f16")):
        with pytest.raises(ShapeError, match="conv2d"):
            infer_types("conv2d", [x, w, bad], _conv_attrs())
    with pytest.raises(TirError, match="2 to 3 operands"):
        infer_types("conv2d", [x, w, TensorType((8,), "f32"), x], _conv_attrs())


def test_biased_conv_text_round_trip_and_interpreter():
    g = parse(BIASED, "m.tir")
    assert parse(print_graph(g), "again.tir") == g
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    (got,) = run(g, {"%x": x, "@w": w, "@b": b})
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 8, 6, 6), np.float32)
    for i in range(6):
        for j in range(6):
            want[0, :, i, j] = np.einsum("cij,ocij->o", xp[0, :, i:i + 3, j:j + 3], w)
    want = np.maximum(want + b[:, None, None], 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_biased_conv_exports_as_conv_with_b():
    g = parse(BIASED, "m.tir")
    m = to_onnx(g)
    ops = [(n.op_type, len(n.input)) for n in m.graph.node]
    assert ("Conv", 3) in ops and "Relu" in [o for o, _ in ops] and "Add" not in ops
    back = import_onnx(m, "m.onnx").graph
    assert [n.op for n in back.nodes if n.op != "weight"] == ["conv2d"]
    (conv,) = [n for n in back.nodes if n.op == "conv2d"]
    assert len(conv.inputs) == 3 and conv.attr["act"] == "relu"


# ------------------------------------------------------------------ the bottleneck block

def _init(name: str, shape: list[int]) -> onnx.TensorProto:
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return nh.from_array((RNG.standard_normal(shape) / np.sqrt(fan)).astype(np.float32), name)


def bottleneck_model(c: int = 64, hw: int = 28, proj_relu: bool = True) -> onnx.ModelProto:
    """The first bottleneck block of ResNet-50 (ir_examples/resnet50.tir's s1b1: 1x1 relu, 3x3
    relu, 1x1; a 1x1 projection, with relu as in TASO's model unless `proj_relu` is False as in
    torchvision's; add; relu), written as torch.onnx writes it: BatchNorm folded into Conv
    biases, explicit pads, separate Relu nodes, `/layer1/...` value names."""
    p = "/layer1/layer1.0"
    nodes, inits = [], []

    def conv(name, x, cout, cin, k, relu):
        out = f"{p}/{name}/Conv_output_0"
        nodes.append(h.make_node("Conv", [x, f"{p}.{name}.weight", f"{p}.{name}.bias"], [out],
                                 name=f"{p}/{name}/Conv", dilations=[1, 1], group=1,
                                 kernel_shape=[k, k], pads=[k // 2] * 4, strides=[1, 1]))
        inits.extend([_init(f"{p}.{name}.weight", [cout, cin, k, k]),
                      _init(f"{p}.{name}.bias", [cout])])
        if not relu:
            return out
        nodes.append(h.make_node("Relu", [out], [f"{p}/{name}/Relu_output_0"],
                                 name=f"{p}/{name}/Relu"))
        return f"{p}/{name}/Relu_output_0"

    a = conv("conv1", "input", c, c, 1, True)
    a = conv("conv2", a, c, c, 3, True)
    a = conv("conv3", a, 4 * c, c, 1, False)
    s = conv("downsample.0", "input", 4 * c, c, 1, proj_relu)
    nodes.append(h.make_node("Add", [s, a], [f"{p}/Add_output_0"], name=f"{p}/Add"))
    nodes.append(h.make_node("Relu", [f"{p}/Add_output_0"], ["output"], name=f"{p}/Relu"))
    g = h.make_graph(nodes, "main_graph",
                     [h.make_tensor_value_info("input", T.FLOAT, [1, c, hw, hw])],
                     [h.make_tensor_value_info("output", T.FLOAT, [1, 4 * c, hw, hw])],
                     initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], producer_name="pytorch",
                     producer_version="2.1")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def test_bottleneck_imports_biased_convs():
    graph = import_onnx(bottleneck_model(), "block.onnx").graph
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert len(convs) == 4 and all(len(n.inputs) == 3 for n in convs)
    assert all(n.attr["pad"] == "same" for n in convs)
    assert [n.op for n in graph.nodes if n.op not in ("weight", "conv2d")] == \
        ["relu", "relu", "relu", "ewadd", "relu"]


def test_bottleneck_block_fires_the_conv_relu_rewrites(tmp_path):
    src, out, rep = tmp_path / "block.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    model = bottleneck_model()
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "--no-measure",
                 "-q"]) == 0
    report = json.loads(rep.read_text())
    fired = {k for k, v in report["rules_fired"].items() if v}
    # what fires on resnet50.tir (merge_convrelus_axis1_enlarge, on convs already fused with
    # relu), here after the biased relu fusion
    assert {"relu_convbias_to_convbiasrelu", "merge_convbiases_axis1_enlarge"} <= fired
    got = onnx.load(str(out))
    onnx.checker.check_model(got, full_check=True)
    convs = [n for n in got.graph.node if n.op_type == "Conv"]
    assert convs and all(len(n.input) == 3 and n.input[2] for n in convs)
    consumers = {}
    for n in got.graph.node:
        for v in n.input:
            consumers.setdefault(v, []).append(n.op_type)
    relus = sum(consumers.get(n.output[0], []) == ["Relu"] for n in convs)
    assert relus >= 3                  # conv1, conv2 and the projection: Relu right after
    assert "Add" in [n.op_type for n in got.graph.node]
    sa, sb = session(model), session(got)
    for seed in (0, 1):                # independently of the tool's own check
        feeds = random_feeds(model, seed=seed)
        (x,), (y,) = sa.run(None, feeds), sb.run(None, feeds)
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5 * float(np.abs(x).max()))


def test_torchvision_block_fuses_its_relus(tmp_path):
    """Without a relu on the projection (torchvision's block) the residual Add of two biased
    convs becomes one conv over concatenated inputs (biases summed), and its Relu fuses too."""
    src, out, rep = tmp_path / "block.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    model = bottleneck_model(c=16, hw=14, proj_relu=False)
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "--no-measure",
                 "-q"]) == 0
    fired = json.loads(rep.read_text())["rules_fired"]
    assert fired.get("relu_convbias_to_convbiasrelu", 0) >= 2
    assert fired.get("ewadd_convbias_to_convbias_concat1", 0) >= 1
    got = onnx.load(str(out))
    assert all(len(n.input) == 3 for n in got.graph.node if n.op_type == "Conv")
    sa, sb = session(model), session(got)
    feeds = random_feeds(model, seed=0)
    (x,), (y,) = sa.run(None, feeds), sb.run(None, feeds)
    np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5 * float(np.abs(x).max()))
