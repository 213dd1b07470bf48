"""The `ort` cost backend: time one-node ONNX models with onnxruntime on the CPU.

Settings that measured stable (DESIGN.md section 7): one intra-op and one inter-op thread,
sequential execution, all graph optimizations, activations as graph inputs and weights as
initializers (an all-constant node is folded away), `warmups` runs then the median of `repeats`
timed `sess.run` calls. What is timed is what a real run executes: onnxruntime may fuse Conv+Relu
or wrap convs/pools in NCHWc reorders (`optimized_op_types` shows the executed graph).

Results go to a `CostCache` keyed by (backend "ort", device fingerprint, op, attributes, input
types and which operands are weights); a second request for the same configuration measures
nothing. Only one process profiles at a time: measuring holds an exclusive file lock next to the
database (`measured.py`). `OrtCostModel` is a `CostModel`: `egraph_costs` / `graph_cost` take it
like the analytic one; operands that are weight-only (`OpSignature.const_inputs`) become
initializers of the one-node model.
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any, Mapping, Sequence

from typing import TYPE_CHECKING

from ..ir.graph import TensorType
from .db import CostCache, device_fingerprint
from .measured import MeasuredCostModel, profiling_lock, signature_key  # noqa: F401 (re-export)

if TYPE_CHECKING:       # onnx is imported on first measurement: a cached run never loads it
    import onnx

BACKEND = "ort"


def time_model(model: onnx.ModelProto, repeats: int = 50, warmups: int = 10,
               threads: int = 1) -> float:
    """Median wall time of one `sess.run` of `model`, in microseconds."""
    from .onnx_node import make_session, random_inputs

    sess = make_session(model, threads=threads)
    feed = random_inputs(model)
    for _ in range(warmups):
        sess.run(None, feed)
    times = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        t0 = clock()
        sess.run(None, feed)
        times.append(clock() - t0)
    return statistics.median(times) / 1000.0


def optimized_op_types(model: onnx.ModelProto) -> list[str]:
    """The op types onnxruntime actually executes for `model` after its graph optimizations."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "opt.onnx")
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = out
        so.log_severity_level = 3
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [n.op_type for n in onnx.load(out).graph.node]


class OrtCostModel(MeasuredCostModel):
    """Measured CPU costs (µs) of single operators, cached in a `CostCache`; a `CostModel`
    (`cost(sig)`, `egraph_costs`, `graph_cost`), and `measure(...)` for one configuration.

    `measurements` counts the configurations actually timed by this instance (cache misses)."""

    backend = BACKEND
    launch_us = 4.6        # the per-call floor measured here; what an `opaque` node costs

    def __init__(self, cache: CostCache | None = None, repeats: int = 50, warmups: int = 10,
                 threads: int = 1) -> None:
        if repeats < 1 or warmups < 0:
            raise ValueError("repeats must be >= 1 and warmups >= 0")
        super().__init__(cache)
        self.repeats = repeats
        self.warmups = warmups
        self.threads = threads
        self.device = device_fingerprint() + ("" if threads == 1 else f"|{threads} threads")

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        from .onnx_node import one_node_model

        model = one_node_model(op, attrs, input_types, weight_inputs)
        return time_model(model, self.repeats, self.warmups, self.threads)
