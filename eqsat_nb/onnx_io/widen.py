"""A half-precision ONNX model widened to float32: the reference a half model is judged against.

Every fp16 and bf16 tensor and type becomes float32 (ir/widen.py: initializers and constant
attributes with their values exactly, declared types, the types nodes produce by attribute, in
subgraphs too). The result computes the same function as the original with float32 rounding
instead of half rounding: `check.check_models` measures how far the half model itself is from
it, and an optimized model may not be much further.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir.bfloat16 import host_array
from ..ir.widen import HALF_TYPES, widen_graph


def widen(model: Any) -> Any:
    """A copy of `model` with every half-precision tensor and type in float32 (mapped weights
    read in: mapped_data.inline)."""
    from ..mapped_data import inline

    out = inline(model)
    widen_graph(out.graph, HALF_TYPES)
    return out


def widen_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Inputs for the widened model: half-precision arrays as float32 (bf16 ones already are
    on the host, ir/bfloat16.py), others as they are."""
    return {k: _widen_array(v) for k, v in feeds.items()}


def _widen_array(a: np.ndarray) -> np.ndarray:
    a = host_array(np.asarray(a))
    if a.dtype == np.float16:
        return a.astype(np.float32)
    return a
