"""Whole IR graphs run in PyTorch, so that an optimized graph's speed-up over its original is
measured end to end on a device rather than summed from per-operator costs (tools/gpu_truth.py).

`TorchGraph(graph, leaves)` lowers every node with `torch_backend.lower` (the per-operator
backend's own lowering), folds the weight-only sub-graphs once when it is built (what the cost
models assume: they cost 0 at inference) and runs the rest in the graph's order. `Leaves` makes
each input and weight tensor once per name and hands the same tensor to every graph of a model,
so the original and its optimized forms compute on the same values: the weights' given values
(ONNX initializers) or the interpreter's reproducible random ones (`interp.random_tensor`,
batchnorm variances positive), the inputs likewise. `Leaves(..., float_type="bf16")` makes every
float leaf in that type (drawn or given in its own type, then converted), and a `TorchGraph` on
such leaves runs every float operation in it (a Cast to a float type included): the graph as
deployed in that precision, whatever float type the IR gives it.

`CompiledGraph(torch_graph)` is the same computation compiled by `torch.compile` (Inductor, its
default mode unless `mode` says otherwise, the whole graph at once: `fullgraph=True`), the folded
tensors passed as arguments. `kernel_times` profiles one run and sums the device kernels' time
(on the CPU: the operators' own time) by the operator kind the kernel's name shows
(`kernel_kind`: cuBLAS GEMMs, cuDNN convolutions, the rest), so that a whole-graph difference
can be attributed to GEMMs, convolutions or everything else.

Timing (`time_alternately`): the graphs take turns within each round, so drift on the device hits
all of them alike, and the median over rounds is kept. On a GPU each graph is captured once as a
CUDA graph and a round times `inner` replays between two CUDA events: the kernels run back to back
with no CPU launch overhead between them, as a runtime that plans the whole graph runs them
(method "graph"). Method "eager" times a synchronised loop of plain calls instead (PyTorch's
per-operator dispatch included: tens of microseconds for a small operator), the only method on
the CPU (one intra-op thread, `time.perf_counter`). Method "loop" times `inner` back-to-back calls
between two CUDA events (on the CPU: `time.perf_counter`) with no synchronisation between them:
how a compiled graph runs in a serving loop, its launch overhead hidden behind the device's work
where the device is the slower of the two.

What the PyTorch run does that the cost models do not assume: a concat is a copy (`torch.cat`)
where the GPU profiles write operands in place, a consumer of a split's view may copy it first,
and a fused activation is a second kernel. Of the `opaque` nodes (operators the IR does not
model), Gather and GatherElements run as PyTorch indexing (the embedding lookups of exported
transformers), the element-wise ones in `ONNX_ELEMENTWISE` (transformers' attention masks:
IsNaN, Where) as their PyTorch functions, broadcasting as ONNX does; any other runs in
onnxruntime on the host, which is only allowed where it is folded (weight-only): on the
inference path it raises NotImplementedError.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..ir.graph import Graph, TensorType
from ..ir.interp import random_tensor
from ..ir.tensors import as_dtype
from ..ir.ops import OPS
from .torch_backend import _import_torch, lower, torch_dtype

METHODS = ("graph", "eager", "loop")
FLOATS = ("f16", "f32", "f64", "bf16")


class Leaves:
    """Input and weight tensors on `device`, one per name, shared by a model's graphs."""

    def __init__(self, device: str | Any, weights: Mapping[str, Any] | None = None,
                 seed: int = 0, float_type: str | None = None) -> None:
        self.torch = _import_torch()
        self.dev = self.torch.device(device)
        self.given = dict(weights or {})
        self.seed = seed
        self.float_type = float_type    # IR type of every float leaf (None: each its own)
        self.tensors: dict[str, Any] = {}

    def retype(self, ty: TensorType) -> TensorType:
        """`ty` as the graph runs it on these leaves: a float in `float_type` when one is set."""
        if self.float_type is not None and ty.dtype in FLOATS and ty.dtype != self.float_type:
            return TensorType(ty.shape, self.float_type)
        return ty

    def get(self, key: str, ty: TensorType, positive: bool = False) -> Any:
        """The tensor for input '%x' or weight '@w' of type `ty` (made once per name and type;
        positive: a batchnorm variance), in `retype(ty)`'s element type."""
        dtype = torch_dtype(self.torch, self.retype(ty).dtype)
        got = self.tensors.get(key)
        if got is not None and (tuple(got.shape) != tuple(ty.shape) or got.dtype != dtype):
            got = None                  # another graph's value of that name: not shared
        if got is None:
            value = self.given.get(key[1:]) if key.startswith("@") else None
            if value is None or np.asarray(value).size == 0:     # no value: drawn at random
                value = random_tensor(key, ty, self.seed, positive=positive)
            if ty.dtype == "bf16":              # a mapped bf16 weight may be its bit patterns
                value = as_dtype(value, "bf16")
            arr = np.asarray(value)             # (not ascontiguousarray: it makes 0-d 1-d)
            if not arr.flags.writeable or not arr.flags.c_contiguous:   # read-only ONNX views
                arr = arr.copy(order="C")
            if tuple(arr.shape) != tuple(ty.shape):
                raise ValueError(f"value of {key} has shape {arr.shape}, expected {ty.shape}")
            got = self.tensors[key] = self.torch.as_tensor(arr).to(self.dev, dtype)
        return got


class TorchGraph:
    """One IR graph lowered to PyTorch calls on the device of `leaves`."""

    def __init__(self, graph: Graph, leaves: Leaves) -> None:
        torch = self.torch = leaves.torch
        self.dev = leaves.dev
        self.graph = graph
        positive = {n.inputs[4] for n in graph.nodes if n.op == "batchnorm"}
        retype = leaves.retype
        self.float_type = leaves.float_type
        env_t: dict[str, TensorType] = {name: retype(ty) for name, ty in graph.inputs}
        own_t: dict[str, TensorType] = dict(graph.inputs)       # the IR's own types
        self.fixed: dict[str, Any] = {name: leaves.get(name, ty) for name, ty in graph.inputs}
        const: dict[str, bool] = {name: False for name, _ in graph.inputs}
        # (function, operand names, result names, whether it returns a tuple of results)
        self.steps: list[tuple[Callable[..., Any], tuple[str, ...], tuple[str, ...], bool]] = []
        self.kernels = 0            # compute nodes run at inference (folded ones excluded)
        with torch.inference_mode():
            for node in graph.nodes:
                ins_t = [env_t[v] for v in node.inputs]
                own_ins = [own_t[v] for v in node.inputs]
                env_t.update(zip(node.results, (retype(t) for t in node.types)))
                own_t.update(zip(node.results, node.types))
                if node.op == "weight":
                    self.fixed[node.results[0]] = leaves.get(
                        "@" + node.attr["name"], node.types[0], node.results[0] in positive)
                    const[node.results[0]] = True
                    continue
                is_const = bool(node.inputs) and all(const[v] for v in node.inputs)
                for r in node.results:
                    const[r] = is_const
                multi = node.op == "opaque" or OPS[node.op].multi_result
                if node.op == "opaque":
                    fn = lower_opaque(torch, node, own_ins, self.dev, on_host=is_const,
                                      float_type=self.float_type)
                elif node.op == "noop":
                    zero = torch.zeros((), dtype=self.fixed_dtype(retype(node.types[0])),
                                       device=self.dev)
                    fn: Callable[..., Any] = lambda *xs, _z=zero: _z
                else:
                    fn = lower(node.op, node.attr, ins_t)
                if is_const:            # weight-only: folded now, free at inference
                    outs = fn(*[self.fixed[v] for v in node.inputs])
                    outs = outs if multi else (outs,)
                    for r, o in zip(node.results, outs):
                        self.fixed[r] = o.contiguous()
                    continue
                self.steps.append((fn, node.inputs, node.results, multi))
                self.kernels += node.op not in ("reshape", "dropout", "noop")
        self.cuda_graph: Any = None
        self.static_out: list[Any] | None = None

    def fixed_dtype(self, ty: TensorType) -> Any:
        return torch_dtype(self.torch, ty.dtype)

    def run(self) -> list[Any]:
        """One run of the graph's compute nodes; its outputs."""
        env = dict(self.fixed)
        for fn, ins, res, multi in self.steps:
            out = fn(*[env[v] for v in ins])
            if multi:
                env.update(zip(res, out))
            else:
                env[res[0]] = out
        return [env[v] for v in self.graph.outputs]

    def outputs(self) -> list[Any]:
        """The outputs of one (eager) run, as host float64 arrays."""
        with self.torch.inference_mode():
            outs = self.run()
            return [o.detach().to("cpu", self.torch.float64).numpy() for o in outs]

    def capture(self, warmups: int = 3) -> None:
        """Record one run as a CUDA graph (warm-up on a side stream first, as capture needs)."""
        torch = self.torch
        with torch.inference_mode():
            side = torch.cuda.Stream(self.dev)
            side.wait_stream(torch.cuda.current_stream(self.dev))
            with torch.cuda.stream(side):
                for _ in range(warmups):
                    self.run()
            torch.cuda.current_stream(self.dev).wait_stream(side)
            torch.cuda.synchronize(self.dev)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.static_out = self.run()
            g.replay()
            torch.cuda.synchronize(self.dev)
        self.cuda_graph = g

    def release(self) -> None:
        self.cuda_graph = self.static_out = None

    def compiled(self, mode: str | None = None) -> "CompiledGraph":
        """This graph compiled by `torch.compile` (see `CompiledGraph`)."""
        return CompiledGraph(self, mode)


class CompiledGraph:
    """A `TorchGraph`'s computation compiled by `torch.compile` (Inductor; `mode` None is its
    default mode), the whole graph as one program (`fullgraph=True`: a graph break is an error,
    not a silent fallback to eager), for its static shapes (`dynamic=False`). The folded and
    leaf tensors the compute nodes read are its arguments. Compilation happens at the first call: `compile()` makes it and returns its
    seconds. Runs the same way as a `TorchGraph` (`run`, `outputs`, `time_alternately`)."""

    def __init__(self, tg: TorchGraph, mode: str | None = None) -> None:
        torch = self.torch = tg.torch
        self.dev = tg.dev
        self.graph = tg.graph
        self.kernels = tg.kernels
        steps, outs = tg.steps, tuple(tg.graph.outputs)
        used = {v for _, ins, _, _ in steps for v in ins} | set(outs)
        names = tuple(n for n in tg.fixed if n in used)
        self.args = [tg.fixed[n] for n in names]

        def forward(*tensors: Any) -> list[Any]:
            env = dict(zip(names, tensors))
            for fn, ins, res, multi in steps:
                out = fn(*[env[v] for v in ins])
                if multi:
                    env.update(zip(res, out))
                else:
                    env[res[0]] = out
            return [env[v] for v in outs]

        # dynamic=False: every graph is compiled for its static shapes. The graphs of a model
        # share `forward`'s code object, and with automatic dynamic shapes a second one would
        # be compiled as a recompilation of the first, with symbolic sizes
        self.fn = torch.compile(forward, mode=mode, fullgraph=True, dynamic=False)
        self.cuda_graph: Any = None
        self.compile_s: float | None = None
        self.cache: dict[str, int] = {}

    def compile(self) -> float:
        """Compile (the first call) and return the seconds it took. `cache` then says how many
        of the compiled graphs Inductor's FX graph cache served ("hit") or compiled ("miss")."""
        from torch._dynamo.utils import counters

        before = dict(counters["inductor"])
        t = time.perf_counter()
        with self.torch.inference_mode():
            self.run()
            if self.dev.type == "cuda":
                self.torch.cuda.synchronize(self.dev)
        self.compile_s = time.perf_counter() - t
        after = counters["inductor"]
        self.cache = {k: after.get(f"fxgraph_cache_{k}", 0) - before.get(f"fxgraph_cache_{k}", 0)
                      for k in ("hit", "miss")}
        return self.compile_s

    def run(self) -> list[Any]:
        return self.fn(*self.args)

    def outputs(self) -> list[Any]:
        """The outputs of one run, as host float64 arrays."""
        with self.torch.inference_mode():
            return [o.detach().to("cpu", self.torch.float64).numpy() for o in self.run()]

    def release(self) -> None:
        self.fn = None
        self.args = []


#: kernel-name fragments (lower case) that mark a convolution or a GEMM: cuDNN's convolution
#: kernels (`..._fprop_...`, `implicit_convolve_...`, winograd) and the layout conversions it
#: runs around them, and PyTorch's CPU convolution operators; cuBLAS's GEMMs (`..._gemm_...`,
#: `nvjet_...`, CUTLASS) and the CPU matmul operators. Convolutions are checked first (cuDNN's
#: implicit-GEMM convolutions name both); Inductor's own generated kernels (`triton_...`,
#: `cpp_fused_...`) are neither, whatever ops they fused.
CONV_MARKS = ("conv", "fprop", "winograd", "implicit_convolve", "dgrad", "wgrad", "nchwtonhwc",
              "nhwctonchw")
GEMM_MARKS = ("gemm", "gemv", "nvjet", "cublas", "cutlass", "aten::mm", "aten::bmm",
              "aten::addmm", "aten::baddbmm", "linear", "matmul")
GENERATED = ("triton", "cpp_fused")


def kernel_kind(name: str) -> str:
    """"conv2d", "matmul" or "other" for a profiled kernel or CPU operator name."""
    low = name.lower()
    if low.startswith(GENERATED):
        return "other"
    if any(m in low for m in CONV_MARKS):
        return "conv2d"
    if any(m in low for m in GEMM_MARKS):
        return "matmul"
    return "other"


def kernel_times(graph: "TorchGraph | CompiledGraph", runs: int = 3) -> dict[str, float]:
    """Microseconds per run by `kernel_kind` ("conv2d", "matmul", "other") and in all
    ("total"), from `torch.profiler` over `runs` runs after one unprofiled run: on a GPU the
    device kernels' durations, on the CPU the operators' own (self) time."""
    torch = graph.torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = graph.dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.inference_mode():
        graph.run()
        if cuda:
            torch.cuda.synchronize(graph.dev)
        with profile(activities=activities) as prof:
            for _ in range(runs):
                graph.run()
            if cuda:
                torch.cuda.synchronize(graph.dev)
    out = {"conv2d": 0.0, "matmul": 0.0, "other": 0.0}
    for e in prof.events():
        if cuda:
            if e.device_type == DeviceType.CPU:
                continue
            us = e.time_range.elapsed_us()
        else:
            if e.device_type != DeviceType.CPU or e.is_async:
                continue
            us = e.self_cpu_time_total
        out[kernel_kind(e.name)] += us / runs
    out["total"] = sum(out.values())
    return out


#: ONNX element-wise operators an opaque node runs as (torch function name); ONNX's
#: multidirectional broadcasting is NumPy's, which PyTorch follows
ONNX_ELEMENTWISE = {"IsNaN": "isnan", "Where": "where", "Not": "logical_not", "Equal": "eq",
                    "Less": "lt", "Greater": "gt", "And": "logical_and", "Or": "logical_or",
                    "Neg": "neg", "Abs": "abs", "Sqrt": "sqrt", "Exp": "exp", "Erf": "erf"}


def lower_opaque(torch: Any, node: Any, ins_t: Sequence[TensorType], dev: Any,
                 on_host: bool, float_type: str | None = None) -> Callable[..., tuple[Any, ...]]:
    """An opaque node as a function returning a tuple of device tensors: Gather and
    GatherElements as PyTorch indexing (ONNX's negative indices wrapped), the operators of
    `ONNX_ELEMENTWISE`, Cast, opset < 13 (Log)Softmax, LRN and an explicitly padded AveragePool
    (the exported CNNs of the ONNX zoo) as their PyTorch functions; any other through
    onnxruntime on the host when `on_host` (a weight-only node, folded once), else
    NotImplementedError. `ins_t` are the IR's own operand types; with `float_type` the graph
    runs its floats in that type: a Cast to a float type casts to it, and a host node's float
    results are converted to it."""
    from onnx import helper

    from ..ir.opaque import ONNX_TO_DTYPE, decode_node, run_opaque

    stored = decode_node(node.attr)
    op = node.attr["op"]
    attrs = {a.name: helper.get_attribute_value(a) for a in stored.attribute}
    axis = attrs.get("axis", 0)
    onnx_domain = node.attr["domain"] in ("", "ai.onnx")

    def run_type(t: TensorType) -> TensorType:
        return TensorType(t.shape, float_type) if float_type and t.dtype in FLOATS else t
    if onnx_domain and op in ONNX_ELEMENTWISE:
        f = getattr(torch, ONNX_ELEMENTWISE[op])
        return lambda *xs: (f(*xs),)
    if onnx_domain and op in ("Softmax", "LogSoftmax") and node.attr["opset"] < 13:
        shape = ins_t[0].shape          # opset < 13: over the dims from `axis` on, flattened
        ax = attrs.get("axis", 1) % max(len(shape), 1)
        rows = math.prod(shape[:ax])
        f = torch.log_softmax if op == "LogSoftmax" else torch.softmax
        return lambda x: (f(x.reshape(rows, -1), -1).reshape(x.shape),)
    if onnx_domain and op == "LRN":     # ONNX's and PyTorch's LRN both divide alpha by size
        size = attrs["size"]
        alpha, beta = attrs.get("alpha", 1e-4), attrs.get("beta", 0.75)
        bias, lrn = attrs.get("bias", 1.0), torch.nn.functional.local_response_norm
        return lambda x: (lrn(x, size, alpha=alpha, beta=beta, k=bias),)
    if onnx_domain and op == "AveragePool" and _plain_pool(attrs, ins_t[0]):
        return _average_pool(torch, attrs, run_type(ins_t[0]), dev)
    if onnx_domain and op == "Cast" and attrs.get("to") in ONNX_TO_DTYPE:
        dtype = torch_dtype(torch, run_type(TensorType((), ONNX_TO_DTYPE[attrs["to"]])).dtype)
        return lambda x: (x.to(dtype),)
    if onnx_domain and op in ("Gather", "GatherElements"):
        rank = len(ins_t[0].shape)
        axis = axis + rank if axis < 0 else axis
        n = ins_t[0].shape[axis]

        def gather(data: Any, idx: Any) -> tuple[Any, ...]:
            idx = torch.where(idx < 0, idx + n, idx).long()
            if op == "GatherElements":
                return (torch.gather(data, axis, idx),)
            out = torch.index_select(data, axis, idx.reshape(-1))
            return (out.reshape(data.shape[:axis] + idx.shape + data.shape[axis + 1:]),)
        return gather
    if not on_host:
        raise NotImplementedError(f"an opaque {op} (an operator the IR does not model) on the "
                                  "inference path has no PyTorch lowering")
    # in the IR's own types, results converted; NumPy has no bfloat16: bf16 tensors cross as
    # float32 (ir/bfloat16.py)
    own = [torch.float32 if t.dtype == "bf16" else torch_dtype(torch, t.dtype) for t in ins_t]
    result = [torch_dtype(torch, run_type(t).dtype) for t in node.types]

    def host(*xs: Any) -> tuple[Any, ...]:
        arrays = [x.detach().to("cpu", d).numpy() for x, d in zip(xs, own)]
        outs = run_opaque(node.attrs, arrays, ins_t, node.types)
        return tuple(torch.as_tensor(o).to(dev, d) for o, d in zip(outs, result))
    return host


def _plain_pool(attrs: Mapping[str, Any], x: TensorType) -> bool:
    """An ONNX AveragePool over NCHW with explicit (or no) pads and floor rounding."""
    return (len(x.shape) == 4 and attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
            and not attrs.get("ceil_mode", 0) and len(attrs.get("kernel_shape", ())) == 2
            and all(d == 1 for d in attrs.get("dilations", (1, 1))))


def _average_pool(torch: Any, attrs: Mapping[str, Any], x: TensorType,
                  dev: Any) -> Callable[..., tuple[Any, ...]]:
    """ONNX AveragePool: pads may differ at the two ends (zero-padded first), and without
    count_include_pad each window is divided by the cells it covers inside the input (the
    average pool of a ones tensor padded alike, computed once)."""
    f = torch.nn.functional
    k = tuple(attrs["kernel_shape"])
    stride = tuple(attrs.get("strides", (1, 1)))
    t, left, b, right = tuple(attrs.get("pads", (0, 0, 0, 0)))[:4]    # begins, then ends
    pad = (left, right, t, b)           # F.pad: last dim first
    count: Any = None
    if not attrs.get("count_include_pad", 0) and any(pad):
        ones = torch.ones((1, 1) + tuple(x.shape[2:]), device=dev,
                          dtype=torch_dtype(torch, x.dtype))
        count = f.avg_pool2d(f.pad(ones, pad), k, stride)

    def pool(v: Any) -> tuple[Any, ...]:
        y = f.avg_pool2d(f.pad(v, pad) if any(pad) else v, k, stride)
        return (y / count if count is not None else y,)
    return pool


def relative_error(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> float:
    """max over outputs of max |candidate - reference| / max |reference| (inf on a shape
    mismatch or a non-finite value)."""
    worst = 0.0
    for r, c in zip(reference, candidate):
        if r.shape != c.shape or not np.all(np.isfinite(c)):
            return float("inf")
        scale = float(np.max(np.abs(r))) if r.size else 0.0
        diff = float(np.max(np.abs(c - r))) if r.size else 0.0
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def time_alternately(graphs: Sequence[TorchGraph | CompiledGraph], method: str = "graph",
                     rounds: int = 20,
                     budget_s: float = 10.0, min_rounds: int = 3, warm_rounds: int = 2,
                     inner_s: float = 2e-3) -> list[list[float]]:
    """Per graph, the microseconds of one run in each timed round (see the module doc). Stops
    after `rounds` timed rounds or once `budget_s` is spent with `min_rounds` done. The warm-up
    rounds size `inner` (calls per timed sample, "graph" and "loop") to about `inner_s`."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (known: {', '.join(METHODS)})")
    torch = graphs[0].torch
    cuda = graphs[0].dev.type == "cuda"
    if method == "graph" and not cuda:
        method = "eager"
    if method == "graph":
        for g in graphs:
            if g.cuda_graph is None:
                g.capture()
    start = torch.cuda.Event(enable_timing=True) if cuda else None
    end = torch.cuda.Event(enable_timing=True) if cuda else None
    inner = [1] * len(graphs)
    samples: list[list[float]] = [[] for _ in graphs]
    t0 = time.perf_counter()
    r = 0
    with torch.inference_mode():
        while True:
            order = range(len(graphs)) if r % 2 == 0 else reversed(range(len(graphs)))
            for i in order:
                g = graphs[i]
                if method == "graph":
                    start.record()
                    for _ in range(inner[i]):
                        g.cuda_graph.replay()
                    end.record()
                    end.synchronize()
                    us = start.elapsed_time(end) * 1000.0 / inner[i]
                elif method == "loop":
                    if cuda:
                        torch.cuda.synchronize(g.dev)
                        start.record()
                    c0 = time.perf_counter()
                    for _ in range(inner[i]):
                        g.run()
                    if cuda:
                        end.record()
                        end.synchronize()
                        us = start.elapsed_time(end) * 1000.0 / inner[i]
                    else:
                        us = (time.perf_counter() - c0) * 1e6 / inner[i]
                else:
                    if cuda:
                        torch.cuda.synchronize(g.dev)
                    c0 = time.perf_counter()
                    g.run()
                    if cuda:
                        torch.cuda.synchronize(g.dev)
                    us = (time.perf_counter() - c0) * 1e6
                if r < warm_rounds:         # warm-up rounds size `inner`, are not kept
                    inner[i] = max(1, min(1000, int(inner_s * 1e6 / max(us, 1e-3))))
                else:
                    samples[i].append(us)
            r += 1
            done = r - warm_rounds
            if done >= rounds or (done >= min_rounds and time.perf_counter() - t0 > budget_s):
                break
    return samples


def median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None
