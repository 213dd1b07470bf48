"""ONNX import and export: `load_onnx` (ONNX → Graph + weight values) and `to_onnx`/`save_onnx`
(Graph → ONNX). Operators with exactly matching semantics map onto the IR's table; every other
ONNX node becomes an `opaque` node that rules never touch but that keeps the graph executable."""
from __future__ import annotations

from .exporter import save_onnx, to_onnx
from .input_types import DEFAULT_DIM
from .read import OnnxImport, from_onnx, import_onnx, load_onnx, read_onnx

__all__ = ["DEFAULT_DIM", "OnnxImport", "from_onnx", "import_onnx", "load_onnx", "read_onnx",
           "save_onnx", "to_onnx"]
