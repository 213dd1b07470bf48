"""The `ort` cost backend: time one-node ONNX models with onnxruntime on the CPU.

Settings that measured stable (DESIGN.md section 7): one intra-op and one inter-op thread,
sequential execution, all graph optimizations, activations as graph inputs and weights as
initializers (an all-constant node is folded away), `warmups` runs then the median of `repeats`
timed `sess.run` calls. What is timed is what a real run executes: onnxruntime may fuse Conv+Relu
or wrap convs/pools in NCHWc reorders (`optimized_op_types` shows the executed graph).

Results go to a `CostCache` keyed by (backend "ort", device fingerprint, op, attributes, input
types and which operands are weights); a second request for the same configuration measures
nothing. Only one process profiles at a time: measuring holds an exclusive file lock next to the
database.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import onnx

from ..ir.graph import TensorType
from ..ir.ops import normalize_attrs, op_def
from .db import CostCache, canonical_json, default_path, device_fingerprint
from .onnx_node import make_session, one_node_model, random_inputs

BACKEND = "ort"


@contextlib.contextmanager
def profiling_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock: never two profiling processes at once (no-op without fcntl)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def signature_key(op: str, attrs: Mapping[str, Any] | Iterable[tuple[str, Any]],
                  input_types: Sequence[TensorType], weight_inputs: set[int] | None
                  ) -> tuple[dict[str, Any], list[list[Any]]]:
    """(attributes with defaults filled, [[shape, dtype, 'w'|'a'] per operand]) for the cache."""
    norm = dict(normalize_attrs(op_def(op), dict(attrs)))
    weights = set(weight_inputs or ())
    shapes = [[list(t.shape), t.dtype, "w" if i in weights else "a"]
              for i, t in enumerate(input_types)]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in norm.items()}, shapes


def time_model(model: onnx.ModelProto, repeats: int = 50, warmups: int = 10,
               threads: int = 1) -> float:
    """Median wall time of one `sess.run` of `model`, in microseconds."""
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


class OrtCostModel:
    """Measured CPU costs (µs) of single operators, cached in a `CostCache`.

    `measurements` counts the configurations actually timed by this instance (cache misses)."""

    backend = BACKEND

    def __init__(self, cache: CostCache | None = None, repeats: int = 50, warmups: int = 10,
                 threads: int = 1) -> None:
        if repeats < 1 or warmups < 0:
            raise ValueError("repeats must be >= 1 and warmups >= 0")
        self.cache = cache
        self.repeats = repeats
        self.warmups = warmups
        self.threads = threads
        self.device = device_fingerprint() + ("" if threads == 1 else f"|{threads} threads")
        self.measurements = 0
        self._memo: dict[tuple[str, str, str], float] = {}

    def _lock_path(self) -> Path:
        db = self.cache.path if self.cache is not None else default_path()
        return db.with_name(db.name + ".profile.lock")

    def measure(self, op: str, attrs: Mapping[str, Any] | Iterable[tuple[str, Any]],
                input_types: Sequence[TensorType], weight_inputs: set[int] | None = None) -> float:
        """Median microseconds of `op(inputs) {attrs}` on this CPU (from the cache when known)."""
        attrs_k, shapes_k = signature_key(op, attrs, input_types, weight_inputs)
        key = (BACKEND, self.device, op, attrs_k, shapes_k)
        memo_key = (op, canonical_json(attrs_k), canonical_json(shapes_k))
        if memo_key in self._memo:
            return self._memo[memo_key]
        if self.cache is not None:
            hit = self.cache.get(*key)
            if hit is not None:
                self._memo[memo_key] = hit
                return hit
        model = one_node_model(op, attrs, input_types, weight_inputs)
        with profiling_lock(self._lock_path()):
            hit = self.cache.get(*key) if self.cache is not None else None   # measured meanwhile?
            if hit is None:
                hit = time_model(model, self.repeats, self.warmups, self.threads)
                self.measurements += 1
                if self.cache is not None:
                    self.cache.put(*key, hit)
        self._memo[memo_key] = hit
        return hit
