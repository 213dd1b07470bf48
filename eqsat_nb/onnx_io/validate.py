"""ONNX inputs checked before anything is computed: every problem a located error (exit 1).

A file is read in this order, each step refusing what the next could not survive:
1. parsed without its external data (a truncated or foreign file stops here);
2. every external data location checked (external.py: inside the model's folder, no symbolic
   link, offset and length inside the file and equal to the tensor's size) and every tensor's
   inline data checked against its dims;
3. the model's frame: IR version and opsets that onnx and onnxruntime know (onnxruntime is asked
   with a one-node model carrying the same opset imports: milliseconds, whatever the model's
   size), graph outputs listed once, graph inputs without a dimension of 0;
4. `onnx.checker` on the file's path (so data files are found and a model over 2 GB never has to
   be serialized again);
5. the external data read in, sparse initializers made dense (onnx's inference does not type
   them; the IR holds tensors dense);
6. the rest of the checker's full check, strict shape and type inference (with data
   propagation), on a copy that holds no large tensor data, then the attribute values the
   operators' own checks miss (convolution and pooling windows, groups that do not divide the
   channels, channels that do not match the weight) and every tensor whose static size is
   beyond what the IR or this machine's memory can hold.
After the import, `check_runs` runs the model once in onnxruntime at the sizes it was imported
with, when its weights are small enough for that to be cheap (RUN_CHECK_BYTES).

Errors name the file, the node (name, op type, opset) and the attribute, input or tensor.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from .. import external_data, mapped_data
from ..errors import TirError
from ..ir.parse import MAX_DIM, MAX_ELEMENTS      # beyond these a tensor is not a real one
from . import external
from .ort_errors import _label, _untagged, ort_located, ort_message  # noqa: F401 - re-exported

RUN_CHECK_BYTES = 256 << 20  # run the input once in onnxruntime when its tensors are this small
_SMALL_TENSOR = 1 << 16      # bytes: tensors kept whole for shape inference (shape constants)
_WINDOW_OPS = {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "ConvInteger",
               "QLinearConv"}


# ------------------------------------------------------------------ reading a file
def load_checked(path: str | Path, mapped: bool = False) -> Any:
    """Read and validate an ONNX file (steps 1-6 above): the model with its data. `mapped`: the
    large initializers of a model with a large external data file stay in their files
    (mapped_data.to_map; read through a `mapped_data.MappedData` of the file's folder)."""
    path = Path(path)
    source = str(path)
    model = _parse(path)
    external.remember_files(path, model)
    external.check_external(model, path.parent, source)
    check_tensors(model, source)
    check_frame(model, source)
    # onnx.checker cannot read sparse tensors kept in external files (onnxruntime can): those
    # models are checked in memory once their data are read
    sparse_outside = any(map(external_data.is_external, external_data.all_tensors(model, True)))
    if not sparse_outside:
        check_file(path, model)
    stay = mapped_data.to_map(model) if mapped else []     # (held: their ids stay theirs)
    left = {id(t) for t in stay}
    try:
        external.read_external(model, path.parent, source, skip=lambda t: id(t) in left)
    except MemoryError:
        raise TirError("not enough memory to load this model", file=source) from None
    except OSError as e:
        raise TirError(f"cannot read the model's external data: {e.strerror or e}",
                       file=source) from None
    if sparse_outside:
        check_file(path, model, in_memory=True)
    densify(model, source)
    check_shapes(model, source)
    return model


def _parse(path: Path) -> Any:
    import onnx
    from google.protobuf.message import DecodeError

    source = str(path)
    try:
        model = onnx.load(source, load_external_data=False)
    except FileNotFoundError:
        raise TirError("cannot read file: No such file or directory", file=source) from None
    except IsADirectoryError:
        raise TirError("cannot read file: Is a directory", file=source) from None
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror or e}", file=source) from None
    except MemoryError:
        raise TirError("not enough memory to load this model", file=source) from None
    except (DecodeError, RuntimeError, ValueError) as e:
        raise TirError(f"not an ONNX model ({type(e).__name__}: the file is not a readable "
                       f"ONNX protobuf, or it is truncated)", file=source) from None
    except Exception as e:      # noqa: BLE001 - anything else protobuf raises on a bad file
        raise TirError(f"not an ONNX model ({type(e).__name__}: {first_line(e)})",
                       file=source) from None
    if not model.HasField("graph"):
        raise TirError("not an ONNX model (no graph)", file=source)
    return model


def first_line(e: BaseException | str) -> str:
    """The first non-empty line of a message (the exception's type name when it has none)."""
    text = str(e).strip()
    if not text:
        return type(e).__name__ if isinstance(e, BaseException) else ""
    return text.splitlines()[0].strip()


# ------------------------------------------------------------------ 2. tensors
_FIELDS = {1: "float_data", 2: "int32_data", 3: "int32_data", 4: "int32_data",
           5: "int32_data", 6: "int32_data", 7: "int64_data", 8: "string_data",
           9: "int32_data", 10: "int32_data", 11: "double_data", 12: "uint64_data",
           13: "uint64_data", 14: "float_data", 15: "double_data", 16: "int32_data"}


def check_tensors(model: Any, source: str) -> None:
    """Every tensor held in the file has as many values as its dims say."""
    for t in external_data.all_tensors(model):
        if external_data.is_external(t):
            continue
        if any(d < 0 for d in t.dims):
            raise TirError(f"tensor '{t.name}' has a negative dimension: {list(t.dims)}",
                           file=source)
        n = 1
        for d in t.dims:
            n *= int(d)
        if n > MAX_ELEMENTS:
            raise TirError(f"tensor '{t.name}' has dims {list(t.dims)}: {n:.3g} elements, "
                           f"more than any real tensor (at most 2^40)", file=source)
        if t.HasField("raw_data"):
            need, have, unit = external_data.expected_bytes(t), len(t.raw_data), "bytes"
        else:
            fld = _FIELDS.get(t.data_type)
            if fld is None:
                continue
            need, have, unit = n * (2 if t.data_type in (14, 15) else 1), len(
                getattr(t, fld)), "values"
            if have == 0 and n and not t.data_location:
                have = _count_other_fields(t)
        if need is not None and need != have:
            raise TirError(f"tensor '{t.name}' has dims {list(t.dims)} ({need} {unit}) but "
                           f"holds {have} {unit}", file=source)


def _count_other_fields(t: Any) -> int:
    return sum(len(getattr(t, f)) for f in set(_FIELDS.values()))


def densify(model: Any, source: str) -> None:
    """Sparse initializers (any graph) become dense initializers of the same name: onnx's shape
    inference does not type them and the IR holds tensors dense. One whose dense form would be
    beyond a real tensor or this machine's memory is refused."""
    import numpy as np

    from ..ir.tensors import BFLOAT16, from_array, to_array

    for g in _graphs(model.graph):
        if not len(g.sparse_initializer):
            continue
        dense = []
        for s in g.sparse_initializer:
            name, dims = s.values.name, [int(d) for d in s.dims]
            n = 1
            for d in dims:
                n *= d
            size = n * (external_data.ITEMSIZE.get(s.values.data_type) or 1)
            memory = _memory_bytes()
            if any(d < 0 for d in dims) or n > MAX_ELEMENTS or (memory and size > memory // 4):
                raise TirError(f"sparse initializer '{name}' has dims {dims}: as a dense "
                               f"tensor it would be too large to hold", file=source)
            try:
                values = to_array(s.values).reshape(-1)
                idx = to_array(s.indices).astype(np.int64)
                if idx.ndim == 2 and len(dims):      # [NNZ, rank] coordinates
                    if idx.shape[1] != len(dims) or (idx < 0).any() or (
                            idx >= np.array(dims)).any():
                        raise ValueError("coordinates outside the tensor")
                    idx = np.ravel_multi_index(tuple(idx.T), dims)
                idx = idx.reshape(-1)
                if len(idx) != len(values) or (idx < 0).any() or (idx >= n).any() or (
                        len(np.unique(idx)) != len(idx)):
                    raise ValueError("indices that do not match its values or its dims")
                full = np.zeros(n, dtype=values.dtype)
                full[idx] = values
            except (ValueError, TypeError, IndexError) as e:
                raise TirError(f"sparse initializer '{name}' is malformed: {first_line(e)}",
                               file=source) from None
            bf16 = s.values.data_type == BFLOAT16         # a float32 array on the host
            dense.append(from_array(full.reshape(dims), name, "bf16" if bf16 else None))
        del g.sparse_initializer[:]
        g.initializer.extend(dense)


def _graphs(g: Any) -> list[Any]:
    """A graph and every subgraph in it."""
    out = [g]
    for n in g.node:
        for a in n.attribute:
            if a.HasField("g"):
                out += _graphs(a.g)
            for sg in a.graphs:
                out += _graphs(sg)
    return out


# ------------------------------------------------------------------ 3. the model's frame
def check_frame(model: Any, source: str) -> None:
    """IR version and opsets known to onnx and onnxruntime; outputs and inputs well formed."""
    import onnx

    g = model.graph
    if model.ir_version < 1:
        raise TirError(f"the model declares IR version {model.ir_version}; an ONNX model has "
                       f"IR version 1 or later", file=source)
    if model.ir_version > onnx.IR_VERSION:
        raise TirError(f"the model declares IR version {model.ir_version}, newer than the "
                       f"installed onnx knows ({onnx.IR_VERSION})", file=source)
    known = onnx.defs.onnx_opset_version()
    seen: set[str] = set()
    for o in model.opset_import:
        dom = o.domain or "ai.onnx"
        if dom in seen:
            raise TirError(f"opset of domain '{dom}' is imported twice", file=source)
        seen.add(dom)
        if o.version < 1:
            raise TirError(f"the model imports opset {o.version} of '{dom}'; opsets start at 1",
                           file=source)
        if dom == "ai.onnx" and o.version > known:
            raise TirError(f"the model imports opset {o.version}, newer than the installed onnx "
                           f"knows (up to {known})", file=source)
    _probe_onnxruntime(model, source)
    outs = [o.name for o in g.output]
    for name in outs:
        if outs.count(name) > 1:
            raise TirError(f"graph output '{name}' is listed {outs.count(name)} times; each "
                           f"output must be listed once", file=source)
    inits = {t.name for t in g.initializer}
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value == 0:
                raise TirError(f"graph input '{vi.name}' declares dimension {axis} as 0: "
                               f"onnxruntime accepts only an empty tensor there, and eqsat-nb "
                               f"cannot optimize zero-size tensors", file=source)
            if d.HasField("dim_value") and d.dim_value > MAX_DIM:
                raise TirError(f"graph input '{vi.name}' declares dimension {axis} as "
                               f"{d.dim_value}, larger than any real tensor (at most "
                               f"2^31 - 1)", file=source)
            if d.HasField("dim_value") and d.dim_value < -1:
                # -1 is the "unknown" some converters write (read as a symbolic dim); any
                # other negative size is no size at all
                raise TirError(f"graph input '{vi.name}' declares dimension {axis} as "
                               f"{d.dim_value}: expected a positive size or a symbolic name "
                               f"(dim_param)", file=source)


def _probe_onnxruntime(model: Any, source: str) -> None:
    """Does onnxruntime take this IR version and these opsets? Asked with a one-node model."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    if not any((o.domain or "") in ("", "ai.onnx") for o in model.opset_import):
        return
    vi = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1]) for n in ("x", "y")]
    probe = helper.make_model(helper.make_graph([helper.make_node("Identity", ["x"], ["y"])],
                                                "probe", vi[:1], vi[1:]))
    del probe.opset_import[:]
    probe.opset_import.extend(model.opset_import)
    probe.ir_version = max(model.ir_version, 3)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:      # noqa: BLE001 - onnxruntime's own refusal is the answer
        raise TirError(f"onnxruntime refuses the model's IR version or opsets: "
                       f"{ort_message(e)}", file=source) from None


# ------------------------------------------------------------------ 4. onnx.checker
def _opset(model: Any) -> int | None:
    """The model's ai.onnx opset (for naming nodes in errors)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def check_file(path: Path, model: Any, in_memory: bool = False) -> None:
    """onnx.checker on the file's path (its data files found beside it), or on `model` with
    its data read (`in_memory`). Its full check is strict shape inference, which
    `check_shapes` runs on a copy without the weights."""
    import onnx

    try:
        onnx.checker.check_model(model if in_memory else str(path))
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError,
            RuntimeError) as e:
        raise TirError(f"not a valid ONNX model: {locate(str(e), _opset(model))}",
                       file=str(path)) from None


_INFER = re.compile(r"\(op_type:([^,]*), node name: ([^)]*)\):\s*(.*)")
_CONTEXT = re.compile(r"[Nn]ame: (.*?) OpType: (\S+)")


def locate(text: str, opset: int | None = None) -> str:
    """A checker or shape-inference message with its node first: "node 'n' (Op): what"."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text).strip()
    m = _INFER.search(text)
    if m:
        op, name, rest = m.group(1).strip(), m.group(2).strip(), m.group(3)
        return f"{_label(name, op, opset)}: {_untagged(rest.splitlines()[0] if rest else rest)}"
    body = text.split("==> Context")[0]
    head = _untagged(" ".join(body.split()))[:400]
    m = _CONTEXT.search(text)
    if m:
        return f"{_label(m.group(1), m.group(2), opset)}: {head}"
    return head


# ------------------------------------------------------------------ 5. shapes and attributes
def skeleton(model: Any) -> Any:
    """A copy of the model without the data of its large tensors (dims and types kept), for
    shape inference: the constants shapes are computed from are small and stay whole."""
    import onnx

    split = external_data.Splitter("-", _SMALL_TENSOR)
    copy = split.model(model)
    for t in external_data.all_tensors(copy):
        if external_data.is_external(t) and external_data.entries(t).get("location") == "-":
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            t.raw_data = b""
    return copy


def check_shapes(model: Any, source: str) -> None:
    """Attribute values first (onnx's inference divides by strides: onnx 1.16 dies of SIGFPE on a
    stride of 0), then strict shape inference, channels and tensor sizes (see the module doc)."""
    import onnx

    opset = _opset(model) or 0
    for g in _graphs(model.graph):
        for node in g.node:
            if node.domain in ("", "ai.onnx"):
                _check_attributes(node, opset, source)
    try:
        inferred = onnx.shape_inference.infer_shapes(skeleton(model), check_type=True,
                                                     strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError,
            RuntimeError) as e:
        raise TirError(f"shape inference fails: {locate(str(e), _opset(model))}",
                       file=source) from None
    shapes = _static_shapes(inferred)
    for node in inferred.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type in ("Conv", "ConvTranspose"):
            _check_channels(node, shapes, opset, source)
    _check_sizes(inferred, shapes, source)


def _static_shapes(model: Any) -> dict[str, tuple[int, list[int | None]]]:
    """Element type and dims (None where unknown) of every value shape inference typed."""
    g = model.graph
    out: dict[str, tuple[int, list[int | None]]] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
            continue
        out[vi.name] = (tt.elem_type, [int(d.dim_value) if d.HasField("dim_value") else None
                                       for d in tt.shape.dim])
    for t in g.initializer:
        out[t.name] = (t.data_type, [int(d) for d in t.dims])
    return out


def _ints(node: Any, name: str) -> list[int] | None:
    for a in node.attribute:
        if a.name == name:
            return [int(v) for v in a.ints] if a.ints or a.type == 7 else [int(a.i)]
    return None


_POSITIVE = ("strides", "dilations", "kernel_shape", "blocksize")


def _check_attributes(node: Any, opset: int, source: str) -> None:
    """Window sizes, strides, dilations and block sizes positive; window pads not negative;
    none beyond a tensor dimension; a convolution's group at least 1."""
    label = _label(node.name, node.op_type, opset)

    def refuse(what: str) -> TirError:
        return TirError(f"{label}: {what}", file=source)

    names = _POSITIVE + (("pads", "output_padding") if node.op_type in _WINDOW_OPS else ())
    for attr in names:
        vals = _ints(node, attr)
        if not vals:
            continue
        if attr in _POSITIVE and any(v <= 0 for v in vals):
            raise refuse(f"attribute {attr} {vals}: every value must be positive")
        if any(v < 0 for v in vals):
            raise refuse(f"attribute {attr} {vals}: values must not be negative")
        if any(v > MAX_DIM for v in vals):
            raise refuse(f"attribute {attr} {vals}: larger than any tensor dimension "
                         f"(at most 2^31 - 1)")
    if node.op_type in ("Conv", "ConvTranspose"):
        group = (_ints(node, "group") or [1])[0]
        if group < 1:
            raise refuse(f"attribute group {group}: must be at least 1")


def _check_channels(node: Any, shapes: dict, opset: int, source: str) -> None:
    """A convolution's group divides its channels and its input matches its weight."""
    label = _label(node.name, node.op_type, opset)

    def refuse(what: str) -> TirError:
        return TirError(f"{label}: {what}", file=source)

    if len(node.input) < 2:
        return
    group = (_ints(node, "group") or [1])[0]
    x, w = shapes.get(node.input[0]), shapes.get(node.input[1])
    if x is None or w is None or len(x[1]) < 2 or len(w[1]) < 2:
        return
    c, (w0, w1) = x[1][1], w[1][:2]
    if node.op_type == "Conv":
        if w0 is not None and w0 % group:
            raise refuse(f"weight '{node.input[1]}' has {w0} output channels, which group "
                         f"{group} does not divide")
        if c is not None and w1 is not None and c != w1 * group:
            raise refuse(f"input '{node.input[0]}' has {c} channels but weight "
                         f"'{node.input[1]}' expects {w1} x group {group} = {w1 * group}")
    else:
        if w0 is not None and w0 % group:
            raise refuse(f"weight '{node.input[1]}' has {w0} input channels, which group "
                         f"{group} does not divide")
        if c is not None and w0 is not None and c != w0:
            raise refuse(f"input '{node.input[0]}' has {c} channels but weight "
                         f"'{node.input[1]}' expects {w0}")


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_sizes(model: Any, shapes: dict, source: str) -> None:
    """No value whose static size is beyond a real tensor or this machine's memory."""
    from ..check_outputs import human_bytes

    producer = {o: n for n in model.graph.node for o in n.output}
    memory = _memory_bytes()
    for name, (elem, dims) in shapes.items():
        if any(d is None for d in dims):
            continue
        n = 1
        for d in dims:
            n *= d
        size = n * (external_data.ITEMSIZE.get(elem) or 1)
        why = None
        if any(d > MAX_DIM for d in dims):
            why = "a dimension larger than any real tensor (at most 2^31 - 1)"
        elif n > MAX_ELEMENTS:
            why = f"{n:.3g} elements, more than any real tensor (at most 2^40)"
        elif memory is not None and size > memory:
            why = (f"{n:.3g} elements ({human_bytes(size)}), more than this machine's memory "
                   f"({human_bytes(memory)})")
        if why is None:
            continue
        node = producer.get(name)
        where = f"{_label(node.name, node.op_type)}: output '{name}'" if node is not None \
            else f"value '{name}'"
        raise TirError(f"{where} has dims {dims}: {why}", file=source)


# ------------------------------------------------------------------ after the import
def check_runs(imp: Any, source: str) -> None:
    """Load the file in onnxruntime as it is (its data files beside it) and run it once with no
    graph optimizations (so node names are the model's) on random inputs of the sizes it was
    imported with, when its tensors are at most RUN_CHECK_BYTES. A failure to load is a located
    error; so is a failure to run when every input is a float tensor (with integer inputs random
    values may be what fails: indices, shapes), else a warning.

    A model with half-precision tensors that onnxruntime's CPU cannot load or run in its own
    precision (it has bfloat16 kernels for few operators, and NumPy has no bfloat16 to feed)
    is loaded and run widened to float32 instead (widen.py), as the check of an optimized
    model then runs it; the original's error is reported when that fails to load too. The
    runs stop at the enclosing `stopping.time_limit` (RunStopped)."""
    import onnxruntime as ort

    from ..runtime import session_options
    from .input_types import import_shapes
    from .measure import random_feeds

    if sum(external_data.data_bytes(t) or (external_data.is_external(t) and
           external_data.expected_bytes(t) or 0)
           for t in external_data.all_tensors(imp.model)) > RUN_CHECK_BYTES:
        return
    so = session_options(1)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    feeds = random_feeds(imp.model, shapes=import_shapes(imp))
    what = "this model"
    try:
        sess = ort.InferenceSession(source, so, providers=["CPUExecutionProvider"])
    except Exception as e:      # noqa: BLE001 - onnxruntime's refusal is the answer
        sess = _widened_session(imp.model, so)
        if sess is None:
            raise TirError(f"onnxruntime cannot load this model: {ort_located(e)}",
                           file=source) from None
        what = WIDENED
    error = _run_error(sess, feeds if what != WIDENED else _wide(feeds))
    if error is not None and what != WIDENED:
        wide = _widened_session(imp.model, so)
        if wide is not None and _run_error(wide, _wide(feeds)) is None:
            return
    if error is None:
        return
    shapes = ", ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in feeds.items())
    text = f"onnxruntime cannot run {what} on random inputs ({shapes}): {ort_located(error)}"
    if all(v.dtype.kind == "f" for v in feeds.values()):
        raise TirError(text, file=source) from None
    import sys
    print(f"warning: {source}: {text}", file=sys.stderr)


WIDENED = "this model widened to float32"


def _run_error(sess: Any, feeds: Any) -> BaseException | None:
    """The exception one run of `sess` raises, None if it runs (RunStopped at the time limit
    is raised, not returned)."""
    from ..errors import RunStopped
    from ..stopping import run_until

    try:
        run_until(sess, None, feeds, what="onnxruntime's test run of the input model")
    except RunStopped:
        raise
    except Exception as e:      # noqa: BLE001 - onnxruntime raises its own types
        return e
    return None


def _wide(feeds: Any) -> Any:
    from .widen import widen_feeds
    return widen_feeds(feeds)


def _widened_session(model: Any, so: Any) -> Any:
    """A session of `model` widened to float32, when it has half-precision tensors and
    onnxruntime loads that; else None."""
    import onnxruntime as ort

    from ..precision import onnx_half_types
    from .widen import widen

    if not onnx_half_types(model):
        return None
    try:
        return ort.InferenceSession(widen(model).SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception:           # noqa: BLE001 - the original's error is the one to report
        return None


