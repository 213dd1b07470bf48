"""Whole graphs in PyTorch (cost/torch_graph.py) and the GPU-truth tool's dry run on the CPU
(tools/gpu_truth.py --device-kind cpu). Skipped without PyTorch (CI has none); the CUDA paths
(graph capture, CUDA events) run only on a machine with a GPU (tools/GPU_TRUTH.md)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.cost import torch_backend

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "ir_examples"
MISSING = torch_backend.unavailable("cpu")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"torch: {MISSING}")


@pytest.mark.parametrize("model", ["tiny_mlp", "tiny_conv", "squeezenet", "mobilenetv2"])
def test_whole_graph_matches_the_interpreter(model):
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, relative_error
    from eqsat_nb.ir import interp
    from eqsat_nb.ir.parse import load
    g = load(EXAMPLES / f"{model}.tir")
    leaves = Leaves("cpu")
    tg = TorchGraph(g, leaves)
    got = tg.outputs()
    env = {k: v.numpy() for k, v in leaves.tensors.items()}
    want = [np.asarray(w, np.float64) for w in interp.run(g, env)]
    assert relative_error(want, got) < 1e-5
    assert 0 < tg.kernels <= len(list(g.compute_nodes()))


def test_weight_only_nodes_are_folded_and_leaves_shared():
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph
    from eqsat_nb.ir.builder import GraphBuilder
    b = GraphBuilder("f")
    x = b.input((2, 8))
    w1, w2 = b.weight((8, 4), "w1"), b.weight((8, 4), "w2")
    wc = b.op("concat", w1, w2, axis=1)          # weight-only: computed once, at build
    y = b.op("relu", b.op("matmul", x, wc))
    g = b.build(y)
    leaves = Leaves("cpu", weights={"w1": np.ones((8, 4), np.float32)})
    tg = TorchGraph(g, leaves)
    assert [res for _, _, res, _ in tg.steps] and tg.kernels == 2      # matmul, relu
    assert float(leaves.tensors["@w1"].sum()) == 32.0                  # the given value
    again = TorchGraph(g, leaves)
    assert again.fixed[g.inputs[0][0]] is tg.fixed[g.inputs[0][0]]    # same input tensor
    with pytest.raises(ValueError, match="shape"):
        TorchGraph(g, Leaves("cpu", weights={"w1": np.ones((3,), np.float32)}))


def _opaque(node, n_in: int, n_out: int = 1) -> str:
    """The attribute block of an opaque node holding ONNX `node` (opset 13)."""
    from eqsat_nb.ir.opaque import encode_node
    return (f'{{op = "{node.op_type}", opset = 13, onnx = '
            f'"{encode_node(node, [True] * n_in, [True] * n_out)}"}}')


def test_opaque_gathers_run_as_torch_indexing_and_weight_only_ones_are_folded():
    """Exported transformers' embedding lookups (Gather on the input ids, a negative axis and
    negative indices wrapped; GatherElements) and attention-mask guards (IsNaN, Where with a
    broadcast scalar; Cast) run on the device; a weight-only TopK runs once in onnxruntime; a
    TopK on the inference path has no lowering."""
    import onnx
    from onnx import helper

    from eqsat_nb import parse
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, relative_error
    from eqsat_nb.ir import interp
    gather = _opaque(helper.make_node("Gather", ["e", "i"], ["y"], axis=0), 2)
    gather_last = _opaque(helper.make_node("Gather", ["e", "i"], ["y"], axis=-1), 2)
    elements = _opaque(helper.make_node("GatherElements", ["e", "i"], ["y"], axis=1), 2)
    topk = _opaque(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1), 2, 2)
    isnan = _opaque(helper.make_node("IsNaN", ["x"], ["y"]), 1)
    where = _opaque(helper.make_node("Where", ["c", "x", "y"], ["z"]), 3)
    cast = _opaque(helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.INT64), 1)
    text = f"""\
func @f(%ids: tensor<2x3xi64>, %j: tensor<6x2xi64>, %x: tensor<6x4xf32>)
    -> (tensor<2x3x4xf32>, tensor<6x2xf32>, tensor<6x2xi64>, tensor<6x4xf32>, tensor<6x4xi64>) {{
  %e = weight @emb : tensor<6x4xf32>
  %k = weight @k : tensor<1xi64>
  %a = opaque(%e, %ids) {gather} : tensor<2x3x4xf32>
  %t = transpose(%e) {{perm = [1, 0]}} : tensor<4x6xf32>
  %c = opaque(%t, %ids) {gather_last} : tensor<4x2x3xf32>
  %c2 = transpose(%c) {{perm = [1, 2, 0]}} : tensor<2x3x4xf32>
  %s = ewadd(%a, %c2) : tensor<2x3x4xf32>
  %b = opaque(%x, %j) {elements} : tensor<6x2xf32>
  %v, %w = opaque(%e, %k) {topk} : tensor<6x2xf32>, tensor<6x2xi64>
  %u = ewadd(%b, %v) : tensor<6x2xf32>
  %zero = weight @zero : tensor<f32>
  %l = sqrt(%x) : tensor<6x4xf32>
  %n = opaque(%l) {isnan} : tensor<6x4xbool>
  %m = opaque(%n, %zero, %l) {where} : tensor<6x4xf32>
  %mi = opaque(%m) {cast} : tensor<6x4xi64>
  return %s, %u, %w, %m, %mi
}}
"""
    g = parse(text)
    ids = np.array([[0, 5, -1], [2, -6, 3]], np.int64)
    weights = {"emb": np.arange(24, dtype=np.float32).reshape(6, 4) / 7, "k": np.array([2]),
               "zero": np.array(0, np.float32)}
    leaves = Leaves("cpu", weights=weights)
    leaves.tensors["%ids"] = leaves.torch.as_tensor(ids)
    tg = TorchGraph(g, leaves)
    assert tg.kernels == 10             # the TopK on weights is folded, not run
    env = {k: v.numpy() for k, v in leaves.tensors.items()}
    with np.errstate(invalid="ignore"):         # sqrt of the negative entries: NaN on purpose
        want = [np.asarray(w, np.float64) for w in interp.run(g, env)]
    assert np.isnan(want[3]).sum() == 0 and (want[3] == 0).sum() > 0     # NaNs replaced
    assert relative_error(want, tg.outputs()) < 1e-6        # sqrt: an ulp apart
    on_path = parse(text.replace("opaque(%e, %k)", "opaque(%x, %k)"))
    with pytest.raises(NotImplementedError, match="opaque TopK"):
        TorchGraph(on_path, leaves)


def test_alternating_timing_on_the_cpu():
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, time_alternately
    from eqsat_nb.ir.parse import load
    leaves = Leaves("cpu")
    graphs = [TorchGraph(load(EXAMPLES / f"{m}.tir"), leaves) for m in ("tiny_mlp", "tiny_conv")]
    samples = time_alternately(graphs, "graph", rounds=4, budget_s=5)   # no GPU: eager
    assert [len(s) for s in samples] == [4, 4]
    assert all(x > 0 for s in samples for x in s)
    with pytest.raises(ValueError):
        time_alternately(graphs, "psychic")


def test_torch_cost_model_options():
    from eqsat_nb.cost.torch_backend import TorchCostModel
    with pytest.raises(ValueError, match="timing method"):
        TorchCostModel(None, device="cpu", method="guess")
    m = TorchCostModel(None, device="cpu", repeats=7, warmups=1, target_s=0.0, min_repeats=3)
    assert m.method == "cpu" and m._repeats(1.0) == 3 and m._repeats(0.0) == 3
    m.target_s = 1.0
    assert m._repeats(1e-3) == 7


def test_gpu_truth_dry_run_writes_a_table_per_precision_and_the_report(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("gpu_truth", ROOT / "tools" / "gpu_truth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "out"
    assert mod.main(["tiny_mlp", "tiny_conv", "--device-kind", "cpu", "--out", str(out),
                     "--budget", "90", "--ilp-time-limit", "2", "--rounds", "3",
                     "--target-s", "0.005", "--precisions", "fp32,tf32,bf16",
                     "--no-compile"]) == 0
    printed = capsys.readouterr().out
    assert "| tiny_mlp |" in printed and "| matmul |" in printed
    assert "torch.compile (--no-compile)" in printed
    doc = json.loads((out / "gpu_truth.json").read_text())
    assert list(doc["tables"]) == ["fp32", "tf32", "bf16"]
    t = doc["tables"]
    assert t["fp32"]["measured"] == t["fp32"]["configs"] > 5
    assert t["tf32"]["measured"] + t["tf32"]["reused"] == t["tf32"]["configs"]
    assert [r["name"] for r in doc["models"]] == ["tiny_mlp", "tiny_conv"]
    for r in doc["models"]:
        assert set(r["est"]) == {"fp32", "tf32", "bf16"}
        assert r["est"]["bf16"]["misses"] == 0
        asis = r["e2e"]["asis"]
        assert asis["check"]["ok"] and asis["original"]["us"] > 0
        assert 1e-4 < asis["check"]["rel_error"]["original"] < 0.05       # bf16 rounding
        assert set(r["kinds"]["asis"]) == {"matmul", "conv2d", "other"}
    from eqsat_nb.cost.table import load_table
    for p, name, dtype in (("fp32", "cpu-torch-measured", "f32"),
                           ("tf32", "cpu-torch-measured-tf32", "f32"),
                           ("bf16", "cpu-torch-measured-bf16", "bf16")):
        table = load_table(out / f"{name}.json")
        assert table.precision == p and table.base_profile == "cpu"
        assert {o[1] for row in table.rows for o in row["operands"]} == {dtype}
    assert (out / "gpu_truth.md").read_text().startswith("Device: cpu")


def test_a_graph_runs_in_bf16_on_bf16_leaves():
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, relative_error
    from eqsat_nb.ir.parse import load
    g = load(EXAMPLES / "tiny_conv.tir")
    ref = TorchGraph(g, Leaves("cpu", float_type="f32")).outputs()
    leaves = Leaves("cpu", float_type="bf16")
    tg = TorchGraph(g, leaves)
    assert {t.dtype for t in leaves.tensors.values()} == {leaves.torch.bfloat16}
    with leaves.torch.inference_mode():
        assert {o.dtype for o in tg.run()} == {leaves.torch.bfloat16}
    err = relative_error(ref, tg.outputs())
    assert 1e-4 < err < 0.05                    # bf16's rounding, not a wrong result


def test_a_compiled_graph_computes_what_the_graph_does():
    """torch.compile (Inductor's C++ backend on the CPU: needs a C compiler) of a small graph:
    the same outputs, a compile time, timed like the eager graph."""
    import shutil
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler for Inductor's CPU backend")
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, relative_error, time_alternately
    from eqsat_nb.ir.parse import load
    g = load(EXAMPLES / "tiny_mlp.tir")
    tg = TorchGraph(g, Leaves("cpu"))
    cg = tg.compiled()
    assert cg.compile() > 0 and set(cg.cache) == {"hit", "miss"}
    assert relative_error(tg.outputs(), cg.outputs()) < 1e-5
    samples = time_alternately([tg, cg], "loop", rounds=3, budget_s=5)
    assert [len(s) for s in samples] == [3, 3] and all(x > 0 for s in samples for x in s)
    cg.release()


def test_opaque_zoo_cnn_operators_match_onnxruntime():
    """The ONNX zoo CNNs' opaque nodes (opset 9): Softmax over the flattened dims from its
    axis, LRN, AveragePool with pads that differ at the two ends, with and without the pad
    counted: PyTorch's results against the interpreter's (onnxruntime)."""
    from onnx import helper

    from eqsat_nb import parse
    from eqsat_nb.cost.torch_graph import Leaves, TorchGraph, relative_error
    from eqsat_nb.ir import interp

    def block(node):
        from eqsat_nb.ir.opaque import encode_node
        return (f'{{op = "{node.op_type}", opset = 9, onnx = '
                f'"{encode_node(node, [True], [True])}"}}')
    softmax = block(helper.make_node("Softmax", ["x"], ["y"], axis=1))
    lrn = block(helper.make_node("LRN", ["x"], ["y"], size=3, alpha=2e-3, beta=0.7, bias=1.5))
    pool = block(helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[0, 1, 1, 2]))
    pool_in = block(helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                     strides=[2, 2], pads=[1, 0, 2, 1], count_include_pad=1))
    text = f"""\
func @f(%x: tensor<2x4x7x7xf32>)
    -> (tensor<2x4x7x7xf32>, tensor<2x4x7x7xf32>, tensor<2x4x3x4xf32>, tensor<2x4x4x3xf32>) {{
  %s = opaque(%x) {softmax} : tensor<2x4x7x7xf32>
  %l = opaque(%x) {lrn} : tensor<2x4x7x7xf32>
  %p = opaque(%x) {pool} : tensor<2x4x3x4xf32>
  %q = opaque(%x) {pool_in} : tensor<2x4x4x3xf32>
  return %s, %l, %p, %q
}}
"""
    g = parse(text)
    leaves = Leaves("cpu")
    tg = TorchGraph(g, leaves)
    env = {k: v.numpy() for k, v in leaves.tensors.items()}
    want = [np.asarray(w, np.float64) for w in interp.run(g, env)]
    got = tg.outputs()
    for w, o in zip(want, got):
        assert relative_error([w], [o]) < 1e-6
    assert tg.kernels == 4
