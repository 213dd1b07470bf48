"""If, Loop and Scan kept as opaque nodes whose output shapes come from their own subgraphs
(issue 28, point 3), built with onnx.helper as torch.onnx (TorchScript and dynamo's torch.cond),
tf2onnx (Keras RNNs as Scan) and spox (silero-vad) write them. Each model imports without input
shapes beyond the ones it declares; the optimizer's graph around the node is made of mapped ops;
the import (reference interpreter, the node run in onnxruntime) and the spliced model agree
with onnxruntime on the input model."""
from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.errors import TirError
from eqsat_nb.onnx_io import import_onnx
from eqsat_nb.onnx_io.compare import compare, inputs_for
from eqsat_nb.onnx_io.measure import random_feeds
from eqsat_nb.onnx_io.splice import splice
from eqsat_nb.runtime import session

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(0)


def C(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value, dtype), name))


def N(op, ins, outs, **at):
    outs = outs if isinstance(outs, list) else [outs]
    return helper.make_node(op, ins, outs, name=f"/{op}_{outs[0]}", **at)


def W(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), name)


def vi(name, dims, t=F):
    return helper.make_tensor_value_info(name, t, dims)


def untyped(name):
    return helper.make_value_info(name, onnx.TypeProto())


def model(nodes, inputs, outputs, inits=(), opset=16):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def squeeze_if_one(prefix, x, out, axis=1):
    """torch's `x.squeeze(1)` traced with a symbolic dim: If(Shape(x)[1] == 1, Squeeze,
    Identity), the branches of different ranks (silero-vad's decoder writes this)."""
    then_g = helper.make_graph([C(f"{prefix}ax", [axis]), N("Squeeze", [x, f"{prefix}ax"],
                                                            f"{prefix}sq")],
                               f"{prefix}then", [], [untyped(f"{prefix}sq")])
    else_g = helper.make_graph([N("Identity", [x], f"{prefix}id")], f"{prefix}else", [],
                               [untyped(f"{prefix}id")])
    return [N("Shape", [x], f"{prefix}sh"), C(f"{prefix}i0", axis),
            N("Gather", [f"{prefix}sh", f"{prefix}i0"], f"{prefix}d0", axis=0),
            C(f"{prefix}one", 1), N("Equal", [f"{prefix}d0", f"{prefix}one"], f"{prefix}eq"),
            N("If", [f"{prefix}eq"], out, then_branch=then_g, else_branch=else_g)]


def silero_like(weights: int = 10):
    """spox's silero-vad: the whole model inside an If on the sample rate, each branch a small
    network that reads the outer weights and squeezes a dim through a shape-conditioned If; the
    If's outputs then go through Identity to the graph outputs. Here a Relu and a MatMul after
    the If give the optimizer something to map."""
    inits = [W(f"w{k}", 8, 8) for k in range(weights)]

    def branch(tag, scale):
        nodes = [N("MatMul", ["input", "w0"], f"{tag}m0")]
        for k in range(1, weights):
            nodes.append(N("MatMul", [f"{tag}m{k - 1}", f"w{k}"], f"{tag}m{k}"))
        nodes += [C(f"{tag}s", scale, np.float32),
                  N("Mul", [f"{tag}m{weights - 1}", f"{tag}s"], f"{tag}m"),
                  C(f"{tag}u", [1]), N("Unsqueeze", [f"{tag}m", f"{tag}u"], f"{tag}y")]
        nodes += squeeze_if_one(f"{tag}/", f"{tag}y", f"{tag}out")
        return helper.make_graph(nodes, tag, [], [untyped(f"{tag}out")])

    nodes = [C("sr16k", 16000), N("Equal", ["sr", "sr16k"], "is16k"),
             N("If", ["is16k"], "If_0_outputs_0", then_branch=branch("then", 1.0),
               else_branch=branch("else", 0.5)),
             N("Relu", ["If_0_outputs_0"], "r"), N("MatMul", ["r", "wout"], "output")]
    return model(nodes, [vi("input", ["batch", 8]), vi("sr", [], I64)],
                 [vi("output", ["batch", 4])], inits + [W("wout", 8, 4)])


def _equal_in_onnxruntime(a, b, shapes=None):
    for seed in (0, 1):
        feeds = random_feeds(a, seed=seed, shapes=shapes)
        for x, y in zip(session(a).run(None, feeds), session(b).run(None, feeds)):
            np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)


def _swapped(graph):
    """The same values computed by new nodes: every ewadd/ewmul's operands swapped."""
    nodes = tuple(dataclasses.replace(n, inputs=n.inputs[::-1]) if n.op in ("ewadd", "ewmul")
                  else n for n in graph.nodes)
    return dataclasses.replace(graph, nodes=nodes)


def test_if_whose_branches_fold_their_own_shape_chains():
    """silero-vad v5 (spox): 'the shape of If_0_outputs_0 is unknown' before issue 28."""
    m = silero_like()
    r = import_onnx(m, "m.onnx")
    (node,) = [n for n in r.graph.nodes if n.op == "opaque" and n.attr["op"] == "If"]
    assert node.types[0].shape == (1, 8)             # batch analysed at 1, [1, 1, 8] squeezed
    assert [n.op for n in r.graph.nodes if n.op != "weight"][-2:] == ["relu", "matmul"]
    assert len(node.inputs) == 2                     # the condition and 'input': 10 weights inside
    problems = compare(r, inputs_for(r, high=2))
    assert not problems, problems


def test_an_if_written_anew_carries_its_weights_inside():
    """The If's operand computed by a new node: the splicer writes the stored If, whose branches
    now hold the weights they read (renamed NAME#const); onnx checks it, onnxruntime agrees."""
    m = silero_like()
    nodes = list(m.graph.node)
    nodes.insert(0, N("Add", ["x0", "bias"], "input"))
    g = helper.make_graph(nodes, "g", [vi("x0", ["batch", 8]), vi("sr", [], I64)],
                          list(m.graph.output), list(m.graph.initializer) + [W("bias", 8)])
    m2 = helper.make_model(g, opset_imports=list(m.opset_import))
    m2.ir_version = 8
    r = import_onnx(m2, "m.onnx")
    out = splice(r, _swapped(r.graph))
    assert out is not None
    onnx.checker.check_model(out, full_check=True)
    (new_if,) = [n for n in out.graph.node if n.op_type == "If"]
    assert new_if.name.startswith("eqsat/")
    assert any(t.name == "w0#const" for t in new_if.attribute[0].g.initializer)
    _equal_in_onnxruntime(m2, out, {"x0": (1, 8), "sr": ()})


def test_torch_cond_if_with_symbolic_dims_in_its_branch_outputs():
    """torch.export's torch.cond (silero-vad's op18 'ifless' file): branch outputs declared with
    the dim_param 'batch', which fixing the input dims leaves unknown to onnx's If inference."""
    def branch(tag, scale):
        return helper.make_graph(
            [C(f"{tag}s", scale, np.float32), N("Mul", ["x", f"{tag}s"], f"{tag}y"),
             N("Relu", [f"{tag}y"], f"{tag}out")], tag, [], [vi(f"{tag}out", ["batch", 6])])
    nodes = [C("shape1", [1]), N("Reshape", ["sr", "shape1"], "srv"), C("i0", 0),
             N("Gather", ["srv", "i0"], "srs", axis=0), C("k", 16000),
             N("Equal", ["srs", "k"], "eq"),
             N("If", ["eq"], ["out"], then_branch=branch("t", 1.0), else_branch=branch("e", 2.0)),
             N("Add", ["out", "b"], "y")]
    m = model(nodes, [vi("x", ["batch", 6]), vi("sr", [], I64)], [vi("y", ["batch", 6])],
              [W("b", 6)], opset=18)
    r = import_onnx(m, "m.onnx")
    assert r.graph.nodes[-1].op == "ewadd"
    assert not compare(r, inputs_for(r, high=2))


def test_loop_with_a_constant_trip_count_as_torch_script_writes_it():
    """A scripted `for i in range(3)`: Loop(M=3, cond="") carrying h and stacking a scan output;
    the body's own inference gives both shapes."""
    body = helper.make_graph(
        [N("MatMul", ["h_in", "wl"], "h_mm"), N("Tanh", ["h_mm"], "h_out"),
         N("Identity", ["cond_in"], "cond_out"), N("Identity", ["h_out"], "h_scan")],
        "body", [vi("i", [], I64), vi("cond_in", [], B), vi("h_in", None)],
        [vi("cond_out", [], B), untyped("h_out"), untyped("h_scan")])
    nodes = [C("M", 3), N("Loop", ["M", "", "x"], ["h_last", "hs"], body=body),
             N("Relu", ["h_last"], "y")]
    m = model(nodes, [vi("x", ["batch", 5])], [vi("y", ["batch", 5]), vi("hs", [3, "batch", 5])],
              [W("wl", 5, 5)], opset=13)
    r = import_onnx(m, "m.onnx")
    (loop,) = [n for n in r.graph.nodes if n.op == "opaque"]
    assert [t.shape for t in loop.types] == [(1, 5), (3, 1, 5)]
    assert "relu" in [n.op for n in r.graph.nodes]
    assert not compare(r, inputs_for(r))


def _while_loop(trips_from_input: bool):
    """A scripted `while` loop as torch writes it: Loop(M="", cond=true) whose body computes the
    next condition, stacking a scan output. The loop ends after 3 iterations, or after
    max(n) + 2 when the bound is read from the input n."""
    body = helper.make_graph(
        [C("one_i", 1), N("Add", ["i", "one_i"], "i1"), N("Less", ["i1", "bound"], "cond_out"),
         N("Add", ["acc_in", "one_f"], "acc_out"), N("Identity", ["acc_out"], "scan")],
        "body", [vi("i", [], I64), vi("cond_in", [], B), vi("acc_in", [4])],
        [vi("cond_out", [], B), untyped("acc_out"), untyped("scan")])
    bound = ([C("ax", [0]), N("ReduceMax", ["n", "ax"], "nmax", keepdims=0), C("two", 2),
              N("Add", ["nmax", "two"], "bound")] if trips_from_input else [C("bound", 3)])
    nodes = [C("one_f", 1.0, np.float32), C("true", True, np.bool_)] + bound + [
        N("Loop", ["", "true", "x"], ["acc", "stack"], body=body), N("Relu", ["stack"], "y")]
    return model(nodes, [vi("x", [4]), vi("n", [3], I64)],
                 [vi("acc", [4]), vi("y", ["trips", 4])], opset=18)


def test_a_while_loop_runs_in_onnxruntime_when_its_body_cannot_tell():
    """The body's inference cannot count the iterations; onnxruntime, run twice on different
    inputs, gives the same length both times: that shape is taken."""
    r = import_onnx(_while_loop(trips_from_input=False), "m.onnx")
    (loop,) = [n for n in r.graph.nodes if n.op == "opaque" and n.attr["op"] == "Loop"]
    assert [t.shape for t in loop.types] == [(4,), (3, 4)]
    assert r.graph.nodes[-1].op == "relu"
    assert not compare(r, inputs_for(r))


def test_a_trip_count_read_from_the_data_is_refused_with_the_value_named():
    """max(n) + 2 iterations: two runs on different inputs disagree, and the IR holds static
    shapes only."""
    with pytest.raises(TirError, match="'stack' is unknown .*data-dependent shapes"):
        import_onnx(_while_loop(trips_from_input=True), "m.onnx")


def test_scan_as_tf2onnx_writes_a_keras_rnn():
    """A simple RNN over time as tf2onnx writes it: Scan(state, sequence) with the sequence on
    axis 1; state outputs as the body gives them, scan outputs stacked along the time axis."""
    body = helper.make_graph(
        [N("MatMul", ["xt", "wx"], "a"), N("MatMul", ["h", "wh"], "b2"),
         N("Add", ["a", "b2"], "s"), N("Tanh", ["s"], "h_new"), N("Identity", ["h_new"], "yt")],
        "rnn", [vi("h", None), vi("xt", None)], [untyped("h_new"), untyped("yt")])
    nodes = [N("Scan", ["h0", "x"], ["h_last", "ys"], body=body, num_scan_inputs=1,
               scan_input_axes=[1], scan_output_axes=[1]),
             N("Relu", ["ys"], "y")]
    m = model(nodes, [vi("h0", ["batch", 4]), vi("x", ["batch", "time", 3])],
              [vi("h_last", ["batch", 4]), vi("y", ["batch", "time", 4])],
              [W("wx", 3, 4), W("wh", 4, 4)], opset=16)
    r = import_onnx(m, "m.onnx", input_shapes={"x": (2, 7, 3), "h0": (2, 4)})
    (scan,) = [n for n in r.graph.nodes if n.op == "opaque"]
    assert [t.shape for t in scan.types] == [(2, 4), (2, 7, 4)]
    assert r.graph.nodes[-1].op == "relu"
    assert not compare(r, inputs_for(r))


def test_an_if_that_onnxruntime_cannot_run_either_names_the_value():
    """Branches that disagree and a model onnxruntime refuses at the analysis sizes: the error
    still names the If's output (no internal error)."""
    then_g = helper.make_graph([C("ts", [2, 3]), N("Reshape", ["x", "ts"], "t")], "t", [],
                               [untyped("t")])
    else_g = helper.make_graph([C("es", [3, 2]), N("Reshape", ["x", "es"], "e")], "e", [],
                               [untyped("e")])
    m = model([N("If", ["c"], "o", then_branch=then_g, else_branch=else_g),
               N("Relu", ["o"], "y")], [vi("x", [7]), vi("c", [], B)], [vi("y", ["a", "b"])])
    with pytest.raises(TirError, match="'o' is unknown"):
        import_onnx(m, "m.onnx")


def test_an_if_whose_branch_is_empty_at_1_is_analysed_where_it_runs():
    """silero-vad v5 (spox): unnamed dims, the STFT convolution inside the If's branches, empty
    at an audio length of 1. The branches cannot tell the If's shapes there, so other sizes are
    searched: the length grows, both batch dims go back to 1 together."""
    w = numpy_helper.from_array(RNG.standard_normal((6, 1, 16)).astype(np.float32), "stft.w")

    def branch(tag):
        return helper.make_graph(
            [C(f"{tag}ax", [1]), N("Unsqueeze", ["input", f"{tag}ax"], f"{tag}u"),
             N("Conv", [f"{tag}u", "stft.w"], f"{tag}c", kernel_shape=[16], strides=[8]),
             N("Relu", [f"{tag}c"], f"{tag}r"), C(f"{tag}t", [2]),
             N("ReduceMean", [f"{tag}r", f"{tag}t"], f"{tag}out", keepdims=0),
             C(f"{tag}one", 1.0, np.float32), N("Add", ["state", f"{tag}one"], f"{tag}st")],
            tag, [], [untyped(f"{tag}out"), untyped(f"{tag}st")])
    nodes = [C("k", 16000), N("Equal", ["sr", "k"], "c"),
             N("If", ["c"], ["o", "stateN"], then_branch=branch("t"), else_branch=branch("e")),
             N("MatMul", ["o", "proj"], "output")]
    dim = helper.make_tensor_value_info          # None: a dim with neither value nor name
    m = model(nodes, [dim("input", F, [None, None]), dim("state", F, [2, None, 4]),
                      vi("sr", [], I64)],
              [vi("output", ["b", 3]), vi("stateN", [2, "b", 4])], [w, W("proj", 6, 3)], opset=18)
    r = import_onnx(m, "silero.onnx")
    assert {n: t.shape for n, t in r.graph.inputs} == {
        "%input": (1, 16), "%state": (2, 1, 4), "%sr": ()}
    assert r.size_note.startswith("symbolic dims analysed at input[0]=1, input[1]=16, "
                                  "state[1]=1")
    assert r.graph.nodes[-1].op == "matmul"
    assert not compare(r, inputs_for(r, high=2))
