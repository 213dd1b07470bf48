"""The Numba shape functions (egraph/shapes_nb.py) against the Python operator table.

Property tests, op by op: random operand types and attributes (generators build a valid case and
then perturb it part of the time, so both verdicts are common) must get exactly the verdict and
result type row of `ops.normalize_attrs` + `ops.infer_types` (any TirError ↔ 0); a fixed
(derandomized) sample checks that each generator really yields both verdicts. Then unit tests
of SAME/VALID/explicit conv and pool sizes, grouped conv, split/proj, malformed rows, and the
import-time check that the port still matches the operator table.

`EQSAT_TEST_PROFILE=quick` shrinks the example counts.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eqsat_nb.egraph import shapes_nb
from eqsat_nb.egraph.intern import WIDTH
from eqsat_nb.egraph.literals import MAX_RANK, Literals
from eqsat_nb.egraph.shapes_nb import infer_proj, infer_row, shape_consts
from eqsat_nb.egraph.store import EOP_IDS
from eqsat_nb.errors import TirError
from eqsat_nb.ir import ops
from eqsat_nb.ir.graph import DTYPES, TensorType
from eqsat_nb.ir.ops import ACTIVATIONS, OPS, infer_types, normalize_attrs

QUICK = os.environ.get("EQSAT_TEST_PROFILE") == "quick"
EXAMPLES = 12 if QUICK else 70

# String ids deliberately not 0, 1, 2 ...: a kernel comparing against a wrong consts slot fails.
LITS = Literals()
for _s in ("zz", "tanh", "gelu", "f64", "full", "swish", "same"):
    LITS.literal(_s)
CONSTS = shape_consts(LITS)


def T(*shape, dtype="f32"):
    return TensorType(tuple(shape), dtype)


# ----------------------------------------------------------------------------------- both sides

def python_types(op, ins, attrs):
    """What the operator table says: the result types, or None when it raises."""
    try:
        outs = infer_types(op, ins, normalize_attrs(OPS[op], attrs))
    except TirError:
        return None
    if any(t.rank > MAX_RANK for t in outs):        # not encodable: the kernel rejects these
        return None
    return outs


def attr_rows(op, attrs):
    specs = OPS[op].attrs
    rows = np.zeros((max(1, len(specs)), WIDTH), np.int64)
    for k, spec in enumerate(specs):
        rows[k] = LITS.encode(attrs[spec.name])
    return rows, len(specs)


def type_rows(ins):
    rows = np.zeros((max(1, len(ins)), WIDTH), np.int64)
    for k, t in enumerate(ins):
        rows[k] = LITS.encode(t)
    return rows


def kernel(op, ins, attrs, nin=None):
    rows, nattr = attr_rows(op, attrs)
    out = np.full(WIDTH, 99, np.int64)              # the kernel must write the whole row
    got = infer_row(EOP_IDS[op], rows, nattr, type_rows(ins), len(ins) if nin is None else nin,
                    CONSTS, out)
    return got, out


def proj(index, attrs, x):
    rows = np.stack([LITS.encode(attrs["axis"]), LITS.encode(attrs["sizes"])])
    out = np.full(WIDTH, 99, np.int64)
    got = infer_proj(index, rows, LITS.encode(x), out)
    return got, out


def check(op, ins, attrs):
    """Assert that the kernel agrees with Python; True when the node is valid."""
    want = python_types(op, ins, attrs)
    got, out = kernel(op, ins, attrs)
    case = f"{op}({', '.join(map(str, ins))}) {attrs}: python {want}, kernel {got} {out}"
    if want is None:
        assert got == 0, case
        if OPS[op].multi_result:
            assert proj(0, attrs, ins[0])[0] == 0, case
        return False
    assert got == 1, case
    if OPS[op].multi_result:
        assert out[0] == -2 and out[1] == len(want) and not out[2:].any(), case
        for i, t in enumerate(want):
            g, row = proj(i, attrs, ins[0])
            assert g == 1 and (row == LITS.encode(t)).all(), case
        assert proj(len(want), attrs, ins[0])[0] == 0 and proj(-1, attrs, ins[0])[0] == 0
    else:
        (t,) = want
        assert (out == LITS.encode(t)).all(), case
    return True


# ----------------------------------------------------------------------------------- generators
# Each takes hypothesis's `data` and returns (operand types, attributes by name), every attribute
# present and of the right Python kind (tuples for ints, floats for floats).

def draw(data, strategy):
    return data.draw(strategy)


def chance(data, percent):
    """True `percent`% of the time, roughly; hypothesis's favourite (and shrink target) 0 gives
    the likelier outcome, its other favourite 99 the rarer one."""
    r = draw(data, st.integers(0, 99))
    return r < percent if percent >= 50 else r >= 100 - percent


def dims(data, lo=0, hi=5, dmax=6):
    return tuple(draw(data, st.lists(st.integers(1, dmax), min_size=lo, max_size=hi)))


def dtype(data):
    return "f32" if chance(data, 60) else draw(data, st.sampled_from(DTYPES))


def other_dtype(data, dt):
    """Usually `dt`; sometimes any dtype (perhaps another one)."""
    return draw(data, st.sampled_from(DTYPES)) if chance(data, 15) else dt


def perturb(data, shape):
    """A nearby shape: one dim changed, one dim dropped or one added."""
    how = draw(data, st.integers(0, 2))
    s = list(shape)
    if how == 0 and s:
        i = draw(data, st.integers(0, len(s) - 1))
        s[i] = s[i] + draw(data, st.sampled_from([-1, 1, 2])) or 2
    elif how == 1 and s:
        del s[draw(data, st.integers(0, len(s) - 1))]
    else:
        s.insert(draw(data, st.integers(0, len(s))), draw(data, st.integers(1, 4)))
    return tuple(s)


def maybe_perturb(data, shape, percent=25):
    return perturb(data, shape) if chance(data, percent) else shape


def act(data):
    return draw(data, st.sampled_from(ACTIVATIONS)) if chance(data, 95) else \
        draw(data, st.sampled_from(["gelu", "swish", "same"]))


def pair(data, hi=3):
    """stride/kernel: mostly two positive ints, sometimes what normalize_attrs rejects."""
    if chance(data, 93):
        return (draw(data, st.integers(1, hi)), draw(data, st.integers(1, hi)))
    return draw(data, st.sampled_from([(0, 1), (1, 0), (-1, 2), (2,), (1, 1, 1), ()]))


def padding(data, hi=3):
    r = draw(data, st.integers(0, 99))
    if r < 35:
        return "same"
    if r < 65:
        return "valid"
    if r < 96:
        return tuple(draw(data, st.integers(0, hi)) for _ in range(4))
    return draw(data, st.sampled_from(["full", "none", (1, 1, 1), (0, -1, 0, 0), (0,) * 5]))


def axis_in(data, rank, slack=1):
    """An axis for `rank`, mostly in [-rank, rank), sometimes just outside."""
    if rank and chance(data, 80):
        return draw(data, st.integers(-rank, rank - 1))
    return draw(data, st.integers(-rank - slack, rank + slack - 1))


def gen_leaf(data):
    n = draw(data, st.integers(0, 8))
    shape = tuple(draw(data, st.integers(-1 if chance(data, 15) else 1, 6)) for _ in range(n))
    dt = draw(data, st.sampled_from(DTYPES)) if chance(data, 88) else "f8"
    return [], {"name": draw(data, st.sampled_from(["a", "x1", "same"])), "shape": shape,
                "dtype": dt}


def gen_ew_binary(data):
    x = dims(data)
    dt = dtype(data)
    return [T(*x, dtype=dt), T(*maybe_perturb(data, x, 35), dtype=other_dtype(data, dt))], {}


def gen_unary(data):
    return [T(*dims(data, 0, 7), dtype=dtype(data))], {}


def gen_unary_float(name):
    def gen(data):
        ins, _ = gen_unary(data)
        return ins, {name: draw(data, st.floats(-4, 4))}
    return gen


def gen_gelu(data):
    ins, _ = gen_unary(data)
    return ins, {"approximate": draw(data, st.sampled_from(["none", "tanh", "none", "tanh",
                                                             "relu", "zz"]))}


def gen_matmul(data):
    r = draw(data, st.integers(2, 5)) if chance(data, 85) else draw(data, st.integers(0, 1))
    dt = dtype(data)
    if r < 2:
        x, y = dims(data, r, r), dims(data)
    else:
        batch = dims(data, r - 2, r - 2, 3)
        m, k, n = (draw(data, st.integers(1, 5)) for _ in range(3))
        yb = batch
        if chance(data, 50):                # NumPy batch broadcasting: drop leading axes, set 1s
            yb = batch[draw(data, st.integers(0, len(batch))):]
            yb = tuple(1 if chance(data, 30) else d for d in yb)
            if chance(data, 50):
                batch, yb = yb, batch
        x, y = batch + (m, k), maybe_perturb(data, yb + (k, n), 20)
    return [T(*x, dtype=dt), T(*y, dtype=other_dtype(data, dt))], {"act": act(data)}


def gen_conv2d(data):
    g, cg, m = (draw(data, st.integers(1, 3)) for _ in range(3))
    kh, kw = draw(data, st.integers(1, 5)), draw(data, st.integers(1, 5))
    n, h, w = draw(data, st.integers(1, 2)), kh + draw(data, st.integers(-2, 5)), \
        kw + draw(data, st.integers(-2, 5))
    x, wt = (n, g * cg, max(h, 1), max(w, 1)), (g * m, cg, kh, kw)
    if chance(data, 15):
        which = draw(data, st.integers(0, 1))
        if which == 0:
            x = perturb(data, x)
        else:
            wt = perturb(data, wt)
    dt = dtype(data)
    ins = [T(*x, dtype=dt), T(*wt, dtype=other_dtype(data, dt))]
    if chance(data, 40):                   # a bias [O], sometimes of the wrong length or rank
        b = (wt[0],) if not chance(data, 20) else perturb(data, (wt[0],) * draw(
            data, st.integers(1, 2)))
        ins.append(T(*b, dtype=other_dtype(data, dt)))
    return ins, {"stride": pair(data), "pad": padding(data), "act": act(data)}


def gen_pool(data):
    kernel = pair(data, 4)
    x = (draw(data, st.integers(1, 2)), draw(data, st.integers(1, 3)),
         draw(data, st.integers(3, 9)), draw(data, st.integers(3, 9)))
    x = maybe_perturb(data, x, 10)
    pad = padding(data, 3)
    if isinstance(pad, tuple) and min(kernel, default=0) > 0 and min(pad, default=-1) >= 0 \
            and len(kernel) == 2 and chance(data, 80):     # explicit pads smaller than the window
        pad = tuple(p % kernel[i % 2] for i, p in enumerate(pad))
    return [T(*x, dtype=dtype(data))], \
        {"kernel": kernel, "stride": pair(data), "pad": pad, "act": act(data)}


def gen_transpose(data):
    x = dims(data)
    perm = tuple(draw(data, st.permutations(range(len(x)))))
    if chance(data, 40):
        perm = draw(data, st.lists(st.integers(-1, len(x)), max_size=len(x) + 1).map(tuple))
    return [T(*x, dtype=dtype(data))], {"perm": perm}


def gen_enlarge(data):
    w = (draw(data, st.integers(1, 4)), draw(data, st.integers(1, 4)),
         draw(data, st.integers(1, 5)), draw(data, st.integers(1, 5)))
    ref = (draw(data, st.integers(1, 4)), draw(data, st.integers(1, 4)),
           w[2] + 2 * draw(data, st.integers(0, 2)), w[3] + 2 * draw(data, st.integers(0, 2)))
    if chance(data, 45):
        if chance(data, 50):
            ref = perturb(data, ref)
        else:
            w = perturb(data, w)
    return [T(*w, dtype=dtype(data)), T(*ref, dtype=dtype(data))], {}


def gen_concat(data):
    base = dims(data, 0 if chance(data, 8) else 1, 5)
    axis = axis_in(data, len(base))
    k = draw(data, st.integers(1, 4))
    dt = dtype(data)
    ins = []
    for _ in range(k):
        s = list(base)
        if -len(s) <= axis < len(s):
            s[axis] = draw(data, st.integers(1, 6))
        ins.append(T(*maybe_perturb(data, tuple(s), 8), dtype=other_dtype(data, dt)))
    return ins, {"axis": axis}


def gen_split(data):
    x = dims(data, 0 if chance(data, 8) else 1, 5)
    axis = axis_in(data, len(x))
    length = x[axis] if -len(x) <= axis < len(x) else 4
    cuts = sorted(set(draw(data, st.lists(st.integers(1, max(1, length - 1)), max_size=4))))
    cuts = [c for c in cuts if c < length]
    edges = [0] + cuts + [length]
    sizes = tuple(b - a for a, b in zip(edges, edges[1:]))
    if chance(data, 35):
        sizes = draw(data, st.lists(st.integers(-1, 6), max_size=5).map(tuple))
    return [T(*x, dtype=dtype(data))], {"axis": axis, "sizes": sizes}


def gen_merge(data):
    count, q, m = (draw(data, st.integers(1, 3)) for _ in range(3))
    groups = count * q
    w = (groups * m, draw(data, st.integers(1, 3)), draw(data, st.integers(1, 3)),
         draw(data, st.integers(1, 3)))
    if chance(data, 40):
        r = draw(data, st.integers(0, 3))
        if r == 0:
            count = draw(data, st.integers(-1, 4))
        elif r == 1:
            groups = draw(data, st.integers(-1, 7))
        else:
            w = perturb(data, w)
    return [T(*w, dtype=dtype(data))], {"count": count, "groups": groups}


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def gen_reshape(data):
    x = dims(data, 0, 5, 4)
    left = int(np.prod(x))
    shape = []
    for _ in range(draw(data, st.integers(0, 4))):
        d = draw(data, st.sampled_from(_divisors(left)))
        shape.append(d)
        left //= d
    if left > 1 or chance(data, 50):
        shape.append(left)
    shape = draw(data, st.permutations(shape))
    shape += [1] * draw(data, st.integers(0, max(0, 8 - len(shape))) if chance(data, 15) else
                        st.just(0))
    shape = tuple(shape)
    if chance(data, 40):
        shape = draw(data, st.lists(st.integers(-1, 6), max_size=8).map(tuple)) \
            if chance(data, 30) else perturb(data, shape)
    return [T(*x, dtype=dtype(data))], {"shape": shape[:8]}


def gen_noop(data):
    k = draw(data, st.integers(1, 4))
    return [T(*dims(data), dtype=dtype(data)) for _ in range(k)], {}


def gen_batchnorm(data):
    x = dims(data, 0 if chance(data, 10) else 2, 5)
    c = x[1] if len(x) > 1 else 3
    dt = dtype(data)
    ins = [T(*x, dtype=dt)]
    for _ in range(4):
        ins.append(T(*maybe_perturb(data, (c,), 8), dtype=other_dtype(data, dt) if chance(data, 25)
                     else dt))
    return ins, {"eps": draw(data, st.floats(1e-6, 1e-2))}


def gen_softmax(data):
    x = dims(data)
    return [T(*x, dtype=dtype(data))], {"axis": axis_in(data, len(x))}


def gen_layernorm(data):
    x = dims(data, 0 if chance(data, 8) else 1, 5)
    axis = axis_in(data, len(x))
    norm = x[axis:] if axis >= 0 else x[len(x) + axis:] if axis >= -len(x) else x
    dt = dtype(data)
    return [T(*x, dtype=dt), T(*maybe_perturb(data, norm, 12), dtype=other_dtype(data, dt)),
            T(*maybe_perturb(data, norm, 12), dtype=other_dtype(data, dt))], \
        {"axis": axis, "eps": draw(data, st.floats(1e-6, 1e-2))}


def gen_rmsnorm(data):
    ins, attrs = gen_layernorm(data)
    return ins[:2], attrs


def gen_reduce_mean(data):
    x = dims(data)
    r = len(x)
    if r and chance(data, 65):
        chosen = draw(data, st.lists(st.integers(0, r - 1), unique=True, max_size=r))
        axes = tuple(a - r if chance(data, 40) else a for a in chosen)
    else:
        axes = tuple(draw(data, st.lists(st.integers(-r - 1, r), max_size=min(r + 1, 8))))
    return [T(*x, dtype=dtype(data))], {"axes": axes, "keepdims": draw(data, st.booleans())}


def gen_slice(data):
    x = dims(data)
    r = len(x)
    chosen = draw(data, st.lists(st.integers(0, r - 1), unique=True, max_size=r)) if r else []
    axes, starts, ends = [], [], []
    for a in chosen:
        s = draw(data, st.integers(0, x[a] - 1))
        axes.append(a - r if chance(data, 40) else a)
        starts.append(s)
        ends.append(draw(data, st.integers(s + 1, x[a])))
    if chance(data, 40):
        which = draw(data, st.sampled_from([axes, starts, ends]))
        which.append(draw(data, st.integers(-r - 1, 6)))
        if chance(data, 50) and axes:
            axes.append(axes[0])                  # maybe a repeated axis
            starts.append(0)
            ends.append(1)
    return [T(*x, dtype=dtype(data))], \
        {"axes": tuple(axes), "starts": tuple(starts), "ends": tuple(ends)}


def gen_pad(data):
    x = dims(data)
    r = len(x)
    if 2 * r <= 8 and chance(data, 75):
        pads = tuple(draw(data, st.integers(0, 2)) for _ in range(2 * r))
        if chance(data, 15) and pads:
            pads = pads[:-1] + (-1,)
    else:
        pads = tuple(draw(data, st.lists(st.integers(-1, 2), max_size=8)))
    return [T(*x, dtype=dtype(data))], {"pads": pads, "value": draw(data, st.floats(-1, 1))}


def gen_broadcast(data):
    x = dims(data)
    lead = dims(data, 0, 3)
    shape = list(lead + tuple(draw(data, st.integers(1, 6)) if d == 1 else d for d in x))
    if chance(data, 40):
        how = draw(data, st.integers(0, 3))
        if how == 0 and shape:                      # a dimension changed (perhaps still valid)
            shape[draw(data, st.integers(0, len(shape) - 1))] += 1
        elif how == 1:                              # lower rank
            shape = shape[len(lead) + 1:]
        elif how == 2 and shape:                    # a non-positive dimension
            shape[draw(data, st.integers(0, len(shape) - 1))] = draw(data, st.integers(-1, 0))
        else:
            shape = draw(data, st.lists(st.integers(-1, 6), max_size=8))
    return [T(*x, dtype=dtype(data))], {"shape": tuple(shape[:8])}


GENERATORS = {
    "input": gen_leaf, "weight": gen_leaf,
    "ewadd": gen_ew_binary, "ewmul": gen_ew_binary,
    "matmul": gen_matmul, "conv2d": gen_conv2d,
    "relu": gen_unary, "tanh": gen_unary, "sigmoid": gen_unary, "gelu": gen_gelu,
    "dropout": gen_unary_float("ratio"), "scale": gen_unary_float("value"),
    "ewsub": gen_ew_binary, "ewdiv": gen_ew_binary, "shift": gen_unary_float("value"),
    "divide": gen_unary_float("value"), "power": gen_unary_float("value"),
    "erf": gen_unary, "sqrt": gen_unary, "reciprocal": gen_unary, "silu": gen_unary,
    "rmsnorm": gen_rmsnorm,
    "poolmax": gen_pool, "poolavg": gen_pool,
    "transpose": gen_transpose, "enlarge": gen_enlarge, "concat": gen_concat,
    "split": gen_split, "merge": gen_merge, "reshape": gen_reshape, "noop": gen_noop,
    "batchnorm": gen_batchnorm, "softmax": gen_softmax, "layernorm": gen_layernorm,
    "reduce_mean": gen_reduce_mean, "slice": gen_slice, "pad": gen_pad,
    "broadcast": gen_broadcast,
}
ALWAYS_VALID = {"relu", "tanh", "sigmoid", "dropout", "scale", "noop", "shift", "divide",
                "power", "erf", "sqrt", "reciprocal", "silu"}


def test_every_op_has_a_generator_and_a_valid_case():
    assert set(GENERATORS) == set(OPS) == set(ONE_VALID)


@pytest.mark.parametrize("op", sorted(GENERATORS))
def test_kernel_agrees_with_operator_table(op):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def agrees(data):
        check(op, *GENERATORS[op](data))

    agrees()


@pytest.mark.parametrize("op", sorted(GENERATORS))
def test_generators_give_both_verdicts(op):
    """A kernel that said 0 to everything must not pass: the generators make both valid and
    invalid nodes (checked on a fixed sample, so this cannot flake). 200 examples, at least 10
    invalid: with 40 (at least 4) the verdicts were down to each hypothesis release's
    derandomized draws (6.0-6.100 drew 1-3 invalid matmul/transpose/reduce_mean cases of 40)."""
    verdicts = [0, 0]

    @settings(max_examples=200, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def sample(data):
        verdicts[python_types(op, *GENERATORS[op](data)) is not None] += 1

    sample()
    total = sum(verdicts)
    assert verdicts[1] >= total // 5, f"{op}: only {verdicts[1]} of {total} cases valid"
    if op not in ALWAYS_VALID:
        assert verdicts[0] >= total // 20, f"{op}: only {verdicts[0]} of {total} cases invalid"


# ----------------------------------------------------------------------------------- unit tests

def infer(op, ins, **attrs):
    """Kernel result type row (or None) with schema defaults filled in, checked against Python."""
    full = {s.name: attrs.get(s.name, s.default) for s in OPS[op].attrs}
    return kernel(op, ins, full)[1] if check(op, ins, full) else None


def shape_of(row):
    return tuple(int(d) for d in row[3:3 + row[1]])


@pytest.mark.parametrize("hw,k,stride,pad,want", [
    ((224, 224), (7, 7), (2, 2), "same", (112, 112)),
    ((225, 225), (7, 7), (2, 2), "same", (113, 113)),
    ((10, 11), (3, 3), (3, 3), "same", (4, 4)),
    ((5, 5), (2, 2), (1, 1), "same", (5, 5)),          # even kernel
    ((7, 9), (3, 3), (1, 2), "same", (7, 5)),
    ((1, 1), (5, 5), (1, 1), "same", (1, 1)),          # kernel larger than input: still SAME
    ((10, 10), (3, 3), (1, 1), "valid", (8, 8)),
    ((10, 10), (3, 3), (2, 2), "valid", (4, 4)),
    ((3, 3), (3, 3), (1, 1), "valid", (1, 1)),
    ((5, 5), (3, 3), (1, 1), (1, 2, 0, 1), (4, 6)),     # [top, left, bottom, right]
    ((2, 2), (3, 3), (1, 1), "valid", None),           # does not fit
    ((2, 2), (4, 4), (1, 1), (1, 0, 0, 0), None),
])
def test_conv2d_sizes(hw, k, stride, pad, want):
    out = infer("conv2d", [T(1, 3, *hw), T(8, 3, *k)], stride=stride, pad=pad)
    assert (None if out is None else shape_of(out)) == (None if want is None else (1, 8) + want)


@pytest.mark.parametrize("c,w,valid,out_c", [
    (8, (16, 2, 3, 3), True, 16),      # 4 groups
    (8, (8, 1, 3, 3), True, 8),        # depthwise
    (3, (6, 1, 3, 3), True, 6),        # channel multiplier 2
    (3, (4, 2, 3, 3), False, None),    # 3 channels not a multiple of 2
    (4, (3, 2, 3, 3), False, None),    # 3 output channels into 2 groups
])
def test_grouped_conv(c, w, valid, out_c):
    out = infer("conv2d", [T(1, c, 5, 5), T(*w)])
    assert (out is not None) == valid
    if valid:
        assert shape_of(out) == (1, out_c, 5, 5)


@pytest.mark.parametrize("hw,k,stride,pad,want", [
    ((112, 112), (3, 3), (2, 2), "same", (56, 56)),
    ((7, 7), (3, 3), (2, 2), "same", (4, 4)),
    ((7, 7), (2, 2), (2, 2), "valid", (3, 3)),
    ((5, 6), (3, 2), (2, 1), (1, 0, 1, 1), (3, 6)),
    ((5, 5), (2, 2), (1, 1), "same", (5, 5)),
    ((2, 2), (3, 3), (1, 1), "valid", None),
    ((5, 5), (3, 3), (1, 1), (3, 0, 0, 0), None),     # top pad not smaller than the window
    ((5, 5), (3, 2), (1, 1), (0, 2, 0, 0), None),     # left pad vs kernel width
    ((5, 5), (3, 2), (1, 1), (2, 1, 2, 1), (7, 6)),   # largest pads allowed
])
@pytest.mark.parametrize("op", ["poolmax", "poolavg"])
def test_pool_sizes(op, hw, k, stride, pad, want):
    out = infer(op, [T(2, 3, *hw)], kernel=k, stride=stride, pad=pad)
    assert (None if out is None else shape_of(out)) == (None if want is None else (2, 3) + want)


def test_split_and_proj():
    x = T(1, 5, 4, dtype="f16")
    attrs = {"axis": -2, "sizes": (2, 3)}
    got, out = kernel("split", [x], attrs)
    assert got == 1 and list(out[:2]) == [-2, 2] and not out[2:].any()
    assert check("split", [x], attrs)
    for i, want in enumerate([T(1, 2, 4, dtype="f16"), T(1, 3, 4, dtype="f16")]):
        g, row = proj(i, attrs, x)
        assert g == 1 and (row == LITS.encode(want)).all()
    assert proj(2, attrs, x)[0] == 0
    for bad in [{"axis": 1, "sizes": (2, 2)}, {"axis": 1, "sizes": ()},
                {"axis": 1, "sizes": (0, 5)}, {"axis": 3, "sizes": (1,)}]:
        assert kernel("split", [x], bad)[0] == 0
        assert proj(0, bad, x)[0] == 0


def test_leaves_and_rank_limit():
    assert shape_of(infer("input", [], name="a", shape=(2, 3), dtype="f64")) == (2, 3)
    assert infer("weight", [], name="w", shape=(1,) * 8) is None          # rank 8
    assert infer("reshape", [T(2, 3)], shape=(1,) * 6 + (2, 3)) is None  # rank 8
    assert shape_of(infer("reshape", [T(2, 3)], shape=(1,) * 5 + (2, 3))) == (1,) * 5 + (2, 3)
    assert infer("broadcast", [T(1)], shape=(2,) * 8) is None


def test_reshape_counts_elements_exactly():
    """Element counts whose int64 product wraps around must not compare equal by accident."""
    assert python_types("reshape", [T(4)], {"shape": (2 ** 62 + 1, 4)}) is None
    assert kernel("reshape", [T(4)], {"shape": (2 ** 62 + 1, 4)})[0] == 0   # wraps to 4
    assert kernel("reshape", [T(2, 2)], {"shape": (2 ** 32, 2 ** 32, 1, 4)})[0] == 0
    assert shape_of(kernel("reshape", [T(4, 6, 5)], {"shape": (3, 2, 20)})[1]) == (3, 2, 20)


ONE_VALID = {      # op: (operand types, attributes beyond the defaults), a valid node
    "input": ([], {"name": "x", "shape": (2, 3)}), "weight": ([], {"name": "w", "shape": (2,)}),
    "ewadd": ([T(2, 3)] * 2, {}), "ewmul": ([T(2, 3)] * 2, {}),
    "matmul": ([T(2, 3), T(3, 4)], {}), "conv2d": ([T(1, 3, 5, 5), T(4, 3, 3, 3)], {}),
    "relu": ([T(2)], {}), "tanh": ([T(2)], {}), "sigmoid": ([T(2)], {}), "gelu": ([T(2)], {}),
    "poolmax": ([T(1, 2, 4, 4)], {"kernel": (2, 2)}),
    "poolavg": ([T(1, 2, 4, 4)], {"kernel": (2, 2)}),
    "transpose": ([T(2, 3)], {"perm": (1, 0)}), "enlarge": ([T(4, 4, 1, 1), T(4, 4, 3, 3)], {}),
    "concat": ([T(2, 3), T(2, 1)], {"axis": 1}), "split": ([T(2, 3)], {"axis": 1, "sizes": (1, 2)}),
    "merge": ([T(4, 1, 3, 3)], {"count": 2, "groups": 2}), "reshape": ([T(2, 3)], {"shape": (6,)}),
    "noop": ([T(2), T(3)], {}), "batchnorm": ([T(1, 3, 2, 2)] + [T(3)] * 4, {}),
    "softmax": ([T(2, 3)], {}), "layernorm": ([T(2, 3), T(3), T(3)], {}),
    "reduce_mean": ([T(2, 3)], {"axes": (1,)}),
    "slice": ([T(2, 3)], {"axes": (1,), "starts": (0,), "ends": (2,)}),
    "pad": ([T(2, 3)], {"pads": (0, 1, 1, 0)}), "dropout": ([T(2)], {}),
    "broadcast": ([T(3)], {"shape": (2, 3)}), "scale": ([T(2)], {"value": 2.0}),
    "ewsub": ([T(2, 3)] * 2, {}), "ewdiv": ([T(2, 3)] * 2, {}),
    "shift": ([T(2)], {"value": 1.0}), "divide": ([T(2)], {"value": 3.0}),
    "power": ([T(2)], {"value": 2.0}), "erf": ([T(2)], {}), "sqrt": ([T(2)], {}),
    "reciprocal": ([T(2)], {}), "silu": ([T(2)], {}), "rmsnorm": ([T(2, 3), T(3)], {}),
}


@pytest.mark.parametrize("op", sorted(ONE_VALID))
def test_wrong_arity_is_rejected(op):
    ins, given = ONE_VALID[op]
    attrs = {s.name: given.get(s.name, s.default) for s in OPS[op].attrs}
    assert check(op, ins, attrs)
    lo, hi = OPS[op].arity
    assert kernel(op, ins[:lo - 1] if lo else [], attrs, nin=lo - 1 if lo else -1)[0] == 0
    if hi is not None:
        assert kernel(op, ins + [ins[0] if ins else T(2)], attrs)[0] == 0


def test_malformed_rows_are_rejected():
    x = [T(1, 3, 5, 5), T(4, 3, 3, 3)]
    good = {"stride": (1, 1), "pad": "same", "act": "none"}
    assert kernel("conv2d", x, good)[0] == 1
    rows, nattr = attr_rows("conv2d", good)
    ins = type_rows(x)
    out = np.zeros(WIDTH, np.int64)
    conv = EOP_IDS["conv2d"]
    assert infer_row(conv, rows, nattr - 1, ins, 2, CONSTS, out) == 0       # attribute missing
    bad = rows.copy()
    bad[0] = LITS.encode(1)                                                 # stride as an int
    assert infer_row(conv, bad, nattr, ins, 2, CONSTS, out) == 0
    bad = rows.copy()
    bad[2] = LITS.encode("gelu")                                            # not an activation
    assert infer_row(conv, bad, nattr, ins, 2, CONSTS, out) == 0
    bad_ins = ins.copy()
    bad_ins[1] = LITS.encode((4, 3, 3, 3))                                  # a literal, not a type
    assert infer_row(conv, rows, nattr, bad_ins, 2, CONSTS, out) == 0
    bad_ins = ins.copy()
    bad_ins[1, 2] = len(DTYPES)                                             # unknown dtype index
    assert infer_row(conv, rows, nattr, bad_ins, 2, CONSTS, out) == 0
    for op in ("lit", "proj", "opaque"):
        assert infer_row(EOP_IDS[op], rows, 0, ins, 1, CONSTS, out) == 0
    assert infer_row(-1, rows, 0, ins, 1, CONSTS, out) == 0


def test_consts_layout():
    strings = [LITS.strings[int(i)] for i in CONSTS]
    assert strings == ["same", "valid", "none", "relu", "sigmoid", "tanh", *DTYPES]
    assert strings[shapes_nb.S_DTYPE0:] == list(DTYPES)


def test_port_matches_operator_table(monkeypatch):
    assert shapes_nb.SCHEMA_NAMES == ops.OP_NAMES
    assert [EOP_IDS[n] for n in shapes_nb.SCHEMA_NAMES] == list(range(len(ops.OP_NAMES)))
    shapes_nb._check_tables()
    swapped = list(ops.OP_NAMES)
    swapped[2], swapped[3] = swapped[3], swapped[2]
    monkeypatch.setattr(ops, "OP_NAMES", tuple(swapped))
    with pytest.raises(RuntimeError, match="op order"):
        shapes_nb._check_tables()
    monkeypatch.undo()
    conv = OPS["conv2d"]
    monkeypatch.setitem(OPS, "conv2d", ops.OpDef(conv.name, conv.arity, conv.attrs[::-1],
                                                 conv.infer, conv.flops, conv.doc))
    with pytest.raises(RuntimeError, match="conv2d: attributes"):
        shapes_nb._check_tables()
