"""Each distinct layer once (eqsat_nb/layers/): repeated layers found structurally, one
representative per class optimized and its rewrite repeated on every copy with that copy's
weights, every copy checked with its own weights.

The models are BERT-style encoders built with onnx.helper node for node as torch.onnx
(TorchScript) writes them (CI has no torch): per layer, Q/K/V Linears (MatMul on the transposed
weight, then Add(bias, MatMul)), heads split with Reshape/Transpose, Q and Kᵀ scaled, an
attention mask computed once outside the layers and added to every layer's scores, Softmax,
the output projection, residual Add and LayerNormalization, an MLP with erf GELU, residual Add
and LayerNormalization; every layer with its own weights.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.check_outputs import verify_graphs
from eqsat_nb.cli import main
from eqsat_nb.cost.select import make_cost_model
from eqsat_nb.ir.graph import Graph
from eqsat_nb.layers import find_layers, optimize_layers, optimize_model
from eqsat_nb.layers.assemble import assemble, for_copy
from eqsat_nb.layers.border import saturate_pair
from eqsat_nb.layers.check import check_copies
from eqsat_nb.layers.pieces import GraphIndex, make_piece, piece_graph
from eqsat_nb.onnx_io import import_onnx
from eqsat_nb.onnx_io.splice import splice, value_keys
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.rules.graph_rewrite import idioms_for_search
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.limits import Limits

S, H, HEADS, D, FF = 8, 32, 2, 16, 64     # sequence, hidden, heads, head dim, MLP width
ELEM = {"f32": (TensorProto.FLOAT, np.float32), "f16": (TensorProto.FLOAT16, np.float16)}


class _Encoder:
    """The nodes and initializers of an encoder under construction, named as torch.onnx names
    them (`/encoder/layer.3/attention/self/query/MatMul`, `onnx::MatMul_12`, per-layer biases)."""

    def __init__(self, dtype: str, seed: int, dynamo: bool = False) -> None:
        self.dynamo = dynamo        # name values val_N and put each node's scope in metadata
        self.elem, self.np = ELEM[dtype]
        self.nodes: list = []
        self.inits: list = []
        self.rng = np.random.default_rng(seed)
        self.anon = 0

    def init(self, name: str, shape, scale: float, value=None) -> str:
        if value is None:
            value = self.rng.standard_normal(shape) * scale
        self.inits.append(numpy_helper.from_array(np.asarray(value, self.np), name))
        return name

    def matmul_weight(self, n_in: int, n_out: int) -> str:
        self.anon += 1
        return self.init(f"onnx::MatMul_{1000 + self.anon}", (n_in, n_out), 1 / np.sqrt(n_in))

    def op(self, scope: str, op: str, ins: list[str], out: str | None = None, **attrs) -> str:
        if self.dynamo:             # as the dynamo exporter: no scope in any name
            name = f"node_{len(self.nodes)}"
            out = out or f"val_{len(self.nodes)}"
            node = helper.make_node(op, ins, [out], name=name, **attrs)
            entry = node.metadata_props.add()
            entry.key, entry.value = "pkg.torch.onnx.name_scopes", repr(scope.split("/"))
            self.nodes.append(node)
            return out
        name = f"{scope}/{op}"
        k = sum(1 for n in self.nodes if n.name.rsplit("_", 1)[0] == name or n.name == name)
        name = name if k == 0 else f"{name}_{k}"
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    def const(self, scope: str, value, dtype=np.int64) -> str:
        out = self.op(scope, "Constant", [])
        self.nodes[-1].attribute.append(helper.make_attribute(
            "value", numpy_helper.from_array(np.asarray(value, dtype), out + "_v")))
        return out

    def linear(self, x: str, scope: str, prefix: str, n_in: int, n_out: int) -> str:
        y = self.op(scope, "MatMul", [x, self.matmul_weight(n_in, n_out)])
        return self.op(scope, "Add", [self.init(f"{prefix}.bias", (n_out,), 0.1), y])

    def heads(self, y: str, scope: str, perm=(0, 2, 1, 3)) -> str:
        r = self.op(scope, "Reshape", [y, self.const(scope, [1, S, HEADS, D])])
        return self.op(scope, "Transpose", [r], perm=list(perm))

    def layernorm(self, x: str, scope: str, prefix: str, epsilon: float) -> str:
        w = self.init(f"{prefix}.weight", (H,), 0.1, 1 + self.rng.standard_normal(H) * 0.1)
        b = self.init(f"{prefix}.bias", (H,), 0.1)
        return self.op(scope, "LayerNormalization", [x, w, b], axis=-1, epsilon=epsilon)

    def layer(self, x: str, mask: str, k: int, epsilon: float = 1e-12, ff: int = FF,
              residual_from_input: bool = True) -> str:
        """One BERT layer reading `x` and the extended attention mask; its output."""
        p, s = f"encoder.layer.{k}", f"/encoder/layer.{k}"
        att = f"{s}/attention/self"
        q = self.heads(self.linear(x, f"{att}/query", f"{p}.attention.self.query", H, H), att)
        kk = self.heads(self.linear(x, f"{att}/key", f"{p}.attention.self.key", H, H), att,
                        (0, 2, 3, 1))
        v = self.heads(self.linear(x, f"{att}/value", f"{p}.attention.self.value", H, H), att)
        root = self.const(att, np.sqrt(1 / np.sqrt(D)), self.np)
        scores = self.op(att, "MatMul", [self.op(att, "Mul", [q, root]),
                                         self.op(att, "Mul", [kk, root])])
        probs = self.op(att, "Softmax", [self.op(att, "Add", [scores, mask])], axis=-1)
        ctx = self.op(att, "Transpose", [self.op(att, "MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = self.op(att, "Reshape", [ctx, self.const(att, [1, S, H])])
        if self.dynamo:             # two nodes the IR keeps opaque, with per-layer metadata
            ctx = self.op(att, "Neg", [self.op(att, "Neg", [ctx])])
        o = f"{s}/attention/output"
        dense = self.linear(ctx, f"{o}/dense", f"{p}.attention.output.dense", H, H)
        res = self.op(o, "Add", [dense, x if residual_from_input else ctx])
        a = self.layernorm(res, f"{o}/LayerNorm", f"{p}.attention.output.LayerNorm", epsilon)
        i = f"{s}/intermediate"
        h = self.linear(a, f"{i}/dense", f"{p}.intermediate.dense", H, ff)
        act = f"{i}/intermediate_act_fn"          # exact GELU as torch.onnx writes it
        erf = self.op(act, "Erf", [self.op(act, "Div", [h, self.const(act, np.sqrt(2), self.np)])])
        gelu = self.op(act, "Mul", [self.op(act, "Mul", [
            h, self.op(act, "Add", [erf, self.const(act, 1.0, self.np)])]),
            self.const(act, 0.5, self.np)])
        out = f"{s}/output"
        y = self.linear(gelu, f"{out}/dense", f"{p}.output.dense", ff, H)
        y = self.op(out, "Add", [y, a])
        return self.layernorm(y, f"{out}/LayerNorm", f"{p}.output.LayerNorm", epsilon)


def encoder(layers: int = 3, dtype: str = "f32", seed: int = 0, vary: dict | None = None,
            dynamo: bool = False):
    """An encoder of `layers` BERT layers (see the module doc). `vary` = {layer: {keyword:
    value}} builds that layer with other `_Encoder.layer` arguments (an epsilon, an MLP width, a
    residual read from elsewhere). `dynamo`: values named val_N with no layer number, each node's
    scope in its metadata (as the dynamo exporter writes them), and two Neg nodes per layer (which
    the IR keeps as opaque nodes, metadata included)."""
    n = _Encoder(dtype, seed, dynamo)
    mask = n.op("", "Sub", [n.const("", 1.0, n.np), "attention_mask"])
    mask = n.op("", "Mul", [mask, n.const("", -10000.0, n.np)])
    x = "hidden_states"
    for k in range(layers):
        x = n.layer(x, mask, k, **(vary or {}).get(k, {}))
    n.nodes[-1].output[0] = "last_hidden_state"
    g = helper.make_graph(n.nodes, "encoder", [
        helper.make_tensor_value_info("hidden_states", n.elem, [1, S, H]),
        helper.make_tensor_value_info("attention_mask", n.elem, [1, 1, 1, S])],
        [helper.make_tensor_value_info("last_hidden_state", n.elem, [1, S, H])],
        initializer=n.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _setup(model):
    imp = import_onnx(model)
    rules = load_rules(None)
    rules += idioms_for_search(imp.graph, rules)
    precision = "fp16" if any(t.dtype == "f16" for t in imp.graph.types().values()) else "fp32"
    cost = make_cost_model("analytic", "h100", None, progress=False, precision=precision)
    return imp, rules, cost


def _merged_weights(g: Graph) -> list[set[str]]:
    """For each matmul whose weight operand is a concatenation (merged projections), the
    weights it is computed from, in graph order."""
    prod = g.producers()

    def weights(v: str) -> set[str]:
        n = prod[v]
        return {v} if n.op == "weight" else set().union(*(weights(u) for u in n.inputs))
    return [weights(n.inputs[1]) for n in g.nodes
            if n.op == "matmul" and prod[n.inputs[1]].op == "concat"]


def _structure(g: Graph, ids: dict) -> tuple:
    """What `g` computes, up to the names of the values a rewrite made: the structural id of
    each output (same operators, attributes and operands down to the same inputs and weights)
    and the number of nodes."""
    keys = value_keys(g, ids)
    return tuple(keys[v] for v in g.outputs), sum(1 for n in g.nodes if n.op != "weight")


# ------------------------------------------------------------------ detection
def test_an_encoders_layers_are_one_class_with_the_shared_mask_on_their_boundary():
    imp = import_onnx(encoder(4))
    layers = find_layers(imp.graph)
    assert (layers.count, layers.distinct) == (4, 1)
    copies = layers.classes[0].copies
    mask = copies[0].inputs[1]
    for k, p in enumerate(copies):
        assert len(p.inputs) == 2 and p.inputs[1] == mask     # the mask, computed once
        assert len(p.outputs) == 1
        # every weight of the copy is its own layer's (matched by position, not by name)
        names = [n for n in p.weight_names(imp.graph) if not n.startswith("onnx__MatMul")]
        assert names and all(f"encoder.layer.{k}." in n for n in names)
    assert copies[-1].outputs == imp.graph.outputs
    assert [imp.graph.nodes[i].results[0] for i in layers.rest] == ["%_Sub_output_0",
                                                                   "%_Mul_output_0"]
    ix = layers.index
    for k, p in enumerate(copies):      # the copies are the layers as torch.onnx named them
        assert list(p.act) == _layer_nodes(imp.graph, ix, k, last=k == 3)


@pytest.mark.parametrize("vary", [
    {2: {"epsilon": 1e-5}},                    # one attribute
    {2: {"ff": 2 * FF}},                       # one shape
    {2: {"residual_from_input": False}},       # one operand: same signatures, other wiring
])
def test_a_layer_unlike_the_others_is_not_in_their_class(vary):
    imp = import_onnx(encoder(4, vary=vary))
    g = imp.graph
    ix = GraphIndex(g)
    layers = find_layers(g, index=ix)
    odd = {i for i, n in enumerate(g.nodes) if any("layer.2" in r for r in n.results)}
    for c in layers.classes:
        assert len({p.key for p in c.copies}) == 1
        assert not any(set(p.act) & odd for p in c.copies)
    assert layers.count < 4
    # the canonical forms themselves tell the odd layer apart (not only the proposal)
    by_layer = {k: make_piece(ix, _layer_nodes(g, ix, k, last=k == 3)) for k in range(4)}
    assert by_layer[0].key == by_layer[1].key == by_layer[3].key != by_layer[2].key


def _layer_nodes(g: Graph, ix: GraphIndex, k: int, last: bool) -> list[int]:
    """Layer k's activation nodes by their torch.onnx names (`/encoder/layer.k/...`), the
    importer's helpers that only they read (the mask's broadcast), and for the last layer the
    node returning the graph's output."""
    named = {i for i in ix.act if any(f"layer.{k}_" in r or (last and r in g.outputs)
                                      for r in g.nodes[i].results)}
    named |= {i for i in ix.act if "layer." not in g.nodes[i].results[0]
              and ix.consumers.get(g.nodes[i].results[0])
              and all(c in named for c in ix.consumers[g.nodes[i].results[0]])}
    return sorted(named)


def test_layers_named_without_numbers_and_opaque_nodes_with_per_layer_metadata():
    """The dynamo exporter's names carry no layer number and its nodes' metadata differ per
    layer: the layers are found all the same, and every copy keeps its own opaque nodes (so the
    splice writes them back as the model's own)."""
    imp, rules, cost = _setup(encoder(3, dynamo=True))
    g = imp.graph
    assert not any("layer" in v for n in imp.model.graph.node for v in list(n.output) + [n.name])
    layers = find_layers(g)
    assert (layers.count, layers.distinct) == (3, 1)
    result, run = optimize_layers(g, layers, cost, rules, Options(extract="ocf+switch"))
    assert result.improved and not run.whole
    before = sorted(n.attr["onnx"] for n in g.nodes if n.op == "opaque")
    after = sorted(n.attr["onnx"] for n in result.optimized.nodes if n.op == "opaque")
    assert len(before) == 6 and after == before
    assert check_copies(run, imp.weights).ok


def test_the_canonical_form_ignores_weight_values_and_names_not_their_sharing():
    a = import_onnx(encoder(2, seed=1)).graph
    b = import_onnx(encoder(2, seed=2)).graph
    ka = [p.key for p in find_layers(a).classes[0].copies]
    kb = [p.key for p in find_layers(b).classes[0].copies]
    assert ka[0] == ka[1] == kb[0]


def test_a_model_without_repetition_is_optimized_as_one_graph():
    model = encoder(1)
    imp, rules, cost = _setup(model)
    assert not find_layers(imp.graph)
    got, how = optimize_model(imp.graph, cost, rules, Options(extract="ocf+switch"))
    want = optimize(imp.graph, cost, rules, Options(extract="ocf+switch"))
    assert how is None and got.layers is None
    assert got.optimized == want.optimized and got.cost_after == want.cost_after


def test_copies_that_do_not_follow_one_another_are_left_whole():
    """Two equal towers on the same input (no chain): a rewrite may join them, so they are not
    optimized one at a time."""
    n = _Encoder("f32", 0)
    mask = n.op("", "Mul", [n.const("", 0.0, np.float32), "attention_mask"])
    outs = []
    for k in range(2):
        outs.append(n.layer("hidden_states", mask, k))
    n.nodes[-1].output[0] = "b"
    y = n.op("", "Add", [outs[0], "b"], out="y")
    g = helper.make_graph(n.nodes, "towers", [
        helper.make_tensor_value_info("hidden_states", n.elem, [1, S, H]),
        helper.make_tensor_value_info("attention_mask", n.elem, [1, 1, 1, S])],
        [helper.make_tensor_value_info(y, n.elem, [1, S, H])], initializer=n.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    layers = find_layers(import_onnx(m).graph)
    assert not layers and layers.not_chained == 1


# ------------------------------------------------------------------ optimizing
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_the_layered_result_is_each_layer_optimized_on_its_own(dtype):
    imp, rules, cost = _setup(encoder(3, dtype))
    g = imp.graph
    layers = find_layers(g)
    options = Options(extract="ocf+switch")
    result, run = optimize_layers(g, layers, cost, rules, options)
    assert result.improved and (layers.count, layers.distinct) == (3, 1)
    # every copy's Q/K/V merged, each with its own layer's three weights
    assert _merged_weights(result.optimized) == _merged_weights(optimize(g, cost, rules,
                                                                         options).optimized)
    assert _merged_weights(result.optimized) == [
        {f"%onnx__MatMul_{1000 + 6 * k + j}" for j in (1, 2, 3)} for k in range(3)]
    # copy by copy: the representative's rewrite renamed = that copy optimized on its own
    ix = layers.index
    rep = layers.classes[0].rep
    taken = set(g.types())
    alone_parts = []
    for copy, renamed in zip(layers.classes[0].copies, run.runs[0].optimized):
        alone = optimize(piece_graph(ix, copy, "copy"), cost, rules, options)
        ids: dict = {}
        assert _structure(alone.optimized, ids) == _structure(renamed, ids)
        assert for_copy(run.runs[0].result.optimized, g, rep, copy, taken).nodes[0].op
        alone_parts.append((alone.optimized, copy))
    alone_parts += [(opt, p) for r in run.runs[1:] for opt, p in zip(r.optimized, r.copies)]
    ids = {}
    assert _structure(assemble(g, alone_parts), ids) == _structure(result.optimized, ids)
    # the same estimated cost as optimizing the whole graph, and numerically the same function
    whole = optimize(g, cost, rules, options)
    assert result.cost_after == pytest.approx(whole.cost_after, rel=1e-9)
    assert verify_graphs(g, result.optimized, imp.weights).ok
    check = check_copies(run, imp.weights)
    assert check.ok and check.copies_checked == 3
    # the border test passed at its first step: no rewrite reaches across a LayerNorm
    assert len(run.borders) == 1 and run.borders[0].passed
    assert run.borders[0].together_us is None
    # the why lines: the representative's changes, three times
    assert result.changes and all(c.count % 3 == 0 for c in result.changes)


def test_the_copies_are_not_checked_when_their_checks_would_not_fit_the_time_left():
    imp, rules, cost = _setup(encoder(3))
    _, run = optimize_layers(imp.graph, find_layers(imp.graph), cost, rules,
                             Options(extract="ocf+switch"))
    check = check_copies(run, imp.weights, seconds=0.0)
    assert check.copies_checked == 0 and "time limit" in check.skipped
    assert check.summary().startswith("per layer class: not checked")


def test_a_wrong_copy_is_caught_by_the_per_copy_check():
    """A copy that reads another copy's weights computes another function: the check with that
    copy's own weights must see it (the renaming is what it checks)."""
    imp, rules, cost = _setup(encoder(3))
    g = imp.graph
    layers = find_layers(g)
    result, run = optimize_layers(g, layers, cost, rules, Options(extract="ocf+switch"))
    assert check_copies(run, imp.weights).ok
    r = run.runs[0]
    first, second = r.copies[0], r.copies[1]
    wrong = for_copy(r.result.optimized, g, first, first, set(g.types()))
    rename = dict(zip(first.inputs, second.inputs))      # copy 1's inputs, copy 0's weights
    r.optimized[1] = Graph(wrong.name, tuple((rename.get(v, v), t) for v, t in wrong.inputs),
                           tuple(n.__class__(n.op, tuple(rename.get(v, v) for v in n.inputs),
                                             n.attrs, n.results, n.types) for n in wrong.nodes),
                           wrong.outputs)
    check = check_copies(run, imp.weights)
    assert not check.ok and "copy 2 of 3" in check.failed


def test_the_written_model_is_the_one_the_whole_graph_gives_and_checks_in_onnxruntime():
    from collections import Counter

    from eqsat_nb.commands.onnx_out import import_shapes
    from eqsat_nb.onnx_io.check import check_models
    from eqsat_nb.onnx_io.measure import random_feeds

    imp, rules, cost = _setup(encoder(3))
    options = Options(extract="ocf+switch")
    result, _ = optimize_layers(imp.graph, find_layers(imp.graph), cost, rules, options)
    model = splice(imp, result.optimized)
    whole = splice(imp, optimize(imp.graph, cost, rules, options).optimized)
    assert Counter(n.op_type for n in model.graph.node) == Counter(
        n.op_type for n in whole.graph.node)
    assert [n.op_type for n in model.graph.node].count("MatMul") == \
        [n.op_type for n in imp.model.graph.node].count("MatMul") - 2 * 3
    feeds = [random_feeds(imp.model, seed=s, shapes=import_shapes(imp)) for s in (0, 1)]
    assert check_models(imp.model, model, feeds).ok


# ------------------------------------------------------------------ the command
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_run_reports_layers_and_checks_every_copy(tmp_path, capsys, dtype):
    src, out, rep = tmp_path / "enc.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(encoder(3, dtype), src)
    assert main(["run", str(src), "--device", "h100", "--onnx", str(out), "--report", str(rep),
                 "-q", "--extract", "ocf+switch", "--layers", "on"]) == 0
    text = capsys.readouterr().out
    assert "layers: 3 (1 distinct), each distinct layer optimized once" in text
    assert "verified per layer class: 1 class x 3 copies checked" in text
    r = json.loads(rep.read_text())
    assert r["layers"]["checks"]["ok"] and r["layers"]["classes"][0]["copies"] == 3
    assert r["onnx_output"]["written"] == "optimized"
    assert r["verification"]["status"] == "verified"
    off = tmp_path / "off.json"
    assert main(["run", str(src), "--device", "h100", "--report", str(off), "-q",
                 "--extract", "ocf+switch", "--layers", "off"]) == 0
    capsys.readouterr()
    whole = json.loads(off.read_text())
    assert whole["layers"] is None
    assert whole["cost_after_us"] == pytest.approx(r["cost_after_us"], rel=1e-9)


def test_auto_optimizes_a_few_small_layers_as_one_graph(tmp_path, capsys):
    """Three layers: one class, the border pair and the rest are all of the graph's nodes, so
    by layers would only add searches; auto says so and optimizes the graph as one."""
    src, rep = tmp_path / "enc.onnx", tmp_path / "r.json"
    onnx.save(encoder(3), src)
    assert main(["run", str(src), "--device", "h100", "--report", str(rep), "-q",
                 "--extract", "ocf+switch"]) == 0
    assert "layers: 3 (1 distinct), optimized as one graph: layer by layer would optimize" in \
        capsys.readouterr().out
    r = json.loads(rep.read_text())
    assert r["layers"]["optimized_as_one_graph"] and "checks" not in r["layers"]
    assert r["verification"]["status"] == "verified"


def mlp_stack(layers: int):
    """`layers` residual MLP blocks (Linear, exact GELU, Linear, residual Add, LayerNorm, and a
    double negation the IR keeps opaque), per-block weights: few rewrites apply."""
    n = _Encoder("f32", 0)
    x = "hidden_states"
    for k in range(layers):
        s, p = f"/layer.{k}", f"layer.{k}"
        h = n.linear(x, f"{s}/fc1", f"{p}.fc1", H, FF)
        erf = n.op(s, "Erf", [n.op(s, "Div", [h, n.const(s, np.sqrt(2), np.float32)])])
        g = n.op(s, "Mul", [n.op(s, "Mul", [h, n.op(s, "Add", [
            erf, n.const(s, 1.0, np.float32)])]), n.const(s, 0.5, np.float32)])
        y = n.op(s, "Neg", [n.op(s, "Neg", [n.linear(g, f"{s}/fc2", f"{p}.fc2", FF, H)])])
        x = n.layernorm(n.op(s, "Add", [y, x]), f"{s}/norm", f"{p}.norm", 1e-5)
    n.nodes[-1].output[0] = "y"
    g = helper.make_graph(n.nodes, "mlp", [
        helper.make_tensor_value_info("hidden_states", n.elem, [1, S, H])],
        [helper.make_tensor_value_info("y", n.elem, [1, S, H])], initializer=n.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_auto_optimizes_many_layers_with_small_e_graphs_as_one_graph():
    """Eight small blocks: by layers would optimize a quarter of the nodes, but the whole
    graph's e-graph would be small (estimated from the border test's pair), so one search is
    as fast as the start-ups of several; auto says so, --layers on optimizes by layers, and
    both find the same graph."""
    imp, rules, cost = _setup(mlp_stack(8))
    options = Options(extract="ocf+switch")
    auto, how = optimize_model(imp.graph, cost, rules, options, "auto")
    assert how is None and auto.layers.whole.startswith("its e-graph would be small")
    on, how = optimize_model(imp.graph, cost, rules, options, "on")
    assert how is not None and not how.whole and how.layers.count == 8
    assert on.cost_after == pytest.approx(auto.cost_after, rel=1e-9)


def test_a_rewrite_across_the_border_of_two_layers_sends_the_graph_whole():
    """TENSAT's BERT: a layer's last matmul feeds the next layer's Q/K/V with nothing between,
    so multiplying the weights first (a rewrite across the border) saves a fifth; optimizing
    one layer at a time cannot find it, and the border test sends the graph whole."""
    from pathlib import Path

    from eqsat_nb.ir.parse import load

    g = load(Path(__file__).resolve().parents[1] / "ir_examples" / "bert.tir")
    cost = make_cost_model("analytic", "cpu", None, progress=False, precision="fp32")
    rules = load_rules(None)
    layers = find_layers(g)
    assert (layers.count, layers.distinct) == (8, 1)
    (_, first), (_, second) = layers.chain[:2]
    pair = piece_graph(layers.index, make_piece(layers.index, first.act + second.act), "pair")
    assert saturate_pair(pair, first.values(g), second.values(g),
                         [v for v in first.outputs if v in second.inputs], rules,
                         Limits()).crossed
    options = Options(extract="ocf+switch")
    result, run = optimize_layers(g, layers, cost, rules, options)
    assert run.whole and not run.borders[-1].passed
    assert result.cost_after == pytest.approx(optimize(g, cost, rules, options).cost_after)
    assert result.cost_after < 0.85 * result.cost_before
