"""Common ground of the measuring backends (`ort`, `trt`, `torch`): a `CostModel` whose `_cost`
times one operator on a real runtime, backed by the SQLite `CostCache`.

Each backend has its own name and device fingerprint in the cache key, so CPU and GPU numbers
never mix. Measuring holds an exclusive file lock next to the database (never two profiling
processes at once: they would disturb each other's timings). `measurements` counts the
configurations this instance actually timed (cache misses); `on_measure`, when set, is called
after each one (the progress bar of `eqsat-nb profile`).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..errors import TirError
from ..ir.graph import TensorType
from ..ir.ops import normalize_attrs, op_def
from .db import CostCache, canonical_json, default_path
from .model import CostModel, OpSignature


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
                  input_types: Sequence[TensorType], weight_inputs: Iterable[int] | None
                  ) -> tuple[dict[str, Any], list[list[Any]]]:
    """(attributes with defaults filled, [[shape, dtype, 'w'|'a'] per operand]) for the cache."""
    norm = dict(normalize_attrs(op_def(op), dict(attrs)))
    weights = set(weight_inputs or ())
    shapes = [[list(t.shape), t.dtype, "w" if i in weights else "a"]
              for i, t in enumerate(input_types)]
    return {k: list(v) if isinstance(v, tuple) else v for k, v in norm.items()}, shapes


class MeasuredCostModel(CostModel):
    """A `CostModel` that times operators; subclasses set `backend`, `device` and implement
    `_time(op, attrs, input_types, weight_inputs) -> microseconds`."""

    backend = "measured"

    def __init__(self, cache: CostCache | None = None) -> None:
        super().__init__()
        self.cache = cache
        self.device = "unknown"
        self.measurements = 0
        self.cache_hits = 0
        self.on_measure: Callable[[str, float], None] | None = None
        self._times: dict[tuple[str, str, str], float] = {}

    @property
    def name(self) -> str:   # type: ignore[override]
        return self.backend

    def _lock_path(self) -> Path:
        db = self.cache.path if self.cache is not None else default_path()
        return db.with_name(db.name + ".profile.lock")

    def _time(self, op: str, attrs: Mapping[str, Any], input_types: Sequence[TensorType],
              weight_inputs: set[int]) -> float:
        raise NotImplementedError

    def known(self, sig: OpSignature) -> bool:
        """Whether `sig` is priced without timing anything (memo or cache)."""
        if sig in self._memo or sig.op in ("lit", "input", "weight", "noop", "proj", "opaque"):
            return True
        attrs_k, shapes_k = signature_key(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
        if (sig.op, canonical_json(attrs_k), canonical_json(shapes_k)) in self._times:
            return True
        return self.cache is not None and \
            self.cache.get(self.backend, self.device, sig.op, attrs_k, shapes_k) is not None

    def measure(self, op: str, attrs: Mapping[str, Any] | Iterable[tuple[str, Any]],
                input_types: Sequence[TensorType], weight_inputs: Iterable[int] | None = None
                ) -> float:
        """Median microseconds of `op(inputs) {attrs}` on this device (from the cache when
        known); operands in `weight_inputs` are weights (initializers), the others inputs."""
        weights = set(weight_inputs or ())
        attrs_k, shapes_k = signature_key(op, attrs, input_types, weights)
        key = (self.backend, self.device, op, attrs_k, shapes_k)
        memo_key = (op, canonical_json(attrs_k), canonical_json(shapes_k))
        got = self._times.get(memo_key)
        if got is not None:
            return got
        got = self.cache.get(*key) if self.cache is not None else None
        if got is None:
            with profiling_lock(self._lock_path()):
                got = self.cache.get(*key) if self.cache is not None else None  # meanwhile?
                if got is None:
                    try:
                        got = float(self._time(op, dict(normalize_attrs(op_def(op), dict(attrs))),
                                               list(input_types), weights))
                    except (NotImplementedError, TirError):
                        raise
                    except Exception as e:   # a runtime refusing a configuration
                        shapes = ", ".join(f"{t}" for t in input_types)
                        raise TirError(f"{self.backend}: cannot time {op}({shapes}): "
                                       f"{type(e).__name__}: {e}") from None
                    self.measurements += 1
                    if self.cache is not None:
                        self.cache.put(*key, got)
                    if self.on_measure is not None:
                        self.on_measure(op, got)
                else:
                    self.cache_hits += 1
        else:
            self.cache_hits += 1
        self._times[memo_key] = got
        return got

    def _cost(self, sig: OpSignature) -> float:
        return self.measure(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
