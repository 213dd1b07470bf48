"""Opaque nodes: text form, checks, interpreter (onnxruntime), e-graph round trip, export."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from eqsat_nb import parse, print_graph
from eqsat_nb.egraph import egraph_to_graph, graph_to_egraph, original_choice
from eqsat_nb.egraph.serialize import from_json, to_json
from eqsat_nb.errors import TirError
from eqsat_nb.ir.interp import run
from eqsat_nb.ir.opaque import encode_node
from eqsat_nb.onnx_io import from_onnx, to_onnx

TOPK = encode_node(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1), [True, True],
                   [True, True])
TEXT = f"""\
func @f(%x: tensor<2x5xf32>, %k: tensor<1xi64>) -> (tensor<2x3xf32>, tensor<2x3xi64>) {{
  %r = relu(%x) : tensor<2x5xf32>
  %v, %i = opaque(%r, %k) {{op = "TopK", opset = 13, onnx = "{TOPK}"}} : tensor<2x3xf32>, tensor<2x3xi64>
  %s = sigmoid(%v) : tensor<2x3xf32>
  return %s, %i
}}
"""
X = np.array([[3, -1, 7, 2, 5], [0, 9, -4, 8, 1]], np.float32)


def test_text_roundtrip():
    g = parse(TEXT)
    assert print_graph(g) == TEXT
    assert g.nodes[1].op == "opaque" and len(g.nodes[1].results) == 2


def test_interpreter_runs_opaque_in_onnxruntime():
    s, i = run(parse(TEXT), {"%x": X, "%k": np.array([3])})
    np.testing.assert_array_equal(i, [[2, 4, 0], [1, 3, 4]])
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-np.array([[7, 5, 3], [9, 8, 1.0]]))), rtol=1e-6)


def test_opaque_reads_a_transposed_view_as_its_copy():
    """A 2-D transpose is a view in the interpreter; onnxruntime gets it in C order."""
    text = TEXT.replace("%x: tensor<2x5xf32>", "%x: tensor<5x2xf32>").replace(
        "  %r = relu(%x) : tensor<2x5xf32>",
        "  %t = transpose(%x) {perm = [1, 0]} : tensor<2x5xf32>\n  %r = relu(%t) : tensor<2x5xf32>")
    s, i = run(parse(text), {"%x": np.ascontiguousarray(X.T), "%k": np.array([3])})
    np.testing.assert_array_equal(i, [[2, 4, 0], [1, 3, 4]])


def test_egraph_carries_opaque_unchanged():
    g = parse(TEXT)
    eg = graph_to_egraph(g)
    assert print_graph(egraph_to_graph(eg, original_choice(eg))) == TEXT
    eg2, _ = from_json(to_json(eg))
    assert print_graph(egraph_to_graph(eg2, original_choice(eg2))) == TEXT


def test_rules_never_touch_opaque():
    from eqsat_nb.rules.parse import parse_rules
    from eqsat_nb.search.saturate import Limits, saturate

    rules = parse_rules("rule r: (relu ?x) => (relu (relu ?x))\n")
    eg = graph_to_egraph(parse(TEXT))
    saturate(eg, rules, Limits(node_limit=200, iter_limit=3))
    g = egraph_to_graph(eg, original_choice(eg))
    assert [n for n in g.nodes if n.op == "opaque"] == [parse(TEXT).nodes[1]]


def test_export_restores_the_node():
    model = to_onnx(parse(TEXT), opset=None)
    onnx.checker.check_model(model, full_check=True)
    node = next(n for n in model.graph.node if n.op_type == "TopK")
    assert list(node.input) == ["r", "k"] and list(node.output) == ["v", "i"]
    assert helper.get_attribute_value(node.attribute[0]) == 1
    assert model.opset_import[0].version == 13
    assert print_graph(from_onnx(model)[0]) == TEXT


def test_omitted_optional_inputs_are_kept():
    node = helper.make_node("Clip", ["x", "", "hi"], ["y"])
    text = f"""\
func @c(%x: tensor<4xf32>, %hi: tensor<f32>) -> tensor<4xf32> {{
  %y = opaque(%x, %hi) {{op = "Clip", opset = 13, onnx = "{encode_node(node, [True, False, True], [True])}"}} : tensor<4xf32>
  return %y
}}
"""
    (y,) = run(parse(text), {"%x": np.array([-2, 0, 1, 3], np.float32),
                             "%hi": np.array(1, np.float32)})
    np.testing.assert_array_equal(y, [-2, 0, 1, 1])


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace(" : tensor<2x3xf32>, tensor<2x3xi64>\n", "\n", 1),
     "need their result types"),
    (lambda t: t.replace('op = "TopK"', 'op = "Top"'), "stored ONNX node is a TopK"),
    (lambda t: t.replace(TOPK, "not base64!"), "not base64"),
    (lambda t: t.replace(TOPK, "AAAA"), "not a serialized ONNX node"),
    (lambda t: t.replace("opaque(%r, %k)", "opaque(%r)"), "reads 2 operands, 1 given"),
    (lambda t: t.replace("opset = 13, ", ""), "requires attribute 'opset'"),
])
def test_malformed_opaque_is_located(change, message):
    with pytest.raises(TirError) as e:
        parse(change(TEXT), "f.tir")
    assert str(e.value).startswith("f.tir:3:") and message in str(e.value)


def test_copies_of_a_node_differing_only_in_metadata_share_one_session():
    """torch.onnx writes each layer's nodes with their own name scopes and stack traces
    (metadata_props): the interpreter runs all copies on one onnxruntime session, not one
    each (a 7-B Llama's 32 layers held 1.2 GB of sessions)."""
    from eqsat_nb.ir import opaque

    def stored(layer: int) -> str:
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, name=f"layers.{layer}")
        entry = node.metadata_props.add()
        entry.key, entry.value = "pkg.torch.onnx.name_scopes", f"['model', 'layers.{layer}']"
        return encode_node(node, [True, True], [True, True])

    texts = [TEXT.replace(TOPK, stored(k)) for k in range(3)]
    assert len(set(texts)) == 3
    opaque._session.cache_clear()
    outs = [run(parse(t), {"%x": X, "%k": np.array([3])}) for t in texts]
    assert opaque._session.cache_info().currsize == 1
    for s, i in outs:
        np.testing.assert_array_equal(i, [[2, 4, 0], [1, 3, 4]])
