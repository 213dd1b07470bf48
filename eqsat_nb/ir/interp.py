"""The NumPy reference interpreter: the semantic ground truth for rule and model verification.

Clarity over speed, but vectorized enough to run the benchmark models: a convolution is one matmul
(1x1), a sum over its kernel taps (one input channel per group), or im2col + (batched) matmul.
Random inputs and weights are drawn per value *name* from a seed, so two graphs that share weight
names (an original and its optimized form) see the same weights; `shared_graph` merges graphs into
one that computes each distinct expression once (what verification runs).
"""
from __future__ import annotations

import itertools
import zlib
from math import erf, prod, sqrt
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..errors import TirError
from ..kernels import kernel
from .graph import Graph, Node, TensorType
from .shapes import normalize_axis, padded_out, spatial_pads

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


def _taps(xp: Array, kernel: Sequence[int], stride: Sequence[int], out_hw: tuple[int, int]
          ) -> Iterator[tuple[int, int, Array]]:
    """(i, j, view) for each kernel tap: the strided view [..., Ho, Wo] of the padded input that
    the tap reads at every output position."""
    (s0, s1), (ho, wo) = stride, out_hw
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            yield i, j, xp[..., i:i + s0 * (ho - 1) + 1:s0, j:j + s1 * (wo - 1) + 1:s1]


def conv2d_path(w_shape: Sequence[int], pads) -> str:
    """How `conv2d` computes: '1x1' (no padding: one matmul on the input as it lies), 'taps' (one
    input channel per group: kh*kw element-wise multiply-adds, where a matmul per group would be
    kh*kw-long dot products), else 'im2col'. The verification planner prices each path."""
    _, cg, kh, kw = w_shape
    if kh == kw == 1 and not any(p for pair in pads for p in pair):
        return "1x1"
    return "taps" if cg == 1 else "im2col"


def conv2d(x: Array, w: Array, a: dict, b: Array | None = None) -> Array:
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    g, og = c // cg, o // (c // cg)
    stride = a["stride"]
    pads = spatial_pads(x.shape[2:], (kh, kw), stride, a["pad"])
    ho, wo = padded_out(x.shape[2:], pads, (kh, kw), stride)
    path = conv2d_path(w.shape, pads)
    if path == "1x1":
        xs = x[:, :, ::stride[0], ::stride[1]]
        out = np.matmul(w.reshape(g, og, cg), xs.reshape(n, g, cg, ho * wo))
    elif path == "taps":            # out[n, o] = sum over taps (i, j) of w[o, 0, i, j] * x[n, o // og]
        xp = _pad_spatial(x, pads, 0.0)
        xp = xp.reshape(n, g, 1, *xp.shape[2:])
        wt = w.reshape(g, og, kh, kw)
        out = np.zeros((n, g, og, ho, wo), dtype=np.result_type(x, w))
        term = np.empty_like(out)
        for i, j, view in _taps(xp, (kh, kw), stride, (ho, wo)):
            np.multiply(view, wt[:, :, i, j].reshape(1, g, og, 1, 1), out=term)
            out += term
    else:       # im2col laid out [g, Cg*kh*kw, N*Ho*Wo]: one matmul per group gives [O, N*Ho*Wo]
        xp = _pad_spatial(x, pads, 0.0)
        win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride[0], ::stride[1]]
        cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(g, cg * kh * kw, n * ho * wo)
        out = np.matmul(w.reshape(g, og, cg * kh * kw), cols)
        if n > 1:
            out = np.ascontiguousarray(out.reshape(o, n, ho * wo).transpose(1, 0, 2))
    out = out.reshape(n, o, ho, wo)
    if b is not None:
        out = out + b.reshape(o, 1, 1)
    return _ACT[a["act"]](out)


def pool(x: Array, a: dict, kind: str) -> Array:
    """Max or average over each window, as an element-wise max / sum over the kernel taps."""
    kernel, stride = a["kernel"], a["stride"]
    pads = spatial_pads(x.shape[2:], kernel, stride, a["pad"])
    out_hw = padded_out(x.shape[2:], pads, kernel, stride)
    xp = _pad_spatial(x, pads, -np.inf if kind == "max" else 0.0)
    combine = np.maximum if kind == "max" else np.add
    out = None
    for _, _, view in _taps(xp, kernel, stride, out_hw):
        if out is None:
            out = view.copy()
        else:
            combine(out, view, out=out)
    if kind != "max":
        out = out / (kernel[0] * kernel[1])
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
    e = x - x.max(axis=a["axis"], keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=a["axis"], keepdims=True)
    return e


def layernorm(x: Array, gamma: Array, beta: Array, a: dict) -> Array:
    axes = tuple(range(normalize_axis(a["axis"], x.ndim), x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    return (x - mu) / np.sqrt(var + a["eps"]) * gamma + beta


@kernel("none(f4[::1])", "none(f8[::1])")
def _erf_inplace(x: Array) -> None:
    """libm's erf of every element, in place (NumPy has none). A kernel, not a Numba ufunc: a
    ufunc is rebuilt at every import (0.2 s of every run), a kernel is compiled ahead of time."""
    for i in range(x.size):
        x[i] = erf(x[i])


def gelu(x: Array) -> Array:
    """0.5 * x * (1 + erf(x / sqrt 2)), in place in one temporary (the same numbers: * 0.5 is
    exact)."""
    t = x / np.asarray(sqrt(2.0), dtype=x.dtype)
    _erf_inplace(t.reshape(-1))
    t += 1
    t *= x
    t *= 0.5
    return t


def slice_(x: Array, a: dict) -> Array:
    index = [slice(None)] * x.ndim
    for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
        index[normalize_axis(ax, x.ndim)] = slice(s, e)
    return x[tuple(index)]


def pad(x: Array, a: dict) -> Array:
    r = x.ndim
    p = a["pads"]
    return np.pad(x, [(p[i], p[i + r]) for i in range(r)], constant_values=a["value"])


def _transpose(x: Array, perm: Sequence[int]) -> Array:
    """A matrix transpose stays a view (F-ordered; BLAS and NumPy read it as it lies, where copying
    VGG-19's 25088x4096 weight took a second); higher ranks are copied, so that a batched matmul
    never meets an operand without a unit stride (NumPy's slow non-BLAS loop)."""
    t = np.transpose(x, perm)
    return t if t.ndim <= 2 else np.ascontiguousarray(t)


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
    "transpose": lambda a, x: _transpose(x, a["perm"]),
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
    # kernels may return views (not np.ascontiguousarray: it makes a 0-d array 1-d)
    args = [a if a.flags.c_contiguous else a.copy(order="C") for a in args]
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
    """A reproducible random tensor for `name` ('%x' for inputs, '@w' for weights): uniform with
    mean 0 and variance 1 (in [-sqrt 3, sqrt 3)); weights of rank >= 2 are scaled by 1/sqrt(fan_in)
    so deep graphs stay in range; `positive` draws from [0.5, 1.5) (batchnorm variances); integer
    and bool tensors are uniform in [0, 4) / [0, 2).

    Uniform float32 draws cost a fifth of a normal's (1.9 vs 8.6 ns an element here; ViT-Huge
    has 632 M weights) and tell functions apart as well. They are drawn and scaled in float32
    whatever `dtype` is, so a float64 run sees the same numbers as a float32 one."""
    rng = _rng(seed, name)
    if ty.dtype in _EXACT:       # integer and bool tensors: small non-negative values
        return rng.integers(0, 2 if ty.dtype == "bool" else 4, ty.shape).astype(
            _EXACT_NP[ty.dtype])
    scale = None
    if not positive:        # uniform on [-sqrt 3, sqrt 3): mean 0, variance 1 (/ fan_in)
        fan_in = prod(ty.shape[1:]) if name.startswith("@") and len(ty.shape) >= 2 else 1
        scale = np.float32(2 * sqrt(3.0) / sqrt(max(fan_in, 1)))
    # drawn a chunk at a time: the same numbers as one draw of the whole shape (the generator's
    # stream does not depend on the chunking), without a second full-size array
    out = np.empty(prod(ty.shape), dtype=dtype)
    direct = out.dtype == np.float32
    buf = None if direct else np.empty(min(RANDOM_CHUNK, out.size), dtype=np.float32)
    for start in range(0, out.size, RANDOM_CHUNK):
        n = min(RANDOM_CHUNK, out.size - start)
        x = out[start:start + n] if direct else buf[:n]
        rng.random(dtype=np.float32, out=x)
        if scale is None:
            x += np.float32(0.5)
        else:
            x -= np.float32(0.5)
            x *= scale
        if not direct:
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


# ops whose kernel applies its fused `act` last (`_ACT[act]`), to the result of the same op
# without it; and the activations whose op's kernel is that same function
_FUSED_ACT = ("conv2d", "matmul", "poolmax", "poolavg")
_ACT_OPS = ("relu", "sigmoid", "tanh")


def shared_graph(graphs: Sequence[Graph]) -> Graph:
    """One graph that computes every output of `graphs` (all of the first's, then all of the
    second's, ...), each distinct expression once: `run` on it returns what `run` on each graph
    would, at the cost of the graphs' distinct parts only (an optimized graph and its original
    share most values).

    Two nodes are one expression when they have the same key: (op, attributes, result types,
    the keys of the operands in order), and then each of their results is one value; an input is
    its name and type, a weight its name, shape and dtype (values are drawn per name, so each is
    drawn once; a weight read as a batchnorm variance in either graph is drawn positive). Keys are
    compared whole (dict equality), never by a digest, and attributes by `repr` (0.0 and -0.0,
    1 and True stay apart), so two different expressions never share a value. Two identities are
    the interpreter's own definitions, and are applied so that fused and unfused forms share:
    an op with a fused activation is that op without it followed by the activation's op (the
    kernels apply `_ACT[act]` last), and `dropout` is its operand.

    Order: the first graph's nodes in its order; a node only a later graph has comes right after
    the last of its operands (a weight of its own just before its first reader), so a value kept
    for the other graph is freed as early as in either graph alone. Result names are fresh; input
    names, weight names and the graph's name are kept."""
    input_types: dict[str, TensorType] = {}
    for g in graphs:
        for name, ty in g.inputs:
            if input_types.setdefault(name, ty) != ty:
                raise ValueError(f"the graphs declare input {name} as {input_types[name]} and {ty}")
    taken = set(input_types)
    counter = itertools.count()
    keys: dict[tuple, tuple[str, ...]] = {}           # expression key -> its result names
    rank: dict[str, tuple] = {name: (-1,) for name in input_types}
    emitted: list[tuple[tuple, Node]] = []
    late_leaves: dict[str, tuple] = {}                # leaves first seen in a later graph

    def fresh() -> str:
        while True:
            name = f"%s{next(counter)}"
            if name not in taken:
                return name

    def emit(op: str, inputs: tuple[str, ...], attrs: tuple, types: tuple, loc,
             order: tuple) -> tuple[str, ...]:
        key = (op, repr(attrs), types, inputs)
        if key not in keys:
            results = tuple(fresh() for _ in types)
            keys[key] = results
            if order[0] is None:                    # a later graph's: after its last operand
                order = (max((rank[v][0] for v in inputs), default=-1),) + order[1:]
                if not inputs:
                    late_leaves[results[0]] = order
            for r in results:
                rank[r] = order
            emitted.append((order, Node(op, inputs, attrs, results, types, loc)))
        return keys[key]

    outputs: list[str] = []
    for k, g in enumerate(graphs):
        env = {name: name for name, _ in g.inputs}
        for j, node in enumerate(g.nodes):
            pos = j if k == 0 else None
            ins = tuple(env[v] for v in node.inputs)
            if node.op == "dropout":
                env[node.results[0]] = ins[0]
                continue
            attrs = node.attrs
            act = dict(attrs).get("act") if node.op in _FUSED_ACT else None
            if act in _ACT_OPS:
                bare = tuple((n, "none" if n == "act" else v) for n, v in attrs)
                ins = emit(node.op, ins, bare, node.types, node.loc, (pos, k, j, 0))
                res = emit(act, ins, (), node.types, node.loc, (pos, k, j, 1))
            else:
                res = emit(node.op, ins, attrs, node.types, node.loc, (pos, k, j, 0))
            env.update(zip(node.results, res))
        outputs.extend(env[v] for v in g.outputs)
    # a later graph's own leaf: drawn just before its first reader
    first_read: dict[str, int] = {}
    for order, node in emitted:
        for v in node.inputs:
            if v in late_leaves:
                first_read[v] = min(first_read.get(v, order[0]), order[0])
    for i, (order, node) in enumerate(emitted):
        if node.results[0] in late_leaves:
            emitted[i] = ((first_read.get(node.results[0], -1),) + order[1:], node)
    nodes = [n for _, _, n in sorted((order, i, n) for i, (order, n) in enumerate(emitted))]
    return Graph(graphs[0].name, tuple(input_types.items()), tuple(nodes), tuple(outputs))


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
