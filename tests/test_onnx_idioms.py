"""What exporters write (torch.onnx TorchScript and dynamo, tf2onnx, paddle2onnx), built with
onnx.helper node for node: each model imports, and the imported graph (reference interpreter) and
its re-export (onnxruntime) agree with onnxruntime on the original model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from eqsat_nb.errors import TirError
from eqsat_nb.ir.opaque import decode_node
from eqsat_nb.onnx_io import import_onnx, read_onnx
from eqsat_nb.onnx_io.compare import compare, inputs_for
from eqsat_nb.onnx_io.splice import splice

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(0)


def W(name, *shape, dtype=np.float32):
    return numpy_helper.from_array((RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype),
                                   name)


def C(name, value, dtype=np.int64):
    """A Constant node as torch writes them."""
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.asarray(value, dtype), name + "_v"))


def N(op, ins, outs, **at):
    return helper.make_node(op, ins, outs if isinstance(outs, list) else [outs],
                            name=f"/{op}_{outs if isinstance(outs, str) else outs[0]}", **at)


def model(nodes, inputs, outputs, inits=(), opset=14, ir=8):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    onnx.checker.check_model(m)
    return m


def vi(name, dims, t=F):
    return helper.make_tensor_value_info(name, t, dims)


def check(m, ops=None, no_opaque=(), rtol=1e-4, atol=1e-5, export=True, **kw):
    """Import, compare with onnxruntime (interpreter and re-export); return the import."""
    r = import_onnx(m, "m.onnx", **kw)
    problems = compare(r, inputs_for(r, high=3), rtol=rtol, atol=atol, export=export)
    assert not problems, problems
    assert splice(r, r.graph) is None     # round trip: nothing changed, the input comes back
    have = [n.op for n in r.graph.nodes]
    for op in ops or ():
        assert op in have, (op, have)
    opaque = {n.attr["op"] for n in r.graph.nodes if n.op == "opaque"}
    assert not opaque & set(no_opaque), opaque
    return r


# --------------------------------------------------------------------- shape-computing chains

def _attention(opset=14, symbolic=True):
    """One self-attention block as the TorchScript exporter writes HF BERT: the head split and
    merge reshapes computed by Shape → Gather → Unsqueeze → Concat, scores divided by 8,
    Softmax, LayerNorm decomposed, GELU in its erf form."""
    H, heads, hd = 16, 2, 8
    nodes, inits = [], [W("Wq", H, H), W("Wk", H, H), W("Wv", H, H), W("Wo", H, H),
                        W("bq", H), W("W1", H, 2 * H), W("W2", 2 * H, H),
                        numpy_helper.from_array(np.ones(H, np.float32), "ln.weight"),
                        numpy_helper.from_array(np.zeros(H, np.float32), "ln.bias")]

    def unsq(src, out):
        if opset >= 13:
            nodes.append(C(out + "_axes", [0]))
            nodes.append(N("Unsqueeze", [src, out + "_axes"], out))
        else:
            nodes.append(N("Unsqueeze", [src], out, axes=[0]))

    def split_heads(x, tag):
        nodes.extend([N("Shape", [x], f"{tag}_shape"), C(f"{tag}_i0", 0),
                      N("Gather", [f"{tag}_shape", f"{tag}_i0"], f"{tag}_b", axis=0),
                      N("Shape", [x], f"{tag}_shape1"), C(f"{tag}_i1", 1),
                      N("Gather", [f"{tag}_shape1", f"{tag}_i1"], f"{tag}_s", axis=0)])
        unsq(f"{tag}_b", f"{tag}_bu")
        unsq(f"{tag}_s", f"{tag}_su")
        nodes.extend([C(f"{tag}_h", [heads]), C(f"{tag}_d", [hd]),
                      N("Concat", [f"{tag}_bu", f"{tag}_su", f"{tag}_h", f"{tag}_d"],
                        f"{tag}_newshape", axis=0),
                      N("Reshape", [x, f"{tag}_newshape"], f"{tag}_r"),
                      N("Transpose", [f"{tag}_r"], f"{tag}_t", perm=[0, 2, 1, 3])])
        return f"{tag}_t"

    nodes += [N("MatMul", ["x", "Wq"], "q0"), N("Add", ["q0", "bq"], "q"),
              N("MatMul", ["x", "Wk"], "k"), N("MatMul", ["x", "Wv"], "v")]
    q, k, v = split_heads("q", "q"), split_heads("k", "k"), split_heads("v", "v")
    nodes += [N("Transpose", [k], "kt", perm=[0, 1, 3, 2]), N("MatMul", [q, "kt"], "sc"),
              C("eight", 8.0, np.float32), N("Div", ["sc", "eight"], "scd"),
              N("Softmax", ["scd"], "p", axis=-1), N("MatMul", ["p", v], "ctx"),
              N("Transpose", ["ctx"], "ctxt", perm=[0, 2, 1, 3]),
              N("Shape", ["ctxt"], "c_shape"), C("c_i0", 0),
              N("Gather", ["c_shape", "c_i0"], "c_b", axis=0),
              N("Shape", ["ctxt"], "c_shape1"), C("c_i1", 1),
              N("Gather", ["c_shape1", "c_i1"], "c_s", axis=0)]
    unsq("c_b", "c_bu")
    unsq("c_s", "c_su")
    nodes += [C("c_H", [H]), N("Concat", ["c_bu", "c_su", "c_H"], "c_newshape", axis=0),
              N("Reshape", ["ctxt", "c_newshape"], "merged"),
              N("MatMul", ["merged", "Wo"], "o"), N("Add", ["o", "x"], "res")]
    # LayerNorm as torch writes it below opset 17
    red = ({"axes": [-1]} if opset < 18 else {})
    ax_in = [] if opset < 18 else ["ln_axes"]
    if opset >= 18:
        nodes.append(C("ln_axes", [-1]))
    nodes += [N("ReduceMean", ["res"] + ax_in, "mean", **red),
              N("Sub", ["res", "mean"], "d"), C("two", 2.0, np.float32),
              N("Pow", ["d", "two"], "d2"), N("ReduceMean", ["d2"] + ax_in, "var", **red),
              C("eps", 1e-12, np.float32), N("Add", ["var", "eps"], "ve"),
              N("Sqrt", ["ve"], "sd"), N("Div", ["d", "sd"], "nrm"),
              N("Mul", ["nrm", "ln.weight"], "ln_g"), N("Add", ["ln_g", "ln.bias"], "ln")]
    # feed-forward with GELU, erf form (torch's spelling)
    nodes += [N("MatMul", ["ln", "W1"], "f1"), C("sqrt2", 1.4142135381698608, np.float32),
              N("Div", ["f1", "sqrt2"], "gd"), N("Erf", ["gd"], "ge"),
              C("one", 1.0, np.float32), N("Add", ["ge", "one"], "ga"),
              N("Mul", ["f1", "ga"], "gm"), C("half", 0.5, np.float32),
              N("Mul", ["gm", "half"], "gelu"), N("MatMul", ["gelu", "W2"], "y")]
    dims = ["batch", "seq", H] if symbolic else [2, 5, H]
    return model(nodes, [vi("x", dims)], [vi("y", dims)], inits, opset=opset)


@pytest.mark.parametrize("opset", [11, 14, 18])
def test_bert_attention_block_shape_chains_fold(opset):
    m = _attention(opset)
    r = check(m, ops=["layernorm", "gelu", "softmax", "scale"], no_opaque={
        "Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Sub", "Pow", "Sqrt", "Erf"},
        rtol=1e-3, atol=1e-4, input_shapes={"x": (2, 5, 16)})
    assert not r.defaulted and not r.dim_dependent
    assert r.symbolic == {"x": ["batch", "seq", 16]}
    assert "q_newshape" in r.folded and "q_newshape" not in r.ssa_of
    assert len(r.model.graph.node) == len(m.graph.node)       # nothing dropped from the model
    shapes = {n.attr["shape"] for n in r.graph.nodes if n.op == "reshape"}
    assert (2, 5, 2, 8) in shapes and (2, 5, 16) in shapes


def test_symbolic_dims_are_reported_not_fixed_silently():
    m = _attention(14)
    r = import_onnx(m, "m.onnx")
    assert r.symbolic == {"x": ["batch", "seq", 16]}
    assert r.defaulted == {"x": [0, 1]}
    assert r.graph.inputs[0][1].shape == (1, 1, 16)
    # the head-split target shapes read batch and seq; the constants 2, 8 and 16 do not
    assert {"q_b", "q_s", "q_newshape", "c_newshape"} <= r.dim_dependent
    r = import_onnx(m, "m.onnx", dims={"batch": 4, "seq": 3})
    assert r.defaulted == {} and r.graph.inputs[0][1].shape == (4, 3, 16)
    r = import_onnx(m, "m.onnx", dims={"batch": 4})
    assert r.defaulted == {"x": [1]} and r.graph.inputs[0][1].shape == (4, 1, 16)
    with pytest.raises(TirError, match=r"'x', whose dims are 'x' \[batch, seq, 16\]"):
        import_onnx(m, "m.onnx", input_shapes={"x": (2, 5, 8)})
    with pytest.raises(TirError, match="'y', which is not a graph input"):
        import_onnx(m, "m.onnx", input_shapes={"y": (2, 5, 16)})


def test_minus_one_and_unnamed_dims_are_symbolic(tmp_path):
    """[-1, 3, ?, ?] as tf2onnx and older exporters write it."""
    x = vi("x", [-1, 3, None, None])
    x.type.tensor_type.shape.dim[2].Clear()
    m = model([N("Relu", ["x"], "y")], [x], [vi("y", [-1, 3, None, None])])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    r = read_onnx(path)
    assert r.symbolic == {"x": ["?", 3, "?", "?"]} and r.defaulted == {"x": [0, 2, 3]}
    assert r.graph.inputs[0][1].shape == (1, 3, 1, 1)
    r = read_onnx(path, input_shapes={"x": (4, 3, 8, 8)})
    assert r.graph.inputs[0][1].shape == (4, 3, 8, 8) and r.defaulted == {}


def test_expand_range_where_constantofshape():
    """GPT-2 position ids and torch's expand: Range over a Shape, Where(Equal(-1)), Expand,
    ConstantOfShape, a Slice with a computed end on a causal-mask buffer."""
    S = 6
    mask = numpy_helper.from_array(np.tril(np.ones((1, 1, 8, 8), np.float32)), "bias")
    nodes = [N("Shape", ["x"], "sh"), C("one_i", 1), N("Gather", ["sh", "one_i"], "seq", axis=0),
             C("zero", 0), C("step", 1), N("Range", ["zero", "seq", "step"], "pos"),
             C("ax0", [0]), N("Unsqueeze", ["pos", "ax0"], "pos2"),
             C("neg", [-1, -1]), N("Shape", ["neg"], "nsh"),
             N("ConstantOfShape", ["nsh"], "ones", value=numpy_helper.from_array(
                 np.ones(1, np.int64))),
             C("m1", -1), N("Equal", ["neg", "m1"], "eq"), N("Where", ["eq", "ones", "neg"],
                                                             "size"),
             N("Expand", ["pos2", "size"], "posx"), N("Cast", ["posx"], "posf", to=F),
             N("Add", ["x", "posf"], "xa"),
             N("Unsqueeze", ["seq", "ax0"], "seq1"), C("st", [0]), C("ax2", [2]),
             N("Slice", ["bias", "st", "seq1", "ax2"], "b1"), C("ax3", [3]),
             N("Slice", ["b1", "st", "seq1", "ax3"], "b2"),
             C("one1", 1), N("Sub", ["seq", "one1"], "last"),
             N("Gather", ["b2", "last"], "b3", axis=2), N("Shape", ["xa"], "nsh2"),
             N("Reshape", ["b3", "nsh2"], "b4"), N("Mul", ["xa", "b4"], "y")]
    m = model(nodes, [vi("x", [1, S])], [vi("y", [1, S])], [mask], opset=14)
    r = check(m, no_opaque={"Range", "Expand", "Where", "ConstantOfShape", "Slice", "Equal"})
    assert {"pos", "posx", "size", "b2"} <= r.folded
    # a folded value read as data became a weight, and the ONNX name maps to it
    (wnode,) = [n for n in r.graph.nodes if n.op == "weight" and n.results[0] == r.ssa_of["posf"]]
    assert wnode.types[0].shape == (1, S)


def test_computed_pads_and_resize_with_empty_roi():
    """Pad amounts from a shape computation (paddle2onnx, tf2onnx SAME padding) and Resize with
    an empty roi and computed sizes (torch's F.interpolate at opset 11/13)."""
    nodes = [N("Shape", ["x"], "sh"), C("s0", [2]), C("e0", [4]), N("Slice", ["sh", "s0", "e0"],
                                                                      "hw"),
             C("mod", [2]), N("Mod", ["hw", "mod"], "odd"), C("z4", [0, 0, 0, 0]),
             C("z2", [0, 0]), N("Concat", ["z4", "z2", "odd"], "pads", axis=0),
             C("pv", 0.0, np.float32), N("Pad", ["x", "pads", "pv"], "xp", mode="constant"),
             N("Shape", ["xp"], "sh2"), C("s1", [0]), N("Slice", ["sh2", "s1", "s0"], "nc"),
             C("two", [2]), N("Mul", ["hw", "two"], "hw2"),
             N("Concat", ["nc", "hw2"], "sizes", axis=0),
             C("roi", np.zeros(0, np.float32), np.float32),
             C("scales", np.zeros(0, np.float32), np.float32),
             N("Resize", ["xp", "roi", "scales", "sizes"], "y", mode="nearest",
               coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    m = model(nodes, [vi("x", [1, 2, 5, 4])], [vi("y", [1, 2, 10, 8])], opset=11)
    r = check(m, ops=["pad"], no_opaque={"Pad", "Mod", "Concat"})
    (rs,) = [n for n in r.graph.nodes if n.op == "opaque"]
    assert rs.attr["op"] == "Resize" and rs.types[0].shape == (1, 2, 10, 8)
    assert rs.attr["opset"] == 11           # kept in the model's opset, with the empty roi
    stored = decode_node(rs.attr)           # and scales Resize-11 requires (never "")
    assert list(stored.input) == ["i0", "empty:1:0", "empty:1:0", "i1"]


def test_resize_upsample_forms():
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    for opset, nodes, inits in [
            (13, [N("Resize", ["x", "", "scales"], "y", mode="linear")], [scales]),
            (9, [N("Upsample", ["x", "scales"], "y", mode="nearest")], [scales]),
            (8, [N("Upsample", ["x"], "y", mode="nearest", scales=[1.0, 1.0, 2.0, 2.0])], [])]:
        m = model(nodes, [vi("x", [1, 2, 3, 3])], [vi("y", [1, 2, 6, 6])], inits, opset=opset,
                  ir=4 if opset < 10 else 7)
        r = check(m, export=opset >= 9)
        assert r.graph.nodes[-1].types[0].shape == (1, 2, 6, 6)


# --------------------------------------------------------------------- optional outputs

@pytest.mark.parametrize("opset", [7, 10, 12, 13, 21])
def test_dropout_with_unused_mask(opset):
    ins = ["x"]
    nodes = []
    at = {}
    if opset >= 12:
        nodes += [C("ratio", 0.1, np.float32), C("train", False, np.bool_)]
        ins += ["ratio", "train"]
    else:
        at = {"ratio": 0.1}
    nodes += [N("Dropout", ins, ["d", "mask"], **at), N("Relu", ["d"], "y")]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], opset=opset, ir=3 if opset < 9 else 8)
    r = check(m, ops=["dropout"], no_opaque={"Dropout"})
    assert "mask" not in r.ssa_of


def test_dropout_mask_used_is_opaque():
    m = model([N("Dropout", ["x"], ["d", "mask"])], [vi("x", [2, 3])],
              [vi("d", [2, 3]), vi("mask", [2, 3], TensorProto.BOOL)], opset=13)
    r = import_onnx(m)
    assert [n.attr.get("op") for n in r.graph.nodes] == ["Dropout"]


def test_maxpool_unused_indices_and_batchnorm_outputs():
    bn = [numpy_helper.from_array(np.abs(RNG.standard_normal(2)).astype(np.float32) + 0.5, n)
          for n in ("s", "b", "mu", "var")]
    m = model([N("MaxPool", ["x"], ["p", "idx"], kernel_shape=[2, 2], strides=[2, 2]),
               N("BatchNormalization", ["p", "s", "b", "mu", "var"], ["y"])],
              [vi("x", [1, 2, 4, 4])], [vi("y", [1, 2, 2, 2])], bn, opset=14)
    check(m, ops=["poolmax", "batchnorm"], no_opaque={"MaxPool", "BatchNormalization"})


# --------------------------------------------------------------------- control flow

def _branch(name, value):
    out = vi(name + "_out", list(np.shape(value)))
    return helper.make_graph([C(name + "_out", value, np.float32)], name, [], [out])


def test_if_with_constant_condition_is_inlined():
    """torch.jit-scripted code: `if x.size(1) == 4:` — the condition is a shape comparison."""
    then_g = helper.make_graph([N("Relu", ["x"], "t_out")], "then", [], [vi("t_out", [2, 4])])
    else_g = helper.make_graph([N("Neg", ["x"], "e_out")], "else", [], [vi("e_out", [2, 4])])
    nodes = [N("Shape", ["x"], "sh"), C("i1", 1), N("Gather", ["sh", "i1"], "d1", axis=0),
             C("four", 4), N("Equal", ["d1", "four"], "cond"),
             N("If", ["cond"], "r", then_branch=then_g, else_branch=else_g),
             N("Sigmoid", ["r"], "y")]
    m = model(nodes, [vi("x", [2, 4])], [vi("y", [2, 4])], opset=14)
    r = check(m, no_opaque={"If"})
    assert [n.op for n in r.graph.nodes] == ["relu", "sigmoid"]
    assert r.inlined and r.ssa_of["r"] == r.graph.nodes[0].results[0]


def test_if_with_data_condition_and_loops_stay_opaque():
    then_g = helper.make_graph([N("Relu", ["x2"], "t_out")], "then", [], [vi("t_out", [2, 2])])
    else_g = helper.make_graph([N("Mul", ["x2", "k"], "e_out")], "else", [],
                               [vi("e_out", [2, 2])])
    nodes = [N("ReduceSum", ["x"], "s", keepdims=0), C("z", 0.0, np.float32),
             N("Greater", ["s", "z"], "cond"), N("Sigmoid", ["x"], "x2"),
             N("If", ["cond"], "r", then_branch=then_g, else_branch=else_g),
             N("Add", ["r", "x"], "y")]
    m = model(nodes, [vi("x", [2, 2])], [vi("y", [2, 2])], [W("k", 2, 2)], opset=13)
    r = check(m, export=False)
    (if_node,) = [n for n in r.graph.nodes if n.op == "opaque" and n.attr["op"] == "If"]
    # the branches' read of x2 is an operand (the IR sees the dependency); the weight k they
    # read is carried inside the stored node (control_flow.with_constants_inside)
    assert if_node.attr["op"] == "If" and len(if_node.inputs) == 2
    # LSTM and GRU as torch writes them (opaque with inferred types), a Loop without outer reads
    H, X = 3, 4
    lw = [W("Wl", 1, 4 * H, X), W("Rl", 1, 4 * H, H), W("Wg", 1, 3 * H, X), W("Rg", 1, 3 * H, H)]
    body = helper.make_graph(
        [N("Identity", ["cond_in"], "cond_out"), N("Add", ["acc_in", "acc_in"], "acc_out")],
        "body", [vi("it", [], I64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [2, 2])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2, 2])])
    nodes = [N("LSTM", ["seq", "Wl", "Rl"], ["yl", "hl", ""], hidden_size=H),
             N("GRU", ["seq", "Wg", "Rg"], ["yg", ""], hidden_size=H),
             C("trip", 3), C("true", True, np.bool_),
             N("Loop", ["trip", "true", "x"], "lp", body=body)]
    m = model(nodes, [vi("seq", [5, 1, X]), vi("x", [2, 2])],
              [vi("yl", [5, 1, 1, H]), vi("hl", [1, 1, H]), vi("yg", [5, 1, 1, H]),
               vi("lp", [2, 2])], lw, opset=14)
    r = check(m, rtol=1e-4)
    assert sorted(n.attr["op"] for n in r.graph.nodes if n.op == "opaque") == [
        "GRU", "LSTM", "Loop"]


# --------------------------------------------------------------------- assorted op forms

def test_variadic_clip_cast_axes_inputs():
    nodes = [N("Sum", ["a", "b", "c"], "s"), N("Mean", ["a", "b"], "mn"),
             N("Max", ["a", "b", "c"], "mx"), N("Min", ["a", "c"], "mi"),
             N("Add", ["s", "mn"], "t1"), N("Add", ["mx", "mi"], "t2"),
             C("lo", 0.0, np.float32), C("hi", 6.0, np.float32),
             N("Clip", ["t1", "lo", "hi"], "c1"), N("Clip", ["t2", "lo"], "c2"),
             N("Cast", ["c1"], "c1f", to=F), N("Cast", ["c2"], "c2i", to=I64),
             N("Cast", ["c2i"], "c2f", to=F), N("Add", ["c1f", "c2f"], "u"),
             C("ax", [0]), N("Unsqueeze", ["u", "ax"], "u1"), N("Squeeze", ["u1", "ax"], "u2"),
             C("rax", [1]), N("ReduceMean", ["u2", "rax"], "y", keepdims=1)]
    m = model(nodes, [vi("a", [2, 3]), vi("b", [1, 3]), vi("c", [2, 1])], [vi("y", [2, 1])],
              opset=18)
    r = check(m, ops=["reduce_mean", "reshape"], no_opaque={"Sum", "Unsqueeze", "Squeeze",
                                                            "ReduceMean"})
    assert sum(n.op == "opaque" and n.attr["op"] == "Cast" for n in r.graph.nodes) == 2
    old = model([N("Clip", ["x"], "y", min=0.0, max=6.0)], [vi("x", [2, 3])], [vi("y", [2, 3])],
                opset=6, ir=3)
    check(old, export=False)


@pytest.mark.parametrize("tA, tB", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes(tA, tB):
    a = [3, 4] if not tA else [4, 3]
    w = W("w", *([4, 5] if not tB else [5, 4]))
    m = model([N("Gemm", ["x", "w", "bias"], "y", transA=tA, transB=tB, alpha=1.0, beta=1.0)],
              [vi("x", a)], [vi("y", [3, 5])], [w, W("bias", 5)], opset=11)
    r = check(m, ops=["matmul"], no_opaque={"Gemm"})
    # a constant B is transposed once at import (torch's Linear): matmul(x, W^T) with W^T a weight
    assert sum(n.op == "transpose" for n in r.graph.nodes) == tA


def test_layernormalization_op_and_gelu_op():
    inits = [W("g", 8), W("b", 8)]
    m = model([N("LayerNormalization", ["x", "g", "b"], "ln", axis=-1, epsilon=1e-5),
               N("Gelu", ["ln"], "y")], [vi("x", [2, 3, 8])], [vi("y", [2, 3, 8])], inits,
              opset=20)
    check(m, ops=["layernorm", "gelu"], no_opaque={"LayerNormalization", "Gelu"})


def test_tf2onnx_gelu_and_layernorm_spelling():
    """Keras through tf2onnx: (x * 0.5) * (1 + erf(x * 0.7071...)), LayerNorm with Mul(d, d)."""
    nodes = [C("h", 0.5, np.float32), C("r2", 0.7071067690849304, np.float32),
             C("one", 1.0, np.float32), N("Mul", ["x", "h"], "xh"), N("Mul", ["x", "r2"], "xr"),
             N("Erf", ["xr"], "e"), N("Add", ["e", "one"], "e1"), N("Mul", ["xh", "e1"], "g"),
             N("ReduceMean", ["g"], "m", axes=[-1]), N("Sub", ["g", "m"], "d"),
             N("Mul", ["d", "d"], "dd"), N("ReduceMean", ["dd"], "v", axes=[-1]),
             C("eps", 1e-3, np.float32), N("Add", ["v", "eps"], "ve"), N("Sqrt", ["ve"], "sd"),
             N("Div", ["d", "sd"], "n"), N("Mul", ["n", "gam"], "ng"),
             N("Add", ["ng", "bet"], "y")]
    m = model(nodes, [vi("x", [2, 8])], [vi("y", [2, 8])], [W("gam", 8), W("bet", 8)], opset=13)
    check(m, ops=["gelu", "layernorm"], no_opaque={"Erf", "Sqrt", "Sub"}, rtol=1e-3, atol=1e-4)


def _bottleneck(bias=True):
    """A ResNet bottleneck as torch.onnx writes it: Conv with explicit pads and a bias (BN
    folded by the exporter; without: BN kept), Relu, the projection shortcut, Add, Relu."""
    c, m_, o = 8, 4, 16
    ws = [W("w1", m_, c, 1, 1), W("b1", m_), W("w2", m_, m_, 3, 3), W("b2", m_),
          W("w3", o, m_, 1, 1), W("b3", o), W("wd", o, c, 1, 1), W("bd", o)]
    p1 = {"pads": [0, 0, 0, 0]}

    def b(name):
        return [name] if bias else []

    nodes = [N("Conv", ["x", "w1"] + b("b1"), "c1", kernel_shape=[1, 1], strides=[1, 1], **p1),
             N("Relu", ["c1"], "r1"),
             N("Conv", ["r1", "w2"] + b("b2"), "c2", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
               strides=[1, 1]), N("Relu", ["c2"], "r2"),
             N("Conv", ["r2", "w3"] + b("b3"), "c3", kernel_shape=[1, 1], strides=[1, 1], **p1),
             N("Conv", ["x", "wd"] + b("bd"), "cd", kernel_shape=[1, 1], strides=[1, 1], **p1),
             N("Add", ["c3", "cd"], "s"), N("Relu", ["s"], "y"),
             N("MaxPool", ["y"], "mp", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             N("GlobalAveragePool", ["mp"], "gp"), N("Flatten", ["gp"], "f", axis=1)]
    ws = ws if bias else ws[::2]
    return model(nodes, [vi("x", ["batch", c, 8, 8])], [vi("f", ["batch", o])], ws, opset=13)


def test_explicit_pads_import_as_same():
    r = check(_bottleneck(), no_opaque={"Conv", "MaxPool", "Flatten"},
              input_shapes={"x": (2, 8, 8, 8)})
    pads = [n.attr["pad"] for n in r.graph.nodes if n.op in ("conv2d", "poolmax")]
    assert pads == ["same", "same", "same", "same", (1, 1, 1, 1)]   # stride-2 3x3 pool on
    # an even size: SAME would pad (0, 1), the model pads (1, 1)


def test_bottleneck_conv_relu_rules_fire():
    """The Conv+Relu rules written for pad = "same" meet torch's explicit pads (Conv without
    bias: the IR's conv2d has none, so Conv+bias+Relu is conv2d, ewadd, relu, which the Conv+Relu
    rules do not match)."""
    from eqsat_nb.cost.analytic import AnalyticCostModel
    from eqsat_nb.optimize import Options, optimize
    from eqsat_nb.rules.parse import load_rules
    from eqsat_nb.search.limits import Limits

    r = import_onnx(_bottleneck(bias=False), input_shapes={"x": (1, 8, 8, 8)})
    res = optimize(r.graph, AnalyticCostModel("cpu"), load_rules(),
                   Options(limits=Limits(iter_limit=3, node_limit=3000), extract="greedy"))
    fired = {k: v for k, v in res.rules_fired.items() if v}
    assert fired.get("relu_conv_to_convrelu", 0) >= 2, fired


# --------------------------------------------------------------------- opsets, IR versions

@pytest.mark.parametrize("opset, ir", [(7, 3), (9, 4), (10, 5), (11, 6), (12, 7), (13, 7),
                                       (15, 8), (17, 8), (19, 9), (21, 10)])
def test_opsets_and_ir_versions(opset, ir):
    inputs = [vi("x", ["N", 2, 6, 6])]
    inits = [W("w", 3, 2, 3, 3), W("fc", 3, 4), W("fb", 4)]
    if ir < 4:
        inputs += [vi(t.name, list(t.dims)) for t in inits]
    shape = [numpy_helper.from_array(np.array([-1, 3], np.int64), "shape")]
    nodes = [N("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]), N("Relu", ["c"], "r"),
             N("GlobalAveragePool", ["r"], "g")]
    if opset >= 5:
        nodes += [N("Reshape", ["g", "shape"], "f")]
        inputs += [vi("shape", [2], I64)] if ir < 4 else []
    nodes += [N("Gemm", ["f", "fc", "fb"], "y", transB=0),
              N("Dropout", ["y"], ["z"] + (["mask"] if opset < 12 else []))]
    m = model(nodes, inputs, [vi("z", ["N", 4])], inits + shape, opset=opset, ir=ir)
    r = check(m, no_opaque={"Conv", "Gemm", "Reshape", "Dropout"}, input_shapes={"x": (2, 2, 6, 6)},
              export=True)
    assert [n.attr["pad"] for n in r.graph.nodes if n.op == "conv2d"] == ["same"]


# --------------------------------------------------------------------- errors

def test_errors_name_file_node_opset_and_remedy(tmp_path):
    nodes = [N("NonZero", ["x"], "nz"), N("Shape", ["nz"], "sh"),
             N("Reshape", ["x", "sh"], "y")]
    m = model(nodes, [vi("x", ["batch", 4])], [vi("y", ["batch", 4])], opset=13)
    path = tmp_path / "dyn.onnx"
    onnx.save(m, path)
    with pytest.raises(TirError) as e:
        read_onnx(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: error: node '/NonZero_nz' (NonZero, opset 13)")
    assert "batch" in msg and "--input-shape" in msg


def test_external_data(tmp_path):
    """Weights in an external file, as models over 2 GB are saved."""
    m = model([N("MatMul", ["x", "w"], "y")], [vi("x", ["b", 64])], [vi("y", ["b", 32])],
              [W("w", 64, 32)])
    path = tmp_path / "ext.onnx"
    w = numpy_helper.to_array(m.graph.initializer[0])
    onnx.save(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    assert (tmp_path / "ext.data").exists()
    r = read_onnx(path, input_shapes={"x": (3, 64)})
    np.testing.assert_array_equal(r.weights["w"], w)
    assert not compare(r, inputs_for(r))
