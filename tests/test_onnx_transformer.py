"""Transformer and LLM idioms as torch.onnx writes them, built with onnx.helper node for node (CI
has no torch): a Linear on a [B, S, H] activation (MatMul on the rank-2 initializer, then
Add(bias, MatMul)), a Linear on a 2-D input (Gemm, transB = 1), torch's scaled-dot-product
attention (Q and Kᵀ each multiplied by sqrt(scale)) and HF's eager form (Div by sqrt(d) after
QKᵀ), grouped-query attention's repeat of K/V heads (Unsqueeze, Expand, Reshape) and a SwiGLU MLP
(Sigmoid * x, times up). Each imports, `run --device a100` merges its projections (rules/
transformer.rules), the written model is valid and equal to the input in onnxruntime."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.cli import main
from eqsat_nb.onnx_io import import_onnx
from eqsat_nb.onnx_io.compare import compare, inputs_for

F = TensorProto.FLOAT
S, H, HEADS, D = 8, 64, 4, 16       # sequence, hidden, heads, head dim (sqrt(D) = 4: exact)


class _Net:
    """Nodes, initializers and value names of one model under construction."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.k = 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"/{base}_{self.k}_output_0"

    def init(self, name: str, shape, scale: float | None = None, value=None) -> str:
        if value is None:
            scale = 1 / np.sqrt(shape[0]) if scale is None else scale
            value = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def const(self, value, dtype=np.int64) -> str:
        out = self.name("Constant")
        self.nodes.append(helper.make_node("Constant", [], [out], name=out[:-9],
                                           value=numpy_helper.from_array(
                                               np.asarray(value, dtype), out + "_v")))
        return out

    def op(self, op: str, ins: list[str], **attrs) -> str:
        out = self.name(op)
        self.nodes.append(helper.make_node(op, ins, [out], name=out[:-9], **attrs))
        return out

    def linear(self, x: str, prefix: str, n_in: int, n_out: int, bias: bool = True) -> str:
        """torch.onnx (TorchScript) for nn.Linear on a rank-3 input: MatMul on the transposed
        weight stored as an initializer, then Add(bias, MatMul)."""
        y = self.op("MatMul", [x, self.init(f"onnx::MatMul_{prefix}", (n_in, n_out))])
        if bias:
            y = self.op("Add", [self.init(f"{prefix}.bias", (n_out,), 0.1), y])
        return y

    def heads(self, y: str, n_heads: int) -> str:
        """[1, S, n*D] → [1, n, S, D]: Reshape (shape as a Constant), Transpose."""
        r = self.op("Reshape", [y, self.const([1, S, n_heads, D])])
        return self.op("Transpose", [r], perm=[0, 2, 1, 3])

    def model(self, inputs, outputs, opset: int = 17):
        g = helper.make_graph(self.nodes, "g", inputs, outputs, initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m


def _vi(name, dims):
    return helper.make_tensor_value_info(name, F, dims)


def attention(form: str = "sdpa", kv_heads: int = HEADS, bias: bool = True, opset: int = 17):
    """One self-attention block. form "sdpa": torch's scaled_dot_product_attention export (Q
    times sqrt(scale), K transposed [0, 2, 3, 1] times sqrt(scale), MatMul, Softmax, MatMul);
    "eager": HF's BERT (K transposed [0, 1, 3, 2] after the head split, MatMul, Div by sqrt(D)).
    kv_heads < HEADS: grouped-query attention, K and V repeated as torch writes repeat_kv."""
    n = _Net()
    x = "hidden_states"
    q = n.heads(n.linear(x, "q", H, HEADS * D, bias), HEADS)
    k_lin = n.linear(x, "k", H, kv_heads * D, bias)
    v_lin = n.linear(x, "v", H, kv_heads * D, bias)

    def repeat_kv(t: str) -> str:
        if kv_heads == HEADS:
            return t
        rep = HEADS // kv_heads
        u = n.op("Unsqueeze", [t, n.const([2])])
        e = n.op("Expand", [u, n.const([1, kv_heads, rep, S, D])])
        return n.op("Reshape", [e, n.const([1, HEADS, S, D])])

    v = repeat_kv(n.heads(v_lin, kv_heads))
    if form == "sdpa":
        k = repeat_kv(n.heads(k_lin, kv_heads))
        kt = n.op("Transpose", [k], perm=[0, 1, 3, 2])
        root = n.init("sqrt_scale", (), value=np.float32(np.sqrt(1 / np.sqrt(D))))
        qs = n.op("Mul", [q, root])
        ks = n.op("Mul", [kt, root])
        scores = n.op("MatMul", [qs, ks])
    else:
        k = repeat_kv(n.heads(k_lin, kv_heads))
        kt = n.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = n.op("Div", [n.op("MatMul", [q, kt]), n.const(np.sqrt(D), np.float32)])
    p = n.op("Softmax", [scores], axis=-1)
    ctx = n.op("Transpose", [n.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    ctx = n.op("Reshape", [ctx, n.const([1, S, HEADS * D])])
    out = n.linear(ctx, "o", HEADS * D, H, bias)
    n.nodes[-1].output[0] = "out"
    return n.model([_vi(x, [1, S, H])], [_vi("out", [1, S, H])], opset)


def swiglu(silu: str = "sigmoid_mul"):
    """Llama's MLP: down(silu(gate(x)) * up(x)), no biases; SiLU written as x * Sigmoid(x)
    (torch.onnx) or Sigmoid(x) * x."""
    n = _Net(1)
    x = "x"
    g = n.linear(x, "gate", H, 3 * H, bias=False)
    u = n.linear(x, "up", H, 3 * H, bias=False)
    sg = n.op("Sigmoid", [g])
    a = n.op("Mul", [g, sg] if silu == "sigmoid_mul" else [sg, g])
    y = n.linear(n.op("Mul", [a, u]), "down", 3 * H, H, bias=False)
    n.nodes[-1].output[0] = "y"
    return n.model([_vi(x, [1, S, H])], [_vi("y", [1, S, H])])


def gemm_linears(opset: int = 13):
    """Three Linears on one 2-D input as torch.onnx writes nn.Linear there: Gemm(x, W, b,
    transB = 1) with W stored [out, in]; their sum is the output."""
    n = _Net(2)
    ys = [n.op("Gemm", ["x", n.init(f"l{i}.weight", (w, H), 1 / np.sqrt(H)),
                        n.init(f"l{i}.bias", (w,), 0.1)], alpha=1.0, beta=1.0, transB=1)
          for i, w in enumerate((H, H // 2, H // 2))]
    z = n.op("Concat", ys, axis=1)
    n.nodes[-1].output[0] = "z"
    return n.model([_vi("x", [S, H])], [_vi("z", [S, 2 * H])], opset)


def _run(tmp_path, model, *extra):
    src, out, rep = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "--device", "a100",
                 "--no-measure", "-q", *extra]) == 0
    got = onnx.load(str(out))
    onnx.checker.check_model(got, full_check=True)
    # the written model against the input in onnxruntime (run checked it too)
    r = import_onnx(model, "m.onnx")
    feeds = inputs_for(r, high=3)
    import onnxruntime as ort
    a = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    b = ort.InferenceSession(got.SerializeToString()).run(None, feeds)
    for x, y in zip(a, b):
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(x).max()))
    return got, json.loads(rep.read_text())


def _ops(m):
    return [n.op_type for n in m.graph.node]


def _weight_only(m, v):
    consts = {t.name for t in m.graph.initializer}
    producers = {o: n for n in m.graph.node for o in n.output}
    n = producers.get(v)
    return v in consts or (n is not None and all(_weight_only(m, i) for i in n.input if i))


def _sources(m, v):
    """The initializers a weight-only value is computed from."""
    consts = {t.name for t in m.graph.initializer}
    producers = {o: n for n in m.graph.node for o in n.output}
    if v in consts:
        return {v}
    n = producers.get(v)
    return set().union(*(_sources(m, i) for i in n.input if i)) if n else set()


def _merged_projection(got, x, weights):
    """The one MatMul that reads activation `x`: its weight is built from all `weights`; one
    Split cuts its result."""
    mms = [n for n in got.graph.node if n.op_type == "MatMul" and n.input[0] == x]
    assert len(mms) == 1, [list(n.input) for n in mms]
    assert _weight_only(got, mms[0].input[1])
    assert set(weights) <= _sources(got, mms[0].input[1])
    splits = [n for n in got.graph.node if n.op_type == "Split"]
    assert len(splits) == 1, "a split of a split is written as one Split"
    return mms[0], splits[0]


@pytest.mark.parametrize("bias", [True, False])
def test_qkv_projections_merge_into_one_matmul_and_split(tmp_path, bias):
    m = attention("eager", bias=bias)
    got, rep = _run(tmp_path, m)
    mm, split = _merged_projection(got, "hidden_states",
                                   ["onnx::MatMul_q", "onnx::MatMul_k", "onnx::MatMul_v"])
    assert len(split.output) >= 3
    ops = _ops(got)
    assert "Expand" not in ops
    if bias:                # the merged bias: one Add of the concatenated bias vectors
        add = next(n for n in got.graph.node if n.op_type == "Add" and mm.output[0] in n.input)
        b = next(i for i in add.input if i != mm.output[0])
        assert _sources(got, b) >= {"q.bias", "k.bias", "v.bias"}
        shapes = {t.name: t.dims for t in got.graph.initializer}
        assert all(len(shapes[v]) == 1 for v in _sources(got, b))     # vectors, broadcast
    assert rep["speedup_pct"] > 0
    assert "merge_projections" in " ".join(rep["rules_fired"])


@pytest.mark.parametrize("bias", [True, False])
def test_sdpa_scales_fold_or_merge(tmp_path, bias):
    """torch's SDPA export scales Q and Kᵀ by sqrt(scale) each. A scale folded into K's weight
    and the merge of K with Q and V are alternatives here (the merges are multi-pattern rules,
    which run in the first iterations, before the scale has reached the weight): the cost model
    picks one; either way at most two MatMuls read the activation, they read every projection
    weight, and no Mul is added."""
    m = attention("sdpa", bias=bias)
    got, rep = _run(tmp_path, m)
    mms = [n for n in got.graph.node if n.op_type == "MatMul" and n.input[0] == "hidden_states"]
    assert 1 <= len(mms) <= 2
    assert set().union(*(_sources(got, n.input[1]) for n in mms)) >= {
        "onnx::MatMul_q", "onnx::MatMul_k", "onnx::MatMul_v"}
    act_muls = [n for n in got.graph.node if n.op_type == "Mul"
                and not all(_weight_only(got, i) for i in n.input)]
    assert len(act_muls) <= 2
    assert rep["speedup_pct"] > 0


def test_a_scale_after_a_projection_folds_into_its_weight(tmp_path):
    """(x @ W + b) * 0.5 → x @ (0.5 W) + 0.5 b: the Mul runs on weights only."""
    n = _Net(3)
    y = n.op("Mul", [n.linear("x", "p", H, H), n.const(0.5, np.float32)])
    n.op("Relu", [y])
    n.nodes[-1].output[0] = "y"
    m = n.model([_vi("x", [1, S, H])], [_vi("y", [1, S, H])])
    got, rep = _run(tmp_path, m)
    muls = [x for x in got.graph.node if x.op_type == "Mul"]
    assert muls and all(all(_weight_only(got, i) for i in x.input) for x in muls)
    assert rep["speedup_pct"] > 0


def test_gqa_unequal_widths_merge(tmp_path):
    m = attention("eager", kv_heads=2, bias=False)
    got, _ = _run(tmp_path, m)
    _, split = _merged_projection(got, "hidden_states",
                                  ["onnx::MatMul_q", "onnx::MatMul_k", "onnx::MatMul_v"])
    sizes = next(numpy_helper.to_array(n.attribute[0].t) for n in got.graph.node
                 if n.op_type == "Constant" and n.output[0] == split.input[1])
    assert sum(sizes) >= HEADS * D + 2 * 2 * D and 2 * D in sizes.tolist()
    assert _ops(got).count("Expand") == 2                            # repeat_kv kept


@pytest.mark.parametrize("silu", ["sigmoid_mul", "mul_sigmoid"])
def test_swiglu_gate_and_up_merge(tmp_path, silu):
    m = swiglu(silu)
    got, rep = _run(tmp_path, m)
    _merged_projection(got, "x", ["onnx::MatMul_gate", "onnx::MatMul_up"])
    assert _ops(got).count("MatMul") == 2                            # gate+up, down


@pytest.mark.parametrize("opset", [11, 13])
def test_gemm_linears_on_a_2d_input_merge_in_the_models_opset(tmp_path, opset):
    m = gemm_linears(opset)
    got, _ = _run(tmp_path, m)
    assert [o.version for o in got.opset_import] == [opset]
    # Gemm's weights are stored [out, in]: the importer's transposed copies are written
    mm, split = _merged_projection(got, "x", [f"eqsat/l{i}.weight_T" for i in range(3)])
    if opset < 13:                      # sizes as an attribute before opset 13, then an input
        assert len(split.input) == 1 and "split" in [a.name for a in split.attribute]
    else:
        assert len(split.input) == 2
    assert len(split.output) == 3
    assert _ops(got).count("Gemm") == 0


def test_idioms_import_and_match_onnxruntime():
    for m in (attention("sdpa"), attention("eager"), attention("sdpa", kv_heads=2), swiglu(),
              gemm_linears()):
        r = import_onnx(m, "m.onnx")
        assert not compare(r, inputs_for(r, high=3), rtol=1e-4, atol=1e-5)
        assert not [n for n in r.graph.nodes if n.op == "opaque"]


def test_scales_fold_into_a_merged_projection(tmp_path):
    """Q and K scaled (as SDPA does), all three projections merged: the scales end in the merged
    weight, none on an activation (the fold reaches a part of the merged projection; its other
    parts join the projections they equal, since the search completes every new split's
    results)."""
    from eqsat_nb.ir.parse import load
    tir = tmp_path / "q.tir"
    tir.write_text("""func @q(%x: tensor<1x8x64xf32>) -> tensor<1x8x64xf32> {
  %wq = weight @wq : tensor<64x64xf32>
  %wk = weight @wk : tensor<64x64xf32>
  %wv = weight @wv : tensor<64x64xf32>
  %q = matmul(%x, %wq) : tensor<1x8x64xf32>
  %k = matmul(%x, %wk) : tensor<1x8x64xf32>
  %v = matmul(%x, %wv) : tensor<1x8x64xf32>
  %qs = scale(%q) {value = 0.5} : tensor<1x8x64xf32>
  %ks = scale(%k) {value = 0.5} : tensor<1x8x64xf32>
  %a = ewmul(%qs, %ks) : tensor<1x8x64xf32>
  %b = ewmul(%a, %v) : tensor<1x8x64xf32>
  return %b
}
""")
    out = tmp_path / "o.tir"
    assert main(["run", str(tir), "--device", "a100", "-q", "-o", str(out)]) == 0
    g = load(out)
    ops = [n.op for n in g.compute_nodes()]
    assert ops.count("matmul") == 1
    weight_only = {n.results[0] for n in g.weights()}
    for n in g.compute_nodes():
        if all(v in weight_only for v in n.inputs):
            weight_only.update(n.results)
    assert all(n.inputs[0] in weight_only for n in g.compute_nodes() if n.op == "scale")
