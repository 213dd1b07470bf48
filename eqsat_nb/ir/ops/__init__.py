"""The operator table: every IR operator, defined once, one module per operator family.

    leaf.py        input, weight, noop (and the `opaque` record)
    elementwise.py ewadd, ewmul, ewsub, ewdiv; scale, shift, divide, power (a scalar attribute)
    activation.py  relu, tanh, sigmoid, gelu, silu, erf, sqrt, reciprocal, dropout
    matrix.py      matmul
    conv.py        conv2d, enlarge, merge
    pool.py        poolmax, poolavg
    layout.py      transpose, concat, split, reshape, slice, pad, broadcast
    norm.py        batchnorm, layernorm, rmsnorm
    reduce.py      softmax, reduce_mean

Each module holds, per op, the `OpDef` record (schema.py: attributes, arity, shape function,
FLOPs, reference semantics, ONNX form, torch lowering, pricing class) and its ONNX import mappers.
Everything else reads the table: the parser and builder, the e-graph (operator ids = table order),
rule application, the interpreter, the ONNX importer/exporter, the cost models. The e-graph's
shape kernels (egraph/shapes_nb.py) are a hand-written Numba port, checked against this table at
import. How to add an operator: docs/operators.md.

Operator ids: the ops of the first table (LEGACY_ORDER) keep their ids; ops added since come after
them, in the order of FAMILIES and, within a family, of its OPS list.
"""
from __future__ import annotations

from typing import Any, Callable

from ...errors import ShapeError, TirError
from ..graph import Attrs, TensorType
from . import activation, conv, elementwise, layout, leaf, matrix, norm, pool, reduce
from .conv import conv_groups
from .leaf import OPAQUE
from .schema import (ACTIVATIONS, COST_CLASSES, REQUIRED, AttrError, AttrSpec, OpDef,
                     check_arity, normalize_attrs)

__all__ = ["ACTIVATIONS", "REQUIRED", "AttrError", "AttrSpec", "OpDef", "OPS", "OP_IDS",
           "OP_NAMES", "OPAQUE", "ONNX_IMPORT", "check_arity", "conv_groups", "flops",
           "infer_types", "normalize_attrs", "op_def"]

FAMILIES = (leaf, elementwise, matrix, conv, activation, pool, layout, norm, reduce)

LEGACY_ORDER = ("input", "weight", "ewadd", "ewmul", "matmul", "conv2d", "relu", "tanh",
                "sigmoid", "poolmax", "poolavg", "transpose", "enlarge", "concat", "split",
                "merge", "reshape", "noop", "batchnorm", "softmax", "layernorm", "gelu",
                "reduce_mean", "slice", "pad", "dropout", "broadcast", "scale")


def _table() -> dict[str, OpDef]:
    defs: dict[str, OpDef] = {}
    for family in FAMILIES:
        for d in family.OPS:
            if d.name in defs or d.name == "opaque":
                raise RuntimeError(f"operator '{d.name}' is defined twice ({family.__name__})")
            if d.cost not in COST_CLASSES:
                raise RuntimeError(f"operator '{d.name}': unknown cost class '{d.cost}'")
            defs[d.name] = d
    missing = [n for n in LEGACY_ORDER if n not in defs]
    if missing:
        raise RuntimeError(f"operators {missing} lost their definitions")
    order = list(LEGACY_ORDER) + [n for n in defs if n not in LEGACY_ORDER]
    return {n: defs[n] for n in order}


def _onnx_import() -> dict[str, Callable[[Any, int, Any], None]]:
    out: dict[str, Callable[[Any, int, Any], None]] = {}
    for family in FAMILIES:
        for op_type, mapper in getattr(family, "ONNX_IMPORT", {}).items():
            if op_type in out:
                raise RuntimeError(f"ONNX op {op_type} is mapped twice ({family.__name__})")
            out[op_type] = mapper
    return out


OPS: dict[str, OpDef] = _table()
OP_IDS: dict[str, int] = {name: i for i, name in enumerate(OPS)}
OP_NAMES: tuple[str, ...] = tuple(OPS)
#: ONNX op type (default domain) -> its mapper onto the table (onnx_map.py describes them)
ONNX_IMPORT = _onnx_import()


def op_def(name: str) -> OpDef:
    """The operator named `name` (the table, or `opaque`); raises TirError when unknown."""
    if name == "opaque":
        return OPAQUE
    try:
        return OPS[name]
    except KeyError:
        raise TirError(f"unknown op '{name}'") from None


def infer_types(op: str, inputs: list[TensorType], attrs: Attrs,
                declared: list[TensorType] | tuple[TensorType, ...] | None = None
                ) -> list[TensorType]:
    """Result types of `op` applied to `inputs`; ShapeError naming the op when invalid.
    `declared` are the written result types, required (and checked) for `opaque` only."""
    opdef = op_def(op)
    if opdef is OPAQUE:
        check_arity(opdef, len(inputs))
        if declared is None:
            raise ShapeError("opaque: result types of an opaque node must be declared")
        from ..opaque import check_opaque     # decoding needs onnx; only opaque nodes pay for it
        check_opaque(dict(attrs), len(inputs), len(declared))
        return list(declared)
    check_arity(opdef, len(inputs))
    try:
        return opdef.infer(inputs, dict(attrs))
    except ShapeError as e:
        raise ShapeError(f"{op}: {e.message}") from None


def flops(op: str, inputs: list[TensorType], outputs: list[TensorType], attrs: Attrs) -> int:
    """Floating-point operations of one node (a multiply-add counts 2); unknown for opaque: 0."""
    return op_def(op).flops(inputs, outputs, dict(attrs))


def ops_priced_as(cost: str) -> frozenset[str]:
    """The ops of one analytic pricing class (schema.COST_CLASSES)."""
    return frozenset(n for n, d in OPS.items() if d.cost == cost)
