"""The `ort` cost backend: time one-node ONNX models with onnxruntime on the CPU.

Settings that measured stable (DESIGN.md section 7): one intra-op and one inter-op thread,
sequential execution, all graph optimizations, activations as graph inputs and weights as
initializers (an all-constant node is folded away), `warmups` runs then the median of `repeats`.

What is timed is what the node costs inside a whole model (checked by `tools/cost_accuracy.py`):
- CPU time of `sess.run` on the calling thread (`CpuTimer`; with one intra-op thread the kernels
  run there), not wall time: on this shared machine short one-node runs mostly catch a free CPU
  while a whole model's run is always descheduled part of the time (2.5x apart at load 5);
- less the NCHWc `ReorderInput`/`ReorderOutput` a lone conv/pool is wrapped in
  (`BOUNDARY_KERNELS`, timed by a profiled twin session): in a model, consecutive NCHWc ops pass
  blocked tensors on and pay these once per run of such ops (up to 20 % of a 1x1 conv);
- weights of `COLD_WEIGHT_BYTES` or more cold, as `copies` side-by-side instances of the node in
  one model (`replicate`) whose weights overflow the LLC, one session floor shared.
- fused activations: a conv2d/matmul `act` is timed fused (onnxruntime fuses Conv+Relu,
  MatMul+activation itself), so the IR's fused form is priced as onnxruntime runs it.

Rules instead of timings (`OrtCostModel.rule_cost`; a cost stays a function of the signature, so
each rule assumes the context the op has in practice; approximations noted):
- `dropout`: 0 (onnxruntime removes it at inference);
- `reshape`: one dispatch (`node_us`): in a model its output aliases the input buffer, while a
  one-node model copies graph input to graph output;
- `relu` on a 4-D tensor: 0: in every CNN of the benchmark set it follows a convolution (directly,
  after a constant batchnorm, or after a residual add), which onnxruntime's NCHWc conv fuses
  (Conv+Relu, Conv+Add+Relu). A 4-D relu after anything else is underpriced by its kernel time;
- `batchnorm` with weight-only parameters on a 4-D tensor: 0: onnxruntime folds it into the
  producing conv's weights and bias (same caveat: a batchnorm not after a conv is underpriced).
Not modelled: onnxruntime also folds a transpose into a following MatMul (FusedMatMul
transA/transB/transBatch) and a MatMul+Add into Gemm; which transposes fold depends on the
consumer, so transposes are timed (about 1 % of BERT).

Results go to a `CostCache` keyed by (backend "ort", device fingerprint incl. `METHOD`, op,
attributes, input types and which operands are weights); a second request for the same
configuration measures nothing. Only one process profiles at a time: measuring holds an exclusive
file lock next to the database (`measured.py`). Operands that are weight-only
(`OpSignature.const_inputs`) become initializers of the one-node model.
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
from .measured import MeasuredCostModel, profiling_lock

if TYPE_CHECKING:       # onnx is imported on first measurement: a cached run never loads it
    import onnx

BACKEND = "ort"


def time_model(model: "onnx.ModelProto | Sequence[onnx.ModelProto]", repeats: int = 50,
               warmups: int = 10, threads: int = 1) -> float:
    """Median CPU µs of one `sess.run` (`CpuTimer`, boundary reorders included). Several models
    (the same node with different weights) are run round-robin on the same inputs, so each run
    finds its weights evicted from the cache, as in a whole model whose weights exceed it."""
    models = [model] if not isinstance(model, (list, tuple)) else list(model)
    timer = CpuTimer(models, threads, boundary=False)
    skip = max(1, warmups)
    for _ in range(skip + repeats):
        timer.run()
    return timer.median(skip)


#: Kernels a one-node model runs only because it is alone: the NCHWc layout conversions at its
#: boundary. In a whole model consecutive NCHWc convs/pools hand blocked tensors to each other and
#: pay these once at the edges of a run of such ops, not once per op.
BOUNDARY_KERNELS = frozenset({"ReorderInput", "ReorderOutput"})


def _session(model: "onnx.ModelProto | str", threads: int = 1, profile_prefix: str = ""):
    """A CPU session with the backend's settings (`runtime.session_options`), from a model or a
    file path, optionally profiled."""
    import onnxruntime as ort

    from ..runtime import session_options

    so = session_options(threads)
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    src = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


class CpuTimer:
    """Runs `sess.run` of one or more models (round-robin, as `time_model`) and records each run's
    CPU time on the calling thread, in µs: with one intra-op thread onnxruntime executes the
    kernels on the caller's thread, so time the process spends descheduled by other processes'
    load (this machine's vCPUs are shared) is not counted, only the work of the run.

    Where onnxruntime wraps a one-node model in `BOUNDARY_KERNELS`, a profiled twin session of the
    first model is run beside it and `boundary_us()` gives their median duration, which a node
    inside a whole model does not pay. Separate `run()` calls let a caller interleave timers (the
    accuracy check alternates one-node runs with whole-model runs)."""

    def __init__(self, models: "Sequence[onnx.ModelProto] | Sequence[str]", threads: int = 1,
                 feed: "Mapping[str, Any] | None" = None, boundary: bool = True) -> None:
        from .onnx_node import random_inputs

        self.sessions = [_session(m, threads) for m in models]
        self.feed = dict(feed) if feed is not None else random_inputs(models[0])
        self.times: list[float] = []
        self._dir: tempfile.TemporaryDirectory | None = None
        self._prof = None
        if boundary and not isinstance(models[0], str) and \
                BOUNDARY_KERNELS & set(optimized_op_types(models[0])):
            self._dir = tempfile.TemporaryDirectory(prefix="eqsat-nb-prof-")
            self._prof = _session(models[0], threads, os.path.join(self._dir.name, "p"))

    def run(self, burst: int = 1) -> None:
        """`burst` runs back to back, the last one recorded (the earlier ones bring the session's
        state back into the caches after other work, as in a loop of inferences)."""
        sess = self.sessions[len(self.times) % len(self.sessions)]
        for _ in range(burst - 1):
            sess.run(None, self.feed)
        t0 = time.thread_time_ns()
        sess.run(None, self.feed)
        self.times.append((time.thread_time_ns() - t0) / 1000.0)
        if self._prof is not None:
            self._prof.run(None, self.feed)

    def median(self, skip: int = 0) -> float:
        """Median CPU µs of the runs after the first `skip`."""
        return statistics.median(self.times[skip:])

    def boundary_us(self, skip: int = 0) -> float:
        """Median µs per run of the boundary reorders (0 without them); ends profiling."""
        if self._prof is None or self._dir is None:
            return 0.0
        import json

        with open(self._prof.end_profiling()) as f:
            events = json.load(f)
        self._prof = None
        runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                      if e.get("cat") == "Session" and e.get("name") == "model_run")
        sums = [0.0] * len(runs)
        for e in events:
            if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and \
                    e.get("args", {}).get("op_name") in BOUNDARY_KERNELS:
                for i, (t0, t1) in enumerate(runs):
                    if t0 <= e["ts"] <= t1:
                        sums[i] += e["dur"]
                        break
        self._dir.cleanup()
        return statistics.median(sums[skip:]) if sums[skip:] else 0.0


def time_node(models: "Sequence[onnx.ModelProto]", repeats: int = 50, warmups: int = 10,
              threads: int = 1) -> float:
    """Median CPU µs of one run of `models` (round-robin) less their boundary reorders."""
    timer = CpuTimer(models, threads)
    skip = max(1, warmups)
    for _ in range(skip + repeats):
        timer.run()
    return max(timer.median(skip) - timer.boundary_us(skip), 0.0)


def replicate(models: "Sequence[onnx.ModelProto]") -> "onnx.ModelProto":
    """One model running every model of `models` (one-node models of the same node with different
    weights) side by side on the same graph inputs: their nodes, initializers and outputs renamed
    apart. One run reads every copy's weights once, like a whole model whose weights exceed the
    last-level cache, with one session's overhead (rotating over separate sessions made the
    sessions' own state cold as well and measured up to 3x what the node costs in a model)."""
    from onnx import helper

    first = models[0]
    shared = {i.name for i in first.graph.input}
    nodes, inits, outputs = [], [], []
    for k, m in enumerate(models):
        def ren(x: str) -> str:
            return x if (not x or x in shared) else f"{x}_r{k}"
        for n in m.graph.node:
            n2 = helper.make_node(n.op_type, [ren(x) for x in n.input],
                                  [ren(x) for x in n.output], domain=n.domain)
            n2.attribute.extend(n.attribute)
            nodes.append(n2)
        for t in m.graph.initializer:
            t2 = type(t)()
            t2.CopyFrom(t)
            t2.name = ren(t.name)
            inits.append(t2)
        for o in m.graph.output:
            o2 = type(o)()
            o2.CopyFrom(o)
            o2.name = ren(o.name)
            outputs.append(o2)
    g = helper.make_graph(nodes, first.graph.name + "_x" + str(len(models)),
                          list(first.graph.input), outputs, initializer=inits)
    return helper.make_model(g, opset_imports=list(first.opset_import),
                             ir_version=first.ir_version, producer_name="eqsat-nb")


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

    `measure` returns the CPU time of one `sess.run` of the one-node model (boundary reorders out;
    for cold weights one floor plus a `copies`-th of a replicated run). `cost` is what the node adds
    to a whole model's run (`net_cost`): the measurement less the session floor (`floor_us`: what
    `sess.run` costs beyond its kernels, paid once per inference), at least `node_us` (the
    in-graph dispatch of one more node); or the `rule_cost` where one-node timing would mislead.
    Both overheads are measured once per device (chains of 1 and 33 one-element Adds) and cached.
    A whole model's predicted latency is `graph_cost(model, g) + floor_us`.

    Weights larger than `COLD_WEIGHT_BYTES` are measured cold (`node_model`): in a whole model
    every weight is read once per inference and, with the models' tens to hundreds of MB of
    weights, comes from DRAM; activations stay warm (just written by the producer).

    `measurements` counts the configurations actually timed by this instance (cache misses)."""

    backend = BACKEND
    launch_us = 4.6        # the per-call floor measured here; what an `opaque` node costs
    METHOD = "m3"          # measurement method (CPU time, reorders, replicas): in the key
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

    def node_model(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
                   weight_inputs: set[int]) -> "tuple[onnx.ModelProto, int]":
        """(the model a measurement runs, how many copies of the node it holds): the one-node
        model, or for cold weights `copies` instances of the node side by side, each with its own
        weights, all reading the same activations (`replicate`)."""
        from .onnx_node import one_node_model

        k = self.copies(input_types, weight_inputs)
        models = [one_node_model(op, attrs, input_types, weight_inputs, seed=i, check=i == 0)
                  for i in range(k)]
        return (models[0] if k == 1 else replicate(models)), k

    def per_node(self, run_us: float, k: int) -> float:
        """One node's run time from a run of `k` side-by-side copies: one session floor plus a
        k-th of the rest."""
        if k == 1:
            return run_us
        floor = self._overheads()[0]
        return floor + max(run_us - floor, 0.0) / k

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        model, k = self.node_model(op, attrs, input_types, weight_inputs)
        return self.per_node(time_node([model], self.repeats, self.warmups, self.threads), k)

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

    def rule_cost(self, sig: OpSignature) -> float | None:
        """The cost of ops whose one-node timing is not what a whole model executes for them
        (None: measure). A function of the signature only, so each rule assumes the context the
        op has in practice; see the module docstring for each rule and its approximation."""
        op = sig.op
        if op == "dropout":
            return 0.0                      # removed by onnxruntime's graph optimizer
        if op == "reshape":
            return self.node_us             # output aliases the input buffer: a dispatch
        if len(sig.inputs[0].shape) == 4:
            if op == "relu":
                return 0.0                  # fused into the producing NCHWc conv (or conv+add)
            if op == "batchnorm" and set(sig.const_inputs) >= {1, 2, 3, 4}:
                return 0.0                  # folded into the producing conv's weights and bias
        return None

    def net_cost(self, run_us: float) -> float:
        """What a node whose one-node run takes `run_us` adds to a whole model's run: less the
        session floor, at least one in-graph dispatch."""
        floor, node = self._overheads()
        return max(run_us - floor, node)

    def _cost(self, sig: OpSignature) -> float:
        rule = self.rule_cost(sig)
        if rule is not None:
            return rule
        return self.net_cost(self.measure(sig.op, sig.attrs, sig.inputs, sig.const_inputs))
