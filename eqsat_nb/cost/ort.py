"""The `ort` cost backend: time one-node ONNX models with onnxruntime on the CPU.

Settings that measured stable (DESIGN.md section 7): one intra-op and one inter-op thread,
sequential execution, all graph optimizations, activations as graph inputs and weights as
initializers (an all-constant node is folded away), `warmups` runs then the median of `repeats`.

What is timed is what the node costs inside a whole model (checked by `tools/cost_accuracy.py`):
- the node's own kernels, as onnxruntime's profiler times them (`KernelTimer`), not the whole
  `sess.run` of the one-node model: a whole model runs its kernels nearly back to back (its
  CPU time is within ~2 % of the sum of its profiled kernels), while a one-node run adds the copy
  of its graph output and the session floor; less the profiler's own time inside each kernel
  event (`OrtCostModel.event_us`, ~3.3 µs here: most of a small elementwise op's event);
- without the NCHWc `ReorderInput`/`ReorderOutput` a lone conv/pool is wrapped in
  (`BOUNDARY_KERNELS`): in a model, consecutive NCHWc ops pass blocked tensors on and pay these
  once per run of such ops (up to 2x the conv itself for a depthwise conv);
- less the time a run was descheduled (wall `model_run` beyond the thread CPU time of `sess.run`;
  with one intra-op thread the kernels run on the calling thread): on this shared machine a long
  kernel's wall time includes other processes' turns, which the whole model's CPU time does not;
- weights of `COLD_WEIGHT_BYTES` or more cold, as `copies` side-by-side instances of the node in
  one model (`replicate`) whose weights overflow the LLC, a `copies`-th of their kernels (their
  outputs joined by one uncounted Concat, so they are intermediates as in a model);
- in the exporter's opset (`ir.opaque.DEFAULT_OPSET`, 21), not the builder's default 17:
  onnxruntime 1.31 has a different AveragePool kernel from opset 19 (dilations), 5x slower on
  squeezenet's 13x13 global pool (491 vs 95 µs), and the whole model is exported in opset 21;
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
transA/transB/transBatch) and a MatMul+Add(+Relu/Sigmoid) into a FusedGemm; which ones fold
depends on the neighbours, so transposes, adds and activations are timed (about 1 % of BERT; 40
of nasrnn's 55 adds and 30 of its 35 relus/sigmoids fold, ~1 µs each once profiler time is out).
Still not modelled: kernels in a whole model find their inputs and weights in colder caches than
repeated one-node runs (a whole small CNN's convs profile ~3-4 % slower than their one-node
twins, more under co-runners' load on the shared L3), so sums run a few % under end to end.

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


def time_model(model: "onnx.ModelProto", repeats: int = 50, warmups: int = 10,
               threads: int = 1) -> float:
    """Median CPU µs of one whole `sess.run` of `model` (`CpuTimer`)."""
    timer = CpuTimer([model], threads)
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
    """Runs `sess.run` of one or more models (round-robin) and records each run's CPU time on the
    calling thread, in µs: with one intra-op thread onnxruntime executes the kernels on the
    caller's thread, so time the process spends descheduled by other processes' load (this
    machine's vCPUs are shared) is not counted, only the work of the run. Times whole models and
    the overhead chains; separate `run()` calls let a caller interleave timers (the accuracy check
    alternates one-node runs with whole-model runs)."""

    def __init__(self, models: "Sequence[onnx.ModelProto] | Sequence[str]", threads: int = 1,
                 feed: "Mapping[str, Any] | None" = None) -> None:
        from .onnx_node import random_inputs

        self.sessions = [_session(m, threads) for m in models]
        self.feed = dict(feed) if feed is not None else random_inputs(models[0])
        self.times: list[float] = []

    def run(self, burst: int = 1) -> None:
        """`burst` runs back to back, the last one recorded (the earlier ones bring the session's
        state back into the caches after other work, as in a loop of inferences)."""
        sess = self.sessions[len(self.times) % len(self.sessions)]
        for _ in range(burst - 1):
            sess.run(None, self.feed)
        t0 = time.thread_time_ns()
        sess.run(None, self.feed)
        self.times.append((time.thread_time_ns() - t0) / 1000.0)

    def median(self, skip: int = 0) -> float:
        """Median CPU µs of the runs after the first `skip`."""
        return statistics.median(self.times[skip:])


class KernelTimer:
    """The node's own kernel time in a one-node model, from onnxruntime's profiler: per recorded
    run, the durations of its kernels other than `BOUNDARY_KERNELS` (and `JOIN_NODE`), less the
    time the run was descheduled (its wall `model_run` beyond the thread CPU time of `sess.run`,
    so that a long kernel that shared the CPU is not overpriced), and less `event_us` per kernel:
    the profiler's own work inside each kernel event (recording shapes and sizes), ~4 µs here,
    which made the profiled kernels of a chain of 33 one-element Adds 4.6x its unprofiled run and
    nasrnn's 150 small ops ~15 % too dear (`OrtCostModel.event_us`, measured per device).

    Why kernels and not the CPU time of the whole `sess.run` less the boundary reorders (method
    m3): what `sess.run` adds beyond the kernels of a one-node model (copying the graph output out,
    the session floor) is not in a whole model, and the reorders, timed in a separate profiled
    session, measured up to 2.5x what they cost in the timed session (its buffers were cold), so
    many depthwise convs came out at 0 and mobilenetv2's sum at 58 % of its run. The profiled
    node kernels of a one-node model match the same kernels in a whole-model profile within a few
    % (`tools/cost_accuracy.py`)."""

    def __init__(self, model: "onnx.ModelProto", threads: int = 1,
                 feed: "Mapping[str, Any] | None" = None, event_us: float = 0.0) -> None:
        from .onnx_node import random_inputs

        self.event_us = event_us            # the profiler's own time inside each kernel event
        self._dir = tempfile.TemporaryDirectory(prefix="eqsat-nb-prof-")
        self.session = _session(model, threads, os.path.join(self._dir.name, "p"))
        self.feed = dict(feed) if feed is not None else random_inputs(model)
        self.times: list[float] = []        # CPU µs of each recorded run
        self._runs = 0                      # runs so far, recorded or not
        self._recorded: list[int] = []      # index of each recorded run among all runs
        self._kernels: list[float] | None = None

    def run(self, burst: int = 1) -> None:
        """`burst` runs back to back, the last one recorded (as `CpuTimer.run`)."""
        for _ in range(burst - 1):
            self.session.run(None, self.feed)
        t0 = time.thread_time_ns()
        self.session.run(None, self.feed)
        self.times.append((time.thread_time_ns() - t0) / 1000.0)
        self._runs += burst
        self._recorded.append(self._runs - 1)

    def kernels(self) -> list[float]:
        """µs of the node's kernels in each recorded run, descheduled time out; ends profiling."""
        if self._kernels is None:
            import bisect
            import json

            with open(self.session.end_profiling()) as f:
                events = json.load(f)
            self._dir.cleanup()
            runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                          if e.get("cat") == "Session" and e.get("name") == "model_run")
            starts = [t0 for t0, _ in runs]
            per_run = [0.0] * len(runs)
            for e in events:
                if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time") and \
                        e.get("args", {}).get("op_name") not in BOUNDARY_KERNELS and \
                        e["name"] != JOIN_NODE + "_kernel_time":
                    i = bisect.bisect_right(starts, e["ts"]) - 1
                    if i >= 0 and e["ts"] <= runs[i][1]:
                        per_run[i] += max(e["dur"] - self.event_us, 0.0)
            self._kernels = []
            for i, cpu in zip(self._recorded, self.times):
                if i < len(runs):
                    wall = runs[i][1] - runs[i][0]
                    self._kernels.append(max(per_run[i] - max(wall - cpu, 0.0), 0.0))
        return self._kernels

    def median(self, skip: int = 0) -> float:
        """Median µs of the node's kernels over the recorded runs after the first `skip`."""
        got = self.kernels()[skip:]
        return statistics.median(got) if got else 0.0


def time_node(model: "onnx.ModelProto", repeats: int = 50, warmups: int = 10,
              threads: int = 1, event_us: float = 0.0) -> float:
    """Median µs of the node kernels of a one-node `model` (`KernelTimer`)."""
    timer = KernelTimer(model, threads, event_us=event_us)
    skip = max(1, warmups)
    for _ in range(skip + repeats):
        timer.run()
    return timer.median(skip)


#: The node `replicate` adds to join the copies' outputs; not part of what is priced.
JOIN_NODE = "eqsat_nb_join"


def replicate(models: "Sequence[onnx.ModelProto]") -> "onnx.ModelProto":
    """One model running every model of `models` (one-node models of the same node with different
    weights) side by side on the same graph inputs: their nodes, initializers and outputs renamed
    apart. One run reads every copy's weights once, like a whole model whose weights exceed the
    last-level cache, with one session's overhead (rotating over separate sessions made the
    sessions' own state cold as well and measured up to 3x what the node costs in a model).

    The copies' first outputs are joined by one Concat (`JOIN_NODE`, axis 0, its kernel not
    counted), so they are intermediates from the session's planned buffers as in a whole model,
    not graph outputs allocated per run (which cost nasrnn's 55 µs GEMVs ~8 % more)."""
    from onnx import helper

    first = models[0]
    shared = {i.name for i in first.graph.input}
    nodes, inits, outputs, joined = [], [], [], []
    join = len(first.graph.output[0].type.tensor_type.shape.dim) > 0
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
        for j, o in enumerate(m.graph.output):
            if join and j == 0:
                joined.append(ren(o.name))
                continue
            o2 = type(o)()
            o2.CopyFrom(o)
            o2.name = ren(o.name)
            outputs.append(o2)
    if join:
        nodes.append(helper.make_node("Concat", joined, [JOIN_NODE], axis=0, name=JOIN_NODE))
        t = first.graph.output[0].type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        outputs.insert(0, helper.make_tensor_value_info(
            JOIN_NODE, t.elem_type, [dims[0] * len(models)] + dims[1:]))
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


CHAIN_EVENTS = 33       # kernels of the chain that calibrates `OrtCostModel.event_us`


def chain_event_us(repeats: int = 50, warmups: int = 10, threads: int = 1) -> float:
    """Median profiled µs per kernel of a chain of `CHAIN_EVENTS` one-element Adds."""
    return time_node(_chain_model(CHAIN_EVENTS), repeats, warmups, threads) / CHAIN_EVENTS


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

    `measure` returns the median time of the node's kernels in its one-node model (`KernelTimer`:
    onnxruntime's profiler, boundary reorders, descheduled time and the profiler's own `event_us`
    per kernel out; for cold weights a `copies`-th of the replicas' kernels). `cost` is what the node adds to a whole model's run
    (`net_cost`): the kernels plus `node_us` (the in-graph dispatch of one more node); or the
    `rule_cost` where one-node timing would mislead. `floor_us` is what `sess.run` costs beyond
    its kernels, paid once per inference. Both overheads are measured once per device (CPU time
    of chains of 1 and 33 one-element Adds) and cached. A whole model's predicted latency is
    `graph_cost(model, g) + floor_us`.

    Weights larger than `COLD_WEIGHT_BYTES` are measured cold (`node_model`): in a whole model
    every weight is read once per inference and, with the models' tens to hundreds of MB of
    weights, comes from DRAM; activations stay warm (just written by the producer).

    `measurements` counts the configurations actually timed by this instance (cache misses)."""

    backend = BACKEND
    launch_us = 4.6        # the per-call floor measured here; what an `opaque` node costs
    METHOD = "m7"          # measurement method (profiled kernels less profiler time, opset,
    #                        joined replicas): part of the cache key
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
        self._event_us: float | None = None

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
        weights, all reading the same activations (`replicate`). In the opset the project's
        exporter writes (`DEFAULT_OPSET`), so that onnxruntime picks the kernel versions a whole
        exported model runs: its AveragePool from opset 19 is ~5x slower than before."""
        from ..ir.opaque import DEFAULT_OPSET
        from .onnx_node import one_node_model

        k = self.copies(input_types, weight_inputs)
        models = [one_node_model(op, attrs, input_types, weight_inputs, seed=i, check=i == 0,
                                 opset=DEFAULT_OPSET) for i in range(k)]
        return (models[0] if k == 1 else replicate(models)), k

    @staticmethod
    def per_node(kernel_us: float, k: int) -> float:
        """One node's kernel time from the kernels of `k` side-by-side copies."""
        return kernel_us / k

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        model, k = self.node_model(op, attrs, input_types, weight_inputs)
        return self.per_node(time_node(model, self.repeats, self.warmups, self.threads,
                                       self._event_locked()), k)

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
    def event_us(self) -> float:
        """The profiler's own µs inside one kernel event (`KernelTimer`): the median profiled
        kernel of a chain of 33 one-element Adds (whose own work is a fraction of a µs), measured
        once per device and cached."""
        if self._event_us is None:
            with profiling_lock(self._lock_path()):
                self._event_locked()
        return self._event_locked()

    def _event_locked(self) -> float:
        """`event_us` for a caller holding the profiling lock (`_time`: flock is not re-entrant)."""
        if self._event_us is None:
            key = (self.backend, self.device, "__overhead__", {"what": "profiler event"}, [])
            got = self.cache.get(*key) if self.cache is not None else None
            if got is None:
                got = chain_event_us(max(self.repeats, 50), self.warmups, self.threads)
                if self.cache is not None:
                    self.cache.put(*key, got)
            self._event_us = got
        return self._event_us

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

    def net_cost(self, kernel_us: float) -> float:
        """What a node whose kernels take `kernel_us` adds to a whole model's run: those plus one
        in-graph dispatch."""
        return kernel_us + self._overheads()[1]

    def _cost(self, sig: OpSignature) -> float:
        rule = self.rule_cost(sig)
        if rule is not None:
            return rule
        return self.net_cost(self.measure(sig.op, sig.attrs, sig.inputs, sig.const_inputs))
