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

from typing import Any, Mapping, Sequence

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

    def outputs(model: Any, what: str, feeds: Sequence[Feeds]) -> list[list[np.ndarray]]:
        """`model`'s outputs on each feed set: one session, gone before the next is made
        (the memory of a check is one model's, whatever the size)."""
        try:
            s = session(model, so=check_options())
        except Exception as e:      # noqa: BLE001 - the caller decides what a failure means
            raise _CannotRun(what, e) from None
        out = []
        for f in feeds:
            try:
                out.append(run_until(s, names, f, what=f"onnxruntime's run of {what} for the "
                                     f"comparison"))
            except RunStopped:      # the time limit, not the model: the caller says so
                raise
            except Exception as e:  # noqa: BLE001 - onnxruntime may fail only when a kernel runs
                raise _CannotRun(what, e) from None
        return out

    try:
        if precision not in HALF:
            a = outputs(before, "the input model", feeds_list)
            b = outputs(after, "the optimized model", feeds_list)
            return worst_over(names, zip(a, b), seeds, tolerance=tol)
        wide = [widen_feeds(f) for f in feeds_list]
        ref = outputs(widen(before), "the input model widened to float32", wide)
        try:
            a = outputs(before, "the input model", feeds_list)
        except _CannotRun as e:
            if e.what != "the input model":
                raise
            b = outputs(widen(after), "the optimized model widened to float32", wide)
            note = (f"onnxruntime cannot run the model in {precision} on this CPU "
                    f"({_first_line(e.error)}): both compared widened to float32")
            return worst_over(names, zip(ref, b), seeds, tolerance=tolerance("fp32"),
                              note=note)
        b = outputs(after, "the optimized model", feeds_list)
        return worst_over(names, zip(ref, a, b), seeds, tolerance=tol)
    except _CannotRun as e:
        if e.what.startswith("the input model"):
            raise TirError(f"onnxruntime cannot run {e.what}: {ort_located(e.error)}") from None
        raise TirError(f"onnxruntime cannot run {e.what}: {ort_located(e.error)}; nothing was "
                       f"written") from None


def check_options() -> Any:
    """Session options for a comparison: onnxruntime's basic graph optimizations only. A check
    compares two functions; the extended fusions and layout changes add nothing to that, cost
    time on every session, and one of them (GatherSliceToSplitFusion in onnxruntime 1.18) names
    two nodes alike on a Llama layer and refuses the model it made."""
    import onnxruntime as ort

    from ..runtime import session_options

    so = session_options(1)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return so


class _CannotRun(Exception):
    def __init__(self, what: str, error: BaseException) -> None:
        super().__init__(what)
        self.what, self.error = what, error


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__


# a check holds one session at a time: the model's weights once (onnxruntime's own copy) and,
# for a half-precision model, its float32 reference (twice the bytes); the margin covers
# activations, prepacked weights and the allocator (1-B Llama, fp32: measured below it)
CHECK_MARGIN = 1.5


def check_bytes(model: Any, precision: str | None = None) -> int:
    """The memory `check_models(model, ...)` is estimated to need (see CHECK_MARGIN)."""
    from ..external_data import expected_bytes

    weights = sum(expected_bytes(t) or 0 for t in model.graph.initializer)
    precision = precision or check_precision(model)
    return int(weights * (2 if precision in HALF else 1) * CHECK_MARGIN)
