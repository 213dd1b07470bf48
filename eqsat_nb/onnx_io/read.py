"""Reading ONNX: files and in-memory models into an `OnnxImport` (graph, weights, provenance).

`read_onnx`/`load_onnx` read a file (validated first by validate.py: a located error for every
way a file can be unreadable or hostile), `import_onnx`/`from_onnx` an onnx.ModelProto: checked
by onnx's checker, then walked by the importer (importer.py), whose result is recorded with what
the splicing writer needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import TirError
from ..ir.graph import Graph
from .importer import _Importer
from .symbolic import import_at_working_sizes


@dataclass
class OnnxImport:
    """What an import gives the exporter besides the graph: the model it came from and, for every
    ONNX value that became an IR value, its SSA name (several ONNX names may share one SSA value,
    e.g. through Identity). The splicing exporter writes the original nodes back for every value
    the optimizer left alone.

    `model` is the model as imported: the input itself, except that an `If` whose condition is a
    constant once the input shapes are fixed is replaced by the nodes of the branch it takes
    (`inlined` names those If nodes). Nodes whose outputs were folded into constants (shape
    computations, `folded`) stay in `model`; their outputs map to SSA values only where the IR
    reads them as data (they became weights).

    Symbolic input dims: `symbolic[input]` lists the dims of every graph input that has any
    symbolic dim as written in the file (ints, dim_param names, "?" for unnamed/-1/0 dims);
    `defaulted[input]` the axes that took DEFAULT_DIM because neither `input_shapes` nor `dims`
    gave a size (empty when the user fixed everything); `size_note` says which other sizes they
    took where 1 was degenerate (symbolic.py; empty when all took 1). `dim_dependent` are the
    folded values that read a defaulted dim (e.g. a Reshape target computed from the batch
    size): a graph that uses any of them is only valid for that size."""

    graph: Graph
    weights: dict[str, np.ndarray]
    model: Any
    ssa_of: dict[str, str]          # ONNX value name → SSA value of `graph`
    symbolic: dict[str, list[int | str]] = field(default_factory=dict)
    defaulted: dict[str, list[int]] = field(default_factory=dict)
    folded: frozenset[str] = frozenset()
    dim_dependent: frozenset[str] = frozenset()
    inlined: tuple[str, ...] = ()
    size_note: str = ""
    data: Any = None        # mapped_data.MappedData of a model whose large weights stay in files


def from_onnx(model: Any, source: str = "<model>", dims: Mapping[str, int] | None = None,
              check: bool = True, constants: Mapping[str, np.ndarray] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None
              ) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import an in-memory onnx.ModelProto (see `load_onnx`). `constants` freezes graph inputs
    to known values (e.g. a Reshape's target shape fed as an input), which lets ops whose
    parameters are inputs map onto the table."""
    r = import_onnx(model, source, dims, check, constants, input_shapes)
    return r.graph, r.weights


def import_onnx(model: Any, source: str = "<model>", dims: Mapping[str, int] | None = None,
                check: bool = True, constants: Mapping[str, np.ndarray] | None = None,
                input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> OnnxImport:
    """`from_onnx` with the provenance the splicing exporter needs (see OnnxImport).
    `input_shapes[input]` fixes a graph input's whole shape; `dims[symbol]` fixes a dim_param
    wherever it occurs; other symbolic dims take DEFAULT_DIM, or other sizes where that is
    degenerate (symbolic.py; reported in `defaulted` and `size_note`)."""
    import onnx

    from ..ir.tensors import BFLOAT16, from_array

    if constants:
        frozen = onnx.ModelProto()
        frozen.CopyFrom(model)
        declared = {i.name: i.type.tensor_type.elem_type for i in frozen.graph.input}
        for name, value in constants.items():
            if name not in declared:
                raise TirError(f"constant '{name}' is not a graph input", file=source)
            bf16 = declared[name] == BFLOAT16       # a float32 array on the host
            frozen.graph.initializer.append(from_array(value, name, "bf16" if bf16 else None))
        keep = [i for i in frozen.graph.input if i.name not in constants]
        del frozen.graph.input[:]
        frozen.graph.input.extend(keep)
        model = frozen

    if check:
        try:
            onnx.checker.check_model(model)
        except (onnx.checker.ValidationError, ValueError) as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TirError(f"not a valid ONNX model: {msg}", file=source) from None
    try:
        imp, (graph, weights) = import_at_working_sizes(
            lambda sizes: _Importer(model, source, dict(dims or {}), input_shapes, sizes), model)
    except TirError as e:
        raise e if e.file else TirError(e.message, file=source) from None
    # the exported weights_as_inputs form: weights without values (drawn at random when run)
    for name in imp.meta_weight_inputs:
        imp.weights.pop(imp.meta_names[name][0], None)
    present = graph.types()
    ssa_of = {k: v for k, v in {**imp.value, **imp.weight_ssa}.items() if v in present}
    return OnnxImport(graph, weights, imp.model, ssa_of, dict(imp.symbolic), dict(imp.defaulted),
                      frozenset(imp.folded), frozenset(imp.symbolic_values), tuple(imp.inlined),
                      imp.size_note)


def load_onnx(path: str | Path, dims: Mapping[str, int] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None
              ) -> tuple[Graph, dict[str, np.ndarray]]:
    """Read an ONNX file: the IR graph and the weight values by weight name. Symbolic input
    dimensions take `input_shapes[input]` / `dims[name]`, else DEFAULT_DIM (1). Any problem is
    a TirError naming the file (and the node)."""
    r = read_onnx(path, dims, input_shapes)
    return r.graph, r.weights


def read_onnx(path: str | Path, dims: Mapping[str, int] | None = None,
              input_shapes: Mapping[str, tuple[int, ...]] | None = None) -> OnnxImport:
    """`load_onnx` with the provenance the splicing exporter needs (see OnnxImport). The file
    is validated first and the import run once in onnxruntime (validate.py)."""
    from ..mapped_data import MappedData, mapped_initializers, use
    from .validate import check_runs, load_checked

    model = load_checked(path, mapped=True)
    data = MappedData(Path(path).parent) if mapped_initializers(model) else None
    with use(data):
        imp = import_onnx(model, str(path), dims, check=False, input_shapes=input_shapes)
        imp.data = data
        check_runs(imp, str(path))
    return imp
