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

Each op's lowering is its `OpDef.torch` (ir/ops/, one module per operator family) and follows its
reference semantics (`OpDef.eval`): explicit asymmetric padding
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
from ..ir.ops import OPS
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
    """A function of the operand tensors computing `op` with attributes `a` in PyTorch: the op's
    own `OpDef.torch` lowering (ir/ops/, one module per operator family)."""
    torch = _import_torch()
    d = OPS.get(op)
    if d is None or d.torch is None:
        raise NotImplementedError(f"op '{op}' has no torch lowering")
    return d.torch(torch, dict(a), list(input_types))


METHODS = ("graph", "event")


def set_tf32(torch, on: bool) -> None:
    """TF32 for cuBLAS matmuls and cuDNN convolutions on (True) or off (strict f32)."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def torch_dtype(torch, dtype: str) -> Any:
    """The torch dtype of an IR element type (f32 -> torch.float32, bf16 -> torch.bfloat16,
    bool -> torch.bool)."""
    if dtype == "bf16":                 # NumPy has no bfloat16
        return torch.bfloat16
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
        positive = OPS[op].positive if op in OPS else ()
        out = []
        for i, t in enumerate(input_types):     # bf16: drawn in f32 (NumPy has no bfloat16)
            drawn = TensorType(t.shape, "f32") if t.dtype == "bf16" else t
            x = self.torch.as_tensor(random_array(drawn, rng, positive=i in positive),
                                     device=self.dev)
            out.append(x.to(self.torch.bfloat16) if t.dtype == "bf16" else x)
        return out

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
