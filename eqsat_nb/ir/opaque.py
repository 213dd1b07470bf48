"""Opaque nodes: operators the IR does not model, kept as the ONNX node they came from.

An opaque node's attributes are `op`, `domain`, `opset` and `onnx` (the base64 of a serialized
ONNX NodeProto whose inputs are the placeholders i0, i1, ... for the operands in order, "" for
omitted optional inputs and `empty:<ONNX element type>:<dims>` for a zero-size constant the node
reads, such as Resize-11's required empty `roi` (the IR holds no zero-size tensors, so the node
carries it and every writer makes it a constant again), outputs likewise o0, o1, ... / "").
Nothing in the optimizer looks inside;
the reference interpreter runs the stored node as a one-node model in onnxruntime so graphs that
contain opaque nodes stay executable, and the ONNX exporter writes the node back unchanged.

onnxruntime's CPU has bfloat16 kernels for few operators, so a node with bf16 operands or
results (or bf16 inside its attributes) runs with those types widened to float32 (ir/widen.py)
on operands rounded to bfloat16, and its bf16 results are rounded to bfloat16 (ir/bfloat16.py):
what the node computes in bf16, up to the float32 rounding of its intermediate steps.
"""
from __future__ import annotations

import base64
import binascii
from functools import lru_cache
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import RunStopped, TirError
from .bfloat16 import round_bf16
from .graph import TensorType

from .dtypes import DTYPE_TO_ONNX, NP_DTYPES, ONNX_TO_DTYPE  # noqa: F401 - re-exported

DEFAULT_OPSET = 21          # opset of the default domain written next to a foreign-domain node
IR_VERSION = 10             # ONNX IR version of the models we write (onnxruntime >= 1.17 reads it)

# ops whose results are random: two equal-looking nodes are different values (no CSE in e-graphs)
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                              "RandomUniformLike", "Multinomial", "Bernoulli"})


class OpaqueAttrError(TirError):
    """A malformed opaque attribute; `attr` names it so the parser can point at it."""

    def __init__(self, message: str, attr: str) -> None:
        super().__init__(message)
        self.attr = attr


EMPTY = "empty:"


def empty_input(elem_type: int, shape: Sequence[int]) -> str:
    """The stored node's input that stands for a zero-size constant of this ONNX element type
    and shape (see the module doc)."""
    return f"{EMPTY}{int(elem_type)}:{'x'.join(str(int(d)) for d in shape)}"


def parse_empty(name: str) -> tuple[int, tuple[int, ...]] | None:
    """(element type, shape) of an `empty:` input; None for any other name."""
    if not name.startswith(EMPTY):
        return None
    try:
        elem, dims = name[len(EMPTY):].split(":")
        shape = tuple(int(d) for d in dims.split("x")) if dims else ()
        elem_type = int(elem)
    except ValueError:
        return None
    if elem_type <= 0 or 0 not in shape or any(d < 0 for d in shape):
        return None
    return elem_type, shape


def empty_tensor(name: str, placeholder: str) -> Any:
    """The TensorProto (named `name`) an `empty:` input stands for."""
    from onnx import helper
    elem_type, shape = parse_empty(placeholder)   # type: ignore[misc] - checked by check_opaque
    return helper.make_tensor(name, elem_type, list(shape), [])


def encode_node(node: Any, inputs_present: Sequence[bool | str],
                outputs_present: Sequence[bool]) -> str:
    """The `onnx` attribute for ONNX `node`: a copy with placeholder input/output names and no
    node name (names are the graph's business), serialized and base64-encoded. An entry of
    `inputs_present` is True for an operand, False for an omitted input, or an `empty:` input
    kept as it is."""
    import onnx

    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = ""
    copy.doc_string = ""
    del copy.input[:]
    del copy.output[:]
    k = 0
    for present in inputs_present:
        if isinstance(present, str):
            copy.input.append(present)
            continue
        copy.input.append(f"i{k}" if present else "")
        k += present
    k = 0
    for present in outputs_present:
        copy.output.append(f"o{k}" if present else "")
        k += present
    return base64.b64encode(copy.SerializeToString(deterministic=True)).decode("ascii")


GRAPH, GRAPHS = 5, 10      # onnx.AttributeProto.GRAPH / GRAPHS


def subgraphs(node: Any) -> list[Any]:
    """The GraphProtos a node's attributes hold (If's branches, Loop's and Scan's bodies)."""
    return [g for a in node.attribute
            for g in ([a.g] if a.type == GRAPH else list(a.graphs) if a.type == GRAPHS else [])]


def implicit_inputs(node: Any) -> list[str]:
    """The enclosing-scope names a node's subgraphs (If/Loop/Scan bodies) read, in order of
    first appearance. An opaque node with subgraphs takes them as operands after the explicit
    ones (so the IR knows the dependency), and the stored node keeps their original names."""
    seen: dict[str, None] = {}
    for g in subgraphs(node):
        for v in _graph_reads(g):
            seen.setdefault(v)
    return list(seen)


def _graph_reads(g: Any) -> list[str]:
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    out: dict[str, None] = {}
    for n in g.node:
        for v in n.input:
            if v and v not in local:
                out.setdefault(v)
        for v in implicit_inputs(n):
            if v not in local:
                out.setdefault(v)
        local.update(o for o in n.output if o)
    for o in g.output:
        if o.name not in local:
            out.setdefault(o.name)
    return list(out)


def input_names(node: Any) -> list[str]:
    """The one-node model's input names for a stored node: its operand inputs (i0, i1, ...)
    then its implicit ones."""
    return [i for i in node.input if i and not i.startswith(EMPTY)] + implicit_inputs(node)


def _inner_names(node: Any) -> set[str]:
    """Every name a node's subgraphs define or read, at any depth."""
    names: set[str] = set()
    for g in subgraphs(node):
        names |= {i.name for i in g.input} | {t.name for t in g.initializer}
        names |= {o.name for o in g.output}
        for n in g.node:
            names.update(v for v in list(n.input) + list(n.output) if v)
            names |= _inner_names(n)
    return names


def runnable_node(attrs: Mapping[str, Any]) -> Any:
    """The stored node with its placeholder names (i0.., o0.., empty:..) renamed where a
    subgraph uses the same name (a Loop body's own 'i1'): the one-node model must be SSA."""
    node = decode_node(attrs)
    inner = _inner_names(node)
    if not inner:
        return node
    taken = set(inner)

    def clear(v: str) -> str:
        if not v or v not in inner:
            return v
        k = 0
        while f"{v}_{k}" in taken:
            k += 1
        taken.add(f"{v}_{k}")
        return f"{v}_{k}"
    renamed = {v: clear(v) for v in dict.fromkeys(list(node.input) + list(node.output))}
    ins = [renamed[v] for v in node.input]
    outs = [renamed[v] for v in node.output]
    del node.input[:]
    del node.output[:]
    node.input.extend(ins)
    node.output.extend(outs)
    return node


@lru_cache(maxsize=1024)
def _decode(b64: str) -> bytes:
    try:
        return base64.b64decode(b64.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise OpaqueAttrError("attribute 'onnx' is not base64 text", "onnx") from None


def decode_node(attrs: Mapping[str, Any]) -> Any:
    """The stored ONNX NodeProto of an opaque node (placeholder input/output names)."""
    import onnx
    from google.protobuf.message import DecodeError

    node = onnx.NodeProto()
    try:
        node.ParseFromString(_decode(attrs["onnx"]))
    except DecodeError:
        raise OpaqueAttrError("attribute 'onnx' is not a serialized ONNX node", "onnx") from None
    return node


def check_opaque(attrs: Mapping[str, Any], n_inputs: int, n_results: int) -> None:
    """Raise OpaqueAttrError unless the stored node agrees with `op`/`domain` and with the
    number of operands and results of the statement."""
    node = decode_node(attrs)
    if node.op_type != attrs["op"]:
        raise OpaqueAttrError(f"attribute 'op' is \"{attrs['op']}\" but the stored ONNX node is "
                              f"a {node.op_type or '(no op_type)'}", "op")
    if node.domain != attrs["domain"]:
        raise OpaqueAttrError(f"attribute 'domain' is \"{attrs['domain']}\" but the stored ONNX "
                              f"node's domain is \"{node.domain}\"", "domain")
    if attrs["opset"] < 1:
        raise OpaqueAttrError(f"attribute 'opset' must be positive, got {attrs['opset']}", "opset")
    for i in node.input:
        if i.startswith(EMPTY) and parse_empty(i) is None:
            raise OpaqueAttrError(f"the stored ONNX node's input '{i}' is not "
                                  f"{EMPTY}<element type>:<dims with a 0>", "onnx")
    ins = [i for i in node.input if i and not i.startswith(EMPTY)]
    if ins != [f"i{k}" for k in range(len(ins))]:
        raise OpaqueAttrError("the stored ONNX node's inputs must be i0, i1, ..., \"\" or "
                              f"{EMPTY}...", "onnx")
    outs = [o for o in node.output if o]
    if outs != [f"o{k}" for k in range(len(outs))]:
        raise OpaqueAttrError("the stored ONNX node's outputs must be o0, o1, ... or \"\"", "onnx")
    n_in = len(ins) + len(implicit_inputs(node))
    if n_in != n_inputs:
        raise OpaqueAttrError(f"opaque {attrs['op']}: the stored node reads {n_in} "
                              f"operand{'s' if n_in != 1 else ''}, {n_inputs} given", "onnx")
    if len(outs) != n_results:
        raise OpaqueAttrError(f"opaque {attrs['op']}: the stored node has {len(outs)} "
                              f"result{'s' if len(outs) != 1 else ''}, {n_results} declared",
                              "onnx")


def opset_imports(domain: str, opset: int) -> list[tuple[str, int]]:
    """(domain, version) pairs a model holding this node needs."""
    if domain in ("", "ai.onnx"):
        return [("", opset)]
    return [("", DEFAULT_OPSET), (domain, opset)]


def one_node_model(attrs: Mapping[str, Any], in_types: Sequence[TensorType],
                   out_types: Sequence[TensorType]) -> Any:
    """A model of just this node: inputs i0.., outputs o0.. (see runnable_node) with the given
    types."""
    from onnx import helper

    node = runnable_node(attrs)
    for t in list(in_types) + list(out_types):
        if t.dtype not in DTYPE_TO_ONNX:
            raise TirError(f"opaque {attrs['op']}: element type {t.dtype} has no ONNX equivalent")
    empties = {i: e for i, e in zip(node.input, decode_node(attrs).input) if e.startswith(EMPTY)}
    graph = helper.make_graph(
        [node], f"opaque_{attrs['op']}",
        [helper.make_tensor_value_info(name, DTYPE_TO_ONNX[t.dtype], list(t.shape))
         for name, t in zip(input_names(node), in_types)],
        [helper.make_tensor_value_info(name, DTYPE_TO_ONNX[t.dtype], list(t.shape))
         for name, t in zip([o for o in node.output if o], out_types)],
        initializer=[empty_tensor(name, e) for name, e in empties.items()])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid(d, v) for d, v in opset_imports(attrs["domain"], attrs["opset"])])
    model.ir_version = IR_VERSION
    return model


@lru_cache(maxsize=256)
def _session(attrs: tuple, in_types: tuple[TensorType, ...], out_types: tuple[TensorType, ...]):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4         # failures are raised as TirErrors, not logged
    model = one_node_model(dict(attrs), in_types, out_types)
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


BF16_ONNX = 16                    # onnx.TensorProto.BFLOAT16
HALF_ONNX = (10, BF16_ONNX)       # FLOAT16, BFLOAT16


def _widened(t: TensorType, half: tuple[int, ...]) -> TensorType:
    return TensorType(t.shape, "f32") if DTYPE_TO_ONNX.get(t.dtype) in half else t


@lru_cache(maxsize=256)
def _holds(attrs: tuple, half: tuple[int, ...]) -> bool:
    """Whether the stored node holds or produces a type in `half` by its attributes."""
    from .widen import holds
    return holds(decode_node(dict(attrs)), half)


@lru_cache(maxsize=256)
def _widened_attrs(attrs: tuple, half: tuple[int, ...]) -> tuple:
    """The attributes of the opaque node with its stored node widened (ir/widen.py)."""
    from .widen import widen_node

    a = dict(attrs)
    node = decode_node(a)
    widen_node(node, half)
    a["onnx"] = base64.b64encode(node.SerializeToString(deterministic=True)).decode("ascii")
    return tuple(a.items())


@lru_cache(maxsize=1024)
def _anonymous(attrs: tuple) -> tuple:
    """The attributes with the stored node's name, doc string and metadata cleared: what tells
    the copies of a layer's node apart (torch.onnx's `layers.7/...` names and stack traces), not
    what it computes. Copies share one session (32 layers' worth of sessions held 1.2 GB)."""
    a = dict(attrs)
    node = decode_node(a)
    if not (node.name or node.doc_string or len(getattr(node, "metadata_props", ()))):
        return attrs
    node.name = ""
    node.doc_string = ""
    if hasattr(node, "metadata_props"):
        del node.metadata_props[:]
    a["onnx"] = base64.b64encode(node.SerializeToString(deterministic=True)).decode("ascii")
    return tuple(a.items())


def run_opaque(attrs: tuple, args: Sequence[np.ndarray], in_types: Sequence[TensorType],
               out_types: Sequence[TensorType], wide: bool = False) -> tuple[np.ndarray, ...]:
    """Evaluate an opaque node with onnxruntime; operands are cast to their declared types.
    A node with bfloat16 in it runs widened to float32, its bf16 operands and results rounded
    to bfloat16 (see the module doc). `wide`: every half-precision type (fp16 and bf16) runs as
    float32 and nothing is rounded to half precision (the node without half rounding). The
    run stops at the enclosing `stopping.time_limit` (RunStopped: a Loop of 2^40 trips is a
    legal node)."""
    from ..stopping import run_until

    attrs = _anonymous(tuple(attrs))
    a = dict(attrs)
    half = HALF_ONNX if wide else (BF16_ONNX,)
    declared = [t.dtype for t in (*in_types, *out_types)]
    rounded_out = [t.dtype == "bf16" and not wide for t in out_types]
    if any(DTYPE_TO_ONNX.get(d) in half for d in declared) or _holds(tuple(attrs), half):
        args = [round_bf16(np.asarray(x, np.float32)) if t.dtype == "bf16" and not wide else x
                for x, t in zip(args, in_types)]
        attrs = _widened_attrs(tuple(attrs), half)
        in_types = [_widened(t, half) for t in in_types]
        out_types = [_widened(t, half) for t in out_types]
    try:
        sess = _session(tuple(attrs), tuple(in_types), tuple(out_types))
        names = input_names(runnable_node(a))
        feeds = {name: np.asarray(x, dtype=NP_DTYPES[t.dtype])
                 for name, x, t in zip(names, args, in_types)}
        outs = run_until(sess, None, feeds, what=f"onnxruntime's run of opaque {a['op']} in "
                         "the reference interpreter")
    except (TirError, RunStopped):
        raise
    except Exception as e:   # onnxruntime raises its own exception types, not a common base
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TirError(f"opaque {a['op']}: onnxruntime cannot run the node: {first}") from None
    for o, t in zip(outs, out_types):
        if tuple(o.shape) != t.shape:
            raise TirError(f"opaque {a['op']}: onnxruntime produced shape {tuple(o.shape)}, the "
                           f"node declares {t}")
    return tuple(round_bf16(o) if r else o for o, r in zip(outs, rounded_out))
