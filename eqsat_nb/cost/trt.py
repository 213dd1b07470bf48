"""The `trt` cost backend: single-layer TensorRT engines on an NVIDIA GPU.

For each configuration: the same one-node ONNX model the `ort` backend times (weights as
initializers, activations as inputs) goes through TensorRT's OnnxParser into a strongly typed
network (precision follows the ONNX types: f32 models time FP32 kernels, FP16 costs need f16
operands), the builder config gets a workspace limit and a timing cache persisted next to the
cost database (it speeds up later builds of the same layers but stores no latencies, so our own
cache still holds the results), the engine is built and deserialized, and `execute_async_v3` is
timed with CUDA events: `warmups` runs, then the median of `repeats`.

Optional: `pip install eqsat-nb[trt]` (TensorRT + cuda-python for device buffers, streams and
events). `unavailable()` says why it cannot run here: TensorRT not importable (ImportError or
OSError from a missing libnvinfer / CUDA library), cuda-python missing, or `trt.Builder` failing
(no GPU or driver).
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir.graph import TensorType
from .db import CostCache, default_path
from .measured import MeasuredCostModel
from .onnx_node import one_node_model, random_inputs

BACKEND = "trt"
WORKSPACE_BYTES = 1 << 30


def _import_trt():
    import tensorrt  # noqa: PLC0415 - optional dependency
    return tensorrt


def _import_cudart():
    try:
        from cuda.bindings import runtime as cudart  # cuda-python >= 12.6
    except ImportError:
        from cuda import cudart  # older cuda-python
    return cudart


def unavailable(index: int = 0) -> str | None:
    """None when TensorRT can build engines on GPU `index` here; else the reason, in words."""
    try:
        trt = _import_trt()
    except ImportError:
        return "TensorRT (the `tensorrt` Python package) is not installed"
    except OSError as e:
        return f"TensorRT is installed but its libraries cannot be loaded ({e})"
    try:
        cudart = _import_cudart()
    except (ImportError, OSError):
        return "cuda-python (device buffers and CUDA events) is not installed"
    try:
        err, count = cudart.cudaGetDeviceCount()
        if int(err) != 0 or count <= index:
            return f"no CUDA GPU {index} (the CUDA runtime sees {count if int(err) == 0 else 0})"
        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
        if builder is None:
            return "trt.Builder failed (no usable GPU or driver)"
    except Exception as e:  # noqa: BLE001 - the probe reports any failure in words
        return f"trt.Builder failed ({type(e).__name__}: {e}); no usable GPU or driver"
    return None


def _check(result: Any) -> Any:
    """cuda-python calls return (err, value...): raise on err, return the value(s)."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {err}")
    return rest[0] if len(rest) == 1 else tuple(rest) if rest else None


def gpu_fingerprint(index: int) -> str:
    """GPU name, compute capability, driver and TensorRT versions."""
    trt = _import_trt()
    cudart = _import_cudart()
    props = _check(cudart.cudaGetDeviceProperties(index))
    name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
    driver = _check(cudart.cudaDriverGetVersion())
    return (f"gpu|{name.strip(chr(0))}|sm{props.major}{props.minor}|driver {driver}"
            f"|trt {trt.__version__}")


class TrtCostModel(MeasuredCostModel):
    """Median latency (µs) of single-layer TensorRT engines, cached in a `CostCache`."""

    backend = BACKEND
    launch_us = 3.0          # an `opaque` node: a few µs of kernel launch

    def __init__(self, cache: CostCache | None = None, device: int = 0, repeats: int = 50,
                 warmups: int = 10, workspace: int = WORKSPACE_BYTES,
                 timing_cache: str | Path | None = None) -> None:
        why = unavailable(device)
        if why is not None:
            raise RuntimeError(f"trt backend unavailable: {why}")
        super().__init__(cache)
        self.trt = _import_trt()
        self.cudart = _import_cudart()
        self.index = device
        self.repeats, self.warmups, self.workspace = repeats, warmups, workspace
        _check(self.cudart.cudaSetDevice(device))
        self.device = gpu_fingerprint(device)
        db = cache.path if cache is not None else default_path()
        self.timing_cache_path = Path(timing_cache) if timing_cache is not None else \
            db.with_name(f"trt-timing-{self.device.replace('|', '_').replace(' ', '')}.cache")
        self.logger = self.trt.Logger(self.trt.Logger.ERROR)
        self.builder = self.trt.Builder(self.logger)
        self.runtime = self.trt.Runtime(self.logger)

    # ------------------------------------------------------------------ engine
    def build_engine(self, onnx_bytes: bytes):
        """A deserialized engine of the ONNX model (timing cache read and written back)."""
        trt = self.trt
        flags = 0
        if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        if hasattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH"):   # TensorRT < 10
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = self.builder.create_network(flags)
        parser = trt.OnnxParser(network, self.logger)
        if not parser.parse(onnx_bytes):
            errs = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"OnnxParser: {errs}")
        config = self.builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace)
        blob = self.timing_cache_path.read_bytes() if self.timing_cache_path.exists() else b""
        tcache = config.create_timing_cache(blob)
        config.set_timing_cache(tcache, ignore_mismatch=False)
        plan = self.builder.build_serialized_network(network, config)
        if plan is None:
            raise RuntimeError("TensorRT could not build an engine for this layer")
        self.timing_cache_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.timing_cache_path.with_suffix(".tmp")
        tmp.write_bytes(bytes(config.get_timing_cache().serialize()))
        tmp.replace(self.timing_cache_path)        # atomic: a killed build never truncates it
        engine = self.runtime.deserialize_cuda_engine(plan)
        if engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine")
        return engine

    def time_engine(self, engine, feed: Mapping[str, np.ndarray]) -> float:
        """Median µs of one `execute_async_v3`, between two CUDA events on a private stream."""
        trt, cu = self.trt, self.cudart
        ctx = engine.create_execution_context()
        stream = _check(cu.cudaStreamCreate())
        start, end = _check(cu.cudaEventCreate()), _check(cu.cudaEventCreate())
        buffers = []
        try:
            for i in range(engine.num_io_tensors):
                name = engine.get_tensor_name(i)
                shape = tuple(engine.get_tensor_shape(name))
                dtype = np.dtype(trt.nptype(engine.get_tensor_dtype(name)))
                nbytes = max(1, int(np.prod(shape)) * dtype.itemsize)
                ptr = _check(cu.cudaMalloc(nbytes))
                buffers.append(ptr)
                if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                    host = np.ascontiguousarray(feed[name], dtype=dtype)
                    _check(cu.cudaMemcpy(ptr, host.ctypes.data, host.nbytes,
                                         cu.cudaMemcpyKind.cudaMemcpyHostToDevice))
                ctx.set_tensor_address(name, int(ptr))
            handle = int(stream)
            for _ in range(self.warmups):
                ctx.execute_async_v3(handle)
            _check(cu.cudaStreamSynchronize(stream))
            times = []
            for _ in range(self.repeats):
                _check(cu.cudaEventRecord(start, stream))
                if not ctx.execute_async_v3(handle):
                    raise RuntimeError("execute_async_v3 failed")
                _check(cu.cudaEventRecord(end, stream))
                _check(cu.cudaEventSynchronize(end))
                times.append(_check(cu.cudaEventElapsedTime(start, end)))
            return statistics.median(times) * 1000.0
        finally:
            for ptr in buffers:
                cu.cudaFree(ptr)
            cu.cudaEventDestroy(start)
            cu.cudaEventDestroy(end)
            cu.cudaStreamDestroy(stream)

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        model = one_node_model(op, attrs, input_types, weight_inputs)
        engine = self.build_engine(model.SerializeToString())
        return self.time_engine(engine, random_inputs(model))
