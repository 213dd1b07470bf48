"""Precisions: what a model is stored and run in, how closely a rewrite must match in each.

A model's precision is its float element type (`fp32`, `fp16`, `bf16`, `fp64`; `tf32` is fp32
storage with tensor-core GEMMs that round their operands to a 10-bit mantissa, a way of running
fp32 models). It decides two things:

- How an optimized model is judged (`Tolerance`). In fp32 and fp64 the optimized model must
  match the original element-wise within `rtol 1e-4` plus `1e-5 * max|ref|`: reassociating fp32
  sums moves results by at most a few 1e-7 of max|ref|. In fp16 and bf16 a correct rewrite moves
  results by the type's rounding (2^-11 and 2^-8 relative per operation), thousands of times
  more, so both the original and the optimized model are judged against a float32 evaluation of
  the original: the optimized model's error must stay within `factor` times the original's own
  error in its own precision, plus `floor * max|ref|` (a graph whose own rounding error happens
  to be tiny still allows one rounding step). A wrong rewrite errs by the size of the values
  themselves and is refused in every precision.
- How operators are priced (bytes per element; the GPU profiles' GEMM peak of that precision).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp64")
HALF = ("fp16", "bf16")

#: ONNX TensorProto element types of the floats (the numbers are fixed by the ONNX standard)
ONNX_FLOATS = {1: "fp32", 10: "fp16", 11: "fp64", 16: "bf16"}
#: IR element types of the floats
IR_FLOATS = {"f32": "fp32", "f16": "fp16", "f64": "fp64", "bf16": "bf16"}
#: the IR element type a float tensor has when a model runs in each precision (tf32 is f32
#: storage; only the GEMMs round differently)
IR_TYPE = {"fp32": "f32", "tf32": "f32", "fp16": "f16", "bf16": "bf16", "fp64": "f64"}

#: bytes a float element takes in memory in each precision
BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp64": 8}
#: unit roundoff: half the gap between 1 and the next number (relative error of one rounding)
UNIT_ROUNDOFF = {"fp64": 2.0 ** -53, "fp32": 2.0 ** -24, "tf32": 2.0 ** -11, "fp16": 2.0 ** -11,
                 "bf16": 2.0 ** -8}

RTOL = 1e-4           # fp32: element-wise, relative to the element
ATOL_REL = 1e-5       # fp32: plus this share of the output's max |ref|
HALF_FACTOR = 4.0     # half: within this multiple of the original's own error ...
HALF_FLOOR_ROUNDINGS = 4.0   # ... plus this many unit roundoffs of max |ref|


@dataclass(frozen=True)
class Tolerance:
    """How an optimized model's outputs are judged. `factor` 0: element-wise against the
    original (`rtol`, `atol_rel`); else against a float32 evaluation of the original, within
    `factor` x the original's own error plus `floor` x max|ref| (see the module doc)."""

    precision: str = "fp32"
    rtol: float = RTOL
    atol_rel: float = ATOL_REL
    factor: float = 0.0
    floor: float = 0.0

    @property
    def relative(self) -> bool:
        """Judged against a higher-precision reference, relative to the original's own error."""
        return self.factor > 0

    def describe(self) -> str:
        if not self.relative:
            return f"tolerance rtol {self.rtol:g}, atol {self.atol_rel:g}*max|ref|"
        return (f"{self.precision} rule: against the original run in float32, within "
                f"{self.factor:g}x the original's own error + {self.floor:.1e}*max|ref|")


def tolerance(precision: str = "fp32") -> Tolerance:
    """The rule an optimized model of this precision is judged by."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})")
    if precision in HALF:
        return Tolerance(precision, factor=HALF_FACTOR,
                         floor=HALF_FLOOR_ROUNDINGS * UNIT_ROUNDOFF[precision])
    return Tolerance(precision)


def dominant(counts: Counter) -> str:
    """The precision holding the most elements (fp32 when there are no floats)."""
    return counts.most_common(1)[0][0] if counts else "fp32"


def _elements(dims: Iterable[Any]) -> int:
    n = 1
    for d in dims:
        n *= max(int(d), 1)
    return n


def onnx_precision(model: Any) -> str:
    """The precision of an ONNX model: the float type of most of its initializer elements, else
    of its graph inputs and outputs (fp32 when it has no floats)."""
    counts: Counter = Counter()
    for t in model.graph.initializer:
        p = ONNX_FLOATS.get(t.data_type)
        if p:
            counts[p] += _elements(t.dims)
    if not counts:
        for vi in (*model.graph.input, *model.graph.output):
            p = ONNX_FLOATS.get(vi.type.tensor_type.elem_type)
            if p:
                counts[p] += 1
    return dominant(counts)


def onnx_half_types(model: Any) -> set[str]:
    """The half precisions any tensor of the model is declared or stored in (a mixed model's
    fp16 regions between Casts included): where a check must allow half-precision rounding."""
    found: set[str] = set()

    def graph(g: Any) -> None:
        for t in g.initializer:
            found.add(ONNX_FLOATS.get(t.data_type, ""))
        for vi in (*g.input, *g.output, *g.value_info):
            found.add(ONNX_FLOATS.get(vi.type.tensor_type.elem_type, ""))
        for n in g.node:
            for a in n.attribute:
                if n.op_type == "Cast" and a.name == "to":
                    found.add(ONNX_FLOATS.get(a.i, ""))
                if a.HasField("t"):
                    found.add(ONNX_FLOATS.get(a.t.data_type, ""))
                if a.HasField("g"):
                    graph(a.g)
                for sub in a.graphs:
                    graph(sub)
    graph(model.graph)
    return found & set(HALF)


def check_precision(model: Any) -> str:
    """The precision an ONNX model's rewrites are judged in: its own when it is half, else the
    coarsest half type any part of it runs in (a mixed model), else fp32/fp64."""
    own = onnx_precision(model)
    if own in HALF:
        return own
    half = onnx_half_types(model)
    return "bf16" if "bf16" in half else "fp16" if "fp16" in half else own


def graph_precision(types: Iterable[Any]) -> str:
    """The precision of an IR graph from its values' types (`TensorType`s): the float type
    holding the most elements."""
    counts: Counter = Counter()
    for t in types:
        p = IR_FLOATS.get(t.dtype)
        if p:
            counts[p] += t.numel
    return dominant(counts)


def half_precision(types: Iterable[Any]) -> str | None:
    """The coarsest half precision among IR value types (`TensorType`s), None if there is none:
    a graph with such values rounds there, and is judged by that precision's rule."""
    found = {IR_FLOATS.get(t.dtype) for t in types}
    return "bf16" if "bf16" in found else "fp16" if "fp16" in found else None
