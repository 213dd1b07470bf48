"""ONNX export: `.tir → .onnx → .tir` is the identity on every example, exported models pass the
full checker, and small examples compute in onnxruntime what the interpreter computes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from eqsat_nb import load, parse, print_graph
from eqsat_nb.errors import TirError
from eqsat_nb.ir.interp import random_env, run
from eqsat_nb.onnx_io import from_onnx, load_onnx, save_onnx, to_onnx

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "ir_examples").glob("*.tir"))
SMALL = ("tiny_branches", "tiny_conv", "tiny_mlp", "squeezenet")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_roundtrip_is_identity_and_checker_passes(path):
    graph = load(path)
    # weights as inputs: the structure without gigabytes of random weights (ViT-Huge has 2.5 GB)
    model = to_onnx(graph, weights_as_inputs=True)
    onnx.checker.check_model(model, full_check=True)
    back, weights = from_onnx(model, str(path))
    assert print_graph(back) == print_graph(graph)
    assert weights == {}


@pytest.mark.parametrize("name", SMALL)
def test_small_examples_run_in_onnxruntime(name, tmp_path):
    graph = load(EXAMPLES[[p.stem for p in EXAMPLES].index(name)])
    out = tmp_path / f"{name}.onnx"
    save_onnx(graph, out, seed=4)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    env = random_env(graph, seed=4)
    want = run(graph, env)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(None, {v[1:]: env[v] for v, _ in graph.inputs})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())
    back, weights = load_onnx(out)          # with real weight values: the same graph and numbers
    assert print_graph(back) == print_graph(graph)
    again = run(back, {**{v: env[v] for v, _ in graph.inputs},
                       **{"@" + k: v for k, v in weights.items()}})
    for a, w in zip(again, want):
        np.testing.assert_array_equal(a, w)


OPS = """\
func @ops(%x: tensor<1x4x8x8xf32>, %m: tensor<2x3x5xf32>) -> (tensor<1x4x8x8xf32>, tensor<2x3x5xf32>, tensor<1x4x4x4xf32>, tensor<2x3x1xf32>, tensor<1x4x1x2xf32>, tensor<2x3x9xf32>) {
  %w = weight @w : tensor<4x2x3x3xf32>
  %0 = conv2d(%x, %w) {stride = [1, 1], pad = [1, 1, 1, 2], act = "tanh"} : tensor<1x4x8x9xf32>
  %1 = slice(%0) {axes = [3], starts = [1], ends = [9]} : tensor<1x4x8x8xf32>
  %2 = scale(%1) {value = 0.1020620726159658} : tensor<1x4x8x8xf32>
  %s = weight @s : tensor<4xf32>
  %b = weight @b : tensor<4xf32>
  %mu = weight @mu : tensor<4xf32>
  %v = weight @v : tensor<4xf32>
  %3 = batchnorm(%2, %s, %b, %mu, %v) {eps = 0.001} : tensor<1x4x8x8xf32>
  %4 = gelu(%3) : tensor<1x4x8x8xf32>
  %5 = dropout(%4) {ratio = 0.1} : tensor<1x4x8x8xf32>
  %6 = softmax(%m) {axis = 1} : tensor<2x3x5xf32>
  %7 = poolmax(%x) {kernel = [3, 3], stride = [2, 2], act = "sigmoid"} : tensor<1x4x4x4xf32>
  %8 = reduce_mean(%m) {axes = [2]} : tensor<2x3x1xf32>
  %9 = poolavg(%x) {kernel = [5, 5], stride = [4, 3], pad = "valid"} : tensor<1x4x1x2xf32>
  %10 = pad(%m) {pads = [0, 0, 1, 0, 0, 3], value = 0.25} : tensor<2x3x9xf32>
  return %5, %6, %7, %8, %9, %10
}
"""


@pytest.mark.parametrize("opset", [None, 18])
def test_every_op_form_roundtrips_and_runs(opset):
    graph = parse(OPS)
    model = to_onnx(graph, seed=1, opset=opset)
    onnx.checker.check_model(model, full_check=True)
    assert print_graph(from_onnx(model)[0]) == print_graph(graph)
    env = random_env(graph, seed=1)
    want = run(graph, env)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": env["%x"], "m": env["%m"]})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())


def test_given_weights_are_used_and_checked():
    graph = parse(OPS)
    w = np.full((4, 2, 3, 3), 0.5, np.float32)
    model = to_onnx(graph, {"w": w})
    init = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(init["w"], w)
    np.testing.assert_array_equal(init["s"], random_env(graph)["@s"])
    with pytest.raises(TirError, match="weight @w has shape"):
        to_onnx(graph, {"w": np.zeros((1, 2))})


def test_weight_transforms_fold_or_become_onnx_ops():
    text = """\
func @t(%x: tensor<1x4x6x6xf32>) -> (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) {
  %w = weight @w : tensor<4x2x1x1xf32>
  %r = weight @r : tensor<4x2x3x3xf32>
  %e = enlarge(%w, %r) : tensor<4x2x3x3xf32>
  %m = merge(%e) {count = 2, groups = 2} : tensor<4x4x3x3xf32>
  %y = conv2d(%x, %m) : tensor<1x4x6x6xf32>
  %z = merge(%r) {count = 2, groups = 2} : tensor<4x4x3x3xf32>
  return %y, %z
}
"""
    graph = parse(text)
    env = random_env(graph, seed=2)
    want = run(graph, env)
    for as_inputs in (False, True):
        model = to_onnx(graph, seed=2, weights_as_inputs=as_inputs)
        onnx.checker.check_model(model, full_check=True)
        feeds = {"x": env["%x"]}
        if as_inputs:                      # unfolded: Pad and Split+Pad+Concat in ONNX
            feeds |= {"w": env["@w"], "r": env["@r"]}
        got = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
