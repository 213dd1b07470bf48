"""onnxruntime sessions for whole models of any size, with the settings that measured stable.

Protobuf caps a serialized model at 2 GB, so larger models (ViT-Huge has 2.5 GB of weights) go
through a temporary file with external data; the session keeps what it needs in memory.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

PROTOBUF_LIMIT = 1_800_000_000      # bytes; leave room below protobuf's 2 GiB


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


def too_big(model: Any) -> bool:
    """Whether `model` must go through a file with external data: over PROTOBUF_LIMIT, or so
    large that protobuf cannot even size it (upb's ByteSize raises EncodeError past 2 GB)."""
    from google.protobuf.message import EncodeError

    try:
        return model.ByteSize() >= PROTOBUF_LIMIT
    except EncodeError:
        return True


def session(model: Any, threads: int = 1) -> Any:
    """A CPU inference session for an `onnx.ModelProto` (left as it was: onnx's save_model
    moves the weights it writes out of the model, so they are read back)."""
    import onnxruntime as ort

    so = session_options(threads)
    if not too_big(model):
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="model.onnx.data")
        try:
            return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        finally:
            load_external_data_for_model(model, tmp)
