"""`run MODEL.onnx --onnx OUT.onnx`: the user's model back, faster or unchanged.

The optimized graph is spliced into the input model (`onnx_io.splice`: the model's own nodes for
everything that did not change). The result is checked in onnxruntime against the input model
itself on random inputs, under the rule of the model's precision (`onnx_io.check`). For the CPU
target it is then timed against the input (`onnx_io.measure.guard`) and replaces it only if it is
faster beyond the measured noise (a model onnxruntime's CPU cannot run in its own precision, such
as most bfloat16 models, cannot be timed: the input is kept). For a GPU target the cost estimate
priced for that GPU decides (its measured table where it has one): the gain cannot be measured on
this CPU, and a CPU timing of a GPU-shaped rewrite is noise that would decide at random.
Otherwise, and whenever nothing changed, OUT is a byte-for-byte copy of the input file (external
data files included).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from ..errors import RunStopped, TirError, VerificationError
from ..onnx_io.input_types import import_shapes
from .files import write_onnx


@dataclass
class OnnxOutcome:
    """What was written to OUT and why (goes into the report)."""

    written: str                      # "optimized" | "input unchanged"
    reason: str
    measured: list[str] = field(default_factory=list)
    measured_speedup_pct: float | None = None
    onnxruntime_check: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"written": self.written, "reason": self.reason, "measured": self.measured,
                "measured_speedup_pct": self.measured_speedup_pct,
                "onnxruntime_check": self.onnxruntime_check}


def copy_input(src: str, dst: str, model: Any, force: bool) -> str:
    """OUT = the input, byte for byte, with every data file it reads beside it (or, where a
    data file's name cannot be used beside OUT, its data in OUT's own data file). Returns a
    note for the report when it is not byte for byte."""
    from ..onnx_io.external import copy_model

    how = copy_model(src, dst, force)
    return "" if how in ("byte for byte", "the input file itself") else f"; copied {how}"


def compare_in_onnxruntime(before: Any, after: Any, feeds_list: list[Mapping[str, np.ndarray]]
                           ) -> tuple[bool, str]:
    """Both models in onnxruntime on the same inputs (one set per entry of `feeds_list`),
    judged by the rule of their precision (`onnx_io.check.check_models`): (all equal, the
    summary). A TirError (without a file: the caller names the input) if onnxruntime cannot run
    `before`."""
    from ..onnx_io.check import check_models

    try:
        v = check_models(before, after, feeds_list)
    except TirError as e:
        raise TirError(f"{e.message}. Nothing was written") from None
    return v.ok, v.summary()


def whole_check_too_big(model: Any, args: Any) -> str | None:
    """Why the whole model is not checked in onnxruntime (its estimated memory is over
    --verify-memory, default half the available memory), None when it fits."""
    from ..check_outputs import human_bytes, memory_budget
    from ..onnx_io.check import check_bytes

    limit, whose = memory_budget(getattr(args, "verify_memory", None))
    need = check_bytes(model)
    if limit is None or need <= limit:
        return None
    return (f"the whole model was not run in onnxruntime: that needs about {human_bytes(need)}, "
            f"over {whose} ({human_bytes(limit)})")


def check_layers_in_onnxruntime(run: Any, weights: Any, seed: int = 0) -> tuple[bool, str]:
    """Each rewritten layer class in onnxruntime: its representative before and after the
    rewrite, written as ONNX models with that layer's own weights (read from the input's files
    one layer at a time) and run on the same random activations under the rule of their
    precision (`onnx_io.check.check_models`). (all equal, the summary)."""
    from ..onnx_io.check import check_models
    from ..onnx_io.measure import random_feeds

    worst, checked, texts = None, 0, []
    for name, a, b in layer_models(run, weights, seed):
        v = check_models(a, b, [random_feeds(a, seed=seed)])
        checked += 1
        texts.append(f"{name}: {v.summary()}")
        if not v.ok:
            return False, texts[-1]
        if worst is None or _excess(v) > _excess(worst):
            worst = v
    if worst is None:
        return True, "no layer was rewritten"
    return True, (f"{checked} rewritten layer class{'es' if checked != 1 else ''} checked one "
                  f"layer at a time, their representatives with their own weights; worst "
                  f"{worst.summary()}")


def layer_models(run: Any, weights: Any, seed: int = 0) -> Iterator[tuple[str, Any, Any]]:
    """(class name, its representative before, after) as ONNX models holding that layer's own
    weights, for each rewritten layer class; one at a time (a mapped model's pages are given
    back after each)."""
    from ..mapped_data import release
    from ..onnx_io.exporter import to_onnx

    for r in run.runs:
        if not r.changed:
            continue
        before, after = r.originals[0], r.optimized[0]
        names = {n.attr["name"] for g in (before, after) for n in g.weights()}
        own = {k: weights[k] for k in names if k in weights}
        a, b = to_onnx(before, own, seed=seed), to_onnx(after, own, seed=seed)
        del own
        yield r.name, a, b
        del a, b
        release()


def guard_layers(run: Any, weights: Any, args: Any) -> tuple[bool, list[str], str]:
    """The CPU target's timing of a model too large to time whole: each rewritten layer class's
    representative before and after (`layer_models`), timed as `measure.guard` times models.
    (keep, the timings, the reason): kept only when every class measured faster."""
    from ..onnx_io.measure import cannot_time, guard, random_feeds

    timings: list[str] = []
    for name, a, b in layer_models(run, weights, args.seed):
        feeds = random_feeds(a, seed=args.seed)
        why = cannot_time(a, feeds)
        if why is not None:
            return False, timings, f"{name}: {why}"
        g = guard(a, b, feeds, budget_s=args.measure_time)
        timings += [f"{name}, {t.describe()}" for t in g.timings]
        if not g.keep:
            return False, timings, f"{name}: {g.reason}"
    return True, timings, "every rewritten layer class faster in onnxruntime"


def _excess(v: Any) -> float:
    return max((o.worst_excess for o in v.outputs), default=0.0)


def _fix_interface(model: Any, imp: Any, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Write the sizes the result was optimized for into its graph inputs and outputs."""
    for vi in model.graph.input:
        if vi.name in shapes:
            for d, size in zip(vi.type.tensor_type.shape.dim, shapes[vi.name]):
                d.Clear()
                d.dim_value = size
    types = imp.graph.types()
    out_types = dict(zip((o.name for o in imp.model.graph.output),
                         (types[v] for v in imp.graph.outputs)))
    for vi in model.graph.output:
        if vi.name in out_types:
            for d, size in zip(vi.type.tensor_type.shape.dim, out_types[vi.name].shape):
                d.Clear()
                d.dim_value = size


def _symbolic_note(imp: Any) -> str:
    parts = []
    for name, axes in imp.defaulted.items():
        written = ", ".join(str(d) for d in imp.symbolic.get(name, []))
        parts.append(f"input '{name}' has dims [{written}]")
    return "; ".join(parts)


def write_onnx_result(args: Any, imp: Any, result: Any, gpu_target: bool,
                      fixed: bool = False) -> OnnxOutcome:
    """Splice, check, measure and write OUT (args.onnx); returns what was written. `fixed`:
    the user set input shapes or dims, so the result is for those sizes. A check or timing in
    onnxruntime stopped at the time limit (`stopping.time_limit`, RunStopped) leaves the
    optimized model unwritten: OUT is the input, unchanged, and the reason says what stopped."""
    try:
        return _write_onnx_result(args, imp, result, gpu_target, fixed)
    except RunStopped as e:
        how = copy_input(args.model, args.onnx, imp.model, args.force)
        return OnnxOutcome("input unchanged", f"{e}. The optimized model could not be checked "
                           f"and timed within --time-limit, so the input is written unchanged "
                           f"(a larger --time-limit leaves onnxruntime more time){how}")


def _write_onnx_result(args: Any, imp: Any, result: Any, gpu_target: bool,
                       fixed: bool) -> OnnxOutcome:
    from ..onnx_io.measure import cannot_time, guard, random_feeds
    from ..onnx_io.splice import splice

    out = args.onnx
    spliced = splice(imp, result.optimized) if result.improved else None
    if spliced is None:
        how = copy_input(args.model, out, imp.model, args.force)
        why = ("no cheaper graph found" if not result.improved else
               "the optimized graph computes nothing the model does not already")
        return OnnxOutcome("input unchanged", why + how)
    shapes = import_shapes(imp)
    seeds = range(args.seed, args.seed + max(1, args.verify_seeds))
    feeds = [random_feeds(imp.model, seed=s, shapes=shapes) for s in seeds]
    outcome = OnnxOutcome("optimized", "")
    too_big = None if args.no_verify else whole_check_too_big(imp.model, args)
    if too_big and (result.layers is None or result.layers.whole):
        how = copy_input(args.model, out, imp.model, args.force)
        return OnnxOutcome("input unchanged", f"{too_big}, and the model has no repeated "
                           f"layers to check one at a time: nothing unchecked is written{how}")
    copies = None if result.layers is None else result.layers.check
    if too_big and (copies is None or not copies.ok or copies.skipped):
        how = copy_input(args.model, out, imp.model, args.force)
        why = copies.skipped if copies is not None else "the copies were not checked"
        return OnnxOutcome("input unchanged", f"{too_big}, and not every rewritten layer was "
                           f"checked with its own weights ({why}): nothing unchecked is "
                           f"written{how}")
    if too_big:
        ok, text = check_layers_in_onnxruntime(result.layers, imp.weights, args.seed)
        outcome.onnxruntime_check = f"{too_big}; {text}"
        if not ok:
            raise VerificationError(f"a rewritten layer does not match the original in "
                                    f"onnxruntime: {text}. Nothing was written.", file=out)
    elif not args.no_verify:
        try:
            ok, text = compare_in_onnxruntime(imp.model, spliced, feeds)
        except TirError as e:
            raise TirError(e.message, file=e.file or args.model) from None
        outcome.onnxruntime_check = text
        if not ok:
            raise VerificationError(f"the optimized ONNX model does not match the input in "
                                    f"onnxruntime: {text}. Nothing was written.", file=out)
    if imp.defaulted and too_big:
        from ..onnx_io.symbolic import shape_hint
        how = copy_input(args.model, out, imp.model, args.force)
        return OnnxOutcome("input unchanged", f"the rewrites were checked at the sizes assumed "
                           f"for symbolic dims ({_symbolic_note(imp)}), and the model is too "
                           f"large to check whole at other sizes; pass the sizes it is used at, "
                           f"{shape_hint(imp)} (or --dim), to optimize for them{how}")
    if imp.defaulted:        # symbolic dims the user did not fix: valid for other sizes too?
        from ..onnx_io.symbolic import another_size, shape_hint
        other = another_size(imp.model, imp.defaulted, shapes)
        ok = False
        if other is not None:
            bigger = [random_feeds(imp.model, seed=args.seed, shapes=other)]
            try:
                ok, _ = compare_in_onnxruntime(imp.model, spliced, bigger)
            except RunStopped:
                raise
            except Exception:    # noqa: BLE001 - onnxruntime refusing the size is the answer
                ok = False
        if not ok:
            how = copy_input(args.model, out, imp.model, args.force)
            assumed = ", ".join(f"{n}={'x'.join(map(str, shapes[n]))}" for n in imp.defaulted)
            held = ("the rewrites hold only for the sizes" if other is not None else
                    "the input model runs in onnxruntime at no other size tried than the ones")
            return OnnxOutcome("input unchanged", f"{held} assumed for symbolic dims "
                               f"({_symbolic_note(imp)}; analysed at {assumed}); pass the sizes "
                               f"the model is used at, {shape_hint(imp)} (or --dim), to optimize "
                               f"for them{how}")
    elif fixed:
        _fix_interface(spliced, imp, shapes)
    if gpu_target:
        outcome.reason = ("a GPU target: chosen by the target's cost estimate, not by a timing "
                          "on this CPU (where graph rewrites measure within noise either way)")
    elif args.measure and too_big:      # the whole model cannot be timed: one layer a class
        keep, outcome.measured, why = guard_layers(result.layers, imp.weights, args)
        outcome.reason = (f"the CPU target keeps a rewrite only when measured faster; too large "
                          f"to time whole, each rewritten layer class was timed: {why}")
        if not keep:
            outcome.reason += copy_input(args.model, out, imp.model, args.force)
            outcome.written = "input unchanged"
            return outcome
    elif args.measure and (why := cannot_time(imp.model, feeds[0])) is not None:
        outcome.reason = f"the CPU target keeps a rewrite only when measured faster; {why}"
        outcome.reason += copy_input(args.model, out, imp.model, args.force)
        outcome.written = "input unchanged"
        return outcome
    elif args.measure:
        g = guard(imp.model, spliced, feeds[0], budget_s=args.measure_time)
        outcome.measured = [t.describe() for t in g.timings]
        outcome.measured_speedup_pct = (g.timings[0].ratio - 1.0) * 100
        outcome.reason = g.reason
        if not g.keep:
            outcome.reason += copy_input(args.model, out, imp.model, args.force)
            outcome.written = "input unchanged"
            return outcome
    else:
        outcome.reason = "not measured (--no-measure)"
    shared = getattr(args, "share_data", False)     # (then the references stay as they are)
    write_onnx(out, spliced, args.force, taken=_input_files(args.model),
               source=args.model if imp.data is not None and not shared else None)
    return outcome


def _input_files(model_path: str) -> tuple[Path, ...]:
    """The input model and its data files: OUT's data file must not replace any of them."""
    from ..onnx_io.external import input_files

    return (Path(model_path), *input_files(Path(model_path)))
