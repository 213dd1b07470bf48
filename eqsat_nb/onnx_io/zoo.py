"""The model-zoo copies that ship inside the onnx wheel (`onnx/backend/test/data/light`), made
usable as real models: their weights are `ConstantOfShape` nodes filling every tensor with 0.02,
which hides wrong rewrites (every channel equal) and makes BatchNormalization's variance a
constant. `reseeded` turns each such weight into an initializer of the same name holding random
values (positive where a BatchNormalization reads a variance), the form exporters write."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def light_models() -> list[Path]:
    """The `light_*.onnx` files of the installed onnx wheel (empty when it ships none)."""
    import onnx

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return sorted(folder.glob("light_*.onnx"))


def reseeded(path: str | Path, seed: int = 0) -> Any:
    """The model at `path` with every ConstantOfShape weight replaced by a random initializer:
    float, or the half or double type the ConstantOfShape's value has."""
    import onnx
    from onnx import helper, numpy_helper

    from ..ir.opaque import ONNX_TO_DTYPE
    from ..ir.tensors import as_dtype, from_array

    model = onnx.load(str(path))
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    variances = {n.input[4] for n in g.node if n.op_type == "BatchNormalization"
                 and len(n.input) > 4}
    rng = np.random.default_rng(seed)
    keep, used_shapes = [], set()
    for n in g.node:
        if n.op_type == "ConstantOfShape" and n.input and n.input[0] in inits:
            shape = [int(d) for d in numpy_helper.to_array(inits[n.input[0]]).reshape(-1)]
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            elem = next((a.t.data_type for a in n.attribute if a.name == "value"), 1)
            elem = elem if elem in (10, 11, 16) else 1     # FLOAT16, DOUBLE, BFLOAT16; FLOAT
            dtype = ONNX_TO_DTYPE[elem]
            values = (rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(np.float32)
            if n.output[0] in variances:
                values = np.abs(values) + np.float32(0.5)
            g.initializer.append(from_array(as_dtype(values, dtype), n.output[0], dtype))
            if model.ir_version < 4:     # IR 3: every initializer is also a graph input
                g.input.append(helper.make_tensor_value_info(n.output[0], elem, shape))
            used_shapes.add(n.input[0])
            continue
        keep.append(n)
    del g.node[:]
    g.node.extend(keep)
    still = {v for n in g.node for v in n.input}
    gone = used_shapes - still
    left = [t for t in g.initializer if t.name not in gone]
    del g.initializer[:]
    g.initializer.extend(left)
    inputs = [i for i in g.input if i.name not in gone]
    del g.input[:]
    g.input.extend(inputs)
    return model
