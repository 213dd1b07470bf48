"""The operator table's shape functions (ir/ops/) ported to Numba, on encoded rows.

Rule application builds new e-nodes inside Numba and must shape-check each one without calling
Python. `infer_row` does what `normalize_attrs` + `infer_types` do for one node, on the encoded
rows of literals.py: attribute literal rows in schema order and operand type rows in, the result
type row out. It returns 1 when Python would return types and 0 when Python would raise (ShapeError,
AttrError on an attribute *value*, or an arity error), so the two agree on every node that
encodes; tests/test_shapes_nb.py checks that property op by op. `infer_proj` gives the type of one
result of a split.

Rows (literals.py, width W = 10): K_INT [1, 1, v], K_FLOAT [2, 1, bits], K_BOOL [3, 1, 0/1],
K_STR [4, 1, string id], K_INTS [5, n, v0 ..], K_TYPE [6, rank, dtype index, d0 .. d6], the
unused tail zero (so an output row interns to the same id as `Literals.encode` of that type).
A split's result is a tuple: `infer_row` writes [T_TUPLE = -2, number of results, 0 ...].

Deliberate differences from the Python (all on nodes the e-graph cannot hold anyway):
- a result of rank > W - 3 = MAX_RANK is rejected (Python builds it; literals cannot encode it);
- degenerate operand dimensions (<= 0) that make Python divide by zero (conv2d with 0 input
  channels) are rejected instead of raising ZeroDivisionError;
- the kernel also checks attribute *kinds* and operand rows (a wrong row kind gives 0), which in
  Python is the loader's job.
Arithmetic on attribute values near the int64 limits wraps here but not in Python (only reshape,
where it could change the verdict, compares element counts exactly).

Caching and the op ids. Numba's on-disk cache is keyed on this file only: a module-level value
that a kernel reads is frozen into the cached machine code, and a change in *another* file that
such a value came from is not noticed. So every value the kernels read is a literal of this file:
the op ids and attribute schemas are spelled out in `_SCHEMA` below (e-graph op id = position in
ops.OP_NAMES = position here), the row kinds are copied from literals.py. At import,
`_check_tables` compares them with ir/ops/, literals.py and layout.py and raises RuntimeError on any
difference (an op added, removed, reordered, an attribute renamed, moved or re-kinded), so a stale
port can never run silently. Values that depend on a Literals instance (string ids) come in at
run time in `consts` (see `shape_consts`).

Why one file of ~740 lines: the port must be one file (Numba's cache is keyed on it, see above,
and `_check_tables` compares one `_SCHEMA` with the table); the definitions it ports live one
module per operator family in ir/ops/ (docs/operators.md: adding an op adds a `_SCHEMA` line and a
case in `infer_row` here).

Compile time. The helpers stay functions of their own: inlined (inline="always") into
`infer_row` they made its type inference slower than compiling each once (measured: a first run
of nasrnn took 40 and 37 CPU seconds with them apart, 57 and 44 inlined, alternating).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .literals import Literals

# ----------------------------------------------------------------------------------- constants
# Row kinds (copies of literals.py's, checked at import).
K_INT, K_FLOAT, K_BOOL, K_STR, K_INTS, K_TYPE = 1, 2, 3, 4, 5, 6
T_TUPLE = -2                  # out[0] for a split (layout.T_TUPLE: C_TYPE of a tuple class)

# Indices into `consts` (see shape_consts).
S_SAME, S_VALID, S_NONE, S_RELU, S_SIGMOID, S_TANH = range(6)
S_DTYPE0 = 6                  # consts[S_DTYPE0 + k] = string id of ir.graph.DTYPES[k]

# Attribute value checks (what normalize_attrs enforces beyond the literal's kind).
A_INT, A_FLOAT, A_BOOL, A_STR, A_INTS = 1, 2, 3, 4, 5   # any value of that kind
A_PAIR = 6                    # ints: exactly two, both > 0 (stride, kernel)
A_PAD = 7                     # "same", "valid" or four ints >= 0
A_ACT = 8                     # str: one of ops.ACTIVATIONS
A_DTYPE = 9                   # str: one of ir.graph.DTYPES
A_APPROX = 10                 # str: "none" or "tanh" (gelu's approximate)
APPROXIMATIONS = ("none", "tanh")

VARIADIC = -1

# The operator table as this port understands it: (name, min arity, max arity, attributes).
# Order = ops.OP_NAMES = e-graph op ids. Checked against ops.OPS at import.
_SCHEMA = (
    ("input", 0, 0, (("name", A_STR), ("shape", A_INTS), ("dtype", A_DTYPE))),
    ("weight", 0, 0, (("name", A_STR), ("shape", A_INTS), ("dtype", A_DTYPE))),
    ("ewadd", 2, 2, ()),
    ("ewmul", 2, 2, ()),
    ("matmul", 2, 2, (("act", A_ACT),)),
    ("conv2d", 2, 3, (("stride", A_PAIR), ("pad", A_PAD), ("act", A_ACT))),
    ("relu", 1, 1, ()),
    ("tanh", 1, 1, ()),
    ("sigmoid", 1, 1, ()),
    ("poolmax", 1, 1, (("kernel", A_PAIR), ("stride", A_PAIR), ("pad", A_PAD), ("act", A_ACT))),
    ("poolavg", 1, 1, (("kernel", A_PAIR), ("stride", A_PAIR), ("pad", A_PAD), ("act", A_ACT))),
    ("transpose", 1, 1, (("perm", A_INTS),)),
    ("enlarge", 2, 2, ()),
    ("concat", 1, VARIADIC, (("axis", A_INT),)),
    ("split", 1, 1, (("axis", A_INT), ("sizes", A_INTS))),
    ("merge", 1, 1, (("count", A_INT), ("groups", A_INT))),
    ("reshape", 1, 1, (("shape", A_INTS),)),
    ("noop", 1, VARIADIC, ()),
    ("batchnorm", 5, 5, (("eps", A_FLOAT),)),
    ("softmax", 1, 1, (("axis", A_INT),)),
    ("layernorm", 3, 3, (("axis", A_INT), ("eps", A_FLOAT))),
    ("gelu", 1, 1, (("approximate", A_APPROX),)),
    ("reduce_mean", 1, 1, (("axes", A_INTS), ("keepdims", A_BOOL))),
    ("slice", 1, 1, (("axes", A_INTS), ("starts", A_INTS), ("ends", A_INTS))),
    ("pad", 1, 1, (("pads", A_INTS), ("value", A_FLOAT))),
    ("dropout", 1, 1, (("ratio", A_FLOAT),)),
    ("broadcast", 1, 1, (("shape", A_INTS),)),
    ("scale", 1, 1, (("value", A_FLOAT),)),
    ("ewsub", 2, 2, ()),
    ("ewdiv", 2, 2, ()),
    ("shift", 1, 1, (("value", A_FLOAT),)),
    ("divide", 1, 1, (("value", A_FLOAT),)),
    ("power", 1, 1, (("value", A_FLOAT),)),
    ("erf", 1, 1, ()),
    ("sqrt", 1, 1, ()),
    ("reciprocal", 1, 1, ()),
    ("silu", 1, 1, ()),
    ("rmsnorm", 2, 2, (("axis", A_INT), ("eps", A_FLOAT))),
)
SCHEMA_NAMES: tuple[str, ...] = tuple(s[0] for s in _SCHEMA)
_ID = {name: i for i, name in enumerate(SCHEMA_NAMES)}
N_OPS = len(_SCHEMA)
(INPUT, WEIGHT, EWADD, EWMUL, MATMUL, CONV2D, RELU, TANH, SIGMOID, POOLMAX, POOLAVG, TRANSPOSE,
 ENLARGE, CONCAT, SPLIT, MERGE, RESHAPE, NOOP, BATCHNORM, SOFTMAX, LAYERNORM, GELU, REDUCE_MEAN,
 SLICE, PAD, DROPOUT, BROADCAST, SCALE, EWSUB, EWDIV, SHIFT, DIVIDE, POWER, ERF, SQRT, RECIPROCAL,
 SILU, RMSNORM) = (_ID[n] for n in SCHEMA_NAMES)

_MAX_ATTRS = max(len(s[3]) for s in _SCHEMA)
_ARITY = np.array([(lo, hi) for _, lo, hi, _ in _SCHEMA], np.int64)
_NATTR = np.array([len(a) for *_, a in _SCHEMA], np.int64)
_ACODE = np.zeros((N_OPS, _MAX_ATTRS), np.int64)
for _i, (*_, _attrs) in enumerate(_SCHEMA):
    for _k, (_, _code) in enumerate(_attrs):
        _ACODE[_i, _k] = _code


def _check_tables() -> None:
    """Raise RuntimeError when ir/ops/ / literals.py / layout.py no longer match this port."""
    from ..ir import ops
    from . import layout, literals

    problems = []
    if tuple(ops.OP_NAMES) != SCHEMA_NAMES:
        problems.append(f"op order {ops.OP_NAMES} != {SCHEMA_NAMES}")
    for name, lo, hi, attrs in _SCHEMA:
        d = ops.OPS.get(name)
        if d is None:
            continue
        if d.arity != (lo, None if hi == VARIADIC else hi):
            problems.append(f"{name}: arity {d.arity}")
        got = []
        for spec in d.attrs:
            k = spec.kind
            if k == "str":
                code = (A_ACT if spec.choices == ops.ACTIVATIONS
                        else A_APPROX if spec.choices == APPROXIMATIONS
                        else A_STR if not spec.choices else -1)
            elif k == "ints":
                code = A_PAIR if spec.name in ("stride", "kernel") else A_INTS
            else:
                code = {"int": A_INT, "float": A_FLOAT, "bool": A_BOOL, "padding": A_PAD,
                        "dtype": A_DTYPE}.get(k, -1)
            got.append((spec.name, code))
        if tuple(got) != attrs:
            problems.append(f"{name}: attributes {got} != {list(attrs)}")
    if (literals.K_INT, literals.K_FLOAT, literals.K_BOOL, literals.K_STR, literals.K_INTS,
            literals.K_TYPE) != (K_INT, K_FLOAT, K_BOOL, K_STR, K_INTS, K_TYPE):
        problems.append("literal row kinds changed")
    if set(ops.ACTIVATIONS) != {"none", "relu", "sigmoid", "tanh"}:   # consts[S_NONE:S_TANH+1]
        problems.append(f"activations {ops.ACTIVATIONS}")
    if layout.T_TUPLE != T_TUPLE:
        problems.append("layout.T_TUPLE changed")
    if problems:
        raise RuntimeError("eqsat_nb/egraph/shapes_nb.py is out of date with the operator table: "
                           + "; ".join(problems))


_check_tables()


def shape_consts(lits: Literals) -> np.ndarray:
    """The string ids `infer_row` compares against, interned in `lits` (int64 array):

    consts[S_SAME] "same", [S_VALID] "valid", [S_NONE] "none", [S_RELU] "relu",
    [S_SIGMOID] "sigmoid", [S_TANH] "tanh", [S_DTYPE0 + k] ir.graph.DTYPES[k] (so
    consts.size - S_DTYPE0 dtypes; a type row's dtype index k is DTYPES[k]).
    Valid for `lits` (and the e-graphs sharing it) forever, since string ids never change."""
    from ..ir.graph import DTYPES

    got = lits.derived.get("shape_consts")
    if got is None:
        names = ("same", "valid", "none", "relu", "sigmoid", "tanh") + tuple(DTYPES)
        got = lits.derived["shape_consts"] = np.array(
            [lits.rows[lits.literal(s), 2] for s in names], np.int64)
    return got


# ----------------------------------------------------------------------------------- row helpers

@njit(cache=True)
def _start_type(out: np.ndarray, dtype: int, rank: int) -> None:
    """out := a type row header with all dims (and the tail) zero."""
    for i in range(out.size):
        out[i] = 0
    out[0] = K_TYPE
    out[1] = rank
    out[2] = dtype


@njit(cache=True)
def _copy_type(t: np.ndarray, out: np.ndarray) -> int:
    _start_type(out, t[2], t[1])
    for i in range(t[1]):
        out[3 + i] = t[3 + i]
    return 1


@njit(cache=True)
def _type_ok(t: np.ndarray, ndtypes: int, width: int) -> bool:
    return t[0] == K_TYPE and 0 <= t[1] <= width - 3 and 0 <= t[2] < ndtypes


@njit(cache=True)
def _same_shape(a: np.ndarray, b: np.ndarray) -> bool:
    if a[1] != b[1]:
        return False
    for i in range(a[1]):
        if a[3 + i] != b[3 + i]:
            return False
    return True


@njit(cache=True)
def _same_dtype(ins: np.ndarray, nin: int) -> bool:
    for k in range(1, nin):
        if ins[k, 2] != ins[0, 2]:
            return False
    return True


@njit(cache=True)
def _norm_axis(axis: int, rank: int) -> int:
    """shapes.normalize_axis, or -1 when out of range."""
    if -rank <= axis < rank:
        return axis % rank
    return -1


@njit(cache=True)
def _gcd(a: int, b: int) -> int:
    while b != 0:
        a, b = b, a % b
    return a


@njit(cache=True)
def _is_str(row: np.ndarray, consts: np.ndarray, lo: int, hi: int) -> bool:
    """row is a K_STR whose string id is one of consts[lo:hi]."""
    if row[0] != K_STR:
        return False
    for k in range(lo, hi):
        if row[2] == consts[k]:
            return True
    return False


@njit(cache=True)
def _attr_ok(code: int, row: np.ndarray, consts: np.ndarray) -> bool:
    """normalize_attrs's checks on one encoded attribute value (kind and value)."""
    kind = row[0]
    if code == A_INT:
        return kind == K_INT and row[1] == 1
    if code == A_FLOAT:
        return kind == K_FLOAT and row[1] == 1
    if code == A_STR:
        return kind == K_STR and row[1] == 1
    if code == A_BOOL:
        return kind == K_BOOL and row[1] == 1 and (row[2] == 0 or row[2] == 1)
    if code == A_INTS:
        return kind == K_INTS and 0 <= row[1] <= row.size - 2
    if code == A_PAIR:
        return kind == K_INTS and row[1] == 2 and row[2] > 0 and row[3] > 0
    if code == A_PAD:
        if kind == K_STR:
            return _is_str(row, consts, np.int64(S_SAME), np.int64(S_VALID + 1))
        return kind == K_INTS and row[1] == 4 and row[2] >= 0 and row[3] >= 0 and \
            row[4] >= 0 and row[5] >= 0
    if code == A_ACT:
        return _is_str(row, consts, np.int64(S_NONE), np.int64(S_TANH + 1))
    if code == A_DTYPE:
        return _is_str(row, consts, np.int64(S_DTYPE0), consts.size)
    if code == A_APPROX:                  # "none" or "tanh": consts[S_NONE], consts[S_TANH]
        return kind == K_STR and row[1] == 1 and (row[2] == consts[S_NONE]
                                                  or row[2] == consts[S_TANH])
    return False


# ----------------------------------------------------------------------------------- op families

@njit(cache=True)
def _leaf(attrs: np.ndarray, consts: np.ndarray, out: np.ndarray) -> int:
    shape, dt = attrs[1], attrs[2]
    rank = shape[1]
    if rank > out.size - 3:
        return 0
    dtype = -1
    for k in range(S_DTYPE0, consts.size):
        if consts[k] == dt[2]:
            dtype = k - S_DTYPE0
            break
    _start_type(out, dtype, rank)
    for i in range(rank):
        out[3 + i] = shape[2 + i]
    return 1


@njit(cache=True)
def _ew_binary(ins: np.ndarray, out: np.ndarray) -> int:
    if not _same_shape(ins[0], ins[1]) or not _same_dtype(ins, np.int64(2)):
        return 0
    return _copy_type(ins[0], out)


@njit(cache=True)
def _matmul(ins: np.ndarray, out: np.ndarray) -> int:
    """ops._matmul: ranks >= 2, inner dims equal, batch dims broadcast from the end."""
    x, y = ins[0], ins[1]
    rx, ry = x[1], y[1]
    if not _same_dtype(ins, np.int64(2)) or rx < 2 or ry < 2:
        return 0
    if x[3 + rx - 1] != y[3 + ry - 2]:
        return 0
    r = max(rx, ry)
    _start_type(out, x[2], r)
    for k in range(3, r + 1):              # batch axis k counted from the end (3 = last batch)
        dx = x[3 + rx - k] if k <= rx else 1
        dy = y[3 + ry - k] if k <= ry else 1
        if dx != dy and dx != 1 and dy != 1:
            return 0
        out[3 + r - k] = dy if dx == 1 else dx
    out[3 + r - 2] = x[3 + rx - 2]
    out[3 + r - 1] = y[3 + ry - 1]
    return 1


@njit(cache=True)
def _window(size: int, kernel: int, stride: int, pad: np.ndarray, before: int, after: int,
            consts: np.ndarray) -> int:
    """shapes.window_out: output length along one axis; pad is the padding attribute row and
    (before, after) the indices of this axis's explicit pads in it."""
    if pad[0] == K_STR:
        if pad[2] == consts[S_VALID]:
            pb, pa = 0, 0
        else:                                           # same: ceil(size / stride) outputs
            n = -((-size) // stride)
            total = max((n - 1) * stride + kernel - size, 0)
            pb = total // 2
            pa = total - pb
    else:
        pb, pa = pad[2 + before], pad[2 + after]
    return (size + pb + pa - kernel) // stride + 1


@njit(cache=True)
def _spatial(x: np.ndarray, kh: int, kw: int, stride: np.ndarray, pad: np.ndarray, c: int,
             consts: np.ndarray, out: np.ndarray) -> int:
    """out := (x.N, c, Ho, Wo) for a 2-D window over NCHW x; 0 when it does not fit."""
    ho = _window(x[5], kh, stride[2], pad, np.int64(0), np.int64(2), consts)     # pads are [top, left, bottom, right]
    wo = _window(x[6], kw, stride[3], pad, np.int64(1), np.int64(3), consts)
    if ho <= 0 or wo <= 0:
        return 0
    _start_type(out, x[2], np.int64(4))
    out[3], out[4], out[5], out[6] = x[3], c, ho, wo
    return 1


@njit(cache=True)
def _conv2d(attrs: np.ndarray, ins: np.ndarray, nin: int, consts: np.ndarray,
            out: np.ndarray) -> int:
    x, w = ins[0], ins[1]
    if x[1] != 4 or w[1] != 4 or not _same_dtype(ins, nin):
        return 0
    c, o, cg = x[4], w[3], w[4]
    if nin == 3 and (ins[2, 1] != 1 or ins[2, 3] != o):   # bias: shape [O]
        return 0
    if cg <= 0 or c % cg != 0:
        return 0
    groups = c // cg                       # inferred, as in TASO
    if groups == 0 or o % groups != 0:     # groups == 0: Python divides by zero
        return 0
    return _spatial(x, w[5], w[6], attrs[0], attrs[1], o, consts, out)


@njit(cache=True)
def _pool(attrs: np.ndarray, ins: np.ndarray, consts: np.ndarray, out: np.ndarray) -> int:
    x, kernel, pad = ins[0], attrs[0], attrs[2]
    if x[1] != 4:
        return 0
    kh, kw = kernel[2], kernel[3]
    if pad[0] == K_INTS and (pad[2] >= kh or pad[3] >= kw or pad[4] >= kh or pad[5] >= kw):
        return 0                           # explicit pads must be smaller than the window
    return _spatial(x, kh, kw, attrs[1], pad, x[4], consts, out)


@njit(cache=True)
def _transpose(perm: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    r = x[1]
    if perm[1] != r:
        return 0
    seen = 0
    for i in range(r):
        p = perm[2 + i]
        if p < 0 or p >= r or (seen >> p) & 1:
            return 0
        seen |= 1 << p
    _start_type(out, x[2], r)
    for i in range(r):
        out[3 + i] = x[3 + perm[2 + i]]
    return 1


@njit(cache=True)
def _enlarge(ins: np.ndarray, out: np.ndarray) -> int:
    w, ref = ins[0], ins[1]
    if w[1] != 4 or ref[1] != 4:
        return 0
    kh, kw, rh, rw = w[5], w[6], ref[5], ref[6]
    if rh < kh or rw < kw or (rh - kh) % 2 != 0 or (rw - kw) % 2 != 0:
        return 0
    _copy_type(w, out)                     # dtype of w; the reference only lends its size
    out[5], out[6] = rh, rw
    return 1


@njit(cache=True)
def _concat(axis_row: np.ndarray, ins: np.ndarray, nin: int, out: np.ndarray) -> int:
    first = ins[0]
    r = first[1]
    axis = _norm_axis(axis_row[2], r)
    if axis < 0 or not _same_dtype(ins, nin):
        return 0
    total = 0
    for k in range(nin):
        t = ins[k]
        if t[1] != r:
            return 0
        for i in range(r):
            if i != axis and t[3 + i] != first[3 + i]:
                return 0
        total += t[3 + axis]
    _copy_type(first, out)
    out[3 + axis] = total
    return 1


@njit(cache=True)
def _split_axis(axis_row: np.ndarray, sizes: np.ndarray, x: np.ndarray) -> int:
    """The normalized axis of a valid split, or -1."""
    axis = _norm_axis(axis_row[2], x[1])
    n = sizes[1]
    if axis < 0 or n < 1:
        return -1
    total = 0
    for i in range(n):
        if sizes[2 + i] <= 0:
            return -1
        total += sizes[2 + i]
    return axis if total == x[3 + axis] else -1


@njit(cache=True)
def _merge(attrs: np.ndarray, w: np.ndarray, out: np.ndarray) -> int:
    count, groups = attrs[0, 2], attrs[1, 2]
    if w[1] != 4 or count < 1 or groups < 1 or groups % count != 0 or w[3] % groups != 0:
        return 0
    _copy_type(w, out)
    out[4] = w[4] * count
    return 1


@njit(cache=True)
def _positive_dims(shape: np.ndarray, n: int) -> bool:
    """The n values of an ints literal row are all > 0 (a valid target shape)."""
    for j in range(n):
        if shape[2 + j] <= 0:
            return False
    return True


@njit(cache=True)
def _shape_type(dtype: int, shape: np.ndarray, n: int, out: np.ndarray) -> int:
    """out := the type with this dtype and the n dims of an ints literal row; returns 1."""
    _start_type(out, dtype, n)
    for j in range(n):
        out[3 + j] = shape[2 + j]
    return 1


@njit(cache=True, _nrt=True)   # allocates; its callers may be compiled without NRT
def _same_numel(x: np.ndarray, shape: np.ndarray) -> bool:
    """prod(x dims) == prod(shape values), all shape values > 0, exactly (no overflow): cancel
    common factors pairwise; the products are equal iff everything cancels to 1."""
    r, n = x[1], shape[1]
    a = np.empty(r, np.int64)
    negative = False
    for i in range(r):
        d = x[3 + i]
        if d == 0:
            return False
        if d < 0:
            negative = not negative
            d = -d
        a[i] = d
    if negative:
        return False
    b = shape[2:2 + n].copy()
    for i in range(r):
        for j in range(n):
            g = _gcd(a[i], b[j])
            a[i] //= g
            b[j] //= g
    for i in range(r):
        if a[i] != 1:
            return False
    for j in range(n):
        if b[j] != 1:
            return False
    return True


@njit(cache=True)
def _reshape(shape: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    n = shape[1]
    if n > out.size - 3:
        return 0
    if not _positive_dims(shape, n):
        return 0
    if not _same_numel(x, shape):
        return 0
    return _shape_type(x[2], shape, n, out)


@njit(cache=True)
def _batchnorm(ins: np.ndarray, out: np.ndarray) -> int:
    x = ins[0]
    if x[1] < 2 or not _same_dtype(ins, np.int64(5)):
        return 0
    for k in range(1, 5):                  # scale, bias, mean, var: shape (channels,)
        if ins[k, 1] != 1 or ins[k, 3] != x[4]:
            return 0
    return _copy_type(x, out)


@njit(cache=True)
def _softmax(axis_row: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    if _norm_axis(axis_row[2], x[1]) < 0:
        return 0
    return _copy_type(x, out)


@njit(cache=True)
def _layernorm(axis_row: np.ndarray, ins: np.ndarray, nin: int, out: np.ndarray) -> int:
    """layernorm (nin 3: x, gamma, beta) and rmsnorm (nin 2: x, gamma)."""
    x = ins[0]
    r = x[1]
    axis = _norm_axis(axis_row[2], r)
    if axis < 0 or not _same_dtype(ins, nin):
        return 0
    for k in range(1, nin):                # gamma, beta: shape x.shape[axis:]
        p = ins[k]
        if p[1] != r - axis:
            return 0
        for i in range(r - axis):
            if p[3 + i] != x[3 + axis + i]:
                return 0
    return _copy_type(x, out)


@njit(cache=True)
def _reduce_mean(axes: np.ndarray, keepdims: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    r = x[1]
    mask = 0
    for k in range(axes[1]):
        i = _norm_axis(axes[2 + k], r)
        if i < 0 or (mask >> i) & 1:       # out of range, or repeated
            return 0
        mask |= 1 << i
    keep = keepdims[2] != 0
    _start_type(out, x[2], np.int64(0))
    rank = 0
    for i in range(r):
        if (mask >> i) & 1:
            if keep:
                out[3 + rank] = 1
                rank += 1
        else:
            out[3 + rank] = x[3 + i]
            rank += 1
    out[1] = rank
    return 1


@njit(cache=True)
def _slice(attrs: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    axes, starts, ends = attrs[0], attrs[1], attrs[2]
    n = axes[1]
    if starts[1] != n or ends[1] != n:
        return 0
    r = x[1]
    _copy_type(x, out)
    seen = 0
    for k in range(n):
        i = _norm_axis(axes[2 + k], r)
        if i < 0 or (seen >> i) & 1:
            return 0
        seen |= 1 << i
        s, e = starts[2 + k], ends[2 + k]
        if not (0 <= s and s < e and e <= x[3 + i]):
            return 0
        out[3 + i] = e - s
    return 1


@njit(cache=True)
def _pad(pads: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    r = x[1]
    if pads[1] != 2 * r:
        return 0
    for k in range(2 * r):
        if pads[2 + k] < 0:
            return 0
    _copy_type(x, out)
    for i in range(r):                     # all begins, then all ends
        out[3 + i] = x[3 + i] + pads[2 + i] + pads[2 + r + i]
    return 1


@njit(cache=True)
def _broadcast(shape: np.ndarray, x: np.ndarray, out: np.ndarray) -> int:
    r, n = x[1], shape[1]
    if n < r or n > out.size - 3:
        return 0
    if not _positive_dims(shape, n):
        return 0
    for k in range(r):                     # trailing axes aligned
        d, t = x[3 + r - 1 - k], shape[2 + n - 1 - k]
        if d != t and d != 1:
            return 0
    return _shape_type(x[2], shape, n, out)


# ----------------------------------------------------------------------------------- kernels

@njit(cache=True)
def infer_row(op: int, attrs: np.ndarray, nattr: int, ins: np.ndarray, nin: int,
              consts: np.ndarray, out: np.ndarray) -> int:
    """Result type of e-graph op `op` (an id of ops.OP_NAMES) on encoded rows.

    attrs[:nattr]: the literal rows of its attributes in schema order; ins[:nin]: the type rows
    of its operands; consts: `shape_consts(lits)` of the Literals the rows come from. Writes the
    result type row (a full row, tail zero) into `out` (which must not alias attrs or ins) and
    returns 1; for a split writes [T_TUPLE, number of results, 0 ...] (see `infer_proj`).
    Returns 0, with `out` unspecified, where ops.normalize_attrs + ops.infer_types would raise
    (and for lit/proj/opaque, wrong arity, malformed rows, results of rank > MAX_RANK)."""
    width = out.size
    if op < 0 or op >= N_OPS or nattr != _NATTR[op]:
        return 0
    if nin < _ARITY[op, 0] or (_ARITY[op, 1] != VARIADIC and nin > _ARITY[op, 1]):
        return 0
    for k in range(nattr):
        if not _attr_ok(_ACODE[op, k], attrs[k], consts):
            return 0
    for k in range(nin):
        if not _type_ok(ins[k], consts.size - S_DTYPE0, width):
            return 0

    if op == INPUT or op == WEIGHT:
        return _leaf(attrs, consts, out)
    if op == EWADD or op == EWMUL or op == EWSUB or op == EWDIV:
        return _ew_binary(ins, out)
    if op == RELU or op == TANH or op == SIGMOID or op == GELU or op == DROPOUT or op == SCALE:
        return _copy_type(ins[0], out)
    if op == SHIFT or op == DIVIDE or op == POWER or op == ERF or op == SQRT or \
            op == RECIPROCAL or op == SILU:
        return _copy_type(ins[0], out)
    if op == MATMUL:
        return _matmul(ins, out)
    if op == CONV2D:
        return _conv2d(attrs, ins, nin, consts, out)
    if op == POOLMAX or op == POOLAVG:
        return _pool(attrs, ins, consts, out)
    if op == TRANSPOSE:
        return _transpose(attrs[0], ins[0], out)
    if op == ENLARGE:
        return _enlarge(ins, out)
    if op == CONCAT:
        return _concat(attrs[0], ins, nin, out)
    if op == SPLIT:
        if _split_axis(attrs[0], attrs[1], ins[0]) < 0:
            return 0
        for i in range(width):
            out[i] = 0
        out[0] = T_TUPLE
        out[1] = attrs[1, 1]
        return 1
    if op == MERGE:
        return _merge(attrs, ins[0], out)
    if op == RESHAPE:
        return _reshape(attrs[0], ins[0], out)
    if op == NOOP:
        _start_type(out, ins[0, 2], np.int64(0))
        return 1
    if op == BATCHNORM:
        return _batchnorm(ins, out)
    if op == SOFTMAX:
        return _softmax(attrs[0], ins[0], out)
    if op == LAYERNORM:
        return _layernorm(attrs[0], ins, np.int64(3), out)
    if op == RMSNORM:
        return _layernorm(attrs[0], ins, np.int64(2), out)
    if op == REDUCE_MEAN:
        return _reduce_mean(attrs[0], attrs[1], ins[0], out)
    if op == SLICE:
        return _slice(attrs, ins[0], out)
    if op == PAD:
        return _pad(attrs[0], ins[0], out)
    if op == BROADCAST:
        return _broadcast(attrs[0], ins[0], out)
    return 0


@njit(cache=True)
def infer_proj(index: int, split_attrs: np.ndarray, split_input: np.ndarray,
               out: np.ndarray) -> int:
    """Type of result `index` of split(split_input) {axis, sizes} (split_attrs: the axis and
    sizes literal rows): writes it into `out` and returns 1; 0 when the split is invalid or
    `index` is not one of its results."""
    axis_row, sizes = split_attrs[0], split_attrs[1]
    x = split_input
    if axis_row[0] != K_INT or sizes[0] != K_INTS or not 0 <= sizes[1] <= sizes.size - 2:
        return 0
    if x[0] != K_TYPE or not 0 <= x[1] <= out.size - 3:
        return 0
    axis = _split_axis(axis_row, sizes, x)
    if axis < 0 or index < 0 or index >= sizes[1]:
        return 0
    _copy_type(x, out)
    out[3 + axis] = sizes[2 + index]
    return 1
