"""The NumPy reference interpreter against independent computations.

The interpreter is the semantic ground truth (rewrite rules and optimized models are verified
against it), so every operator is checked here against something that does not share its code:
plain-Python loops over tiny shapes and, for the operators ONNX has, a one-node ONNX model run by
onnxruntime on CPU. Every test goes through a real graph: GraphBuilder -> `interp.run` with explicit
values in `env` (inputs keyed by value name '%x0', weights by '@name').
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from eqsat_nb.ir import interp
from eqsat_nb.ir.ops.conv import conv2d
from eqsat_nb.ir.builder import GraphBuilder
from eqsat_nb.ir.ops import OPS

F64 = dict(rtol=1e-12, atol=1e-12)   # both sides in float64
F32 = dict(rtol=1e-5, atol=1e-5)     # ORT only has a float32 kernel (Conv, AveragePool, Gelu)


# ----------------------------------------------------------------------------------- helpers

def rand(*shape, seed=0, low=None, high=None):
    rng = np.random.default_rng([seed, *shape, 7])
    if low is not None:
        return rng.uniform(low, high, shape)
    return rng.standard_normal(shape)


def interp_op(op, *args, weights=(), dtype=np.float64, **attrs):
    """Evaluate `op(args) {attrs}` through a one-node graph. Operands whose position is in
    `weights` become weight nodes '@w<i>', the others graph inputs '%x<k>'. Returns the result
    array (a tuple for split). Checks the result dtype on the way."""
    b = GraphBuilder("t")
    env, names = {}, []
    for i, a in enumerate(args):
        a = np.asarray(a)
        if i in weights:
            v = b.weight(a.shape, name=f"w{i}")
            env[f"@w{i}"] = a
        else:
            v = b.input(a.shape)
            assert v == f"%x{sum(1 for j in range(i) if j not in weights)}"
            env[v] = a
        names.append(v)
    out = b.op(op, *names, **attrs)
    outs = out if isinstance(out, tuple) else (out,)
    res = interp.run(b.build(*outs), env, dtype=dtype)
    for r in res:
        assert r.dtype == np.dtype(dtype)
    return tuple(res) if OPS[op].multi_result else res[0]


_ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
               np.dtype(np.int64): TensorProto.INT64}


def ort_op(op_type, *args, n_out=1, opset=17, **attrs):
    """Run a one-node ONNX model on onnxruntime CPU. `args` are arrays; their dtypes decide the
    model's input types (int64 ones are shape/index operands, passed as inputs too)."""
    ins = [helper.make_tensor_value_info(f"i{k}", _ONNX_TYPES[np.asarray(a).dtype],
                                         np.asarray(a).shape) for k, a in enumerate(args)]
    out_type = _ONNX_TYPES[np.asarray(args[0]).dtype]
    outs = [helper.make_tensor_value_info(f"o{k}", out_type, None) for k in range(n_out)]
    node = helper.make_node(op_type, [f"i{k}" for k in range(len(args))],
                            [f"o{k}" for k in range(n_out)], **attrs)
    model = helper.make_model(helper.make_graph([node], "g", ins, outs),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    res = sess.run(None, {f"i{k}": np.asarray(a) for k, a in enumerate(args)})
    return res if n_out > 1 else res[0]


def i64(*v):
    return np.array(v, dtype=np.int64)


def elementwise(f, *arrays):
    """Apply a scalar Python function element by element (plain floats, no NumPy ufuncs)."""
    shape = arrays[0].shape
    flat = [a.ravel().tolist() for a in arrays]
    return np.array([f(*vals) for vals in zip(*flat)], dtype=np.float64).reshape(shape)


def py_sigmoid(v):
    return 1.0 / (1.0 + math.exp(-v))


def py_gelu(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


ACT_REF = {"none": lambda v: v, "relu": lambda v: max(v, 0.0), "sigmoid": py_sigmoid,
           "tanh": math.tanh}


def act_ref(act, a):
    return elementwise(ACT_REF[act], a)


def same_pads_1d(size, k, s):
    """TensorFlow / ONNX SAME_UPPER: ceil(size/s) outputs, the odd pixel of padding at the end."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def explicit_pads(hw, kernel, stride, pad):
    """[top, left, bottom, right] for pad = 'same' | 'valid' | 4 ints."""
    if pad == "valid":
        return (0, 0, 0, 0)
    if pad == "same":
        (t, b), (l, r) = (same_pads_1d(hw[0], kernel[0], stride[0]),
                          same_pads_1d(hw[1], kernel[1], stride[1]))
        return (t, l, b, r)
    return tuple(pad)


def onnx_pad_attrs(pad, pads):
    if pad == "same":
        return {"auto_pad": "SAME_UPPER"}
    if pad == "valid":
        return {"auto_pad": "VALID"}
    return {"pads": list(pads)}     # ONNX order [x1_begin, x2_begin, x1_end, x2_end] = [t, l, b, r]


# --------------------------------------------------------------------------------- loop references

def conv_ref(x, w, stride, pads, act="none"):
    """Direct convolution: seven nested loops, explicit zero padding, stride and groups."""
    n_, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    groups = c // cg
    og = o // groups
    t, l, b, r = pads
    sh, sw = stride
    ho, wo = (h + t + b - kh) // sh + 1, (wd + l + r - kw) // sw + 1
    xl, wl = x.tolist(), w.tolist()
    out = np.zeros((n_, o, ho, wo))
    for n in range(n_):
        for oc in range(o):
            g = oc // og
            for i in range(ho):
                for j in range(wo):
                    acc = 0.0
                    for ci in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                yy, xx = i * sh + p - t, j * sw + q - l
                                if 0 <= yy < h and 0 <= xx < wd:
                                    acc += xl[n][g * cg + ci][yy][xx] * wl[oc][ci][p][q]
                    out[n, oc, i, j] = acc
    return act_ref(act, out)


def pool_ref(x, kernel, stride, pads, kind, act="none"):
    """Max pooling over real pixels only; average pooling sums real pixels and divides by the
    full window size kh*kw (zero padding counts in the divisor)."""
    n_, c, h, wd = x.shape
    kh, kw = kernel
    sh, sw = stride
    t, l, b, r = pads
    ho, wo = (h + t + b - kh) // sh + 1, (wd + l + r - kw) // sw + 1
    xl = x.tolist()
    out = np.zeros((n_, c, ho, wo))
    for n in range(n_):
        for ch in range(c):
            for i in range(ho):
                for j in range(wo):
                    vals = [xl[n][ch][i * sh + p - t][j * sw + q - l]
                            for p in range(kh) for q in range(kw)
                            if 0 <= i * sh + p - t < h and 0 <= j * sw + q - l < wd]
                    out[n, ch, i, j] = max(vals) if kind == "max" else sum(vals) / (kh * kw)
    return act_ref(act, out)


def matmul_ref(x, y):
    """Loops over the broadcast batch (ONNX MatMul: batch dims aligned from the end, 1 repeats)."""
    m, k = x.shape[-2:]
    nn = y.shape[-1]
    r = max(x.ndim, y.ndim)
    xs, ys = (1,) * (r - x.ndim) + x.shape, (1,) * (r - y.ndim) + y.shape
    x, y = x.reshape(xs), y.reshape(ys)
    batch = [max(a, b) for a, b in zip(xs[:-2], ys[:-2])]
    out = np.zeros((*batch, m, nn))
    for bi in itertools.product(*map(range, batch)):
        xb = x[tuple(i if d > 1 else 0 for i, d in zip(bi, xs))].tolist()
        yb = y[tuple(i if d > 1 else 0 for i, d in zip(bi, ys))].tolist()
        for i in range(m):
            for j in range(nn):
                out[bi + (i, j)] = sum(xb[i][p] * yb[p][j] for p in range(k))
    return out


# ----------------------------------------------------------------------------------- conv2d

CONV_CASES = [
    # x shape, w shape, stride, pad
    ((1, 3, 5, 5), (4, 3, 3, 3), (1, 1), "same"),            # odd kernel
    ((1, 2, 5, 6), (3, 2, 2, 2), (1, 1), "same"),            # even kernel: extra pad after
    ((1, 2, 6, 5), (2, 2, 4, 4), (1, 1), "same"),            # even kernel 4
    ((2, 3, 6, 5), (2, 3, 3, 3), (2, 2), "same"),            # stride 2, even and odd sizes
    ((1, 2, 7, 6), (3, 2, 2, 2), (2, 2), "same"),            # stride 2, even kernel
    ((1, 2, 7, 8), (2, 2, 3, 3), (1, 2), "same"),            # unequal strides
    ((1, 2, 6, 5), (3, 2, 3, 2), (1, 1), "valid"),
    ((1, 2, 7, 7), (2, 2, 3, 3), (2, 2), "valid"),
    ((1, 2, 3, 3), (2, 2, 3, 3), (1, 1), "valid"),            # kernel = input: 1x1 output
    ((1, 2, 5, 5), (3, 2, 3, 3), (1, 1), (1, 2, 0, 1)),       # explicit [t, l, b, r]
    ((1, 2, 6, 7), (2, 2, 3, 2), (2, 1), (0, 1, 2, 0)),
    ((1, 2, 4, 9), (3, 2, 1, 7), (1, 1), "same"),            # 1x7
    ((1, 2, 9, 4), (3, 2, 7, 1), (1, 1), "same"),            # 7x1
    ((1, 3, 4, 4), (5, 3, 1, 1), (1, 1), "same"),            # 1x1
    ((1, 4, 5, 5), (6, 2, 3, 3), (1, 1), "same"),            # 2 groups
    ((1, 8, 6, 6), (8, 2, 3, 3), (2, 2), "same"),            # 4 groups, stride 2
    ((1, 4, 5, 5), (4, 1, 3, 3), (1, 1), "same"),            # depthwise
    ((1, 3, 5, 4), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1)),       # depthwise, multiplier 2
    ((2, 6, 5, 5), (6, 2, 2, 3), (2, 1), "valid"),            # 3 groups, non-square kernel
    ((2, 4, 5, 4), (6, 2, 1, 1), (2, 2), "same"),            # 1x1: 2 groups, stride 2, batch 2
    ((1, 3, 4, 4), (2, 3, 1, 1), (1, 1), (1, 0, 0, 1)),       # 1x1 with padding (im2col path)
    ((2, 4, 7, 6), (8, 1, 5, 5), (2, 2), "same"),            # depthwise x2, stride 2, batch 2
]


def _conv_id(case):
    x, w, s, p = case
    return f"x{'x'.join(map(str, x))}-w{'x'.join(map(str, w))}-s{s[0]}{s[1]}-{p}"


@pytest.mark.parametrize("case", CONV_CASES, ids=_conv_id)
def test_conv2d_against_loops_and_onnxruntime(case):
    xs, ws, stride, pad = case
    x, w = rand(*xs, seed=1), rand(*ws, seed=2)
    got = interp_op("conv2d", x, w, weights=(1,), stride=stride, pad=pad)
    pads = explicit_pads(xs[2:], ws[2:], stride, pad)
    np.testing.assert_allclose(got, conv_ref(x, w, stride, pads), **F64)
    groups = xs[1] // ws[1]
    ref = ort_op("Conv", x.astype(np.float32), w.astype(np.float32), group=groups,
                 strides=list(stride), kernel_shape=list(ws[2:]), **onnx_pad_attrs(pad, pads))
    np.testing.assert_allclose(got, ref, **F32)
    got32 = interp_op("conv2d", x, w, weights=(1,), dtype=np.float32, stride=stride, pad=pad)
    np.testing.assert_allclose(got32, ref, **F32)


@pytest.mark.parametrize("ws", [(6, 4, 1, 1), (4, 1, 3, 3), (6, 2, 3, 3)],
                         ids=["1x1", "taps", "im2col"])
def test_conv2d_reads_a_strided_view_as_its_copy(ws):
    """Kernels may return views (a transpose, a slice): each conv path reads them as arrays."""
    base = rand(2, 5, 7, 4, seed=9).transpose(0, 3, 2, 1)      # [2, 4, 7, 5], not contiguous
    w = rand(*ws, seed=10)
    for stride in ((1, 1), (2, 2)):
        a = {"stride": stride, "pad": "same", "act": "none"}
        np.testing.assert_array_equal(conv2d(base, w, a),
                                      conv2d(np.ascontiguousarray(base), w, a))


@pytest.mark.parametrize("pad", ["same", (0, 0, 1, 1)])
def test_conv2d_explicit_pads_in_onnx_order_match_same(pad):
    """SAME on a 6x6 input with a 2x2 kernel pads one pixel at the bottom and right only."""
    x, w = rand(1, 2, 6, 6, seed=3), rand(3, 2, 2, 2, seed=4)
    got = interp_op("conv2d", x, w, weights=(1,), pad=pad)
    np.testing.assert_allclose(got, conv_ref(x, w, (1, 1), (0, 0, 1, 1)), **F64)


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh"])
def test_conv2d_fused_activation(act):
    x, w = rand(1, 4, 5, 5, seed=5), rand(4, 2, 3, 3, seed=6)
    got = interp_op("conv2d", x, w, weights=(1,), stride=(2, 1), pad="same", act=act)
    np.testing.assert_allclose(got, conv_ref(x, w, (2, 1), explicit_pads((5, 5), (3, 3), (2, 1),
                                                                         "same"), act), **F64)
    plain = interp_op("conv2d", x, w, weights=(1,), stride=(2, 1), pad="same")
    np.testing.assert_allclose(got, interp_op(act, plain), **F64)


# ----------------------------------------------------------------------------------- merge, enlarge

def merge_ref(w, count, groups):
    """TASO merge_gconv by hand: old group j (output channels j*O/g ..) is group j // count of the
    new conv; its C/g input channels sit at slot j % count of the new group's count*C/g."""
    o, cg, kh, kw = w.shape
    og = o // groups
    out = np.zeros((o, cg * count, kh, kw))
    for oc in range(o):
        j = oc // og
        slot = j % count
        for ci in range(cg):
            for p in range(kh):
                for q in range(kw):
                    out[oc, slot * cg + ci, p, q] = w[oc, ci, p, q]
    return out


@pytest.mark.parametrize("groups,count,cg,og", [
    (4, 2, 2, 1), (8, 4, 1, 2), (4, 4, 2, 1), (2, 1, 3, 2), (6, 3, 1, 1), (6, 2, 2, 1),
    (2, 2, 1, 3),
])
def test_merge_preserves_grouped_conv(groups, count, cg, og):
    """conv2d(x, w) with g groups == conv2d(x, merge(w){count, groups}) computed with g/count."""
    c, o = groups * cg, groups * og
    x, w = rand(2, c, 5, 4, seed=7), rand(o, cg, 3, 3, seed=8)
    b = GraphBuilder("merge")
    xv, wv = b.input(x.shape), b.weight(w.shape, name="w")
    direct = b.op("conv2d", xv, wv)
    mw = b.op("merge", wv, count=count, groups=groups)
    assert b.shape(mw) == (o, cg * count, 3, 3)
    merged = b.op("conv2d", xv, mw)
    got_direct, got_merged, got_w = interp.run(b.build(direct, merged, mw), {"%x0": x, "@w": w},
                                               dtype=np.float64)
    np.testing.assert_allclose(got_w, merge_ref(w, count, groups), **F64)
    ref = conv_ref(x, w, (1, 1), explicit_pads((5, 4), (3, 3), (1, 1), "same"))
    np.testing.assert_allclose(got_direct, ref, **F64)
    np.testing.assert_allclose(got_merged, ref, **F64)
    # and the merged weight really is a (groups/count)-group conv weight for onnxruntime too
    ort_ref = ort_op("Conv", x.astype(np.float32), got_w.astype(np.float32),
                     group=groups // count, auto_pad="SAME_UPPER")
    np.testing.assert_allclose(got_merged, ort_ref, **F32)


def enlarge_ref(w, rh, rw):
    o, c, kh, kw = w.shape
    ph, pw = (rh - kh) // 2, (rw - kw) // 2
    out = np.zeros((o, c, rh, rw))
    for a, bb, p, q in itertools.product(range(o), range(c), range(kh), range(kw)):
        out[a, bb, p + ph, q + pw] = w[a, bb, p, q]
    return out


@pytest.mark.parametrize("ks,rs,stride", [
    ((3, 3), (5, 5), (1, 1)), ((1, 1), (3, 3), (1, 1)), ((1, 3), (3, 5), (1, 1)),
    ((2, 2), (4, 4), (1, 1)), ((3, 3), (5, 5), (2, 2)), ((3, 3), (3, 3), (1, 1)),
])
def test_enlarge_preserves_same_conv(ks, rs, stride):
    """conv(x, w_k){same} == conv(x, enlarge(w_k, w_r)){same}: the kernel is centred."""
    x = rand(1, 3, 6, 7, seed=9)
    w, ref_w = rand(4, 3, *ks, seed=10), rand(2, 5, *rs, seed=11)  # ref only lends its size
    b = GraphBuilder("enlarge")
    xv, wv, rv = b.input(x.shape), b.weight(w.shape, name="w"), b.weight(ref_w.shape, name="r")
    small = b.op("conv2d", xv, wv, stride=stride)
    big_w = b.op("enlarge", wv, rv)
    big = b.op("conv2d", xv, big_w, stride=stride)
    got_small, got_big, got_w = interp.run(b.build(small, big, big_w),
                                           {"%x0": x, "@w": w, "@r": ref_w}, dtype=np.float64)
    np.testing.assert_array_equal(got_w, enlarge_ref(w, *rs))
    np.testing.assert_allclose(got_small, got_big, **F64)
    np.testing.assert_allclose(got_big, conv_ref(x, got_w, stride, explicit_pads(
        (6, 7), rs, stride, "same")), **F64)


# ----------------------------------------------------------------------------------- pooling

POOL_CASES = [
    # x shape, kernel, stride, pad
    ((1, 2, 5, 5), (3, 3), (1, 1), "same"),
    ((1, 2, 5, 6), (2, 2), (1, 1), "same"),            # even window: pad after
    ((2, 3, 7, 6), (3, 3), (2, 2), "same"),
    ((1, 2, 6, 6), (2, 2), (2, 2), "valid"),
    ((1, 2, 7, 7), (3, 3), (2, 2), "valid"),
    ((1, 2, 5, 6), (3, 2), (2, 1), (1, 0, 1, 1)),      # explicit [t, l, b, r], non-square window
    ((1, 1, 6, 5), (3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 2, 4, 4), (1, 1), (1, 1), "same"),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=_conv_id)
def test_poolmax_against_loops_and_onnxruntime(case):
    xs, kernel, stride, pad = case
    x = rand(*xs, seed=12)
    got = interp_op("poolmax", x, kernel=kernel, stride=stride, pad=pad)
    pads = explicit_pads(xs[2:], kernel, stride, pad)
    np.testing.assert_allclose(got, pool_ref(x, kernel, stride, pads, "max"), **F64)
    ref = ort_op("MaxPool", x, kernel_shape=list(kernel), strides=list(stride),
                 **onnx_pad_attrs(pad, pads))
    np.testing.assert_allclose(got, ref, **F64)


def test_poolmax_padding_never_wins():
    x = -rand(1, 2, 5, 5, seed=13, low=1.0, high=2.0)     # all negative
    got = interp_op("poolmax", x, kernel=(3, 3), stride=(2, 2), pad=(1, 1, 1, 1))
    assert (got < 0).all()
    np.testing.assert_allclose(got, pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), "max"), **F64)


@pytest.mark.parametrize("case", POOL_CASES, ids=_conv_id)
def test_poolavg_counts_padding_against_loops_and_onnxruntime(case):
    xs, kernel, stride, pad = case
    x = rand(*xs, seed=14)
    got = interp_op("poolavg", x, kernel=kernel, stride=stride, pad=pad)
    pads = explicit_pads(xs[2:], kernel, stride, pad)
    np.testing.assert_allclose(got, pool_ref(x, kernel, stride, pads, "avg"), **F64)
    ref = ort_op("AveragePool", x.astype(np.float32), kernel_shape=list(kernel),
                 strides=list(stride), count_include_pad=1, pads=list(pads))
    np.testing.assert_allclose(got, ref, **F32)


def test_poolavg_corner_divisor_includes_padding():
    x = np.ones((1, 1, 3, 3))
    got = interp_op("poolavg", x, kernel=(3, 3), pad="same")
    assert got[0, 0, 0, 0] == pytest.approx(4 / 9)     # 4 real pixels, 5 padding, divisor 9
    assert got[0, 0, 0, 1] == pytest.approx(6 / 9)
    assert got[0, 0, 1, 1] == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["poolmax", "poolavg"])
@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh"])
def test_pool_fused_activation(kind, act):
    x = rand(1, 2, 5, 5, seed=15)
    got = interp_op(kind, x, kernel=(2, 2), stride=(1, 1), pad="same", act=act)
    pads = explicit_pads((5, 5), (2, 2), (1, 1), "same")
    np.testing.assert_allclose(got, pool_ref(x, (2, 2), (1, 1), pads, kind[4:], act), **F64)


# ----------------------------------------------------------------------------------- matmul

@pytest.mark.parametrize("xs,ys", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)),
                                   ((2, 2, 3, 1), (2, 2, 1, 2)), ((1, 1), (1, 1)),
                                   ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)),
                                   ((2, 1, 3, 4), (3, 4, 2)), ((1, 3, 2, 4), (2, 1, 4, 3))])
def test_matmul_against_loops_and_onnxruntime(xs, ys):
    x, y = rand(*xs, seed=16), rand(*ys, seed=17)
    got = interp_op("matmul", x, y, weights=(1,))
    np.testing.assert_allclose(got, matmul_ref(x, y), **F64)
    np.testing.assert_allclose(got, ort_op("MatMul", x, y), **F64)


@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh"])
def test_matmul_fused_activation(act):
    x, y = rand(2, 3, 4, seed=18), rand(2, 4, 3, seed=19)
    got = interp_op("matmul", x, y, act=act)
    np.testing.assert_allclose(got, act_ref(act, matmul_ref(x, y)), **F64)


# ----------------------------------------------------------------------------------- element-wise

@pytest.mark.parametrize("op,onnx_op,f", [
    ("ewadd", "Add", lambda a, b: a + b),
    ("ewmul", "Mul", lambda a, b: a * b),
    ("ewsub", "Sub", lambda a, b: a - b),
    ("ewdiv", "Div", lambda a, b: a / b),
])
def test_binary_elementwise(op, onnx_op, f):
    x, y = rand(2, 3, 4, seed=20), rand(2, 3, 4, seed=21)
    got = interp_op(op, x, y)
    np.testing.assert_allclose(got, elementwise(f, x, y), **F64)
    np.testing.assert_allclose(got, ort_op(onnx_op, x, y), **F64)


@pytest.mark.parametrize("op,onnx_op,f", [
    ("relu", "Relu", lambda v: max(v, 0.0)),
    ("tanh", "Tanh", math.tanh),
    ("sigmoid", "Sigmoid", py_sigmoid),
])
def test_unary_elementwise(op, onnx_op, f):
    x = rand(3, 5, seed=22) * 4
    got = interp_op(op, x)
    np.testing.assert_allclose(got, elementwise(f, x), **F64)
    np.testing.assert_allclose(got, ort_op(onnx_op, x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("op,onnx_op,f,low", [
    ("erf", "Erf", math.erf, None),
    ("sqrt", "Sqrt", math.sqrt, 0.0),
    ("reciprocal", "Reciprocal", lambda v: 1.0 / v, 0.5),
])
def test_unary_math(op, onnx_op, f, low):
    x = rand(3, 5, seed=31) * 3 if low is None else rand(3, 5, seed=31, low=low, high=4.0)
    got = interp_op(op, x)
    np.testing.assert_allclose(got, elementwise(f, x), **F64)
    if op == "erf":                    # ORT's Erf: float32 only
        x32 = x.astype(np.float32)
        np.testing.assert_allclose(interp_op(op, x32, dtype=np.float32),
                                   ort_op(onnx_op, x32, opset=13), **F32)
    else:
        np.testing.assert_allclose(got, ort_op(onnx_op, x, opset=13), rtol=1e-12, atol=1e-15)
    with np.errstate(invalid="ignore"):
        assert np.isnan(interp_op("sqrt", np.array([-1.0]))).all()


def test_silu_is_x_times_sigmoid():
    x = rand(3, 5, seed=32) * 4
    got = interp_op("silu", x)
    np.testing.assert_allclose(got, elementwise(lambda v: v * py_sigmoid(v), x), **F64)
    # torch.onnx writes F.silu as Sigmoid and Mul: the same numbers, to the bit
    np.testing.assert_array_equal(got, x * interp_op("sigmoid", x))


@pytest.mark.parametrize("op,onnx_op,value,f", [
    ("shift", "Add", 1e-5, lambda v, c: v + c),
    ("shift", "Add", -3.0, lambda v, c: v + c),
    ("divide", "Div", 1.4142135623730951, lambda v, c: v / c),
    ("power", "Pow", 2.0, lambda v, c: v ** c),
    ("power", "Pow", 3.0, lambda v, c: v ** c),
])
def test_scalar_forms(op, onnx_op, value, f):
    """x (op) value, the value in x's element type, as ONNX's scalar constant operand."""
    x = rand(2, 3, seed=33) * 2
    got = interp_op(op, x, value=value)
    np.testing.assert_allclose(got, elementwise(lambda v: f(v, value), x), **F64)
    np.testing.assert_allclose(got, ort_op(onnx_op, x, np.asarray(value)), **F64)
    x32 = x.astype(np.float32)         # float32: the constant rounded to float32 first
    got32 = interp_op(op, x32, value=value, dtype=np.float32)
    np.testing.assert_allclose(got32, ort_op(onnx_op, x32, np.asarray(value, np.float32)),
                               rtol=1e-6, atol=1e-7)


def test_gelu_tanh_form():
    x = np.concatenate([rand(2, 7, seed=34) * 3, [[-8.0, -3.0, -1e-3, 0.0, 1e-3, 3.0, 8.0]]])
    got = interp_op("gelu", x, approximate="tanh")

    def py_tanh_gelu(v):
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    np.testing.assert_allclose(got, elementwise(py_tanh_gelu, x), rtol=1e-12, atol=1e-14)
    ref = ort_op("Gelu", x.astype(np.float32), opset=20, approximate="tanh")
    np.testing.assert_allclose(interp_op("gelu", x, dtype=np.float32, approximate="tanh"), ref,
                               **F32)


def test_gelu_erf_form():
    x = np.concatenate([rand(2, 7, seed=23) * 3, [[-8.0, -3.0, -1e-3, 0.0, 1e-3, 3.0, 8.0]]])
    got = interp_op("gelu", x)
    np.testing.assert_allclose(got, elementwise(py_gelu, x), **F64)
    ref = ort_op("Gelu", x.astype(np.float32), opset=20)      # ORT's Gelu: float32 only
    np.testing.assert_allclose(interp_op("gelu", x, dtype=np.float32), ref, **F32)
    # the erf form, not the tanh approximation: they differ by ~1e-3 near |x| = 2
    tanh_form = 0.5 * 2.0 * (1 + math.tanh(math.sqrt(2 / math.pi) * (2.0 + 0.044715 * 8.0)))
    assert abs(interp_op("gelu", np.array([2.0])).item() - py_gelu(2.0)) < 1e-14
    assert abs(py_gelu(2.0) - tanh_form) > 1e-5


@pytest.mark.parametrize("value", [2.5, -0.5, 0.0, 3])
def test_scale(value):
    x = rand(2, 3, seed=24)
    got = interp_op("scale", x, value=value)
    np.testing.assert_allclose(got, elementwise(lambda v: v * float(value), x), **F64)


def test_dropout_is_identity():
    x = rand(2, 3, 4, seed=25)
    np.testing.assert_array_equal(interp_op("dropout", x, ratio=0.3), x)
    np.testing.assert_array_equal(interp_op("dropout", x), x)


# ----------------------------------------------------------------------------------- normalizations

def batchnorm_ref(x, scale, bias, mean, var, eps):
    out = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        c = idx[1]
        out[idx] = (x[idx] - mean[c]) / math.sqrt(var[c] + eps) * scale[c] + bias[c]
    return out


# eps values exact in float32: ONNX stores `epsilon` as a float32 attribute
@pytest.mark.parametrize("xs,eps", [((2, 3, 4, 5), 2.0**-17), ((4, 3), 2.0**-10),
                                    ((1, 2, 5), 0.125)])
def test_batchnorm(xs, eps):
    c = xs[1]
    x = rand(*xs, seed=26)
    scale, bias, mean = rand(c, seed=27), rand(c, seed=28), rand(c, seed=29)
    var = rand(c, seed=30, low=0.2, high=2.0)
    got = interp_op("batchnorm", x, scale, bias, mean, var, weights=(1, 2, 3, 4), eps=eps)
    np.testing.assert_allclose(got, batchnorm_ref(x, scale, bias, mean, var, eps), **F64)
    ref = ort_op("BatchNormalization", x, scale, bias, mean, var, opset=15, epsilon=eps)
    np.testing.assert_allclose(got, ref, **F64)


def softmax_ref(x, axis):
    out = np.zeros_like(x)
    axis %= x.ndim
    for idx in np.ndindex(*x.shape[:axis], *x.shape[axis + 1:]):
        line = [x[idx[:axis] + (k,) + idx[axis:]] for k in range(x.shape[axis])]
        m = max(line)
        es = [math.exp(v - m) for v in line]
        for k, e in enumerate(es):
            out[idx[:axis] + (k,) + idx[axis:]] = e / sum(es)
    return out


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_softmax(axis):
    x = rand(2, 3, 4, seed=31) * 5
    x[0, 0, 0] = 700.0                                   # would overflow exp() unshifted
    got = interp_op("softmax", x, axis=axis)
    np.testing.assert_allclose(got, softmax_ref(x, axis), **F64)
    np.testing.assert_allclose(got, ort_op("Softmax", x, opset=13, axis=axis), **F64)


def layernorm_ref(x, gamma, beta, axis, eps):
    axis %= x.ndim
    out = np.zeros_like(x)
    inner = x.shape[axis:]
    for outer in np.ndindex(*x.shape[:axis]):
        vals = [x[outer + i] for i in np.ndindex(*inner)]
        mu = sum(vals) / len(vals)
        var = sum((v - mu) ** 2 for v in vals) / len(vals)
        for i in np.ndindex(*inner):
            out[outer + i] = (x[outer + i] - mu) / math.sqrt(var + eps) * gamma[i] + beta[i]
    return out


@pytest.mark.parametrize("xs,axis,eps", [((2, 3, 4), -1, 2.0**-17), ((2, 3, 4), 1, 2.0**-17),
                                         ((3, 5), 1, 2.0**-10), ((2, 2, 3), -2, 0.5)])
def test_layernorm(xs, axis, eps):
    x = rand(*xs, seed=32) * 2 + 1
    norm = xs[axis % len(xs):]
    gamma, beta = rand(*norm, seed=33), rand(*norm, seed=34)
    got = interp_op("layernorm", x, gamma, beta, weights=(1, 2), axis=axis, eps=eps)
    np.testing.assert_allclose(got, layernorm_ref(x, gamma, beta, axis, eps), **F64)
    ref = ort_op("LayerNormalization", x, gamma, beta, axis=axis, epsilon=eps)
    np.testing.assert_allclose(got, ref, **F64)


@pytest.mark.parametrize("xs,axis,eps", [((2, 3, 8), -1, 1e-6), ((2, 3, 4), 1, 0.25)])
def test_rmsnorm(xs, axis, eps):
    """ONNX's RMSNormalization: x / sqrt(mean(x * x) + eps) * gamma over the axes from `axis`."""
    x = rand(*xs, seed=36) * 2 + 1
    norm = xs[axis % len(xs):]
    gamma = rand(*norm, seed=37)
    got = interp_op("rmsnorm", x, gamma, weights=(1,), axis=axis, eps=eps)
    ref = np.zeros_like(x)
    lead = xs[:axis % len(xs)]
    for idx in np.ndindex(*lead):
        row = x[idx]
        ref[idx] = row / math.sqrt(float((row * row).mean()) + eps) * gamma
    np.testing.assert_allclose(got, ref, **F64)
    import onnx.defs
    if onnx.defs.onnx_opset_version() >= 23:
        ort = ort_op("RMSNormalization", x.astype(np.float32), gamma.astype(np.float32),
                     opset=23, axis=axis, epsilon=eps)
        np.testing.assert_allclose(interp_op("rmsnorm", x.astype(np.float32),
                                             gamma.astype(np.float32), weights=(1,), axis=axis,
                                             eps=eps, dtype=np.float32), ort, **F32)


@pytest.mark.parametrize("axes,keepdims", [((1,), True), ((1,), False), ((0, 2), True),
                                           ((-1,), False), ((2, 0), False), ((0, 1, 2), True)])
def test_reduce_mean(axes, keepdims):
    x = rand(2, 3, 4, seed=35)
    got = interp_op("reduce_mean", x, axes=axes, keepdims=keepdims)
    red = {a % 3 for a in axes}
    ref = np.zeros(tuple(1 if i in red else d for i, d in enumerate(x.shape)))
    count = math.prod(x.shape[i] for i in red)
    for idx in np.ndindex(*x.shape):
        ref[tuple(0 if i in red else k for i, k in enumerate(idx))] += x[idx] / count
    if not keepdims:
        ref = ref.reshape([d for i, d in enumerate(x.shape) if i not in red])
    np.testing.assert_allclose(got, ref, **F64)
    ort_ref = ort_op("ReduceMean", x, axes=list(axes), keepdims=int(keepdims))
    np.testing.assert_allclose(got, ort_ref, **F64)


# ----------------------------------------------------------------------------------- data movement

@pytest.mark.parametrize("xs,perm", [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)),
                                     ((1, 2, 3, 4), (0, 2, 3, 1)), ((2, 3, 4), (0, 1, 2))])
def test_transpose(xs, perm):
    x = rand(*xs, seed=36)
    got = interp_op("transpose", x, perm=perm)
    ref = np.zeros(tuple(xs[p] for p in perm))
    for idx in np.ndindex(*ref.shape):
        src = [0] * len(xs)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        ref[idx] = x[tuple(src)]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, ort_op("Transpose", x, perm=list(perm)))


@pytest.mark.parametrize("shapes,axis", [([(2, 1, 3), (2, 4, 3), (2, 2, 3)], 1),
                                         ([(1, 3), (2, 3)], 0), ([(2, 2), (2, 3)], -1),
                                         ([(2, 3)], 0)])
def test_concat(shapes, axis):
    xs = [rand(*s, seed=37 + i) for i, s in enumerate(shapes)]
    got = interp_op("concat", *xs, axis=axis)
    ax = axis % len(shapes[0])
    ref_shape = list(shapes[0])
    ref_shape[ax] = sum(s[ax] for s in shapes)
    ref = np.zeros(ref_shape)
    offset = 0
    for x in xs:
        for idx in np.ndindex(*x.shape):
            dst = list(idx)
            dst[ax] += offset
            ref[tuple(dst)] = x[idx]
        offset += x.shape[ax]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, ort_op("Concat", *xs, axis=axis))


@pytest.mark.parametrize("xs,axis,sizes", [((2, 5, 3), 1, (2, 3)), ((6, 2), 0, (1, 2, 3)),
                                           ((2, 4), -1, (1, 3)), ((3, 2), 0, (3,))])
def test_split(xs, axis, sizes):
    x = rand(*xs, seed=40)
    got = interp_op("split", x, axis=axis, sizes=sizes)
    assert len(got) == len(sizes)
    ax = axis % len(xs)
    start = 0
    for part, size in zip(got, sizes):
        ref_shape = list(xs)
        ref_shape[ax] = size
        ref = np.zeros(ref_shape)
        for idx in np.ndindex(*ref_shape):
            src = list(idx)
            src[ax] += start
            ref[idx] = x[tuple(src)]
        np.testing.assert_array_equal(part, ref)
        start += size
    ort_parts = ort_op("Split", x, i64(*sizes), n_out=len(sizes), opset=13, axis=axis)
    if len(sizes) == 1:
        ort_parts = [ort_parts]
    for part, ref in zip(got, ort_parts):
        np.testing.assert_array_equal(part, ref)


@pytest.mark.parametrize("xs,shape", [((2, 3, 4), (6, 4)), ((2, 3, 4), (24,)),
                                      ((6,), (1, 2, 3, 1)), ((2, 6), (4, 3))])
def test_reshape_row_major(xs, shape):
    x = rand(*xs, seed=41)
    got = interp_op("reshape", x, shape=shape)
    flat = [x[idx] for idx in np.ndindex(*xs)]             # row-major order by hand
    ref = np.zeros(shape)
    for k, idx in enumerate(np.ndindex(*shape)):
        ref[idx] = flat[k]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, ort_op("Reshape", x, i64(*shape), opset=14))


@pytest.mark.parametrize("axes,starts,ends", [((1,), (1,), (3,)), ((0, 2), (1, 0), (2, 3)),
                                              ((-1,), (2,), (4,)), ((2, 0), (1, 0), (2, 2))])
def test_slice(axes, starts, ends):
    x = rand(2, 3, 4, seed=42)
    got = interp_op("slice", x, axes=axes, starts=starts, ends=ends)
    lo, hi = [0, 0, 0], list(x.shape)
    for ax, s, e in zip(axes, starts, ends):
        lo[ax % 3], hi[ax % 3] = s, e
    ref = np.zeros([h - l for l, h in zip(lo, hi)])
    for idx in np.ndindex(*ref.shape):
        ref[idx] = x[tuple(i + l for i, l in zip(idx, lo))]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, ort_op("Slice", x, i64(*starts), i64(*ends), i64(*axes),
                                              opset=13))


@pytest.mark.parametrize("pads,value", [((0, 1, 2, 0, 3, 0), 0.0), ((1, 0, 0, 1, 1, 2), 1.5),
                                        ((0, 0, 0, 0, 0, 0), -2.0)])
def test_pad(pads, value):
    x = rand(2, 3, 2, seed=43)
    got = interp_op("pad", x, pads=pads, value=value)
    begins, ends = pads[:3], pads[3:]
    ref = np.full([d + b + e for d, b, e in zip(x.shape, begins, ends)], value)
    for idx in np.ndindex(*x.shape):
        ref[tuple(i + b for i, b in zip(idx, begins))] = x[idx]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, ort_op("Pad", x, i64(*pads), np.array(value), opset=13,
                                              mode="constant"))


@pytest.mark.parametrize("xs,shape", [((3, 1), (2, 3, 4)), ((4,), (2, 3, 4)), ((), (2, 2)),
                                      ((1, 3, 1), (2, 3, 2)), ((2, 3), (2, 3))])
def test_broadcast(xs, shape):
    x = rand(*xs, seed=44) if xs else np.array(1.25)
    got = interp_op("broadcast", x, shape=shape)
    ref = np.zeros(shape)
    for idx in np.ndindex(*shape):
        tail = idx[len(shape) - len(xs):]
        ref[idx] = x[tuple(0 if d == 1 else i for i, d in zip(tail, xs))]
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, ort_op("Expand", x, i64(*shape), opset=13))


def test_noop_joins_outputs_into_a_scalar():
    x, y = rand(2, 3, seed=45), rand(4, seed=46)
    for dtype in (np.float32, np.float64):
        got = interp_op("noop", x, y, dtype=dtype)
        assert got.shape == () and got.dtype == dtype


# ------------------------------------------------------------------------- every op, both dtypes

# one sample application of every non-leaf op: operand shapes, positions that are weights, attrs
SAMPLES = {
    "ewadd": ([(2, 3), (2, 3)], (), {}),
    "ewmul": ([(2, 3), (2, 3)], (), {}),
    "matmul": ([(2, 3, 4), (2, 4, 5)], (1,), {"act": "relu"}),
    "conv2d": ([(1, 4, 5, 5), (6, 2, 3, 3)], (1,), {"stride": (2, 2), "act": "tanh"}),
    "relu": ([(2, 3)], (), {}),
    "tanh": ([(2, 3)], (), {}),
    "sigmoid": ([(2, 3)], (), {}),
    "poolmax": ([(1, 2, 5, 5)], (), {"kernel": (3, 3), "stride": (2, 2)}),
    "poolavg": ([(1, 2, 5, 5)], (), {"kernel": (2, 2), "pad": "valid", "act": "sigmoid"}),
    "transpose": ([(2, 3, 4)], (), {"perm": (2, 0, 1)}),
    "enlarge": ([(4, 2, 1, 3), (4, 2, 3, 3)], (0, 1), {}),
    "concat": ([(2, 3), (2, 1)], (), {"axis": 1}),
    "split": ([(2, 5)], (), {"axis": 1, "sizes": (2, 3)}),
    "merge": ([(8, 2, 3, 3)], (0,), {"count": 2, "groups": 4}),
    "reshape": ([(2, 3, 4)], (), {"shape": (4, 6)}),
    "noop": ([(2, 3), (3,)], (), {}),
    "batchnorm": ([(2, 3, 4, 4), (3,), (3,), (3,), (3,)], (1, 2, 3, 4), {}),
    "softmax": ([(2, 5)], (), {}),
    "layernorm": ([(2, 3, 4), (4,), (4,)], (1, 2), {}),
    "gelu": ([(2, 3)], (), {}),
    "reduce_mean": ([(2, 3, 4)], (), {"axes": (1, 2)}),
    "slice": ([(3, 4)], (), {"axes": (1,), "starts": (1,), "ends": (3,)}),
    "pad": ([(2, 3)], (), {"pads": (1, 0, 0, 2), "value": 0.5}),
    "dropout": ([(2, 3)], (), {}),
    "broadcast": ([(3, 1)], (), {"shape": (2, 3, 4)}),
    "scale": ([(2, 3)], (), {"value": 0.25}),
    "ewsub": ([(2, 3), (2, 3)], (), {}),
    "ewdiv": ([(2, 3), (2, 3)], (1,), {}),
    "shift": ([(2, 3)], (), {"value": 1e-3}),
    "divide": ([(2, 3)], (), {"value": 1.4142135}),
    "power": ([(2, 3)], (), {"value": 2.0}),
    "erf": ([(2, 3)], (), {}),
    "sqrt": ([(2, 3)], (0,), {}),
    "reciprocal": ([(2, 3)], (), {}),
    "silu": ([(2, 3)], (), {}),
    "rmsnorm": ([(2, 3, 4), (4,)], (1,), {}),
}


def test_every_op_has_an_interpreter_test():
    """A new op in the table must get a sample here (and an independent test above)."""
    assert set(SAMPLES) == {name for name, d in OPS.items() if not d.leaf}


def sample_graph(op):
    shapes, weights, attrs = SAMPLES[op]
    b = GraphBuilder(op)
    names = [b.weight(s, name=f"{op}_w{i}") if i in weights else b.input(s)
             for i, s in enumerate(shapes)]
    out = b.op(op, *names, **attrs)
    return b.build(*(out if isinstance(out, tuple) else (out,)))


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_float32_and_float64(op):
    g = sample_graph(op)
    r32 = interp.run(g, seed=3, dtype=np.float32)
    r64 = interp.run(g, seed=3, dtype=np.float64)
    r64s = interp.run(g, seed=3, dtype="f64")
    for a, b, c, ty in zip(r32, r64, r64s, g.output_types()):
        assert a.dtype == np.float32 and b.dtype == np.float64 and c.dtype == np.float64
        assert a.shape == b.shape == ty.shape
        assert np.isfinite(b).all()
        np.testing.assert_array_equal(b, c)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------------- random values

def _bn_graph(extra_conv: bool):
    b = GraphBuilder("bn")
    x = b.input((1, 3, 4, 4))
    if extra_conv:
        x = b.op("conv2d", x, b.weight((3, 3, 3, 3), name="k"))
    params = [b.weight((3,), name=n) for n in ("gamma", "beta", "mean", "var")]
    y = b.op("batchnorm", x, *params)
    return b.build(y)


def test_random_env_and_run_are_deterministic():
    g = sample_graph("conv2d")
    e1, e2 = interp.random_env(g, seed=5), interp.random_env(g, seed=5)
    assert set(e1) == {"%x0", "@conv2d_w1"}
    for k in e1:
        np.testing.assert_array_equal(e1[k], e2[k])
        assert e1[k].dtype == np.float32
    assert not np.array_equal(e1["%x0"], interp.random_env(g, seed=6)["%x0"])
    r1, r2 = interp.run(g, seed=5), interp.run(g, seed=5)
    np.testing.assert_array_equal(r1[0], r2[0])
    np.testing.assert_array_equal(r1[0], interp.run(g, e1)[0])    # run draws what random_env does
    assert not np.array_equal(r1[0], interp.run(g, seed=6)[0])
    e64 = interp.random_env(g, seed=5, dtype=np.float64)
    assert e64["%x0"].dtype == np.float64
    np.testing.assert_allclose(e64["%x0"], e1["%x0"], rtol=1e-6)


def test_same_weight_name_same_values_across_graphs():
    g1, g2 = _bn_graph(False), _bn_graph(True)
    e1, e2 = interp.random_env(g1, seed=9), interp.random_env(g2, seed=9)
    assert set(e2) - set(e1) == {"@k"}
    for k in e1:
        np.testing.assert_array_equal(e1[k], e2[k])
    # a partially given env: given names are used, the rest is drawn as before
    mean = np.arange(3.0)
    out = interp.run(g1, {"@mean": mean}, seed=9, dtype=np.float64)[0]
    env = {k: v.astype(np.float64) for k, v in interp.random_env(g1, seed=9, dtype=np.float64)
           .items()}
    ref = batchnorm_ref(env["%x0"], env["@gamma"], env["@beta"], mean, env["@var"], 1e-5)
    np.testing.assert_allclose(out, ref, **F64)


@pytest.mark.parametrize("seed", range(5))
def test_batchnorm_variances_are_positive(seed):
    g = _bn_graph(True)
    env = interp.random_env(g, seed=seed)
    assert (env["@var"] > 0).all()
    assert np.isfinite(interp.run(g, seed=seed)[0]).all()


def test_env_shape_mismatch_is_an_error():
    g = sample_graph("relu")
    with pytest.raises(Exception, match="expected"):
        interp.run(g, {"%x0": np.zeros((3, 2))})
