"""The types an import works with: the shape each graph input takes and every value's type.

Symbolic input dimensions are fixed first: `input_shapes` by input, `dims` by dim_param, else
DEFAULT_DIM or, where that size is degenerate, the size symbolic.py found (`imp.sizes`), reported
in `OnnxImport.symbolic`/`defaulted`/`size_note`, never silently. Then `onnx.shape_inference`
(with data propagation), the output types of If/Loop/Scan from their subgraphs (control_flow.py)
and the folding of shape computations (fold.py) give every value's type; values of element types
the IR lacks, values that are not tensors, zero-size values and unknown shapes are recorded so
that an error names them when a node needs them (a `DegenerateShape` where the sizes chosen for
symbolic dims may be the cause).
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import TirError
from ..ir.graph import TensorType
from ..ir.opaque import ONNX_TO_DTYPE
from ..ir.ops.onnx_map import BitsConst, Const
from ..ir.tensors import dtype_of_array
from .elem_types import np_to_onnx

def initializer_const(t: Any) -> Const:
    """The constant an initializer (TensorProto) holds (ValueError if unreadable)."""
    from ..external_data import is_external
    from ..ir.tensors import BFLOAT16, to_array
    from ..mapped_data import current

    data = current() if is_external(t) else None    # a mapped read (mapped_data.py): a view
    if data is None:
        return Const(to_array(t), False, bf16=t.data_type == BFLOAT16)
    if t.data_type == BFLOAT16:                     # the view of its bit patterns
        return BitsConst(data.array(t))
    return Const(data.array(t), False)


DEFAULT_DIM = 1          # size given to a symbolic dimension (e.g. the batch) not named in `dims`
SMALL = 4096             # constants up to this many elements take part in shape inference


class DegenerateShape(TirError):
    """The import failed because of the sizes the symbolic dims were analysed at (zero-size
    values, shape inference refusing them, shapes it cannot derive): other sizes may import
    (symbolic.py tries them)."""


def dims_text(shapes: Mapping[str, list]) -> str:
    return ", ".join(f"'{k}' [{', '.join(str(d) for d in v)}]" for k, v in shapes.items())


def input_dims(imp: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, set[int]]]:
    """The shape each graph input is imported with, and the axes that took DEFAULT_DIM
    because the user named no size for them. A dim that is a dim_param, unnamed, or written
    as -1 or 0 is symbolic."""
    g = imp.model.graph
    inits = {t.name for t in g.initializer}
    names = {i.name for i in g.input}
    for name in imp.input_shapes:
        if name not in names or name in inits:
            raise imp.err(f"input shape given for '{name}', which is not a graph input "
                          f"(inputs: {', '.join(sorted(names - inits)) or 'none'})")
    shapes: dict[str, tuple[int, ...]] = {}
    free: dict[str, set[int]] = {}
    imp.free_symbols = {}
    for inp in g.input:
        if inp.name in inits:
            continue
        tt = inp.type.tensor_type
        if not inp.type.HasField("tensor_type") or not tt.HasField("shape"):
            if inp.name in imp.input_shapes:
                shapes[inp.name] = tuple(int(d) for d in imp.input_shapes[inp.name])
                continue
            raise imp.err(f"graph input '{inp.name}' has no tensor shape (give it one: "
                          f"--input-shape {inp.name}=...)")
        labels: list[int | str] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                labels.append(int(d.dim_value))
            else:
                labels.append(d.dim_param if d.dim_param else "?")
        if any(isinstance(x, str) for x in labels):
            imp.symbolic[inp.name] = labels
        given = imp.input_shapes.get(inp.name)
        if given is not None:
            given = tuple(int(d) for d in given)
            if len(given) != len(labels) or any(
                    isinstance(x, int) and x != y for x, y in zip(labels, given)) or any(
                    y < 0 for y in given):
                raise imp.err(f"input shape {dims_text({inp.name: list(given)})} given for "
                              f"'{inp.name}', whose dims are "
                              f"{dims_text({inp.name: labels})}")
            shapes[inp.name] = given
            continue
        dims = []
        for k, x in enumerate(labels):
            if isinstance(x, int):
                dims.append(x)
            elif x != "?" and x in imp.dims:
                dims.append(int(imp.dims[x]))
            else:
                symbol = x if x != "?" else f"{inp.name}[{k}]"
                imp.free_symbols.setdefault(symbol, []).append((inp.name, k))
                dims.append(int(imp.sizes.get(symbol, DEFAULT_DIM)))
                free.setdefault(inp.name, set()).add(k)
        shapes[inp.name] = tuple(dims)
    imp.defaulted = {k: sorted(v) for k, v in free.items()}
    return shapes, free


def import_shapes(imp: Any) -> dict[str, tuple[int, ...]]:
    """The shape each graph input was imported with (symbolic dims fixed or defaulted)."""
    types = imp.graph.types()
    return {name: types[ssa].shape for name, ssa in imp.ssa_of.items()
            if ssa in dict(imp.graph.inputs)}



def infer_types(imp: Any) -> None:
    from . import fold
    from .control_flow import empty_in_branches, fold_with_control_flow

    shapes, free = input_dims(imp)
    known = {k: c.value for k, c in imp.consts.items()
             if c.value.size <= fold.FOLD_MAX and not c.bf16}     # fold.py: bf16 is not folded
    try:
        res = fold_with_control_flow(imp.model, shapes, known, free, SMALL)
    except Exception as e:   # noqa: BLE001 - inference errors are of onnx's own types
        raise imp.err(f"shape inference failed: {str(e).strip().splitlines()[0]}",
                      cls=DegenerateShape) from None
    empty = empty_in_branches(res.model, res, known, SMALL) if free else None
    if empty is not None:       # sizes the tool chose, at which a branch computes nothing
        raise imp.err(f"'{empty[1]}', computed in a branch, has a zero-size dimension at "
                      f"these sizes", empty[0], DegenerateShape)
    if res.model is not imp.model:          # If nodes with a constant condition inlined
        imp.model = res.model
        imp.index_nodes(imp.model.graph)
        for t in imp.model.graph.initializer:
            if t.name not in imp.consts:
                imp.consts[t.name] = initializer_const(t)
        imp.inlined = res.inlined
    for name, v in res.values.items():
        imp.consts[name] = Const(v, True)
        imp.folded.add(name)
    imp.symbolic_values = res.symbolic
    imp.concrete = res.concrete
    g = imp.model.graph
    ig = res.inferred.graph
    for vi in list(ig.input) + list(ig.value_info) + list(ig.output):
        kind = vi.type.WhichOneof("value")
        if kind not in (None, "tensor_type"):      # a sequence, map, optional, sparse tensor
            imp.not_tensors.setdefault(vi.name, kind.removesuffix("_type").replace("_", " "))
        if vi.name in imp.types or kind != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or tt.elem_type == 0:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        if tt.elem_type not in ONNX_TO_DTYPE:
            imp.bad_types[vi.name] = tt.elem_type
            continue
        if 0 in dims:
            imp.zero_size.add(vi.name)
        if any(d <= 0 for d in dims):
            continue                 # unknown or zero-size: left unknown
        imp.types[vi.name] = TensorType(tuple(dims), ONNX_TO_DTYPE[tt.elem_type])
    for t in g.initializer:
        if t.data_type in ONNX_TO_DTYPE and all(d > 0 for d in t.dims):
            imp.types.setdefault(t.name, TensorType(tuple(t.dims),
                                                     ONNX_TO_DTYPE[t.data_type]))
    for name, v in res.values.items():
        dt = dtype_of_array(v)
        if dt is None:
            imp.bad_types.setdefault(name, np_to_onnx(v.dtype))
        elif v.size == 0:
            imp.zero_size.add(name)
        elif name not in imp.types:
            imp.types[name] = TensorType(tuple(int(d) for d in v.shape), dt)
