"""The NumPy reference interpreter: the semantic ground truth for rule and model verification.

Each operator's reference semantics is its `OpDef.eval` (ir/ops/, one module per operator family);
this module runs graphs of them. Clarity over speed, but vectorized enough to run the benchmark
models (a convolution is one matmul (1x1), a sum over its kernel taps (one input channel per
group), or im2col + (batched) matmul: ir/ops/conv.py). Random inputs and weights are drawn per
value *name* from a seed, so two graphs that share weight names (an original and its optimized
form) see the same weights; `shared_graph` merges graphs into one that computes each distinct
expression once, and `EqualValues` lets a run of it follow values computed twice to the same bits
once (what verification runs).
"""
from __future__ import annotations

import itertools
import zlib
from functools import partial
from math import prod, sqrt
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import TirError
from .graph import Graph, Node, TensorType
from .bfloat16 import from_bits
from .random_fill import fill_uniform
from .ops import OPS

Array = np.ndarray
FLOAT_DTYPES = {"float32": np.float32, "float64": np.float64, "f32": np.float32, "f64": np.float64}

_NP_TO_DTYPE = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
                np.dtype(np.float64): "f64", np.dtype(np.int32): "i32", np.dtype(np.int64): "i64",
                np.dtype(np.bool_): "bool"}
_EXACT = ("i32", "i64", "bool")     # element types the interpreter keeps (floats use its dtype)


def eval_opaque(node: Node, args: list[Array], in_types: list[TensorType] | None = None,
                float_dtype: Any = None, wide: bool = False) -> tuple[Array, ...]:
    """Run an opaque node in onnxruntime. Operands are cast to their declared types (`in_types`,
    else taken from the arrays); float results come back in `float_dtype` (default: that of the
    first float operand, else float32), integer and bool results unchanged. A node with bf16
    operands or results runs widened to float32 with bfloat16 rounding emulated, and `wide`
    runs it without any half-precision rounding (ir/opaque.py `run_opaque`)."""
    from .opaque import run_opaque

    if in_types is None:
        in_types = [TensorType(a.shape, _NP_TO_DTYPE.get(a.dtype, "f32")) for a in args]
    if float_dtype is None:
        float_dtype = next((a.dtype for a in args if a.dtype.kind == "f"), np.float32)
    # kernels may return views (not np.ascontiguousarray: it makes a 0-d array 1-d)
    args = [a if a.flags.c_contiguous else a.copy(order="C") for a in args]
    outs = run_opaque(node.attrs, args, in_types, node.types, wide=wide)
    return tuple(o if t.dtype in _EXACT else o.astype(float_dtype, copy=False)
                 for o, t in zip(outs, node.types))


_HALF = ("f16", "bf16")


def eval_opaque_wide(node: Node, args: list[Array], in_types: list[TensorType],
                     float_dtype: Any) -> tuple[Array, ...]:
    """`eval_opaque` with half-precision operands and results in float32 instead: a Cast
    between float types is the value itself, any other node runs with its half types widened
    (declared ones and those its attributes produce). What a model computes without its
    half-precision rounding (`run(wide=True)`)."""
    a = node.attr
    if a.get("op") == "Cast" and a.get("domain", "") in ("", "ai.onnx") and len(args) == 1:
        src, dst = in_types[0].dtype, node.types[0].dtype
        if src in _HALF + ("f32", "f64") and dst in _HALF + ("f32", "f64"):
            return (np.asarray(args[0], dtype=float_dtype),)
    return eval_opaque(node, args, in_types, float_dtype, wide=True)


def eval_node(node: Node, args: list[Array]) -> tuple[Array, ...]:
    """Evaluate one node on concrete arrays; returns one array per result."""
    if node.op == "opaque":
        return eval_opaque(node, args)
    out = OPS[node.op].eval(dict(node.attrs), *args)
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(np.asarray(o, dtype=args[0].dtype) if o.dtype != args[0].dtype else o
                 for o in outs)


_EXACT_NP = {"i32": np.int32, "i64": np.int64, "bool": np.bool_}


RANDOM_CHUNK = 1 << 20     # elements drawn at a time by random_tensor for other than f32/f64


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def random_tensor(name: str, ty: TensorType, seed: int = 0, dtype: Any = np.float32,
                  positive: bool = False) -> Array:
    """A reproducible random tensor for `name` ('%x' for inputs, '@w' for weights): uniform with
    mean 0 and variance 1 (in [-sqrt 3, sqrt 3)); weights of rank >= 2 are scaled by 1/sqrt(fan_in)
    so deep graphs stay in range; `positive` draws from [0.5, 1.5) (batchnorm variances); integer
    and bool tensors are uniform in [0, 4) / [0, 2).

    Floats come from a counter-based stream keyed by (seed, name) (random_fill.py: 0.5 ns a
    number here, NumPy's uniform float32 1.9 ns and its normal 8.6; ViT-Huge has 632 M weights),
    filled in place with no second full-size array; uniform draws tell functions apart as well
    as normal ones. They are drawn and scaled in float32 whatever `dtype` is, so a float64 run
    sees the same numbers as a float32 one."""
    if ty.dtype in _EXACT:       # integer and bool tensors: small non-negative values
        return _rng(seed, name).integers(0, 2 if ty.dtype == "bool" else 4, ty.shape).astype(
            _EXACT_NP[ty.dtype])
    if positive:
        offset, scale = 0.5, 1.0
    else:                   # uniform on [-sqrt 3, sqrt 3): mean 0, variance 1 (/ fan_in)
        fan_in = prod(ty.shape[1:]) if name.startswith("@") and len(ty.shape) >= 2 else 1
        offset, scale = -0.5, float(np.float32(2 * sqrt(3.0) / sqrt(max(fan_in, 1))))
    key = _stream_key(seed, name)
    out = np.empty(prod(ty.shape), dtype=dtype)
    if out.dtype in (np.float32, np.float64):
        fill_uniform(out, key, 0, offset, scale)
    else:                   # another float type: through a float32 buffer, a chunk at a time
        buf = np.empty(min(RANDOM_CHUNK, out.size), np.float32)
        for start in range(0, out.size, RANDOM_CHUNK):
            n = min(RANDOM_CHUNK, out.size - start)
            fill_uniform(buf[:n], key, start, offset, scale)
            out[start:start + n] = buf[:n]
    return out.reshape(ty.shape)


def _stream_key(seed: int, name: str) -> int:
    """The random stream of `name` under `seed` (a non-negative int64)."""
    return ((int(seed) & 0x7FFFFFFF) << 32) | zlib.crc32(name.encode())


def positive_weights(graph: Graph) -> set[str]:
    """Values that must be positive for the graph to be well defined (batchnorm variances: the
    operands an op lists in `OpDef.positive`)."""
    return {n.inputs[i] for n in graph.nodes if n.op in OPS for i in OPS[n.op].positive}


def random_env(graph: Graph, seed: int = 0, dtype: Any = np.float32) -> dict[str, Array]:
    """Random values for every input and weight of `graph`, keyed by value name / weight name."""
    positive = positive_weights(graph)
    env = {name: random_tensor(name, ty, seed, dtype) for name, ty in graph.inputs}
    for node in graph.weights():
        wname = node.attr["name"]
        env["@" + wname] = random_tensor("@" + wname, node.types[0], seed, dtype,
                                         positive=node.results[0] in positive)
    return env


def run(graph: Graph, env: Mapping[str, Array] | None = None, seed: int = 0,
        dtype: Any = np.float32, check: Callable[[], None] | None = None,
        equal_values: int = 0, wide: bool = False) -> list[Array]:
    """Evaluate `graph`. `env` maps input value names ('%x') and weight names ('@w1') to arrays;
    anything missing is drawn at random from `seed`. Returns the outputs in order. `check` is
    called before each node (it may raise to stop the run, e.g. at a deadline).

    `equal_values` > 0: a node whose operands are bitwise the same values as those of a node
    already run, with the same op, attributes and result types, reads that node's results
    instead of running again (`EqualValues`; what a rewritten graph computes as its original
    did); up to that many bytes of values past their last use are kept for it.

    `wide`: opaque nodes run without half-precision rounding (`eval_opaque_wide`): the
    higher-precision reference a half-precision graph is judged against."""
    dtype = FLOAT_DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    given = dict(env or {})
    types = graph.types() if any(n.op == "opaque" for n in graph.nodes) else {}
    values: dict[str, Array] = {}
    for name, ty in graph.inputs:
        values[name] = _fetch(given, name, ty, seed, dtype, False)
    positive = positive_weights(graph)
    remaining = {v: 1 for v in graph.outputs}  # outputs stay pinned
    for node in graph.nodes:
        for v in node.inputs:
            remaining[v] = remaining.get(v, 0) + 1
    equal = EqualValues(equal_values) if equal_values > 0 else None

    def compute(node: Node) -> tuple[Array, ...]:
        args = [values[v] for v in node.inputs]
        if node.op == "opaque":
            return (eval_opaque_wide if wide else eval_opaque)(
                node, args, [types[v] for v in node.inputs], dtype)
        return eval_node(node, args)

    for node in graph.nodes:
        if check is not None:
            check()
        if node.op == "weight":
            values[node.results[0]] = _fetch(given, "@" + node.attr["name"], node.types[0], seed,
                                             dtype, node.results[0] in positive)
            continue
        outs = compute(node) if equal is None else equal.evaluate(node, values,
                                                                  partial(compute, node))
        for v in node.inputs:          # free values as soon as their last reader ran
            remaining[v] -= 1
            if remaining[v] == 0:
                freed = values.pop(v)
                if equal is not None and v in equal.canon:
                    equal.keep(v, freed)
        for r, o, ty in zip(node.results, outs, node.types):
            if o.shape != ty.shape:
                raise TirError(f"interpreter bug: {node.op} produced shape {o.shape}, "
                               f"expected {ty.shape}", node.loc)
            if r in remaining:
                values[r] = o
    return [values[v] for v in graph.outputs]


class EqualValues:
    """Values a run computed twice, found and computed once.

    A rewritten graph run beside its original (`shared_graph`) often computes bitwise the same
    values by another expression (a merged matmul's split is the separate matmul, here), and
    everything downstream of them again. Each result gets a canonical name: the first value
    bitwise equal to it (same dtype, shape and bits; candidates found by a fingerprint of a few
    elements, confirmed by comparing every element). A node whose (op, attributes, result types,
    canonical operands) a node already run had is not run: it reads that node's results, which
    is what running it would give (the interpreter is deterministic). Values past their last
    use are kept, oldest dropped first, up to `budget` bytes, so a twin that comes later still
    finds them."""

    FINGERPRINT_ELEMENTS = 16
    CANDIDATES = 4          # values compared in full per fingerprint, at most

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.canon: dict[str, str] = {}
        self.memo: dict[tuple, tuple[str, ...]] = {}
        self.by_print: dict[tuple, list[str]] = {}
        self.kept: dict[str, Array] = {}
        self.kept_bytes = 0

    def _key(self, node: Node) -> tuple:
        return (node.op, repr(node.attrs), node.types,
                tuple(self.canon.get(v, v) for v in node.inputs))

    def _get(self, name: str, values: Mapping[str, Array]) -> Array | None:
        got = values.get(name)
        return got if got is not None else self.kept.get(name)

    def evaluate(self, node: Node, values: Mapping[str, Array],
                 compute: Callable[[], Sequence[Array]]) -> Sequence[Array]:
        """The results of an earlier node with this node's canonical key, if still held; else
        `compute()`'s, remembered (each result named after an equal earlier value)."""
        key = self._key(node)
        names = self.memo.get(key)
        if names is not None:
            held = tuple(self._get(n, values) for n in names)
            if all(o is not None for o in held):
                for r, n in zip(node.results, names):
                    self.canon[r] = self.canon.get(n, n)
                return held
        outs = compute()
        self.memo[key] = node.results       # the newest: the likeliest still held
        for r, o in zip(node.results, outs):
            self.canon[r] = r
            fp = _fingerprint(o, self.FINGERPRINT_ELEMENTS)
            seen = self.by_print.setdefault(fp, [])
            for other in seen[-self.CANDIDATES:]:
                arr = self._get(other, values)
                if arr is not None and _bitwise_equal(arr, o):
                    self.canon[r] = self.canon.get(other, other)
                    break
            else:
                seen.append(r)
        return outs

    def keep(self, name: str, value: Array) -> None:
        """Hold a computed value past its last use (oldest dropped first beyond the budget)."""
        if value.nbytes > self.budget:
            return
        self.kept[name] = value
        self.kept_bytes += value.nbytes
        while self.kept_bytes > self.budget:
            old = next(iter(self.kept))
            self.kept_bytes -= self.kept.pop(old).nbytes


def _fingerprint(a: Array, k: int) -> tuple:
    """dtype, shape and k elements spread over the array (fewer where it has fewer)."""
    flat = a.reshape(-1) if a.flags.c_contiguous else a.flat
    n = a.size
    idx = [i * (n - 1) // (k - 1) for i in range(k)] if n > k else list(range(n))
    return a.dtype.str, a.shape, np.asarray(flat[idx]).tobytes()


def _bitwise_equal(a: Array, b: Array) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    bits = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
    if bits is None:
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(a.view(bits), b.view(bits)))


# ops whose kernel applies its fused `act` last (ops/activation.py `ACT[act]`), to the result of
# the same op without it; and the activations whose op's kernel is that same function
_FUSED_ACT = tuple(n for n, d in OPS.items() if d.attr_spec("act") is not None)
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
    kernels apply `ACT[act]` last), and `dropout` is its operand.

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
        value = given[key]
        if ty.dtype == "bf16" and getattr(value, "dtype", None) == np.uint16:
            value = from_bits(value)        # a mapped bf16 weight's bit patterns
        arr = np.asarray(value, dtype=dtype)
        if arr.shape != ty.shape:
            raise TirError(f"value for {key} has shape {arr.shape}, expected {ty.shape}")
        return arr
    return random_tensor(key, ty, seed, dtype, positive)
