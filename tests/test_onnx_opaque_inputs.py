"""Rewritten nodes keep every input their opset requires (issue 28, point 1).

Each model is one operator family the importer keeps opaque or maps (Resize/Upsample, Pad, Slice,
Clip, Split, ReduceX), built with onnx.helper node for node as torch.onnx, tf2onnx and
paddle2onnx write it, behind an Add. The "optimized" graph is the import with every Add's
operands swapped: the same values computed by new nodes, so the splicing exporter writes the
operator anew from what the import kept. The written model must pass onnx's full check, load in
onnxruntime and compute what the input model computes.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.ir.graph import Graph
from eqsat_nb.ir.opaque import decode_node
from eqsat_nb.ir.parse import parse
from eqsat_nb.ir.printer import print_graph
from eqsat_nb.onnx_io import import_onnx, to_onnx
from eqsat_nb.onnx_io.measure import random_feeds
from eqsat_nb.onnx_io.splice import splice
from eqsat_nb.runtime import session

F, I64 = TensorProto.FLOAT, TensorProto.INT64
SHAPE = [1, 2, 4, 6]


def C(name, value, dtype=np.int64):
    """A Constant node (torch and paddle2onnx write their parameters so)."""
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value, dtype), name))


def I(name, value, dtype=np.int64):
    """An initializer (tf2onnx writes its parameters so)."""
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def N(op, ins, outs, **at):
    outs = outs if isinstance(outs, list) else [outs]
    return helper.make_node(op, ins, outs, name=f"/{op}_{outs[0]}", **at)


def _model(opset, nodes, out_shapes, inits=(), extra_inputs=()):
    """x → Add(x, b) = "y" → nodes → outputs "out0", "out1", ..."""
    rng = np.random.default_rng(opset)
    b = numpy_helper.from_array(rng.standard_normal(SHAPE[1:]).astype(np.float32), "b")
    g = helper.make_graph(
        [N("Add", ["x", "b"], "y")] + nodes, "g",
        [helper.make_tensor_value_info("x", F, SHAPE)] + list(extra_inputs),
        [helper.make_tensor_value_info(f"out{k}", F, s) for k, s in enumerate(out_shapes)],
        initializer=[b] + list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7 if opset < 15 else 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _swapped_adds(graph: Graph) -> Graph:
    """The same graph with every ewadd's operands swapped (a + b → b + a)."""
    nodes = tuple(dataclasses.replace(n, inputs=n.inputs[::-1]) if n.op == "ewadd" else n
                  for n in graph.nodes)
    return dataclasses.replace(graph, nodes=nodes)


def _written_anew(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model spliced with the swapped graph: checked by onnx, equal in onnxruntime."""
    r = import_onnx(m, "m.onnx")
    out = splice(r, _swapped_adds(r.graph))
    assert out is not None
    onnx.checker.check_model(out, full_check=True)
    assert out.opset_import == m.opset_import           # the model's opset, never upgraded
    old, new = session(m), session(out)
    for seed in (0, 1):
        feeds = random_feeds(m, seed=seed)
        for a, b in zip(old.run(None, feeds), new.run(None, feeds)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    return out


def _check(m, op):
    out = _written_anew(m)
    assert any(n.op_type == op and n.name.startswith("eqsat/") for n in out.graph.node), \
        f"{op} was not written anew"
    return out


def _resize_out(scale=2):
    return [SHAPE[:2] + [SHAPE[2] * scale, SHAPE[3] * scale]]


# --------------------------------------------------------------------------- Resize / Upsample

def test_resize_10_scales_as_torch_writes_it():
    m = _model(10, [C("scales", [1, 1, 2, 2], np.float32),
                    N("Resize", ["y", "scales"], "out0", mode="nearest")], _resize_out())
    _check(m, "Resize")


@pytest.mark.parametrize("opset", [11, 12])
def test_resize_11_12_with_an_empty_roi_as_paddle2onnx_writes_it(opset):
    """PaddleOCR's text detector (paddle2onnx, opset 12): roi a Constant of shape [0]."""
    m = _model(opset, [C("roi", np.zeros(0), np.float32), C("scales", [1, 1, 2, 2], np.float32),
                       N("Resize", ["y", "roi", "scales"], "out0", mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
               _resize_out())
    out = _check(m, "Resize")
    (rs,) = [n for n in out.graph.node if n.op_type == "Resize"]
    assert all(rs.input)                   # Resize-11/12 require roi and scales: never ""


def test_resize_11_sizes_with_empty_roi_and_scales_as_torch_writes_it():
    """F.interpolate(size=...) at opset 11: roi and scales empty, sizes from a shape chain."""
    m = _model(11, [N("Shape", ["y"], "sh"), C("s0", [0]), C("e0", [2]),
                    N("Slice", ["sh", "s0", "e0"], "nc"), C("hw", [8, 12]),
                    N("Concat", ["nc", "hw"], "sizes", axis=0),
                    C("roi", np.zeros(0), np.float32), C("scales", np.zeros(0), np.float32),
                    N("Resize", ["y", "roi", "scales", "sizes"], "out0", mode="linear",
                      coordinate_transformation_mode="pytorch_half_pixel")], _resize_out())
    _check(m, "Resize")


def test_resize_11_empty_initializers_as_tf2onnx_writes_them():
    """tf2onnx: one empty float initializer for roi and scales, sizes an initializer."""
    m = _model(11, [N("Resize", ["y", "const_empty_float", "const_empty_float", "sizes"], "out0",
                      mode="linear", coordinate_transformation_mode="half_pixel",
                      exclude_outside=0, cubic_coeff_a=-0.75)], _resize_out(),
               inits=[I("const_empty_float", np.zeros(0), np.float32),
                      I("sizes", SHAPE[:2] + [8, 12])])
    _check(m, "Resize")


@pytest.mark.parametrize("opset", [13, 18, 19])
def test_resize_13_to_19_without_roi_as_torch_writes_it(opset):
    extra = ({"antialias": 0, "keep_aspect_ratio_policy": "stretch"} if opset >= 18 else {})
    mode = "half_pixel_symmetric" if opset >= 19 else "pytorch_half_pixel"
    m = _model(opset, [C("scales", [1, 1, 2, 2], np.float32),
                       N("Resize", ["y", "", "scales"], "out0", mode="linear",
                         coordinate_transformation_mode=mode, **extra)], _resize_out())
    _check(m, "Resize")


def test_resize_13_sizes_only_as_torch_writes_it():
    m = _model(13, [C("sizes", SHAPE[:2] + [8, 12]),
                    N("Resize", ["y", "", "", "sizes"], "out0", mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
               _resize_out())
    _check(m, "Resize")


def test_upsample_9_as_torch_writes_it():
    m = _model(9, [C("scales", [1, 1, 2, 2], np.float32),
                   N("Upsample", ["y", "scales"], "out0", mode="nearest")], _resize_out())
    _check(m, "Upsample")


# --------------------------------------------------------------------------- Pad

@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_11_reflect_and_edge(mode):
    """torch's ReflectionPad2d / ReplicationPad2d at opset 11: pads a Constant, no value."""
    m = _model(11, [C("pads", [0, 0, 1, 2, 0, 0, 1, 2]), N("Pad", ["y", "pads"], "out0",
                                                           mode=mode)], [[1, 2, 6, 10]])
    _check(m, "Pad")


def test_pad_18_with_axes_and_no_value():
    m = _model(18, [C("pads", [1, 2, 1, 2]), C("axes", [2, 3]),
                    N("Pad", ["y", "pads", "", "axes"], "out0", mode="reflect")], [[1, 2, 6, 10]])
    _check(m, "Pad")


def test_pad_attributes_at_opset_10_and_constant_pad_11():
    m = _model(10, [N("Pad", ["y"], "out0", mode="reflect", pads=[0, 0, 1, 1, 0, 0, 1, 1])],
               [[1, 2, 6, 8]])
    _check(m, "Pad")
    m = _model(11, [C("pads", [0, 0, 1, 1, 0, 0, 1, 1]), C("value", 0.5, np.float32),
                    N("Pad", ["y", "pads", "value"], "out0", mode="constant")], [[1, 2, 6, 8]])
    _written_anew(m)                 # mapped onto the IR's pad: written anew in opset 11


# --------------------------------------------------------------------------- Slice

def test_slice_with_steps_as_torch_writes_it():
    """x.flip(-1) and x[..., ::2] at opset 13: starts, ends, axes and steps as Constants."""
    m = _model(13, [C("st", [-1]), C("en", [-(2**63)]), C("ax", [3]), C("sp", [-1]),
                    N("Slice", ["y", "st", "en", "ax", "sp"], "out0"),
                    C("st2", [0]), C("en2", [2**63 - 1]), C("sp2", [2]),
                    N("Slice", ["y", "st2", "en2", "ax", "sp2"], "out1")],
               [SHAPE, SHAPE[:3] + [3]])
    _check(m, "Slice")


def test_slice_from_a_graph_input_and_attribute_slice():
    """Starts fed at run time (opaque) and opset-9 attributes (mapped)."""
    m = _model(11, [C("en", [3]), C("ax", [2]), N("Slice", ["y", "starts", "en", "ax"], "out0")],
               [[1, 2, 2, 6]], extra_inputs=[helper.make_tensor_value_info("starts", I64, [1])])
    r = import_onnx(m, "m.onnx", constants=None)
    assert any(n.op == "opaque" and n.attr["op"] == "Slice" for n in r.graph.nodes)
    _check(m, "Slice")
    m = _model(9, [N("Slice", ["y"], "out0", starts=[1], ends=[3], axes=[2])], [[1, 2, 2, 6]])
    _written_anew(m)


# --------------------------------------------------------------------------- Clip

def test_clip_11_min_max_as_paddle2onnx_writes_it():
    m = _model(11, [C("lo", 0.0, np.float32), C("hi", 6.0, np.float32),
                    N("Clip", ["y", "lo", "hi"], "out0")], [SHAPE])
    _check(m, "Clip")


def test_clip_13_max_only_as_torch_writes_it():
    """torch.clamp(x, max=...): Clip(x, "", max)."""
    m = _model(13, [C("hi", 0.5, np.float32), N("Clip", ["y", "", "hi"], "out0")], [SHAPE])
    out = _check(m, "Clip")
    (clip,) = [n for n in out.graph.node if n.op_type == "Clip"]
    assert clip.input[1] == ""


def test_clip_attributes_at_opset_9_and_initializers_as_tf2onnx_writes_them():
    """torch's hardtanh/relu6 at opset 9 (Clip-6 attributes); tf2onnx's relu6 at opset 12."""
    m = _model(9, [N("Clip", ["y"], "out0", min=0.0, max=6.0)], [SHAPE])
    _check(m, "Clip")
    m = _model(12, [N("Clip", ["y", "zero", "six"], "out0")], [SHAPE],
               inits=[I("zero", 0.0, np.float32), I("six", 6.0, np.float32)])
    _check(m, "Clip")


# --------------------------------------------------------------------------- Split

@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_as_torch_writes_it(opset):
    if opset < 13:
        split = [N("Split", ["y"], ["out0", "out1"], axis=3, split=[2, 4])]
    elif opset < 18:
        split = [C("sizes", [2, 4]), N("Split", ["y", "sizes"], ["out0", "out1"], axis=3)]
    else:
        split = [N("Split", ["y"], ["out0", "out1"], axis=3, num_outputs=2)]
    sizes = [3, 3] if opset >= 18 else [2, 4]
    m = _model(opset, split, [SHAPE[:3] + [s] for s in sizes])
    _written_anew(m)


def test_split_sizes_fed_at_run_time_stay_opaque():
    m = _model(13, [N("Split", ["y", "sizes"], ["out0", "out1"], axis=3)],
               [SHAPE[:3] + [3], SHAPE[:3] + [3]],
               inits=[I("sizes", [3, 3])])
    _written_anew(m)


# --------------------------------------------------------------------------- ReduceX

@pytest.mark.parametrize("op,opset,axes_as_input", [
    ("ReduceSum", 11, False), ("ReduceSum", 13, True), ("ReduceMean", 13, False),
    ("ReduceMean", 18, True), ("ReduceMax", 13, False), ("ReduceMax", 18, True),
    ("ReduceL2", 18, True), ("ReduceProd", 11, False)])
def test_reduce_with_axes_as_input_or_attribute(op, opset, axes_as_input):
    if axes_as_input:
        nodes = [C("axes", [-1]), N(op, ["y", "axes"], "out0", keepdims=1)]
    else:
        nodes = [N(op, ["y"], "out0", axes=[-1], keepdims=1)]
    m = _model(opset, nodes, [SHAPE[:3] + [1]])
    _written_anew(m)


def test_reduce_sum_13_over_everything_and_with_empty_axes():
    """torch's x.sum(): no axes; an empty axes Constant is the same (optional: written "")."""
    m = _model(13, [N("ReduceSum", ["y"], "out0", keepdims=0),
                    C("none", np.zeros(0), np.int64),
                    N("ReduceSum", ["y", "none"], "out1", keepdims=0)], [[], []])
    out = _check(m, "ReduceSum")
    for n in out.graph.node:
        if n.op_type == "ReduceSum":
            assert list(n.input)[1:] == []


# --------------------------------------------------------------------------- the .tir round trip

def test_an_empty_input_survives_the_tir_text_and_to_onnx():
    m = _model(12, [C("roi", np.zeros(0), np.float32), C("scales", [1, 1, 2, 2], np.float32),
                    N("Resize", ["y", "roi", "scales"], "out0", mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
               _resize_out())
    r = import_onnx(m, "m.onnx")
    (rs,) = [n for n in r.graph.nodes if n.op == "opaque"]
    assert list(decode_node(rs.attr).input) == ["i0", "empty:1:0", "i1"]
    g = parse(print_graph(r.graph))
    assert g == r.graph
    written = to_onnx(g, r.weights)
    onnx.checker.check_model(written, full_check=True)
    feeds = random_feeds(m, seed=0)
    want = session(m).run(None, feeds)
    got = session(written).run(None, {written.graph.input[0].name: feeds["x"]})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
