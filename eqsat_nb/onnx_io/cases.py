"""The ONNX project's operator test cases as a check of the importer and exporter.

`onnx.backend.test.case.node.collect_testcases()` builds one small model per case with inputs and
expected outputs. `check_case` imports a case, evaluates it with the reference interpreter (opaque
nodes run in onnxruntime), compares with the expected outputs, re-exports it and runs the export in
onnxruntime. `sweep` does every case and counts the outcomes (what the tests and the report use).

A case with bfloat16 outputs is compared within a few bfloat16 roundings: the interpreter computes
in float32 and rounds only where a node's result is bf16, the reference rounds after every step.
onnxruntime's CPU has bfloat16 kernels for few operators (and NumPy no bfloat16 to feed it), so
such an export runs widened to float32 (widen.py).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..errors import TirError
from ..ir.bfloat16 import from_bits, host_array
from ..ir.opaque import NONDETERMINISTIC
from ..precision import HALF_FLOOR_ROUNDINGS, UNIT_ROUNDOFF

MAPPED, OPAQUE, SKIPPED, FAILED = "mapped", "opaque", "skipped", "failed"
BF16_TOLERANCE = HALF_FLOOR_ROUNDINGS * UNIT_ROUNDOFF["bf16"]   # four bfloat16 roundings
BFLOAT16 = 16       # onnx.TensorProto.BFLOAT16


@dataclass
class CaseResult:
    name: str
    ops: tuple[str, ...]          # ONNX op types in the case's model
    kind: str                     # MAPPED (no opaque node) | OPAQUE | SKIPPED | FAILED
    reason: str = ""              # why skipped / what failed
    roundtrip: bool = False       # the re-exported model ran in onnxruntime with equal outputs


@dataclass
class SweepReport:
    results: list[CaseResult] = field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(r.kind for r in self.results)

    def reasons(self, kind: str = SKIPPED) -> Counter:
        return Counter(r.reason for r in self.results if r.kind == kind)


def collect() -> list[Any]:
    """The ONNX node test cases (slow-ish: ~5 s; callers cache)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in collect_testcases(None) if c.kind == "node"]


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float,
           bf16: bool = False) -> str:
    """'' when equal within tolerance, else a short description of the difference. `bf16`: an
    output the model declares bfloat16 (see the module doc)."""
    got, want = host_array(np.asarray(got)), host_array(np.asarray(want))
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu" or want.dtype == np.bool_:
        return "" if np.array_equal(got.astype(want.dtype), want) else "integer values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if want.dtype == np.float16:
        rtol, atol = max(rtol, 1e-2), max(atol, 1e-2)
    if bf16:
        rtol = atol = max(rtol, atol, BF16_TOLERANCE)
    scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
    ok = np.isclose(g, w, rtol=rtol, atol=atol + 1e-5 * scale, equal_nan=True)
    if ok.all():
        return ""
    return f"max abs diff {float(np.nanmax(np.abs(g - w))):.3g} (max |ref| {scale:.3g})"


def _bf16_data(x: Any, bf16: bool) -> Any:
    """A case's array for a value the model declares bfloat16 as the host holds it (float32):
    onnx without ml_dtypes (1.16) writes such data as uint16 bit patterns."""
    if bf16 and isinstance(x, (np.ndarray, np.generic)) and np.asarray(x).dtype == np.uint16:
        return from_bits(np.asarray(x))
    return x


def _reason(e: TirError) -> str:
    m = e.message
    for key, why in (("element type", "element type the IR lacks"),
                     ("zero-size", "zero-size tensor"),
                     ("shape of", "shape unknown (data-dependent)"),
                     ("no tensor shape", "input without shape"),
                     ("shape inference failed", "shape inference failed"),
                     ("not a valid ONNX model", "invalid model"),
                     ("onnxruntime cannot run", "onnxruntime cannot run the node"),
                     ("cannot read the constant", "unsupported Constant"),
                     ("changed in opset", "opaque op changed between opsets")):
        if key in m:
            return why
    return m[:80]


# ops whose inputs after the first are parameters (shapes, axes, sizes, pads, ratio)
PARAMETER_OPS = frozenset({"Reshape", "Expand", "Slice", "Squeeze", "Unsqueeze", "ReduceMean",
                           "Pad", "Split", "Dropout"})


def _parameter_inputs(model: Any) -> set[str]:
    """Graph inputs read only as parameters of PARAMETER_OPS: the cases feed a Reshape's shape
    and the like as inputs; frozen to their values they let the op map onto the table."""
    uses: dict[str, list[tuple[str, int]]] = {}
    for n in model.graph.node:
        for k, v in enumerate(n.input):
            uses.setdefault(v, []).append((n.op_type, k))
    inits = {t.name for t in model.graph.initializer}
    return {i.name for i in model.graph.input if i.name not in inits and uses.get(i.name)
            and all(op in PARAMETER_OPS and k >= 1 for op, k in uses[i.name])}


def check_case(case: Any, run_opaque: bool = True, roundtrip: bool = True) -> CaseResult:
    """Import one case, evaluate it, compare, re-export and run in onnxruntime."""
    import onnxruntime as ort

    from ..ir.interp import run
    from ..precision import onnx_half_types
    from .exporter import to_onnx
    from .read import from_onnx
    from .widen import widen, widen_feeds

    model = case.model
    ops = tuple(sorted({n.op_type for n in model.graph.node}))
    frozen = _parameter_inputs(model)
    if frozen and len(case.data_sets) != 1:
        return CaseResult(case.name, ops, SKIPPED, "parameters fed as inputs, several data sets")
    names = [i.name for i in model.graph.input]
    constants = ({n: np.asarray(x) for n, x in zip(names, case.data_sets[0][0]) if n in frozen}
                 if frozen else None)
    shapes = None      # symbolic (or 0) dims of the inputs take the sizes the data has
    if all(isinstance(x, np.ndarray) for d in case.data_sets for x in d[0]):
        per = [{n: tuple(x.shape) for n, x in zip(names, d[0]) if n not in frozen}
               for d in case.data_sets]
        if all(p == per[0] for p in per):
            shapes = per[0]
    try:
        graph, weights = from_onnx(model, case.name, constants=constants, input_shapes=shapes)
    except TirError as e:
        return CaseResult(case.name, ops, SKIPPED, _reason(e))
    kind = OPAQUE if any(n.op == "opaque" for n in graph.nodes) else MAPPED
    if kind == OPAQUE and not run_opaque:
        return CaseResult(case.name, ops, kind, "imported, not run")
    inits = {t.name for t in model.graph.initializer} | frozen
    real_inputs = [i.name for i in model.graph.input if i.name not in inits]
    rtol, atol = max(case.rtol, 1e-4), max(case.atol, 1e-7)
    bf16 = [o.type.tensor_type.elem_type == BFLOAT16 for o in model.graph.output]
    env_w = {"@" + k: v for k, v in weights.items() if v.size}
    exported, wide = None, False
    bf16_in = {i.name for i in model.graph.input if i.type.tensor_type.elem_type == BFLOAT16}
    for all_inputs, expected in case.data_sets:
        if not all(isinstance(x, (np.ndarray, np.generic)) for x in all_inputs):
            return CaseResult(case.name, ops, SKIPPED, "inputs of an element type NumPy lacks")
        all_inputs = [_bf16_data(x, n in bf16_in) for n, x in zip(names, all_inputs)]
        expected = [_bf16_data(x, b) for x, b in zip(expected, bf16)]
        inputs = [np.asarray(x) for n, x in zip(names, all_inputs) if n not in frozen]
        if len(inputs) != len(real_inputs) or len(graph.inputs) != len(inputs):
            return CaseResult(case.name, ops, SKIPPED, "optional inputs left out")
        env = {ssa: np.asarray(x) for (ssa, _), x in zip(graph.inputs, inputs)}
        floats = [x.dtype for x in env.values() if x.dtype.kind == "f"]
        dtype = np.float64 if np.dtype(np.float64) in floats else np.float32
        random = [n.attr["op"] for n in graph.nodes if n.op == "opaque"
                  and (n.attr["op"] in NONDETERMINISTIC or n.attr["op"] == "Dropout")]
        if random:
            return CaseResult(case.name, ops, SKIPPED, "random outputs (training-mode Dropout, "
                                                       "random ops)")
        try:
            got = run(graph, {**env, **env_w}, dtype=dtype)
        except TirError as e:
            return CaseResult(case.name, ops, SKIPPED if "onnxruntime" in e.message else FAILED,
                              _reason(e))
        for g, w, b in zip(got, expected, bf16):
            diff = _close(g, w, rtol, atol, b)
            if diff:
                who = ("onnxruntime differs from the ONNX reference" if kind == OPAQUE
                       else "interpreter")
                return CaseResult(case.name, ops, FAILED, f"{who}: {diff}")
        if not roundtrip:
            continue
        try:
            if exported is None:
                opts = ort.SessionOptions()
                opts.log_severity_level = 4
                written = to_onnx(graph, weights)
                wide = "bf16" in onnx_half_types(written)
                if wide:
                    written = widen(written)
                exported = ort.InferenceSession(written.SerializeToString(), opts,
                                                providers=["CPUExecutionProvider"])
            names = [i.name for i in exported.get_inputs()]
            feeds = {n: np.asarray(x) for n, x in zip(names, inputs)}
            outs = exported.run(None, widen_feeds(feeds) if wide else feeds)
        except TirError as e:
            return CaseResult(case.name, ops, FAILED, f"export: {e.message[:80]}")
        except Exception as e:   # noqa: BLE001 - onnxruntime's own exception types
            return CaseResult(case.name, ops, FAILED, f"onnxruntime on the export: "
                                                      f"{str(e).splitlines()[0][:80]}")
        for g, w, b in zip(outs, expected, bf16):
            diff = _close(g, w, rtol, atol, b)
            if diff:
                return CaseResult(case.name, ops, FAILED, f"round trip: {diff}")
    return CaseResult(case.name, ops, kind, "", roundtrip=roundtrip)


def sweep(cases: Iterable[Any], run_opaque: bool = True, roundtrip: bool = True) -> SweepReport:
    report = SweepReport()
    for case in cases:
        report.results.append(check_case(case, run_opaque, roundtrip))
    return report
