"""Idioms as rules (rules/idioms/idioms.rules): what exporters spell out arrives one ONNX node to
one IR node and the rules raise it to the fused op, at import (rules/graph_rewrite.py) and in the
search.

The models are built with onnx.helper node for node as torch.onnx (TorchScript and dynamo) and HF
write them: GPT-2 (LayerNorm below opset 17, NewGELUActivation's tanh form with Pow 3), Llama
(LlamaRMSNorm with Pow 2, ReduceMean, Add eps, Sqrt, Div(1, .) or Reciprocal, Mul, Mul weight;
SwiGLU's SiLU as Sigmoid and Mul), ViT (LayerNorm, GELU's erf form). Each imports to the fused ops,
agrees with onnxruntime on the original, and splices back to the input unchanged."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.ir.parse import parse
from eqsat_nb.ir.printer import print_graph
from eqsat_nb.onnx_io import import_onnx, to_onnx
from eqsat_nb.onnx_io.compare import compare, inputs_for
from eqsat_nb.onnx_io.splice import splice
from eqsat_nb.rules.graph_rewrite import idiom_rules, idioms_for_search, rewrite_graph

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)
H = 16


def W(name, *shape):
    return numpy_helper.from_array((RNG.standard_normal(shape) / np.sqrt(shape[0]))
                                   .astype(np.float32), name)


def C(name, value, dtype=np.float32, shape=None):
    """A Constant node as torch writes it (0-d unless `shape`)."""
    arr = np.asarray(value, dtype)
    if shape is not None:
        arr = arr.reshape(shape)
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))


def N(op, ins, out, **at):
    return helper.make_node(op, ins, [out], name=f"/{op}_{out}", **at)


def model(nodes, inits, opset, dims=(2, 5, H), out_dims=None):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, list(dims))],
                          [helper.make_tensor_value_info("y", F, list(out_dims or dims))],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def imported(m, ops, absent=(), rtol=1e-4, atol=1e-5):
    """Import; the fused ops are there and none of `absent`; onnxruntime agrees; the model
    splices back unchanged."""
    r = import_onnx(m, "m.onnx")
    have = [n.op for n in r.graph.nodes]
    for op in ops:
        assert op in have, (op, have)
    assert not set(absent) & set(have), have
    problems = compare(r, inputs_for(r, high=3), rtol=rtol, atol=atol)
    assert not problems, problems
    assert splice(r, r.graph) is None
    return r


def layernorm_nodes(x, out, tag, opset):
    """LayerNorm as torch.onnx writes it below opset 17."""
    ax = {"axes": [-1]} if opset < 18 else {}
    axin = [] if opset < 18 else [f"{tag}_axes"]
    nodes = [C(f"{tag}_axes", [-1], np.int64)] if opset >= 18 else []
    return nodes + [
        N("ReduceMean", [x] + axin, f"{tag}_m", **ax), N("Sub", [x, f"{tag}_m"], f"{tag}_d"),
        C(f"{tag}_two", 2.0), N("Pow", [f"{tag}_d", f"{tag}_two"], f"{tag}_d2"),
        N("ReduceMean", [f"{tag}_d2"] + axin, f"{tag}_v", **ax), C(f"{tag}_eps", 1e-5),
        N("Add", [f"{tag}_v", f"{tag}_eps"], f"{tag}_ve"), N("Sqrt", [f"{tag}_ve"], f"{tag}_s"),
        N("Div", [f"{tag}_d", f"{tag}_s"], f"{tag}_n"), N("Mul", [f"{tag}_n", f"{tag}.w"],
                                                          f"{tag}_g"),
        N("Add", [f"{tag}_g", f"{tag}.b"], out)]


def ln_weights(tag):
    return [numpy_helper.from_array(RNG.uniform(0.5, 1.5, H).astype(np.float32), f"{tag}.w"),
            W(f"{tag}.b", H)]


# ----------------------------------------------------------------------------------- GPT-2

def gpt2_mlp(opset):
    """ln_2 -> c_fc -> NewGELUActivation -> c_proj -> residual, as torch.onnx writes GPT-2."""
    nodes = layernorm_nodes("x", "ln", "ln_2", opset)
    nodes += [N("MatMul", ["ln", "fc.w"], "fc"), N("Add", ["fc", "fc.b"], "h"),
              C("half", 0.5), N("Mul", ["h", "half"], "h_half"),
              C("three", 3.0), N("Pow", ["h", "three"], "h3"),
              C("kappa", 0.044715), N("Mul", ["h3", "kappa"], "h3k"),
              N("Add", ["h", "h3k"], "inner"), C("beta", 0.7978845608028654),
              N("Mul", ["inner", "beta"], "inner_b"), N("Tanh", ["inner_b"], "t"),
              C("one", 1.0), N("Add", ["t", "one"], "t1"), N("Mul", ["h_half", "t1"], "act"),
              N("MatMul", ["act", "proj.w"], "p"), N("Add", ["p", "x"], "y")]
    inits = ln_weights("ln_2") + [W("fc.w", H, 4 * H), W("fc.b", 4 * H), W("proj.w", 4 * H, H)]
    return model(nodes, inits, opset)


@pytest.mark.parametrize("opset", [14, 18])
def test_gpt2_layernorm_and_tanh_gelu_become_fused_ops(opset):
    r = imported(gpt2_mlp(opset), ["layernorm", "gelu"],
                 absent=["ewsub", "power", "sqrt", "tanh", "shift"], rtol=1e-3, atol=1e-4)
    (g,) = [n for n in r.graph.nodes if n.op == "gelu"]
    assert g.attr["approximate"] == "tanh" and g.results[0] == r.ssa_of["act"]
    (ln,) = [n for n in r.graph.nodes if n.op == "layernorm"]
    assert ln.attr == {"axis": -1, "eps": 1e-5} and ln.results[0] == r.ssa_of["ln"]


# ----------------------------------------------------------------------------------- Llama

def llama_block(form, opset):
    """LlamaRMSNorm, then SwiGLU: down(silu(gate(h)) * up(h)). `form` "script": torch.onnx
    TorchScript (rsqrt as Div(Constant 1 of shape [1], Sqrt), Casts to float around it);
    "dynamo": Reciprocal(Sqrt), ReduceMean's axes as an input (opset 18)."""
    ax = {"axes": [-1]} if opset < 18 else {}
    axin = [] if opset < 18 else ["axes"]
    nodes = [C("axes", [-1], np.int64)] if opset >= 18 else []
    nodes += [N("Cast", ["x"], "xf", to=F), C("two", 2.0), N("Pow", ["xf", "two"], "x2"),
              N("ReduceMean", ["x2"] + axin, "ms", **ax), C("eps", 1e-6),
              N("Add", ["ms", "eps"], "mse"), N("Sqrt", ["mse"], "rms")]
    if form == "script":
        nodes += [C("one", [1.0], shape=(1,)), N("Div", ["one", "rms"], "inv")]
    else:
        nodes += [N("Reciprocal", ["rms"], "inv")]
    nodes += [N("Mul", ["xf", "inv"], "normed"), N("Cast", ["normed"], "normed_t", to=F),
              N("Mul", ["norm.w", "normed_t"], "h"),
              N("MatMul", ["h", "gate.w"], "gate"), N("Sigmoid", ["gate"], "gate_s"),
              N("Mul", ["gate", "gate_s"], "silu"), N("MatMul", ["h", "up.w"], "up"),
              N("Mul", ["silu", "up"], "gu"), N("MatMul", ["gu", "down.w"], "y")]
    inits = [numpy_helper.from_array(RNG.uniform(0.5, 1.5, H).astype(np.float32), "norm.w"),
             W("gate.w", H, 3 * H), W("up.w", H, 3 * H), W("down.w", 3 * H, H)]
    return model(nodes, inits, opset)


@pytest.mark.parametrize("form, opset", [("script", 14), ("script", 17), ("dynamo", 18)])
def test_llama_rmsnorm_and_silu_become_fused_ops(form, opset):
    r = imported(llama_block(form, opset), ["rmsnorm", "silu"],
                 absent=["power", "sqrt", "reciprocal", "sigmoid", "shift", "opaque"])
    (n,) = [n for n in r.graph.nodes if n.op == "rmsnorm"]
    assert n.attr == {"axis": -1, "eps": 1e-6} and n.results[0] == r.ssa_of["h"]


NEEDS_OPSET_23 = pytest.mark.skipif(
    onnx.defs.onnx_opset_version() < 23,
    reason=f"onnx {onnx.__version__} knows opsets up to {onnx.defs.onnx_opset_version()}; "
           "RMSNormalization is opset 23")


@NEEDS_OPSET_23
def test_rmsnormalization_op_imports_and_exports():
    nodes = [N("RMSNormalization", ["x", "g"], "y", axis=-1, epsilon=1e-6)]
    m = model(nodes, [W("g", H)], 23)
    r = imported(m, ["rmsnorm"], absent=["opaque"])
    for opset in (17, 23):              # decomposed below 23, the op from 23
        back = import_onnx(to_onnx(r.graph, r.weights, opset=opset))
        assert [n.op for n in back.graph.nodes if n.op != "weight"] == ["rmsnorm"]


# ----------------------------------------------------------------------------------- ViT

def vit_block(opset):
    """norm1 -> qkv -> (attention) -> proj + x -> norm2 -> fc1 -> GELU (erf) -> fc2 + residual,
    as torch.onnx writes timm's ViT below opset 17 (attention reduced to its projections)."""
    nodes = layernorm_nodes("x", "n1", "norm1", opset)
    nodes += [N("MatMul", ["n1", "qkv.w"], "qkv"), N("MatMul", ["qkv", "proj.w"], "a"),
              N("Add", ["a", "x"], "r1")]
    nodes += layernorm_nodes("r1", "n2", "norm2", opset)
    nodes += [N("MatMul", ["n2", "fc1.w"], "f1"), C("sqrt2", 1.4142135381698608),
              N("Div", ["f1", "sqrt2"], "gd"), N("Erf", ["gd"], "ge"), C("one", 1.0),
              N("Add", ["ge", "one"], "ga"), N("Mul", ["f1", "ga"], "gm"), C("half", 0.5),
              N("Mul", ["gm", "half"], "gelu"), N("MatMul", ["gelu", "fc2.w"], "f2"),
              N("Add", ["f2", "r1"], "y")]
    inits = ln_weights("norm1") + ln_weights("norm2") + [
        W("qkv.w", H, H), W("proj.w", H, H), W("fc1.w", H, 4 * H), W("fc2.w", 4 * H, H)]
    return model(nodes, inits, opset)


@pytest.mark.parametrize("opset", [13, 14])
def test_vit_block_layernorms_and_erf_gelu_become_fused_ops(opset):
    r = imported(vit_block(opset), ["layernorm", "gelu"],
                 absent=["ewsub", "erf", "divide", "sqrt", "power"], rtol=1e-3, atol=1e-4)
    assert sum(n.op == "layernorm" for n in r.graph.nodes) == 2
    (g,) = [n for n in r.graph.nodes if n.op == "gelu"]
    assert g.attr["approximate"] == "none" and g.results[0] == r.ssa_of["gelu"]


# ----------------------------------------------------------------------------------- spellings

@pytest.mark.parametrize("swap", [False, True])
def test_either_operand_order_of_add_and_mul(swap):
    """Exporters write Add(1, e) and Mul(0.5, x) too: at import either order matches."""
    def o(a, b):
        return [b, a] if swap else [a, b]
    nodes = [C("sqrt2", 1.4142135381698608), N("Div", ["x", "sqrt2"], "d"), N("Erf", ["d"], "e"),
             C("one", 1.0), N("Add", o("e", "one"), "a"), N("Mul", o("x", "a"), "m"),
             C("half", 0.5), N("Mul", o("m", "half"), "y")]
    imported(model(nodes, [], 13), ["gelu"], absent=["erf"])
    nodes = [N("Sigmoid", ["x"], "s"), N("Mul", o("s", "x"), "y")]
    imported(model(nodes, [], 13), ["silu"], absent=["sigmoid"])


def test_float64_gelu():
    nodes = [C("sqrt2", np.sqrt(2.0), np.float64), N("Div", ["x", "sqrt2"], "d"),
             N("Erf", ["d"], "e"), C("one", 1.0, np.float64), N("Add", ["e", "one"], "a"),
             N("Mul", ["x", "a"], "m"), C("half", 0.5, np.float64), N("Mul", ["m", "half"], "y")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE,
                                                                     [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    r = import_onnx(m)
    assert [n.op for n in r.graph.nodes] == ["gelu"]


def test_an_idiom_whose_inner_value_is_read_elsewhere_stays_decomposed_at_import():
    """The erf value is also a graph output: raising would drop it, so the import keeps the
    primitives (the search may still raise it: test_search_raises_what_import_could_not)."""
    nodes = [C("sqrt2", 1.4142135381698608), N("Div", ["x", "sqrt2"], "d"), N("Erf", ["d"], "e"),
             C("one", 1.0), N("Add", ["e", "one"], "a"), N("Mul", ["x", "a"], "m"),
             C("half", 0.5), N("Mul", ["m", "half"], "y")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3, 4])],
                          [helper.make_tensor_value_info("y", F, [3, 4]),
                           helper.make_tensor_value_info("e", F, [3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    r = import_onnx(m)
    assert [n.op for n in r.graph.nodes] == ["divide", "erf", "shift", "ewmul", "scale"]
    assert splice(r, r.graph) is None


def test_one_to_one_scalar_forms():
    """Add/Div/Pow with a one-element constant keep the value as an attribute; Div(1, x) is
    reciprocal; Sub and Div of tensors broadcast explicitly."""
    nodes = [C("c", 3.0), N("Add", ["x", "c"], "a"), N("Div", ["a", "c"], "b"),
             C("two", 2, np.int64), N("Pow", ["b", "two"], "p"), C("one", [1.0], shape=(1,)),
             N("Div", ["one", "p"], "q"), N("ReduceMean", ["q"], "m", axes=[-1]),
             N("Sub", ["q", "m"], "s"), N("Div", ["s", "x"], "y")]
    r = imported(model(nodes, [], 14, dims=(3, 4)), [], absent=["opaque"])
    assert [n.op for n in r.graph.nodes] == ["shift", "divide", "power", "reciprocal",
                                             "reduce_mean", "broadcast", "ewsub", "ewdiv"]
    assert [n.attr["value"] for n in r.graph.nodes[:3]] == [3.0, 3.0, 2.0]


# ----------------------------------------------------------------------------------- the search

def test_search_raises_what_import_could_not():
    """A decomposed LayerNorm in a .tir file (or an idiom with a value read elsewhere) is raised
    in the e-graph; extraction takes the fused op (cheaper) and the result is verified."""
    from eqsat_nb.check_outputs import verify_graphs
    from eqsat_nb.cost.analytic import AnalyticCostModel
    from eqsat_nb.optimize import Options, optimize
    from eqsat_nb.rules.parse import load_rules
    from eqsat_nb.search.limits import Limits

    g = parse("""
func @ln(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %g = weight @g : tensor<8xf32>
  %b = weight @b : tensor<8xf32>
  %m = reduce_mean(%x) {axes = [-1]} : tensor<4x1xf32>
  %mb = broadcast(%m) {shape = [4, 8]} : tensor<4x8xf32>
  %d = ewsub(%x, %mb) : tensor<4x8xf32>
  %d2 = power(%d) {value = 2.0} : tensor<4x8xf32>
  %v = reduce_mean(%d2) {axes = [-1]} : tensor<4x1xf32>
  %ve = shift(%v) {value = 1e-5} : tensor<4x1xf32>
  %s = sqrt(%ve) : tensor<4x1xf32>
  %sb = broadcast(%s) {shape = [4, 8]} : tensor<4x8xf32>
  %n = ewdiv(%d, %sb) : tensor<4x8xf32>
  %gb = broadcast(%g) {shape = [4, 8]} : tensor<4x8xf32>
  %ng = ewmul(%n, %gb) : tensor<4x8xf32>
  %bb = broadcast(%b) {shape = [4, 8]} : tensor<4x8xf32>
  %y = ewadd(%ng, %bb) : tensor<4x8xf32>
  %e = sigmoid(%y) : tensor<4x8xf32>
  %z = ewmul(%y, %e) : tensor<4x8xf32>
  return %z, %d
}
""")
    rules = load_rules() + idioms_for_search(g, load_rules())
    assert {r.name for r in idioms_for_search(g, load_rules())} >= {"layernorm_pow", "silu"}
    res = optimize(g, AnalyticCostModel("a100"), rules,
                   Options(limits=Limits(iter_limit=4, node_limit=5000), extract="greedy"))
    ops = [n.op for n in res.optimized.nodes]
    assert "layernorm" in ops and "silu" in ops and "ewsub" in ops, ops    # %d is an output
    assert res.rules_fired.get("layernorm_pow") and res.rules_fired.get("silu")
    assert verify_graphs(g, res.optimized).ok


# ----------------------------------------------------------------------------------- round trips

FUSED = """
func @f(%x: tensor<2x3x8xf32>) -> tensor<2x3x8xf32> {
  %g = weight @g : tensor<8xf32>
  %b = weight @b : tensor<8xf32>
  %0 = layernorm(%x, %g, %b) {eps = 1e-5} : tensor<2x3x8xf32>
  %1 = gelu(%0) {approximate = "tanh"} : tensor<2x3x8xf32>
  %2 = rmsnorm(%1, %g) {eps = 1e-6} : tensor<2x3x8xf32>
  %3 = silu(%2) : tensor<2x3x8xf32>
  %4 = gelu(%3) : tensor<2x3x8xf32>
  return %4
}
"""


@pytest.mark.parametrize("opset", [13, 17, 18, 21, pytest.param(23, marks=NEEDS_OPSET_23)])
def test_fused_ops_round_trip_through_onnx_at_every_opset(opset):
    """Below the opset of an op's ONNX form the decomposition is written; it imports back to the
    same graph (`.tir -> .onnx -> .tir` is the identity)."""
    g = parse(FUSED)
    m = to_onnx(g, opset=opset)
    onnx.checker.check_model(m, full_check=True)
    r = import_onnx(m)
    assert print_graph(r.graph) == print_graph(g)
    assert not compare(r, inputs_for(r), rtol=1e-4, atol=1e-5)


def test_decomposed_forms_written_are_the_ones_onnxruntime_fuses(tmp_path):
    """onnxruntime's optimizer (CPU) turns the decompositions the exporter writes below the ops'
    opsets back into LayerNormalization, SimplifiedLayerNormalization (RMSNorm), Gelu and
    QuickGelu (SiLU); the fused op never makes a model slower than its decomposed form."""
    import onnxruntime as ort
    g = parse(FUSED.replace(' {approximate = "tanh"}', ""))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(to_onnx(g, opset=14).SerializeToString(), so,
                         providers=["CPUExecutionProvider"])
    got = [n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node]
    assert got == ["LayerNormalization", "Gelu", "SimplifiedLayerNormalization", "QuickGelu",
                   "Gelu"], got


def test_rewrite_graph_reports_what_fired():
    g = import_onnx(vit_block(14)).graph
    again, fired = rewrite_graph(g, idiom_rules())
    assert again is g and not fired        # already raised at import: nothing left
    assert {r.name for r in idiom_rules()} >= {"gelu_erf_div", "layernorm_pow", "silu",
                                               "rmsnorm_rsqrt", "gelu_tanh"}


def test_idiom_rules_verify_and_join_the_search_only_where_they_can_match():
    from eqsat_nb.ir.parse import load
    from eqsat_nb.resources import data_dir
    from eqsat_nb.rules.parse import load_rules
    from eqsat_nb.rules.verify import verify_rules

    bad = [v for v in verify_rules(idiom_rules()) if not v.ok]
    assert not bad, [(v.rule.name, v.problems) for v in bad]
    assert all(r.file.endswith("idioms/idioms.rules") for r in idiom_rules())
    # not in the default rule set (.tir searches stay TASO's); for an imported graph only those
    # whose primitives it holds: none for BERT and ViT, SiLU's for NasRNN's sigmoid gates
    assert not {r.name for r in idiom_rules()} & {r.name for r in load_rules()}
    for name, want in (("bert", []), ("vit_base", []), ("nasrnn", ["silu"])):
        g = load(data_dir("ir_examples") / f"{name}.tir")
        assert [r.name for r in idioms_for_search(g, load_rules())] == want
