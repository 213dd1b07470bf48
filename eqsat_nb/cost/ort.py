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
from .model import OpSignature
from .measured import MeasuredCostModel, profiling_lock, signature_key  # noqa: F401 (re-export)

if TYPE_CHECKING:       # onnx is imported on first measurement: a cached run never loads it
    import onnx

BACKEND = "ort"


def time_model(model: "onnx.ModelProto | Sequence[onnx.ModelProto]", repeats: int = 50,
               warmups: int = 10, threads: int = 1) -> float:
    """Median wall time of one `sess.run`, in microseconds. Several models (the same node with
    different weights) are run round-robin on the same inputs, so each run finds its weights
    evicted from the cache, as in a whole model whose weights exceed it."""
    from .onnx_node import make_session, random_inputs

    models = [model] if not isinstance(model, (list, tuple)) else list(model)
    sessions = [make_session(m, threads=threads) for m in models]
    feed = random_inputs(models[0])
    for _ in range(max(1, warmups // len(sessions))):
        for sess in sessions:
            sess.run(None, feed)
    times = []
    clock = time.perf_counter_ns
    for i in range(repeats):
        sess = sessions[i % len(sessions)]
        t0 = clock()
        sess.run(None, feed)
        times.append(clock() - t0)
    return statistics.median(times) / 1000.0


def _chain_model(length: int) -> "onnx.ModelProto":
    """`length` Adds of a one-element tensor in a chain: what a run costs beyond its kernels."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i}", "x"],
                              ["y" if i == length - 1 else f"t{i + 1}"]) for i in range(length)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    from .onnx_node import IR_VERSION, OPSET
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)


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

    `measure` returns what one `sess.run` of the one-node model takes. `cost` is what the node
    adds to a whole model's run: the measurement less the session floor (`floor_us`: what
    `sess.run` costs beyond its kernels: Python binding, input/output handling, executor setup,
    paid once per inference, not once per node), and at least `node_us` (the in-graph dispatch of
    one more node). Both are measured once per device (a chain of 1 and of 33 one-element Adds)
    and cached. A whole model's predicted latency is `graph_cost(model, g) + floor_us`.

    Weights larger than `COLD_WEIGHT_BYTES` are measured cold: the node is timed round-robin over
    enough copies with different weights to overflow the last-level cache (`LLC_BYTES`), because
    in a whole model every weight is read once per inference and, with the models' tens to
    hundreds of MB of weights, comes from DRAM; activations stay warm (just written by the
    producer), as in the whole model.

    `measurements` counts the configurations actually timed by this instance (cache misses)."""

    backend = BACKEND
    launch_us = 4.6        # the per-call floor measured here; what an `opaque` node costs
    METHOD = "m2"          # measurement method version (cold weights, floor): part of the key
    COLD_WEIGHT_BYTES = 256 << 10
    LLC_BYTES = 32 << 20
    MAX_COPIES = 64

    def __init__(self, cache: CostCache | None = None, repeats: int = 50, warmups: int = 10,
                 threads: int = 1) -> None:
        if repeats < 1 or warmups < 0:
            raise ValueError("repeats must be >= 1 and warmups >= 0")
        super().__init__(cache)
        self.repeats = repeats
        self.warmups = warmups
        self.threads = threads
        self.device = (device_fingerprint() + ("" if threads == 1 else f"|{threads} threads")
                       + f"|{self.METHOD}")
        self._floor: tuple[float, float] | None = None

    def copies(self, input_types: Sequence[TensorType], weight_inputs: set[int]) -> int:
        """How many weight copies a cold-weight measurement rotates over (1: warm is right)."""
        from .analytic import ITEMSIZE
        wbytes = sum(input_types[i].numel * ITEMSIZE.get(input_types[i].dtype, 4)
                     for i in weight_inputs)
        if wbytes < self.COLD_WEIGHT_BYTES:
            return 1
        return max(1, min(self.MAX_COPIES, -(-2 * self.LLC_BYTES // wbytes)))

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        from .onnx_node import one_node_model

        k = self.copies(input_types, weight_inputs)
        models = [one_node_model(op, attrs, input_types, weight_inputs, seed=i, check=i == 0)
                  for i in range(k)]
        return time_model(models, self.repeats, self.warmups, self.threads)

    def _overheads(self) -> tuple[float, float]:
        """(floor_us, node_us), measured once per device and cached."""
        if self._floor is None:
            keys = [(self.backend, self.device, "__overhead__", {"what": w}, [])
                    for w in ("floor", "node")]
            got = self.cache.get(*keys[0]) if self.cache is not None else None
            node = self.cache.get(*keys[1]) if self.cache is not None else None
            if got is None or node is None:
                with profiling_lock(self._lock_path()):
                    reps = max(self.repeats, 50)
                    t1 = time_model(_chain_model(1), reps, self.warmups, self.threads)
                    t33 = time_model(_chain_model(33), reps, self.warmups, self.threads)
                    node = max((t33 - t1) / 32, 0.0)
                    got = max(t1 - node, 0.0)
                    if self.cache is not None:
                        self.cache.put_many([(keys[0], got), (keys[1], node)])
            self._floor = (got, node)
        return self._floor

    @property
    def floor_us(self) -> float:
        """What one `sess.run` costs beyond its kernels (paid once per inference)."""
        return self._overheads()[0]

    @property
    def node_us(self) -> float:
        """What one more (trivial) node adds to a run."""
        return self._overheads()[1]

    def _cost(self, sig: OpSignature) -> float:
        raw = self.measure(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
        floor, node = self._overheads()
        return max(raw - floor, node)
