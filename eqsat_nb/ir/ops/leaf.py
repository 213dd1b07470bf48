"""Values from outside and structure: input (a graph argument), weight (a constant tensor known
before inference), noop (joins several outputs into one root, as TENSAT does; computes nothing),
and `opaque`, the record of an operator the IR does not model (ir/opaque.py runs it).

The ONNX writers handle inputs and weights themselves (graph inputs, initializers); ONNX
Constant nodes and initializers import as weights where they are data (onnx_io/importer.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ShapeError
from ..graph import TensorType
from .schema import AttrSpec, OpDef, zero


def _leaf(ins: list[TensorType], a: dict) -> list[TensorType]:
    return [TensorType(a["shape"], a["dtype"])]


def _noop(ins: list[TensorType], a: dict) -> list[TensorType]:
    return [TensorType((), ins[0].dtype)]


def _noop_onnx(w: Any, n: Any) -> None:
    """A zero scalar, as the interpreter gives."""
    from ..tensors import from_array
    w.add("Constant", [], [n.main], value=from_array(np.zeros(()), n.main,
                                                     n.out_types[0].dtype))


def _opaque_infer(ins: list[TensorType], a: dict) -> list[TensorType]:
    raise ShapeError("result types of an opaque node cannot be inferred; they must be declared")


_LEAF_ATTRS = (AttrSpec("name", "str"), AttrSpec("shape", "ints"),
               AttrSpec("dtype", "dtype", "f32"))
_LEAF = "a leaf: {}, computes nothing"

OPS = [
    OpDef("input", (0, 0), _LEAF_ATTRS, _leaf, zero,
          "a graph input (in text: a function argument)", leaf=True, cost="free",
          unmeasured=_LEAF.format("a graph input")),
    OpDef("weight", (0, 0), _LEAF_ATTRS, _leaf, zero, "a constant tensor, known before inference",
          leaf=True, cost="free", unmeasured=_LEAF.format("a constant tensor")),
    OpDef("noop", (1, None), (), _noop, zero,
          "joins several outputs into one root (TENSAT); computes nothing",
          eval=lambda a, *xs: np.zeros((), dtype=xs[0].dtype), to_onnx=_noop_onnx, cost="free",
          unmeasured="joins outputs into one root; computes nothing (costs 0)"),
]

# An operator the IR does not model (an imported ONNX node). It is deliberately *not* in `OPS`:
# OPS is the rewritable table whose order fixes the e-graph's op ids and the Numba shape port, and
# rules can only name ops in OPS, so no rule ever matches an opaque node. The e-graph has its own
# `opaque` op (egraph/store.py EXTRA_OPS). Text form (result types are required):
#   %y, %i = opaque(%x) {op = "TopK", opset = 11, onnx = "<base64 NodeProto>"} : T1, T2
# `onnx` is the serialized ONNX NodeProto (attributes included) whose inputs/outputs are the
# placeholders i0, i1, ... / o0, o1, ... for the operands/results in order and "" for an omitted
# optional one; `op` and `domain` repeat its op_type and domain for the reader; `opset` is the
# version of that domain the node was written for (eqsat_nb/ir/opaque.py decodes and runs it).
OPAQUE = OpDef("opaque", (0, None), (AttrSpec("op", "str"), AttrSpec("domain", "str", ""),
                                     AttrSpec("opset", "int"), AttrSpec("onnx", "str")),
               _opaque_infer, zero,
               "an operator the IR does not model, kept verbatim (an ONNX node); types declared",
               multi_result=True)
