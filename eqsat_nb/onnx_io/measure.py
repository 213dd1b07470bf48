"""Is the optimized ONNX model faster? Timed end to end in onnxruntime, never assumed.

The sum of per-operator costs is not a model's time (X-RLflow's lesson; onnxruntime fuses,
reorders layouts and plans memory across nodes), so before an optimized model replaces the input
both run on the same inputs, alternating A/B and B/A so that drift and frequency changes hit both
alike, at one thread and at onnxruntime's default thread count. The verdict uses the per-round
ratios: their median must clear the spread of the ratios themselves.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir.opaque import ONNX_TO_DTYPE, NP_DTYPES
from ..ir.tensors import as_dtype

MIN_GAIN = 0.01          # a speed-up under 1 % is not worth a changed file
SLOWER_LIMIT = 0.98      # below this (and beyond the noise) a result counts as slower


@dataclass(frozen=True)
class Timing:
    """Medians (ms) of the input and the optimized model at one thread setting."""

    threads: int                  # 0: onnxruntime's default
    before_ms: float
    after_ms: float
    ratio: float                  # median over rounds of before / after (> 1: faster)
    spread: float                 # half the interquartile range of those ratios
    rounds: int

    @property
    def faster(self) -> bool:
        """Faster beyond the measured noise."""
        return self.ratio > 1.0 + max(MIN_GAIN, self.spread)

    @property
    def slower(self) -> bool:
        """Slower beyond the measured noise (and beyond SLOWER_LIMIT)."""
        return self.below(SLOWER_LIMIT)

    def below(self, floor: float) -> bool:
        """Under `floor` of the input's speed, and further from 1 than the measured noise: a
        ratio within the noise of the input's speed is the input's speed."""
        return self.ratio < min(floor, 1.0 - self.spread)

    def describe(self) -> str:
        label = "1 thread" if self.threads == 1 else "default threads"
        return (f"{label}: {self.before_ms:.2f} -> {self.after_ms:.2f} ms, "
                f"x{self.ratio:.3f} (+-{self.spread:.3f}, {self.rounds} rounds)")


def random_feeds(model: Any, dims: Mapping[str, int] | None = None, seed: int = 0,
                 default_dim: int = 1, shapes: Mapping[str, Sequence[int]] | None = None
                 ) -> dict[str, np.ndarray]:
    """Random inputs for every graph input that is not an initializer: `shapes[input]` if
    given, else its declared dims, a symbolic one taking `dims[its name]` or `default_dim`.
    A bf16 input gets float32 values that are bfloat16 numbers (NumPy has no bfloat16,
    ir/bfloat16.py): what the model widened to float32 takes (onnx_io/widen.py)."""
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = list((shapes or {}).get(vi.name, ())) or [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else
            (dims or {}).get(d.dim_param, default_dim) for d in tt.shape.dim]
        ir_type = ONNX_TO_DTYPE.get(tt.elem_type, "f32")
        dtype = NP_DTYPES[ir_type]
        if np.dtype(dtype).kind == "f":
            feeds[vi.name] = as_dtype(rng.standard_normal(shape), ir_type)
        else:                         # ints and bools: 0/1, valid as indices and masks
            feeds[vi.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def cannot_time(model: Any, feeds: Mapping[str, np.ndarray]) -> str | None:
    """Why onnxruntime cannot time `model` on this CPU, None when it can: a model with
    half-precision tensors may have operators onnxruntime's CPU has no kernel for in that type
    (most, in bfloat16), and NumPy cannot feed a bfloat16 input. Other models are not tried
    here (a failure of theirs is an error the caller reports)."""
    from ..precision import onnx_half_types
    from ..runtime import session
    from .ort_errors import ort_located

    from ..errors import RunStopped
    from ..stopping import run_until

    if not onnx_half_types(model):
        return None
    try:
        run_until(session(model), None, feeds, what="onnxruntime's trial run for the timing")
    except RunStopped:
        raise
    except Exception as e:      # noqa: BLE001 - onnxruntime raises its own types
        return f"onnxruntime cannot run the model on this CPU: {ort_located(e)}"
    return None


def _sessions(models: Sequence[Any], threads: int) -> list[Any]:
    from ..runtime import session
    return [session(m, threads=threads) for m in models]


def time_pair(before: Any, after: Any, feeds: Mapping[str, np.ndarray], threads: int = 1,
              budget_s: float = 10.0, min_rounds: int = 5, max_rounds: int = 41,
              deadline: float | None = None) -> Timing:
    """Alternate the two models (A/B, then B/A) until `max_rounds` or the time budget is spent
    (at least `min_rounds`); each sample runs a model enough times to last ~20 ms. Every run
    stops at `deadline` or the enclosing `stopping.time_limit` (work clock): RunStopped, with
    no timing (a model whose single run outlasts the budget cannot be timed)."""
    from ..stopping import Watchdog

    a, b = _sessions([before, after], threads)
    with Watchdog(deadline, "onnxruntime's timing of the input and optimized models") as w:
        return _time_pair(a, b, feeds, threads, budget_s, min_rounds, max_rounds, w.run)


def _time_pair(a: Any, b: Any, feeds: Mapping[str, np.ndarray], threads: int, budget_s: float,
               min_rounds: int, max_rounds: int, run: Any) -> Timing:
    for s in (a, b):                      # warm-up: first runs allocate and pick kernels
        for _ in range(2):
            run(s, None, feeds)
    t = time.perf_counter()
    run(a, None, feeds)
    once = max(time.perf_counter() - t, 1e-5)
    reps = max(1, int(0.02 / once))

    def sample(s: Any) -> float:
        t0 = time.perf_counter()
        for _ in range(reps):
            run(s, None, feeds)
        return (time.perf_counter() - t0) / reps * 1e3

    ta, tb, ratios = [], [], []
    start = time.perf_counter()
    for k in range(max_rounds):
        if k >= min_rounds and time.perf_counter() - start > budget_s:
            break
        if k % 2 == 0:
            x, y = sample(a), sample(b)
        else:
            y, x = sample(b), sample(a)
        ta.append(x)
        tb.append(y)
        ratios.append(x / y)
    q25, q50, q75 = np.percentile(ratios, [25, 50, 75])
    return Timing(threads, float(np.median(ta)), float(np.median(tb)), float(q50),
                  float(q75 - q25) / 2, len(ratios))


@dataclass(frozen=True)
class Guard:
    """The guard's verdict: keep the optimized model or hand back the input."""

    keep: bool
    timings: tuple[Timing, ...]
    reason: str

    def describe(self) -> str:
        return "; ".join(t.describe() for t in self.timings)


def guard(before: Any, after: Any, feeds: Mapping[str, np.ndarray], budget_s: float = 20.0
          ) -> Guard:
    """Time both models at one thread and at the default thread count. The CPU target keeps
    the optimized model only if it is faster beyond the noise at one thread and not slower at
    the default count. (GPU targets are never timed here: `commands.onnx_out`.) Raises
    RunStopped when a run passes the enclosing `stopping.time_limit`."""
    timings = tuple(time_pair(before, after, feeds, threads=n, budget_s=budget_s / 2)
                    for n in (1, 0))
    single, default = timings
    if any(t.slower for t in timings):
        return Guard(False, timings, "the optimized model measured slower in onnxruntime")
    if single.faster:
        return Guard(True, timings, "faster in onnxruntime")
    return Guard(False, timings, "not faster beyond the measured noise in onnxruntime")
