"""The `torch` cost backend: each IR operator lowered to PyTorch calls and timed, as TASO timed
cuDNN kernels, for GPUs without TensorRT (and, with perf_counter, on the CPU).

On a GPU: `torch.backends.cudnn.benchmark` on (cuDNN picks its fastest algorithm per shape, as
TASO's cudnnFind does), operands on the device, `warmups` calls then the median of `repeats`
intervals between two CUDA events around one call. On the CPU: one intra-op thread (the `ort`
settings) and `time.perf_counter_ns`. Everything runs under `torch.inference_mode()`.

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


class TorchCostModel(MeasuredCostModel):
    """Median latency (µs) of one operator in PyTorch on `device`, cached in a `CostCache`."""

    backend = BACKEND

    def __init__(self, cache: CostCache | None = None, device: str | None = None,
                 repeats: int = 50, warmups: int = 10) -> None:
        why = unavailable(device)
        if why is not None:
            raise RuntimeError(f"torch backend unavailable: {why}")
        super().__init__(cache)
        torch = self.torch = _import_torch()
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.dev = torch.device(device)
        self.repeats, self.warmups = repeats, warmups
        if self.dev.type == "cuda":
            torch.backends.cudnn.benchmark = True
            index = self.dev.index or 0
            props = torch.cuda.get_device_properties(index)
            self.device = (f"gpu|{props.name}|sm{props.major}{props.minor}|torch "
                           f"{torch.__version__}|cuda {torch.version.cuda}"
                           f"|cudnn {torch.backends.cudnn.version()}")
            self.launch_us = 4.0
        else:
            torch.set_num_threads(1)
            from .db import device_fingerprint
            self.device = device_fingerprint().replace("|ort ", "|onnxruntime ") + \
                f"|torch {torch.__version__}"
            self.launch_us = 4.6

    def operands(self, input_types: Sequence[TensorType], op: str) -> list[Any]:
        """Random operand tensors on the device (batchnorm variances positive)."""
        rng = np.random.default_rng(0)
        positive = OPS[op].positive if op in OPS else ()
        return [self.torch.as_tensor(random_array(t, rng, positive=i in positive),
                                     device=self.dev) for i, t in enumerate(input_types)]

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        torch = self.torch
        fn = lower(op, attrs, input_types)
        args = self.operands(input_types, op)
        with torch.inference_mode():
            for _ in range(self.warmups):
                fn(*args)
            times = []
            if self.dev.type == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize(self.dev)
                for _ in range(self.repeats):
                    start.record()
                    fn(*args)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end) * 1000.0)
            else:
                clock = time.perf_counter_ns
                for _ in range(self.repeats):
                    t0 = clock()
                    fn(*args)
                    times.append((clock() - t0) / 1000.0)
        return statistics.median(times)
