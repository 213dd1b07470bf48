"""The `torch` cost backend: each IR operator lowered to PyTorch calls and timed, as TASO timed
cuDNN kernels, for GPUs without TensorRT (and, with perf_counter, on the CPU).

On a GPU: `torch.backends.cudnn.benchmark` on (cuDNN picks its fastest algorithm per shape, as
TASO's cudnnFind does), TF32 off unless asked for (`tf32`: the IR is f32, and PyTorch lets cuDNN
convolutions use TF32 by default), random operands made on the device, `warmups` calls, then
(method "graph", the default) `calls` back-to-back calls captured in one CUDA graph and the
median over replays of the interval between two CUDA events around one replay, divided by
`calls`: the op's time in a stream of kernels with no CPU launch overhead between them, as in a
whole model replayed as a CUDA graph (TASO timed a loop of back-to-back calls the same way).
Method "event" (or a configuration that cannot be captured) times one call between two events,
which also counts PyTorch's dispatch on the CPU. On the CPU: one intra-op thread (the `ort`
settings) and `time.perf_counter_ns`. Replays (calls on the CPU) are repeated until about
`target_s` is spent, at least `min_repeats` and at most `repeats` times. Everything runs under
`torch.inference_mode()`.

The lowering follows the operator table's semantics (`ir/interp.py`): explicit asymmetric padding
becomes `F.pad` before the conv/pool (what a framework would run), a fused `act` is a second call,
`transpose`/`broadcast` materialize (`.contiguous()`), while `reshape`, `split`, `slice` and
`dropout` are views and cost only their call overhead, as in cuDNN-style runtimes. Weight
operands are created once on the device like the activations; nothing is folded.

Optional: `pip install eqsat-nb[torch]`. `unavailable()` says why it cannot run here.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..ir.graph import TensorType
from ..ir.opaque import NP_DTYPES
from ..ir.ops import conv_groups, infer_types
from ..ir.shapes import spatial_pads
from .db import CostCache
from .measured import MeasuredCostModel
from .onnx_node import random_array

BACKEND = "torch"


def _import_torch():
    import torch  # noqa: PLC0415 - optional dependency
    return torch


def unavailable(device: str | None = None) -> str | None:
    """None when the torch backend can time on `device` (None: GPU if any, else CPU)."""
    try:
        torch = _import_torch()
    except ImportError:
        return "PyTorch (the `torch` package) is not installed"
    except OSError as e:
        return f"PyTorch is installed but its libraries cannot be loaded ({e})"
    if device is None or device == "cpu":
        return None
    if not device.startswith("cuda"):
        return f"unknown torch device '{device}' (use cpu, cuda or cuda:N)"
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA GPU (CPU-only build, or no GPU/driver)"
    index = int(device[5:]) if device.startswith("cuda:") and device[5:].isdigit() else 0
    if index >= torch.cuda.device_count():
        return f"no CUDA GPU {index} (PyTorch sees {torch.cuda.device_count()})"
    return None


def lower(op: str, a: Mapping[str, Any], input_types: Sequence[TensorType]
          ) -> Callable[..., Any]:
    """A function of the operand tensors computing `op` with attributes `a` in PyTorch."""
    torch = _import_torch()
    F = torch.nn.functional
    acts = {"none": lambda x: x, "relu": torch.relu, "sigmoid": torch.sigmoid,
            "tanh": torch.tanh}

    def spatial(x_t: TensorType, kernel, stride, pad):
        (t, b), (l, r) = spatial_pads(tuple(x_t.shape[2:]), tuple(kernel), tuple(stride), pad)
        return (t, b, l, r)

    if op == "ewadd":
        return torch.add
    if op == "ewmul":
        return torch.mul
    if op == "matmul":
        act = acts[a["act"]]
        return lambda x, y: act(torch.matmul(x, y))
    if op == "conv2d":
        x_t, w_t = input_types[:2]
        t, b, l, r = spatial(x_t, w_t.shape[2:], a["stride"], a["pad"])
        groups = conv_groups(x_t, w_t)
        act = acts[a["act"]]
        stride = tuple(a["stride"])
        if t == b and l == r:      # bias=None where conv2d has none
            return lambda x, w, bias=None: act(F.conv2d(x, w, bias, stride=stride,
                                                        padding=(t, l), groups=groups))
        return lambda x, w, bias=None: act(F.conv2d(F.pad(x, (l, r, t, b)), w, bias,
                                                    stride=stride, groups=groups))
    if op in ("relu", "tanh", "sigmoid"):
        return acts[op]
    if op in ("poolmax", "poolavg"):
        (x_t,) = input_types
        t, b, l, r = spatial(x_t, a["kernel"], a["stride"], a["pad"])
        kernel, stride, act = tuple(a["kernel"]), tuple(a["stride"]), acts[a["act"]]
        pool = F.max_pool2d if op == "poolmax" else F.avg_pool2d
        fill = float("-inf") if op == "poolmax" else 0.0
        extra = {} if op == "poolmax" else {"count_include_pad": True}
        if t == b and l == r and 2 * t <= kernel[0] and 2 * l <= kernel[1]:
            return lambda x: act(pool(x, kernel, stride, padding=(t, l), **extra))
        return lambda x: act(pool(F.pad(x, (l, r, t, b), value=fill), kernel, stride))
    if op == "transpose":
        perm = tuple(a["perm"])
        return lambda x: x.permute(perm).contiguous()
    if op == "concat":
        axis = a["axis"]
        return lambda *xs: torch.cat(xs, dim=axis)
    if op == "split":
        sizes, axis = list(a["sizes"]), a["axis"]
        return lambda x: torch.split(x, sizes, dim=axis)
    if op == "reshape":
        shape = tuple(a["shape"])
        return lambda x: x.reshape(shape)
    if op == "batchnorm":
        eps = a["eps"]
        return lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, training=False, eps=eps)
    if op == "softmax":
        axis = a["axis"]
        return lambda x: torch.softmax(x, dim=axis)
    if op == "layernorm":
        x_t = input_types[0]
        axis = a["axis"] % len(x_t.shape)
        norm_shape, eps = tuple(x_t.shape[axis:]), a["eps"]
        return lambda x, g, b: F.layer_norm(x, norm_shape, g.reshape(norm_shape),
                                            b.reshape(norm_shape), eps)
    if op == "gelu":
        return F.gelu
    if op == "reduce_mean":
        axes, keep = tuple(a["axes"]), bool(a["keepdims"])
        return lambda x: x.mean(dim=axes, keepdim=keep)
    if op == "slice":
        x_t = input_types[0]
        index = [slice(None)] * len(x_t.shape)
        for ax, s, e in zip(a["axes"], a["starts"], a["ends"]):
            index[ax % len(x_t.shape)] = slice(s, e)
        idx = tuple(index)
        return lambda x: x[idx]
    if op == "pad":
        r = len(input_types[0].shape)
        p = a["pads"]
        flat: list[int] = []
        for i in reversed(range(r)):
            flat += [p[i], p[i + r]]
        value = float(a["value"])
        return lambda x: F.pad(x, tuple(flat), value=value)
    if op == "dropout":
        return lambda x: x
    if op == "broadcast":
        shape = tuple(a["shape"])
        return lambda x: x.expand(shape).contiguous()
    if op == "scale":
        value = float(a["value"])
        return lambda x: x * value
    if op == "enlarge":
        w_t, ref_t = input_types
        kh, kw = w_t.shape[2:]
        rh, rw = ref_t.shape[2:]
        ph, pw = (rh - kh) // 2, (rw - kw) // 2
        pads = (pw, rw - kw - pw, ph, rh - kh - ph)
        return lambda w, ref: F.pad(w, pads)
    if op == "merge":
        (w_t,) = input_types
        count, groups = a["count"], a["groups"]
        o, cg, kh, kw = w_t.shape
        blocks = (groups // count, count, o // groups, 1, cg, kh, kw)
        out_shape = tuple(infer_types("merge", [w_t], tuple(a.items()))[0].shape)
        mask_np = np.eye(count, dtype=NP_DTYPES[w_t.dtype]).reshape(1, count, 1, count, 1, 1, 1)
        cache: dict[Any, Any] = {}

        def merge(w):
            key = (w.device, w.dtype)
            if key not in cache:
                cache[key] = torch.as_tensor(mask_np, device=w.device)
            return (w.reshape(blocks) * cache[key]).reshape(out_shape)
        return merge
    raise NotImplementedError(f"op '{op}' has no torch lowering")


METHODS = ("graph", "event")


def set_tf32(torch, on: bool) -> None:
    """TF32 for cuBLAS matmuls and cuDNN convolutions on (True) or off (strict f32)."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def torch_dtype(torch, dtype: str) -> Any:
    """The torch dtype of an IR element type (f32 -> torch.float32, bool -> torch.bool)."""
    return torch.bool if dtype == "bool" else getattr(torch, np.dtype(NP_DTYPES[dtype]).name)


def device_operands(torch, input_types: Sequence[TensorType], dev: Any, op: str = "",
                    seed: int = 0) -> list[Any]:
    """Random operands made on `dev` (uniform in [-1, 1); batchnorm variances in [0.5, 1.5);
    integers in [0, 4), booleans): no host-side generation or copy of large weights."""
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    out = []
    for i, t in enumerate(input_types):
        dtype = torch_dtype(torch, t.dtype)
        shape = tuple(t.shape)
        if t.dtype == "bool":
            out.append(torch.rand(shape, generator=gen, device=dev) < 0.5)
        elif t.dtype in ("i32", "i64"):
            out.append(torch.randint(0, 4, shape, generator=gen, device=dev, dtype=dtype))
        elif op == "batchnorm" and i == 4:
            out.append(torch.rand(shape, generator=gen, device=dev, dtype=dtype) + 0.5)
        else:
            out.append(torch.rand(shape, generator=gen, device=dev, dtype=dtype) * 2 - 1)
    return out


class TorchCostModel(MeasuredCostModel):
    """Median latency (µs) of one operator in PyTorch on `device`, cached in a `CostCache`."""

    backend = BACKEND

    def __init__(self, cache: CostCache | None = None, device: str | None = None,
                 repeats: int = 50, warmups: int = 10, method: str = "graph", calls: int = 20,
                 target_s: float = 0.05, min_repeats: int = 5, tf32: bool = False) -> None:
        why = unavailable(device)
        if why is not None:
            raise RuntimeError(f"torch backend unavailable: {why}")
        if method not in METHODS:
            raise ValueError(f"unknown timing method {method!r} (known: {', '.join(METHODS)})")
        super().__init__(cache)
        torch = self.torch = _import_torch()
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.dev = torch.device(device)
        self.repeats, self.warmups = repeats, warmups
        self.calls, self.target_s, self.min_repeats = calls, target_s, min(min_repeats, repeats)
        self.method = method if self.dev.type == "cuda" else "cpu"
        self.tf32 = tf32
        self.uncaptured = 0        # configurations timed by events because capture failed
        if self.dev.type == "cuda":
            torch.backends.cudnn.benchmark = True
            set_tf32(torch, tf32)
            index = self.dev.index or 0
            props = torch.cuda.get_device_properties(index)
            self.device = (f"gpu|{props.name}|sm{props.major}{props.minor}|torch "
                           f"{torch.__version__}|cuda {torch.version.cuda}"
                           f"|cudnn {torch.backends.cudnn.version()}|{method}"
                           + ("|tf32" if tf32 else ""))
            self.launch_us = 4.0
        else:
            torch.set_num_threads(1)
            from .db import device_fingerprint
            self.device = device_fingerprint().replace("|ort ", "|onnxruntime ") + \
                f"|torch {torch.__version__}"
            self.launch_us = 4.6

    def operands(self, input_types: Sequence[TensorType], op: str) -> list[Any]:
        """Random operand tensors on the device (batchnorm variances positive)."""
        if self.dev.type == "cuda":
            return device_operands(self.torch, input_types, self.dev, op)
        rng = np.random.default_rng(0)
        return [self.torch.as_tensor(random_array(t, rng, positive=(op == "batchnorm" and i == 4)),
                                     device=self.dev) for i, t in enumerate(input_types)]

    def _repeats(self, one_s: float) -> int:
        """Timed repetitions for a unit of work taking `one_s` seconds."""
        want = int(self.target_s / max(one_s, 1e-9))
        return max(self.min_repeats, min(self.repeats, want))

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        torch = self.torch
        fn = lower(op, attrs, input_types)
        args = self.operands(input_types, op)
        with torch.inference_mode():
            if self.dev.type != "cuda":
                return self._time_cpu(fn, args)
            if self.method == "graph":
                try:
                    return self._time_graph(fn, args)
                except RuntimeError:       # not capturable: events around one call
                    self.uncaptured += 1
                    torch.cuda.synchronize(self.dev)
            return self._time_events(fn, args)

    def _time_cpu(self, fn: Callable[..., Any], args: list[Any]) -> float:
        clock = time.perf_counter_ns
        for _ in range(self.warmups):
            fn(*args)
        t0 = clock()
        fn(*args)
        times = [(clock() - t0) / 1000.0]
        for _ in range(self._repeats(times[0] * 1e-6) - 1):
            t0 = clock()
            fn(*args)
            times.append((clock() - t0) / 1000.0)
        return statistics.median(times)

    def _time_events(self, fn: Callable[..., Any], args: list[Any]) -> float:
        torch = self.torch
        for _ in range(self.warmups):
            fn(*args)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.dev)
        times: list[float] = []
        n = self.repeats
        while len(times) < n:
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0)
            if len(times) == 1:
                n = self._repeats(times[0] * 1e-6)
        return statistics.median(times)

    def _time_graph(self, fn: Callable[..., Any], args: list[Any]) -> float:
        """Median µs per call over replays of a CUDA graph of `calls` back-to-back calls."""
        torch = self.torch
        side = torch.cuda.Stream(self.dev)
        side.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(side):          # warm-up (and cuDNN's algorithm search) off the
            for _ in range(max(self.warmups, 3)):   # capture stream, as CUDA graphs require
                fn(*args)
        torch.cuda.current_stream(self.dev).wait_stream(side)
        torch.cuda.synchronize(self.dev)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(self.calls):
                fn(*args)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        graph.replay()                       # first replay uploads the graph
        torch.cuda.synchronize(self.dev)
        times: list[float] = []
        n = self.repeats
        while len(times) < n:
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000.0 / self.calls)
            if len(times) == 1:
                n = self._repeats(times[0] * self.calls * 1e-6)
        del graph
        return statistics.median(times)
