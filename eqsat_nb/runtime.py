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


def session(model: Any, threads: int = 1, so: Any = None) -> Any:
    """A CPU inference session for an `onnx.ModelProto` (`so`: its options, default
    `session_options(threads)`). A model that keeps external references to the data of the
    input being optimized (mapped_data.py) reads them from the input's folder."""
    import onnxruntime as ort

    so = so or session_options(threads)
    folder = _data_folder(model)
    if folder is not None:
        return _session_with_data(model, so, folder)
    if not needs_external(model):
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory() as tmp:       # the model in memory stays as it is
        path = Path(tmp) / "model.onnx"
        save_split(model, path)
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


_FOLDER_KEY = "session.model_external_initializers_file_folder_path"


def _data_folder(model: Any) -> Path | None:
    """The folder of the mapped data in use when `model` refers to external files, else None."""
    from .external_data import is_external
    if not any(is_external(t) for t in model.graph.initializer):
        return None
    from .mapped_data import current
    data = current()
    return None if data is None else data.base


def _session_with_data(model: Any, so: Any, folder: Path) -> Any:
    """A session of a model whose initializers are in files of `folder`: the serialized model
    with onnxruntime told that folder (onnxruntime >= 1.19); older releases, which lack that
    setting, load it from a scratch folder whose data files link to the originals."""
    import onnxruntime as ort

    from .external_data import data_files

    so.add_session_config_entry(_FOLDER_KEY, str(folder))
    try:
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as first:      # noqa: BLE001 - an old onnxruntime: try the links
        with tempfile.TemporaryDirectory() as tmp:
            try:
                for loc in data_files(model):
                    link = Path(tmp) / loc
                    link.parent.mkdir(parents=True, exist_ok=True)
                    link.symlink_to((folder / loc).resolve())
                path = Path(tmp) / "model.onnx"
                path.write_bytes(model.SerializeToString())
                return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            except Exception:       # noqa: BLE001 - the first refusal is the one to report
                raise first from None
