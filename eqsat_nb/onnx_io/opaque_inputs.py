"""Which inputs an opaque node keeps: every one its operator's schema requires at the model's
opset.

Exporters feed zero-size constants to inputs they do not use: torch, tf2onnx and paddle2onnx give
Resize-11/12 an empty `roi` (and an empty `scales` next to `sizes`), which those opsets require.
The IR holds no zero-size tensors, so such an input cannot be an operand. Where the schema of the
node's own opset marks the input optional, it is left out ("" means absent, and an empty tensor
there means the same); anywhere else, and for operators onnx has no schema for, the node keeps the
constant itself as an `empty:` input (ir/opaque.py), which every writer turns back into a
constant. The node stays in the model's opset: a Resize-11 is written back as a Resize-11, never
upgraded to an opset the model does not import.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..ir.opaque import empty_input


def _optional_inputs(op_type: str, domain: str, opset: int) -> Callable[[int], bool] | None:
    """Whether input k of this operator may be "" at this opset (None: onnx has no schema)."""
    from onnx import defs

    try:
        schema = defs.get_schema(op_type, opset, domain)
    except Exception:     # noqa: BLE001 - SchemaError, or an unknown domain
        return None
    formals = schema.inputs
    optional = defs.OpSchema.FormalParameterOption.Optional

    def allowed(k: int) -> bool:
        if not formals:
            return False
        return formals[min(k, len(formals) - 1)].option == optional
    return allowed


def stored_inputs(node: Any, empty_value: Callable[[str], np.ndarray | None], opset: int
                  ) -> list[bool | str]:
    """For each input of `node`: True (an operand of the opaque node), False (absent: "" in the
    stored node) or the `empty:` input that stands for a zero-size constant the node keeps.
    `empty_value(name)` is the value of a zero-size constant, None for anything else; `opset` is
    the model's version of the node's domain. Trailing absent inputs are dropped."""
    from onnx import helper

    flags: list[bool | str] = []
    optional = None
    for k, v in enumerate(node.input):
        if not v:
            flags.append(False)
            continue
        value = empty_value(v)
        if value is None:
            flags.append(True)
            continue
        if optional is None:
            optional = _optional_inputs(node.op_type, node.domain or "", opset) or (lambda k: False)
        if optional(k):
            flags.append(False)
        else:
            elem = int(helper.np_dtype_to_tensor_dtype(value.dtype))
            flags.append(empty_input(elem, value.shape))
    while flags and flags[-1] is False:
        flags.pop()
    return flags
