"""onnxruntime sessions for whole models of any size, with the settings that measured stable.

Protobuf caps a serialized model at 2 GB, so larger models (ViT-Huge has 2.5 GB of weights) go
through a temporary file with external data (external_data.py); the session keeps what it needs
in memory.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from .external_data import needs_external, save_split


def session_options(threads: int = 1) -> Any:
    """`threads` intra-op threads, one inter-op thread, sequential, all graph optimizations."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    return so


def quiet_run() -> Any:
    """RunOptions that log nothing: for runs whose failure is an answer (does the model run at
    these sizes?), reported by the caller, not on the terminal."""
    import onnxruntime as ort

    ro = ort.RunOptions()
    ro.log_severity_level = 4
    return ro


def session(model: Any, threads: int = 1) -> Any:
    """A CPU inference session for an `onnx.ModelProto`."""
    import onnxruntime as ort

    so = session_options(threads)
    if not needs_external(model):
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory() as tmp:       # the model in memory stays as it is
        path = Path(tmp) / "model.onnx"
        save_split(model, path)
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
