"""The NumPy reference interpreter: the semantic ground truth for rule and model verification.

Clarity over speed, but vectorized enough to run the benchmark models: convolutions are im2col +
(batched) matmul. Random inputs and weights are drawn per value *name* from a seed, so two graphs
that share weight names (an original and its optimized form) see the same weights.
"""
from __future__ import annotations

import zlib
from math import erf, prod, sqrt
from typing import Any, Callable, Mapping

import numpy as np
from numba import vectorize
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import TirError
from .graph import Graph, Node, TensorType
from .shapes import normalize_axis, spatial_pads

Array = np.ndarray
FLOAT_DTYPES = {"float32": np.float32, "float64": np.float64, "f32": np.float32, "f64": np.float64}

_ACT: dict[str, Callable[[Array], Array]] = {
    "none": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "tanh": np.tanh,
}


def _pad_spatial(x: Array, pads: tuple[tuple[int, int], tuple[int, int]], value: float) -> Array:
    (t, b), (l, r) = pads
    if t == b == l == r == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)


def _windows(x: Array, a: dict, kernel: tuple[int, int], value: float) -> Array:
    """Sliding windows [N, C, Ho, Wo, kh, kw] of the padded input (a strided view)."""
    stride = a["stride"]
    xp = _pad_spatial(x, spatial_pads(x.shape[2:], kernel, stride, a["pad"]), value)
    win = sliding_window_view(xp, kernel, axis=(2, 3))
    return win[:, :, ::stride[0], ::stride[1]]


def conv2d(x: Array, w: Array, a: dict, b: Array | None = None) -> Array:
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    g = c // cg
    win = _windows(x, a, (kh, kw), 0.0)                    # N C Ho Wo kh kw
    ho, wo = win.shape[2:4]
    cols = win.reshape(n, g, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6)
    cols = cols.reshape(g, n * ho * wo, cg * kh * kw)      # g, NHW, Cg*k*k
    wg = w.reshape(g, o // g, cg * kh * kw).transpose(0, 2, 1)
    out = np.matmul(cols, wg)                              # g, NHW, O/g
    out = out.reshape(g, n, ho, wo, o // g).transpose(1, 0, 4, 2, 3).reshape(n, o, ho, wo)
    if b is not None:
        out = out + b.reshape(o, 1, 1)
    return _ACT[a["act"]](out)


def pool(x: Array, a: dict, kind: str) -> Array:
    kernel = a["kernel"]
    if kind == "max":
        fill = -np.inf
        out = _windows(x, a, kernel, fill).max(axis=(4, 5))
    else:
        out = _windows(x, a, kernel, 0.0).sum(axis=(4, 5)) / (kernel[0] * kernel[1])
    return _ACT[a["act"]](out.astype(x.dtype, copy=False))


def enlarge(w: Array, ref: Array) -> Array:
    kh, kw = w.shape[2:]
    rh, rw = ref.shape[2:]
    ph, pw = (rh - kh) // 2, (rw - kw) // 2
    return np.pad(w, ((0, 0), (0, 0), (ph, rh - kh - ph), (pw, rw - kw - pw)))


def merge(w: Array, a: dict) -> Array:
    """Weight of the same convolution computed with groups/count groups: output channel o of old
    group j = o // (O/groups) reads its Cg inputs at slot j % count of its new, wider group."""
    count, groups = a["count"], a["groups"]
    o, cg = w.shape[:2]
    out = np.zeros((o, cg * count) + w.shape[2:], dtype=w.dtype)
    for ch in range(o):
        slot = (ch // (o // groups)) % count
        out[ch, slot * cg:(slot + 1) * cg] = w[ch]
    return out


def batchnorm(x: Array, scale: Array, bias: Array, mean: Array, var: Array, a: dict) -> Array:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + a["eps"])
    return (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)


def softmax(x: Array, a: dict) -> Array:
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return e / e.sum(axis=a["axis"], keepdims=True)


def layernorm(x: Array, gamma: Array, beta: Array, a: dict) -> Array:
    axes = tuple(range(normalize_axis(a["axis"], x.ndim), x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + a["eps"]) * gamma + beta


@vectorize(["float32(float32)", "float64(float64)"], cache=True)
def _erf(x):  # libm's erf, element-wise (NumPy has none)
    return erf(x)


def gelu(x: Array) -> Array:
    return 0.5 * x * (1 + _erf(x / np.asarray(sqrt(2.0), dtype=x.dtype)))


def slice_(x: Array, a: dict) -> Array:
    index = [slice(None)] * x.ndim
    for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
        index[normalize_axis(ax, x.ndim)] = slice(s, e)
    return x[tuple(index)]


def pad(x: Array, a: dict) -> Array:
    r = x.ndim
    p = a["pads"]
    return np.pad(x, [(p[i], p[i + r]) for i in range(r)], constant_values=a["value"])


def split(x: Array, a: dict) -> tuple[Array, ...]:
    cuts = np.cumsum(a["sizes"])[:-1]
    return tuple(np.split(x, cuts, axis=a["axis"]))


_KERNELS: dict[str, Callable[..., Any]] = {
    "ewadd": lambda a, x, y: x + y,
    "ewmul": lambda a, x, y: x * y,
    "matmul": lambda a, x, y: _ACT[a["act"]](np.matmul(x, y)),
    "conv2d": lambda a, x, w, b=None: conv2d(x, w, a, b),
    "relu": lambda a, x: _ACT["relu"](x),
    "tanh": lambda a, x: np.tanh(x),
    "sigmoid": lambda a, x: _ACT["sigmoid"](x),
    "poolmax": lambda a, x: pool(x, a, "max"),
    "poolavg": lambda a, x: pool(x, a, "avg"),
    "transpose": lambda a, x: np.ascontiguousarray(np.transpose(x, a["perm"])),
    "enlarge": lambda a, w, ref: enlarge(w, ref),
    "concat": lambda a, *xs: np.concatenate(xs, axis=a["axis"]),
    "split": lambda a, x: split(x, a),
    "merge": lambda a, w: merge(w, a),
    "reshape": lambda a, x: x.reshape(a["shape"]),
    "noop": lambda a, *xs: np.zeros((), dtype=xs[0].dtype),
    "batchnorm": lambda a, *xs: batchnorm(*xs, a),
    "softmax": lambda a, x: softmax(x, a),
    "layernorm": lambda a, x, g, b: layernorm(x, g, b, a),
    "gelu": lambda a, x: gelu(x),
    "reduce_mean": lambda a, x: x.mean(axis=tuple(a["axes"]), keepdims=a["keepdims"]),
    "slice": lambda a, x: slice_(x, a),
    "pad": lambda a, x: pad(x, a),
    "dropout": lambda a, x: x,
    "broadcast": lambda a, x: np.broadcast_to(x, a["shape"]).copy(),
    "scale": lambda a, x: x * np.asarray(a["value"], dtype=x.dtype),
}


_NP_TO_DTYPE = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
                np.dtype(np.float64): "f64", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
                np.dtype(np.bool_): "bool"}
_EXACT = ("i32", "i64", "bool")     # element types the interpreter keeps (floats use its dtype)


def eval_opaque(node: Node, args: list[Array], in_types: list[TensorType] | None = None,
                float_dtype: Any = None) -> tuple[Array, ...]:
    """Run an opaque node in onnxruntime. Operands are cast to their declared types (`in_types`,
    else taken from the arrays); float results come back in `float_dtype` (default: that of the
    first float operand, else float32), integer and bool results unchanged."""
    from .opaque import run_opaque

    if in_types is None:
        in_types = [TensorType(a.shape, _NP_TO_DTYPE.get(a.dtype, "f32")) for a in args]
    if float_dtype is None:
        float_dtype = next((a.dtype for a in args if a.dtype.kind == "f"), np.float32)
    outs = run_opaque(node.attrs, args, in_types, node.types)
    return tuple(o if t.dtype in _EXACT else o.astype(float_dtype, copy=False)
                 for o, t in zip(outs, node.types))


def eval_node(node: Node, args: list[Array]) -> tuple[Array, ...]:
    """Evaluate one node on concrete arrays; returns one array per result."""
    if node.op == "opaque":
        return eval_opaque(node, args)
    out = _KERNELS[node.op](dict(node.attrs), *args)
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(np.asarray(o, dtype=args[0].dtype) if o.dtype != args[0].dtype else o
                 for o in outs)


_EXACT_NP = {"i32": np.int32, "i64": np.int64, "bool": np.bool_}


RANDOM_CHUNK = 1 << 20     # elements drawn at a time by random_tensor


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def random_tensor(name: str, ty: TensorType, seed: int = 0, dtype: Any = np.float32,
                  positive: bool = False) -> Array:
    """A reproducible random tensor for `name` ('%x' for inputs, '@w' for weights): standard
    normal (integer and bool tensors: uniform in [0, 4) / [0, 2)); weights of rank >= 2 are scaled by 1/sqrt(fan_in) so deep graphs stay in range;
    `positive` draws from [0.5, 1.5) (batchnorm variances)."""
    rng = _rng(seed, name)
    if ty.dtype in _EXACT:       # integer and bool tensors: small non-negative values
        return rng.integers(0, 2 if ty.dtype == "bool" else 4, ty.shape).astype(
            _EXACT_NP[ty.dtype])
    divisor = None
    if not positive and name.startswith("@") and len(ty.shape) >= 2:
        divisor = sqrt(max(prod(ty.shape[1:]), 1))
    # drawn in float64 in chunks, cast into the result: the same numbers as one draw of the whole
    # shape (the generator's stream does not depend on the chunking), without a float64 copy
    out = np.empty(prod(ty.shape), dtype=dtype)
    for start in range(0, out.size, RANDOM_CHUNK):
        n = min(RANDOM_CHUNK, out.size - start)
        x = rng.uniform(0.5, 1.5, n) if positive else rng.standard_normal(n)
        if divisor is not None:
            x /= divisor
        out[start:start + n] = x
    return out.reshape(ty.shape)


def _positive_weights(graph: Graph) -> set[str]:
    """Values that must be positive for the graph to be well defined (batchnorm variances)."""
    return {n.inputs[4] for n in graph.nodes if n.op == "batchnorm"}


def random_env(graph: Graph, seed: int = 0, dtype: Any = np.float32) -> dict[str, Array]:
    """Random values for every input and weight of `graph`, keyed by value name / weight name."""
    positive = _positive_weights(graph)
    env = {name: random_tensor(name, ty, seed, dtype) for name, ty in graph.inputs}
    for node in graph.weights():
        wname = node.attr["name"]
        env["@" + wname] = random_tensor("@" + wname, node.types[0], seed, dtype,
                                         positive=node.results[0] in positive)
    return env


def run(graph: Graph, env: Mapping[str, Array] | None = None, seed: int = 0,
        dtype: Any = np.float32, check: Callable[[], None] | None = None) -> list[Array]:
    """Evaluate `graph`. `env` maps input value names ('%x') and weight names ('@w1') to arrays;
    anything missing is drawn at random from `seed`. Returns the outputs in order. `check` is
    called before each node (it may raise to stop the run, e.g. at a deadline)."""
    dtype = FLOAT_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    given = dict(env or {})
    types = graph.types() if any(n.op == "opaque" for n in graph.nodes) else {}
    values: dict[str, Array] = {}
    for name, ty in graph.inputs:
        values[name] = _fetch(given, name, ty, seed, dtype, False)
    positive = _positive_weights(graph)
    remaining = {v: 1 for v in graph.outputs}  # outputs stay pinned
    for node in graph.nodes:
        for v in node.inputs:
            remaining[v] = remaining.get(v, 0) + 1
    for node in graph.nodes:
        if check is not None:
            check()
        if node.op == "weight":
            values[node.results[0]] = _fetch(given, "@" + node.attr["name"], node.types[0], seed,
                                             dtype, node.results[0] in positive)
            continue
        args = [values[v] for v in node.inputs]
        if node.op == "opaque":
            outs = eval_opaque(node, args, [types[v] for v in node.inputs], dtype)
        else:
            outs = eval_node(node, args)
        for v in node.inputs:          # free values as soon as their last reader ran
            remaining[v] -= 1
            if remaining[v] == 0:
                del values[v]
        for r, o, ty in zip(node.results, outs, node.types):
            if o.shape != ty.shape:
                raise TirError(f"interpreter bug: {node.op} produced shape {o.shape}, "
                               f"expected {ty.shape}", node.loc)
            if r in remaining:
                values[r] = o
    return [values[v] for v in graph.outputs]


def _fetch(given: Mapping[str, Array], key: str, ty: TensorType, seed: int, dtype: Any,
           positive: bool) -> Array:
    if ty.dtype in _EXACT:
        dtype = _EXACT_NP[ty.dtype]
    if key in given:
        arr = np.asarray(given[key], dtype=dtype)
        if arr.shape != ty.shape:
            raise TirError(f"value for {key} has shape {arr.shape}, expected {ty.shape}")
        return arr
    return random_tensor(key, ty, seed, dtype, positive)
