"""The operator table: shape functions, attribute validation, FLOP counts."""
from __future__ import annotations

import pytest

from eqsat_nb.errors import ShapeError, TirError
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.ops import OPS, AttrError, flops, infer_types, normalize_attrs


def T(*shape, dtype="f32"):
    return TensorType(tuple(shape), dtype)


def infer(op, shapes, **attrs):
    """Result shapes of `op` on operands of the given shapes (f32)."""
    ins = [s if isinstance(s, TensorType) else T(*s) for s in shapes]
    return [t.shape for t in infer_types(op, ins, normalize_attrs(OPS[op], attrs))]


# ----------------------------------------------------------------------------------- valid shapes

VALID = [
    # op, operand shapes, attrs, result shapes
    ("ewadd", [(2, 3), (2, 3)], {}, [(2, 3)]),
    ("ewmul", [(4,), (4,)], {}, [(4,)]),
    ("ewadd", [(), ()], {}, [()]),
    ("matmul", [(3, 4), (4, 5)], {}, [(3, 5)]),
    ("matmul", [(2, 3, 4), (2, 4, 6)], {"act": "relu"}, [(2, 3, 6)]),
    ("matmul", [(2, 2, 1, 4), (2, 2, 4, 1)], {}, [(2, 2, 1, 1)]),
    # NumPy/ONNX MatMul: batch dims broadcast, ranks may differ
    ("matmul", [(2, 3, 4), (4, 5)], {}, [(2, 3, 5)]),                  # activation @ weight
    ("matmul", [(3, 4), (2, 4, 5)], {}, [(2, 3, 5)]),
    ("matmul", [(2, 1, 3, 4), (5, 4, 6)], {}, [(2, 5, 3, 6)]),
    ("matmul", [(1, 12, 7, 8), (2, 1, 8, 7)], {}, [(2, 12, 7, 7)]),
    # conv2d: SAME gives ceil(H / stride)
    ("conv2d", [(1, 3, 224, 224), (64, 3, 7, 7)], {"stride": (2, 2)}, [(1, 64, 112, 112)]),
    ("conv2d", [(1, 3, 225, 225), (64, 3, 7, 7)], {"stride": (2, 2)}, [(1, 64, 113, 113)]),
    ("conv2d", [(2, 4, 10, 11), (8, 4, 3, 3)], {"stride": (3, 3)}, [(2, 8, 4, 4)]),
    ("conv2d", [(1, 1, 5, 5), (1, 1, 2, 2)], {}, [(1, 1, 5, 5)]),               # even kernel
    ("conv2d", [(1, 4, 17, 17), (4, 4, 1, 7)], {}, [(1, 4, 17, 17)]),           # 1x7
    ("conv2d", [(1, 4, 7, 9), (4, 4, 3, 3)], {"stride": (1, 2)}, [(1, 4, 7, 5)]),
    ("conv2d", [(1, 3, 10, 10), (8, 3, 3, 3)], {"pad": "valid"}, [(1, 8, 8, 8)]),
    ("conv2d", [(1, 3, 10, 10), (8, 3, 3, 3)], {"pad": "valid", "stride": (2, 2)},
     [(1, 8, 4, 4)]),
    ("conv2d", [(1, 3, 5, 5), (8, 3, 3, 3)], {"pad": (1, 2, 0, 1)}, [(1, 8, 4, 6)]),
    ("conv2d", [(1, 3, 3, 3), (8, 3, 3, 3)], {"pad": "valid"}, [(1, 8, 1, 1)]),
    ("conv2d", [(1, 8, 5, 5), (16, 2, 3, 3)], {}, [(1, 16, 5, 5)]),             # 4 groups
    ("conv2d", [(1, 8, 6, 6), (8, 1, 3, 3)], {"stride": (2, 2)}, [(1, 8, 3, 3)]),  # depthwise
    ("conv2d", [(1, 3, 6, 6), (6, 1, 3, 3)], {}, [(1, 6, 6, 6)]),               # multiplier 2
    # pooling
    ("poolmax", [(1, 64, 112, 112)], {"kernel": (3, 3), "stride": (2, 2)}, [(1, 64, 56, 56)]),
    ("poolavg", [(1, 2, 7, 7)], {"kernel": (3, 3), "stride": (2, 2)}, [(1, 2, 4, 4)]),
    ("poolavg", [(1, 2, 7, 7)], {"kernel": (2, 2), "stride": (2, 2), "pad": "valid"},
     [(1, 2, 3, 3)]),
    ("poolmax", [(1, 2, 5, 6)], {"kernel": (3, 2), "stride": (2, 1), "pad": (1, 0, 1, 1)},
     [(1, 2, 3, 6)]),
    ("poolmax", [(2, 3, 5, 5)], {"kernel": (2, 2)}, [(2, 3, 5, 5)]),
    # unary
    ("relu", [(2, 3)], {}, [(2, 3)]),
    ("tanh", [(2, 3)], {}, [(2, 3)]),
    ("sigmoid", [(2, 3)], {}, [(2, 3)]),
    ("gelu", [(2, 3)], {}, [(2, 3)]),
    ("dropout", [(2, 3)], {"ratio": 0.1}, [(2, 3)]),
    ("scale", [(2, 3)], {"value": 2}, [(2, 3)]),
    ("gelu", [(2, 3)], {"approximate": "tanh"}, [(2, 3)]),
    ("ewsub", [(2, 3), (2, 3)], {}, [(2, 3)]),
    ("ewdiv", [(4,), (4,)], {}, [(4,)]),
    ("shift", [(2, 3)], {"value": 1e-5}, [(2, 3)]),
    ("divide", [(2, 3)], {"value": 1.4142135}, [(2, 3)]),
    ("power", [(2, 3)], {"value": 2}, [(2, 3)]),
    ("erf", [(2, 3)], {}, [(2, 3)]),
    ("sqrt", [(2, 3)], {}, [(2, 3)]),
    ("reciprocal", [(2, 3)], {}, [(2, 3)]),
    ("silu", [(2, 3)], {}, [(2, 3)]),
    # data movement
    ("transpose", [(1, 2, 3, 4)], {"perm": (0, 2, 3, 1)}, [(1, 3, 4, 2)]),
    ("transpose", [(2, 3)], {"perm": (1, 0)}, [(3, 2)]),
    ("enlarge", [(8, 4, 1, 1), (8, 4, 3, 3)], {}, [(8, 4, 3, 3)]),
    ("enlarge", [(8, 4, 3, 3), (2, 2, 5, 5)], {}, [(8, 4, 5, 5)]),              # only ref's HW
    ("enlarge", [(8, 4, 1, 3), (1, 1, 3, 5)], {}, [(8, 4, 3, 5)]),
    ("enlarge", [(8, 4, 3, 3), (8, 4, 5, 3)], {}, [(8, 4, 5, 3)]),
    ("concat", [(1, 2, 4), (1, 3, 4), (1, 1, 4)], {"axis": 1}, [(1, 6, 4)]),
    ("concat", [(2, 3), (2, 5)], {"axis": -1}, [(2, 8)]),
    ("concat", [(2, 3)], {"axis": 0}, [(2, 3)]),
    ("split", [(1, 5, 4)], {"axis": 1, "sizes": (2, 3)}, [(1, 2, 4), (1, 3, 4)]),
    ("split", [(6, 2)], {"axis": 0, "sizes": (1, 2, 3)}, [(1, 2), (2, 2), (3, 2)]),
    ("split", [(2, 4)], {"axis": -1, "sizes": (4,)}, [(2, 4)]),
    ("merge", [(16, 2, 3, 3)], {"count": 2, "groups": 4}, [(16, 4, 3, 3)]),
    ("merge", [(16, 1, 3, 3)], {"count": 8, "groups": 8}, [(16, 8, 3, 3)]),
    ("reshape", [(2, 3, 4)], {"shape": (6, 4)}, [(6, 4)]),
    ("reshape", [(2, 3, 4)], {"shape": (24,)}, [(24,)]),
    ("reshape", [(6,)], {"shape": (1, 2, 3, 1)}, [(1, 2, 3, 1)]),
    ("noop", [(2, 3), (4,)], {}, [()]),
    ("noop", [(2, 3)], {}, [()]),
    # normalization / reduction
    ("batchnorm", [(2, 3, 4, 4), (3,), (3,), (3,), (3,)], {}, [(2, 3, 4, 4)]),
    ("batchnorm", [(5, 3), (3,), (3,), (3,), (3,)], {"eps": 1e-3}, [(5, 3)]),
    ("softmax", [(2, 5)], {}, [(2, 5)]),
    ("softmax", [(2, 5, 3)], {"axis": 1}, [(2, 5, 3)]),
    ("layernorm", [(2, 5, 8), (8,), (8,)], {}, [(2, 5, 8)]),
    ("layernorm", [(2, 5, 8), (5, 8), (5, 8)], {"axis": 1}, [(2, 5, 8)]),
    ("rmsnorm", [(2, 5, 8), (8,)], {}, [(2, 5, 8)]),
    ("rmsnorm", [(2, 5, 8), (5, 8)], {"axis": -2, "eps": 1e-6}, [(2, 5, 8)]),
    ("reduce_mean", [(2, 3, 4)], {"axes": (1,)}, [(2, 1, 4)]),
    ("reduce_mean", [(2, 3, 4)], {"axes": (1,), "keepdims": False}, [(2, 4)]),
    ("reduce_mean", [(2, 3, 4)], {"axes": (-1, 0), "keepdims": False}, [(3,)]),
    ("reduce_mean", [(2, 3, 4)], {"axes": (0, 1, 2), "keepdims": False}, [()]),
    ("slice", [(2, 5, 4)], {"axes": (1,), "starts": (1,), "ends": (3,)}, [(2, 2, 4)]),
    ("slice", [(2, 5, 4)], {"axes": (-1, 0), "starts": (0, 1), "ends": (4, 2)}, [(1, 5, 4)]),
    ("pad", [(2, 3, 4)], {"pads": (0, 1, 2, 0, 3, 4)}, [(2, 7, 10)]),
    ("pad", [(2, 3)], {"pads": (0, 0, 0, 0), "value": 1.0}, [(2, 3)]),
    ("broadcast", [(3, 1)], {"shape": (2, 3, 4)}, [(2, 3, 4)]),
    ("broadcast", [(4,)], {"shape": (2, 3, 4)}, [(2, 3, 4)]),
    ("broadcast", [()], {"shape": (2, 2)}, [(2, 2)]),
    ("broadcast", [(2, 3)], {"shape": (2, 3)}, [(2, 3)]),
]


@pytest.mark.parametrize("op,shapes,attrs,expected", VALID,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(VALID)])
def test_valid_shapes(op, shapes, attrs, expected):
    assert infer(op, shapes, **attrs) == expected


def test_every_op_has_a_valid_shape_case():
    assert {c[0] for c in VALID} == {name for name, d in OPS.items() if not d.leaf}


@pytest.mark.parametrize("dtype", ["f32", "f64", "f16"])
def test_result_dtype_follows_operands(dtype):
    x, w = T(1, 4, 5, 5, dtype=dtype), T(4, 4, 3, 3, dtype=dtype)
    (out,) = infer_types("conv2d", [x, w], normalize_attrs(OPS["conv2d"], {}))
    assert out.dtype == dtype
    (out,) = infer_types("noop", [x], ())
    assert out == TensorType((), dtype)


@pytest.mark.parametrize("op", ["input", "weight"])
def test_leaves(op):
    attrs = normalize_attrs(OPS[op], {"name": "a", "shape": [2, 3], "dtype": "f64"})
    assert infer_types(op, [], attrs) == [T(2, 3, dtype="f64")]
    attrs = normalize_attrs(OPS[op], {"name": "a", "shape": [4]})
    assert infer_types(op, [], attrs) == [T(4)]


# ----------------------------------------------------------------------------------- invalid shapes

INVALID = [
    # op, operand shapes, attrs, words in the message
    ("ewadd", [(2, 3), (3, 2)], {}, "2x3 vs 3x2"),
    ("ewadd", [(2, 3), (1, 3)], {}, "broadcast"),           # no implicit broadcasting
    ("ewmul", [(2, 3), (2, 3, 1)], {}, "differ"),
    ("ewadd", [(2, 3), T(2, 3, dtype="f64")], {}, "element types"),
    ("matmul", [(3, 4), (5, 6)], {}, "inner dimensions"),
    ("matmul", [(2, 3, 4), (5, 5)], {}, "inner dimensions"),
    ("matmul", [(4,), (4,)], {}, "rank >= 2"),
    ("matmul", [(2, 3, 4), (4,)], {}, "rank >= 2"),
    ("matmul", [(2, 3, 4), (3, 4, 5)], {}, "batch dimensions do not broadcast"),
    ("matmul", [(2, 2, 3, 4), (3, 4, 5)], {}, "batch dimensions do not broadcast"),
    ("conv2d", [(1, 3, 5, 5), (4, 2, 3, 3)], {}, "3 channels"),
    ("conv2d", [(1, 4, 5, 5), (3, 2, 3, 3)], {}, "3 output channels"),
    ("conv2d", [(3, 5, 5), (4, 3, 3, 3)], {}, "rank 4"),
    ("conv2d", [(1, 3, 5, 5), (4, 3, 3)], {}, "rank 4"),
    ("conv2d", [(1, 1, 2, 2), (1, 1, 3, 3)], {"pad": "valid"}, "does not fit"),
    ("conv2d", [(1, 3, 5, 5), T(4, 3, 3, 3, dtype="f16")], {}, "element types"),
    ("poolmax", [(2, 5, 5)], {"kernel": (2, 2)}, "rank 4"),
    ("poolavg", [(1, 1, 2, 2)], {"kernel": (3, 3), "pad": "valid"}, "does not fit"),
    ("transpose", [(2, 3, 4)], {"perm": (0, 0, 1)}, "not a permutation"),
    ("transpose", [(2, 3, 4)], {"perm": (1, 0)}, "not a permutation"),
    ("transpose", [(2, 3)], {"perm": (1, 2)}, "not a permutation"),
    ("enlarge", [(8, 4, 5, 5), (8, 4, 3, 3)], {}, "cannot centre"),     # smaller reference
    ("enlarge", [(8, 4, 3, 3), (8, 4, 4, 4)], {}, "cannot centre"),     # odd difference
    ("enlarge", [(8, 4, 3, 3), (8, 4, 5, 2)], {}, "cannot centre"),    # narrower reference
    ("enlarge", [(8, 4, 3), (8, 4, 3, 3)], {}, "rank 4"),
    ("concat", [(2, 3), (3, 3)], {"axis": 1}, "differ outside axis"),
    ("concat", [(2, 3), (2, 3, 1)], {"axis": 0}, "differ"),
    ("concat", [(2, 3), (2, 3)], {"axis": 2}, "out of range"),
    ("concat", [(2, 3), T(2, 3, dtype="f64")], {"axis": 0}, "element types"),
    ("split", [(1, 5, 4)], {"axis": 1, "sizes": (2, 2)}, "do not partition"),
    ("split", [(1, 5, 4)], {"axis": 1, "sizes": (0, 5)}, "do not partition"),
    ("split", [(1, 5, 4)], {"axis": 1, "sizes": (6, -1)}, "do not partition"),
    ("split", [(1, 5, 4)], {"axis": 1, "sizes": ()}, "do not partition"),
    ("split", [(1, 5, 4)], {"axis": 3, "sizes": (1,)}, "out of range"),
    ("merge", [(24, 2, 3, 3)], {"count": 4, "groups": 6}, "cannot merge"),  # 6 % 4
    ("merge", [(6, 2, 3, 3)], {"count": 2, "groups": 4}, "cannot merge"),   # 6 % 4 channels
    ("merge", [(8, 2, 3, 3)], {"count": 0, "groups": 4}, "cannot merge"),
    ("merge", [(8, 2, 3)], {"count": 2, "groups": 4}, "rank 4"),
    ("reshape", [(2, 3, 4)], {"shape": (5, 5)}, "24 elements"),
    ("reshape", [(2, 3, 4)], {"shape": (-1, 4)}, "cannot reshape"),         # no -1 inference
    ("reshape", [(2, 3, 4)], {"shape": (0, 4)}, "cannot reshape"),
    ("batchnorm", [(2, 3, 4, 4), (3,), (4,), (3,), (3,)], {}, "bias"),
    ("batchnorm", [(2, 3, 4, 4), (3,), (3,), (3,), (1, 3)], {}, "var"),
    ("batchnorm", [(3,), (3,), (3,), (3,), (3,)], {}, "rank >= 2"),
    ("softmax", [(2, 3)], {"axis": 2}, "out of range"),
    ("softmax", [(2, 3)], {"axis": -3}, "out of range"),
    ("layernorm", [(2, 5, 8), (5, 8), (8,)], {}, "gamma"),
    ("layernorm", [(2, 5, 8), (8,), (5, 8)], {}, "beta"),
    ("layernorm", [(2, 5, 8), (8,), (8,)], {"axis": 3}, "out of range"),
    ("reduce_mean", [(2, 3, 4)], {"axes": (1, -2)}, "repeated axis"),
    ("reduce_mean", [(2, 3, 4)], {"axes": (3,)}, "out of range"),
    ("slice", [(2, 5, 4)], {"axes": (1,), "starts": (3,), "ends": (3,)}, "out of range"),
    ("slice", [(2, 5, 4)], {"axes": (1,), "starts": (1,), "ends": (6,)}, "out of range"),
    ("slice", [(2, 5, 4)], {"axes": (1,), "starts": (-1,), "ends": (2,)}, "out of range"),
    ("slice", [(2, 5, 4)], {"axes": (1, -2), "starts": (0, 0), "ends": (1, 1)}, "twice"),
    ("slice", [(2, 5, 4)], {"axes": (1,), "starts": (0, 1), "ends": (1,)}, "same length"),
    ("slice", [(2, 5, 4)], {"axes": (3,), "starts": (0,), "ends": (1,)}, "out of range"),
    ("pad", [(2, 3)], {"pads": (1, 1, 1)}, "pads must be 4"),
    ("pad", [(2, 3)], {"pads": (1, -1, 0, 0)}, "non-negative"),
    ("broadcast", [(2, 3)], {"shape": (3,)}, "lower rank"),
    ("broadcast", [(2, 3)], {"shape": (4, 3, 3)}, "cannot broadcast"),
    ("broadcast", [(3, 1)], {"shape": (2, 4, 2)}, "cannot broadcast"),
]


@pytest.mark.parametrize("op,shapes,attrs,words", INVALID,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(INVALID)])
def test_invalid_shapes_raise_shape_error_naming_the_op(op, shapes, attrs, words):
    with pytest.raises(ShapeError) as info:
        infer(op, shapes, **attrs)
    err = info.value
    assert err.message.startswith(f"{op}: "), err.message
    assert f"error: {op}: " in str(err)
    assert words in err.message
    assert isinstance(err, TirError)


@pytest.mark.parametrize("op,n", [("ewadd", 1), ("ewadd", 3), ("relu", 2), ("noop", 0),
                                  ("concat", 0), ("batchnorm", 4), ("layernorm", 1)])
def test_wrong_arity(op, n):
    attrs = normalize_attrs(OPS[op], {"axis": 0} if op == "concat" else {})
    with pytest.raises(TirError, match=f"op '{op}' takes"):
        infer_types(op, [T(2, 3)] * n, attrs)


def test_unknown_op():
    with pytest.raises(TirError, match="unknown op 'conv3d'"):
        infer_types("conv3d", [T(1)], ())


# ----------------------------------------------------------------------------------- attributes

def test_defaults_are_filled_in_schema_order():
    assert normalize_attrs(OPS["conv2d"], {}) == (("stride", (1, 1)), ("pad", "same"),
                                                  ("act", "none"))
    got = normalize_attrs(OPS["conv2d"], {"act": "relu", "stride": [2, 2], "pad": [1, 0, 1, 0]})
    assert got == (("stride", (2, 2)), ("pad", (1, 0, 1, 0)), ("act", "relu"))
    assert normalize_attrs(OPS["relu"], {}) == ()
    assert normalize_attrs(OPS["batchnorm"], {"eps": 1}) == (("eps", 1.0),)
    assert isinstance(dict(normalize_attrs(OPS["batchnorm"], {"eps": 1}))["eps"], float)
    assert normalize_attrs(OPS["reduce_mean"], {"axes": [0]}) == (("axes", (0,)),
                                                                 ("keepdims", True))
    assert normalize_attrs(OPS["conv2d"], {"pad": "valid"})[1] == ("pad", "valid")


BAD_ATTRS = [
    # op, attrs, attribute named by the error, words in the message
    ("relu", {"foo": 1}, "foo", "has no attribute 'foo'"),
    ("conv2d", {"padding": "same"}, "padding", "has no attribute"),
    ("conv2d", {"act": "gelu"}, "act", "must be one of"),
    ("matmul", {"act": "softmax"}, "act", "must be one of"),
    ("conv2d", {"stride": "2"}, "stride", "list of integers"),
    ("conv2d", {"stride": [1, 1.5]}, "stride", "list of integers"),
    ("conv2d", {"stride": [1, 1, 1]}, "stride", "two positive integers"),
    ("conv2d", {"stride": [0, 1]}, "stride", "two positive integers"),
    ("conv2d", {"stride": [True, True]}, "stride", "list of integers"),
    ("conv2d", {"pad": "full"}, "pad", "\"same\", \"valid\""),
    ("conv2d", {"pad": [1, 1, 1]}, "pad", "[top, left, bottom, right]"),
    ("conv2d", {"pad": [1, -1, 0, 0]}, "pad", "[top, left, bottom, right]"),
    ("conv2d", {"act": 1}, "act", "a string"),
    ("poolmax", {"kernel": [3]}, "kernel", "two positive integers"),
    ("poolmax", {"kernel": [3, 0]}, "kernel", "two positive integers"),
    ("softmax", {"axis": 1.5}, "axis", "an integer"),
    ("softmax", {"axis": True}, "axis", "an integer"),
    ("batchnorm", {"eps": "small"}, "eps", "a number"),
    ("batchnorm", {"eps": False}, "eps", "a number"),
    ("reduce_mean", {"axes": [1], "keepdims": 1}, "keepdims", "true or false"),
    ("input", {"name": "x", "shape": [2], "dtype": "f8"}, "dtype", "one of"),
    ("weight", {"name": 3, "shape": [2]}, "name", "a string"),
]


@pytest.mark.parametrize("op,attrs,attr,words", BAD_ATTRS,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_ATTRS)])
def test_bad_attributes(op, attrs, attr, words):
    with pytest.raises(AttrError) as info:
        normalize_attrs(OPS[op], attrs)
    assert info.value.attr == attr
    assert words in info.value.message
    assert isinstance(info.value, TirError)


@pytest.mark.parametrize("op,attrs,missing", [
    ("poolmax", {}, "kernel"), ("split", {"axis": 0}, "sizes"), ("concat", {}, "axis"),
    ("merge", {"count": 2}, "groups"), ("reshape", {}, "shape"), ("transpose", {}, "perm"),
    ("scale", {}, "value"), ("weight", {"name": "w"}, "shape"),
])
def test_missing_required_attribute(op, attrs, missing):
    with pytest.raises(AttrError, match=f"op '{op}' requires attribute '{missing}'"):
        normalize_attrs(OPS[op], attrs)


# ----------------------------------------------------------------------------------- flops

def _flops(op, shapes, **attrs):
    ins = [T(*s) for s in shapes]
    norm = normalize_attrs(OPS[op], attrs)
    return flops(op, ins, infer_types(op, ins, norm), norm)


@pytest.mark.parametrize("xs,ws,attrs,expected", [
    # 2 * N * O * Ho * Wo * (C/groups) * kh * kw  (+ one op per output for a fused activation)
    ((1, 3, 8, 8), (16, 3, 3, 3), {}, 2 * 16 * 8 * 8 * 3 * 3 * 3),
    ((1, 3, 8, 8), (16, 3, 3, 3), {"act": "relu"}, 2 * 16 * 8 * 8 * 27 + 16 * 8 * 8),
    ((2, 3, 8, 8), (16, 3, 3, 3), {"stride": (2, 2)}, 2 * 2 * 16 * 4 * 4 * 27),
    ((1, 8, 8, 8), (8, 2, 3, 3), {}, 2 * 8 * 8 * 8 * 2 * 9),                 # 4 groups
    ((1, 8, 8, 8), (8, 1, 3, 3), {"pad": "valid"}, 2 * 8 * 6 * 6 * 9),        # depthwise
    ((1, 4, 5, 9), (6, 4, 1, 7), {}, 2 * 6 * 5 * 9 * 4 * 7),
])
def test_conv2d_flops(xs, ws, attrs, expected):
    assert _flops("conv2d", [xs, ws], **attrs) == expected


@pytest.mark.parametrize("xs,ys,act,expected", [
    ((3, 4), (4, 5), "none", 2 * 3 * 5 * 4),
    ((2, 3, 4), (2, 4, 5), "none", 2 * 2 * 3 * 5 * 4),
    ((2, 3, 4), (2, 4, 5), "tanh", 2 * 2 * 3 * 5 * 4 + 2 * 3 * 5),
])
def test_matmul_flops(xs, ys, act, expected):
    assert _flops("matmul", [xs, ys], act=act) == expected


def test_other_flops():
    assert _flops("poolmax", [(1, 2, 6, 6)], kernel=(2, 2), stride=(2, 2)) == 2 * 3 * 3 * 4
    assert _flops("ewadd", [(2, 3), (2, 3)]) == 6
    assert _flops("reshape", [(2, 3)], shape=(6,)) == 0
    assert _flops("transpose", [(2, 3)], perm=(1, 0)) == 0
