"""Is an optimized ONNX model the same function as the input? Both run in onnxruntime.

`check_models` is the one check of ONNX models, whole or cut to one layer: both models run on
the same random inputs (one set per entry of `feeds_list`) and their outputs are compared by name
under the rule of the models' precision (`precision.tolerance`):

- fp32 / fp64: the optimized model against the input, element-wise.
- fp16 / bf16 (and fp32 models with half-precision regions between Casts): both against the
  input widened to float32 (`widen.widen`), the optimized model's error within a small multiple
  of the input's own. Where onnxruntime's CPU cannot run the model in its own precision (it
  lacks bfloat16 kernels for most operators), both models are compared widened to float32 under
  the fp32 rule instead, and the result says so.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..check_outputs import Verification, worst_over
from ..errors import RunStopped, TirError
from ..precision import HALF, check_precision, tolerance
from .ort_errors import ort_located
from .widen import widen, widen_feeds

Feeds = Mapping[str, np.ndarray]


def check_models(before: Any, after: Any, feeds_list: Sequence[Feeds],
                 precision: str | None = None) -> Verification:
    """Compare `after` with `before` (ONNX models with the same graph inputs and outputs) on
    each feed set, judged by `precision`'s rule (default: `check_precision(before)`).

    TirError (without a file: the caller names it) when onnxruntime cannot run `before`;
    RunStopped when a run passes the enclosing `stopping.time_limit`."""
    from ..runtime import session
    from ..stopping import run_until

    precision = precision or check_precision(before)
    tol = tolerance(precision)
    names = [o.name for o in before.graph.output]
    seeds = tuple(range(len(feeds_list)))

    def runner(model: Any, what: str) -> Callable[[Feeds], list[np.ndarray]]:
        try:
            s = session(model)
        except Exception as e:      # noqa: BLE001 - the caller decides what a failure means
            raise _CannotRun(what, e) from None
        return lambda feeds: run_until(s, names, feeds, what=f"onnxruntime's run of {what} "
                                       f"for the comparison")

    try:
        if precision not in HALF:
            a = _checked(runner, before, "the input model")
            b = _checked(runner, after, "the optimized model")
            return worst_over(names, ((a(f), b(f)) for f in feeds_list), seeds, tolerance=tol)
        ref = _checked(runner, widen(before), "the input model widened to float32")
        wide = [widen_feeds(f) for f in feeds_list]
        try:
            a = _checked(runner, before, "the input model")
            outs = [(ref(w), a(f)) for w, f in zip(wide, feeds_list)]
        except _CannotRun as e:
            if e.what != "the input model":
                raise
            b = _checked(runner, widen(after), "the optimized model widened to float32")
            note = (f"onnxruntime cannot run the model in {precision} on this CPU "
                    f"({_first_line(e.error)}): both compared widened to float32")
            return worst_over(names, ((ref(w), b(w)) for w in wide), seeds,
                              tolerance=tolerance("fp32"), note=note)
        b = _checked(runner, after, "the optimized model")
        return worst_over(names, ((r, o, b(f)) for (r, o), f in zip(outs, feeds_list)), seeds,
                          tolerance=tol)
    except _CannotRun as e:
        if e.what.startswith("the input model"):
            raise TirError(f"onnxruntime cannot run {e.what}: {ort_located(e.error)}") from None
        raise TirError(f"onnxruntime cannot run {e.what}: {ort_located(e.error)}; nothing was "
                       f"written") from None


class _CannotRun(Exception):
    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(what)
        self.what, self.error = what, error


def _checked(runner: Callable, model: Any, what: str) -> Callable[[Feeds], list]:
    """`runner(model, what)` whose run failures are `_CannotRun` naming `what` too
    (onnxruntime may build a session and fail only when a kernel runs)."""
    run = runner(model, what)

    def call(feeds: Feeds) -> list[np.ndarray]:
        try:
            return run(feeds)
        except RunStopped:          # the time limit, not the model: the caller says so
            raise
        except Exception as e:      # noqa: BLE001
            raise _CannotRun(what, e) from None
    return call


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
