"""Check an import against onnxruntime: run the original model in onnxruntime, the imported graph
in the reference interpreter (opaque nodes in onnxruntime) and its re-export (`to_onnx`) in
onnxruntime, on the same inputs, and compare. Used by the idiom tests and tools/onnx_zoo_check.py.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir.interp import random_tensor, run
from ..ir.opaque import NP_DTYPES
from .read import OnnxImport


def ort_run(model: Any, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def inputs_for(r: OnnxImport, seed: int = 0, high: int | None = None) -> dict[str, np.ndarray]:
    """Random values for the graph inputs of an import (by ONNX name) at the imported shapes;
    integer inputs lie in [0, high) (default: the interpreter's [0, 4))."""
    ssa_to_name = {}
    for name, ssa in r.ssa_of.items():
        ssa_to_name.setdefault(ssa, name)
    onnx_inputs = [i.name for i in r.model.graph.input]
    feeds = {}
    for ssa, ty in r.graph.inputs:
        name = next(n for n in onnx_inputs if r.ssa_of.get(n) == ssa)
        x = random_tensor(ssa, ty, seed, NP_DTYPES.get(ty.dtype, np.float32))
        if high is not None and ty.dtype in ("i32", "i64"):
            x = np.random.default_rng(seed).integers(0, high, ty.shape).astype(x.dtype)
        feeds[name] = x
    return feeds


def compare(r: OnnxImport, feeds: Mapping[str, np.ndarray], rtol: float = 1e-4,
            atol: float = 1e-5, export: bool = True) -> list[str]:
    """Differences (empty when none) between the original model in onnxruntime and the import
    (interpreter; and its `to_onnx` export in onnxruntime)."""
    from .exporter import to_onnx

    want = ort_run(r.model, feeds)
    env = {r.ssa_of[k]: v for k, v in feeds.items() if k in r.ssa_of}
    env.update({"@" + k: v for k, v in r.weights.items()})
    got = run(r.graph, env)
    problems = _diff("interpreter", got, want, rtol, atol)
    if export:
        from ..errors import TirError
        try:
            m = to_onnx(r.graph, r.weights)
        except TirError as e:
            return problems + [f"export: {e.message}"]
        names = [i.name for i in m.graph.input]
        order = [ssa for ssa, _ in r.graph.inputs]
        ssa_feeds = {r.ssa_of[k]: v for k, v in feeds.items() if k in r.ssa_of}
        exp_feeds = {n: ssa_feeds[s] for n, s in zip(names, order)}
        problems += _diff("export", ort_run(m, exp_feeds), want, rtol, atol)
    return problems


def _diff(what: str, got: list, want: list, rtol: float, atol: float) -> list[str]:
    out = []
    if len(got) != len(want):
        return [f"{what}: {len(got)} outputs, onnxruntime gives {len(want)}"]
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            out.append(f"{what}: output {k} shape {g.shape} != {w.shape}")
        elif w.dtype.kind in "biu":
            if not np.array_equal(g, w):
                out.append(f"{what}: output {k} integer values differ")
        elif not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                             equal_nan=True):
            d = float(np.nanmax(np.abs(g.astype(np.float64) - w)))
            out.append(f"{what}: output {k} max abs diff {d:.3g}")
    return out
