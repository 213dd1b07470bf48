"""Hostile and unusual ONNX files through `eqsat-nb run M.onnx --onnx OUT.onnx`, and what came
back: the fuzz harness of tests/test_onnx_fuzz.py (`python tests/onnx_fuzz.py --table [N]`
prints the table of classes x outcomes).

Mutants are drawn, deterministically from a seed, from small models written with onnx.helper as
exporters write them (a convolutional net, a sum of two projections that the optimizer merges,
a graph with If/Constant/Reshape and a branch's own initializers), each also with its weights
in external data. Classes: truncated files, bit flips, graph-level damage (nodes, inputs,
initializers, attributes, types, opsets), hostile external data (paths leaving the folder,
symbolic links, huge offsets and lengths, data named like OUT, ...) and odd names.

Every mutant runs in its own folder, `in/` (the model and its data) and `out/` (OUT), with the
working directory at the folder. What is checked (`Outcome.failures`): the exit code is 0 or 1;
no internal error and no traceback; an error names a file; nothing outside `out/` was written,
changed or removed; when OUT is written it loads in onnxruntime and equals the input model there
(on random inputs), and the input itself loads and runs in onnxruntime (an input onnxruntime
refuses must not be accepted silently); no run takes longer than HANG_S.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

HANG_S = 60
RULES = """rule ewadd_matmul_to_matmul_ewadd_3: (ewadd (matmul ?a ?b) (matmul ?a ?c))
    => (matmul ?a (ewadd ?b ?c))
"""
OPTIONS = ["-q", "--no-measure", "--extract", "greedy", "--iter-limit", "3", "--time-limit",
           "30"]
CLASSES = ("truncated", "bit flips", "graph damage", "external data", "odd names")


# ------------------------------------------------------------------ base models
def _w(rng: np.random.Generator, name: str, shape: list[int]) -> onnx.TensorProto:
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return nh.from_array((rng.standard_normal(shape) / np.sqrt(fan)).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    g = h.make_graph(nodes, "main_graph", inputs, outputs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="pytorch",
                     producer_version="2.1")
    m.ir_version = 8
    return m


def conv_net(rng: np.random.Generator) -> onnx.ModelProto:
    """Conv+bias, Relu, grouped Conv, Add, MaxPool, GlobalAveragePool, Flatten, Gemm."""
    nodes = [
        h.make_node("Conv", ["input", "c1.w", "c1.b"], ["/c1/Conv_output_0"], name="/c1/Conv",
                    kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        h.make_node("Relu", ["/c1/Conv_output_0"], ["/r1/Relu_output_0"], name="/r1/Relu"),
        h.make_node("Conv", ["/r1/Relu_output_0", "c2.w", "c2.b"], ["/c2/Conv_output_0"],
                    name="/c2/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2),
        h.make_node("Add", ["/c2/Conv_output_0", "/r1/Relu_output_0"], ["/Add_output_0"],
                    name="/Add"),
        h.make_node("MaxPool", ["/Add_output_0"], ["/p/MaxPool_output_0"], name="/p/MaxPool",
                    kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("GlobalAveragePool", ["/p/MaxPool_output_0"], ["/g/Pool_output_0"],
                    name="/g/GlobalAveragePool"),
        h.make_node("Flatten", ["/g/Pool_output_0"], ["/f/Flatten_output_0"], name="/f/Flatten"),
        h.make_node("Gemm", ["/f/Flatten_output_0", "fc.w", "fc.b"], ["output"], name="/fc/Gemm",
                    transB=1)]
    inits = [_w(rng, "c1.w", [8, 3, 3, 3]), _w(rng, "c1.b", [8]), _w(rng, "c2.w", [8, 4, 3, 3]),
             _w(rng, "c2.b", [8]), _w(rng, "fc.w", [10, 8]), _w(rng, "fc.b", [10])]
    return _model(nodes, [h.make_tensor_value_info("input", T.FLOAT, ["batch", 3, 16, 16])],
                  [h.make_tensor_value_info("output", T.FLOAT, ["batch", 10])], inits)


def projections(rng: np.random.Generator) -> onnx.ModelProto:
    """x·Wq + x·Wk + b: the optimizer merges the two MatMuls (a spliced, changed OUT)."""
    nodes = [h.make_node("MatMul", ["x", "Wq"], ["/q/MatMul_output_0"], name="/q/MatMul"),
             h.make_node("MatMul", ["x", "Wk"], ["/k/MatMul_output_0"], name="/k/MatMul"),
             h.make_node("Add", ["/q/MatMul_output_0", "/k/MatMul_output_0"], ["/s"],
                         name="/s/Add"),
             h.make_node("Add", ["/s", "b"], ["hidden"], name="/b/Add")]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 32])],
                  [h.make_tensor_value_info("hidden", T.FLOAT, [1, 8, 32])],
                  [_w(rng, "Wq", [32, 32]), _w(rng, "Wk", [32, 32]), _w(rng, "b", [32])])


def control(rng: np.random.Generator) -> onnx.ModelProto:
    """A Constant shape for a Reshape, and an If whose branches hold their own initializers."""
    def branch(name: str, k: int) -> onnx.GraphProto:
        return h.make_graph(
            [h.make_node("MatMul", ["/r/Reshape_output_0", f"bw{k}"], [f"{name}_out"],
                         name=f"/{name}/MatMul")], name, [],
            [h.make_tensor_value_info(f"{name}_out", T.FLOAT, [4, 16])], [_w(rng, f"bw{k}",
                                                                              [16, 16])])
    shape = h.make_tensor("shape", T.INT64, [2], [4, 16])
    nodes = [h.make_node("Constant", [], ["/c/Constant_output_0"], name="/c/Constant",
                         value=shape),
             h.make_node("Reshape", ["x", "/c/Constant_output_0"], ["/r/Reshape_output_0"],
                         name="/r/Reshape"),
             h.make_node("ReduceSum", ["x"], ["/sum"], name="/ReduceSum", keepdims=0),
             h.make_node("Greater", ["/sum", "zero"], ["/cond"], name="/Greater"),
             h.make_node("If", ["/cond"], ["/if_out"], name="/If",
                         then_branch=branch("then", 1), else_branch=branch("else", 2)),
             h.make_node("Relu", ["/if_out"], ["y"], name="/Relu")]
    return _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 2, 16])],
                  [h.make_tensor_value_info("y", T.FLOAT, [4, 16])],
                  [nh.from_array(np.array(0.0, np.float32), "zero")])


BASES: dict[str, Callable[[np.random.Generator], onnx.ModelProto]] = {
    "conv_net": conv_net, "projections": projections, "control": control}


# ------------------------------------------------------------------ writing a case
@dataclass
class Case:
    """One mutant: its class, what was done, and how to lay it out in a folder."""

    cls: str
    what: str
    write: Callable[[Path], None]          # writes in/ (the model at in/m.onnx and its data)
    out_name: str = "o.onnx"
    extra: list[str] = field(default_factory=list)


def save(model: onnx.ModelProto, folder: Path, external: str | None = None) -> None:
    """in/m.onnx, its weights in `external` (relative to in/) when given."""
    folder.mkdir(parents=True, exist_ok=True)
    if external is None:
        (folder / "m.onnx").write_bytes(model.SerializeToString())
        return
    m = onnx.ModelProto()
    m.CopyFrom(model)
    onnx.save_model(m, str(folder / "m.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=external, size_threshold=0,
                    convert_attribute=True)


def to_external(t: onnx.TensorProto, folder: Path, location: str, **entries: str) -> None:
    """Move a tensor's bytes to the end of `folder/location` (entries override the offset and
    length written)."""
    path = folder / location
    path.parent.mkdir(parents=True, exist_ok=True)
    data = t.raw_data or nh.from_array(nh.to_array(t)).raw_data
    offset = path.stat().st_size if path.exists() else 0
    with open(path, "ab") as f:
        f.write(data)
    t.ClearField("raw_data")
    for fld in ("float_data", "int64_data", "int32_data", "double_data"):
        t.ClearField(fld)
    t.data_location = T.EXTERNAL
    values = {"location": location, "offset": str(offset), "length": str(len(data)),
              **entries}
    for k, v in values.items():
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, v


# ------------------------------------------------------------------ mutants
def _bytes_case(cls: str, what: str, data: bytes) -> Case:
    def write(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "m.onnx").write_bytes(data)
    return Case(cls, what, write)


def truncated(rng: np.random.Generator, base: str, model: onnx.ModelProto) -> Case:
    data = model.SerializeToString()
    k = int(rng.integers(0, len(data)))
    return _bytes_case("truncated", f"{base}: first {k} of {len(data)} bytes", data[:k])


def bit_flips(rng: np.random.Generator, base: str, model: onnx.ModelProto) -> Case:
    data = bytearray(model.SerializeToString())
    n = int(rng.integers(1, 9))
    # half the flips land in the first third, where protobuf writes the nodes (before weights)
    for _ in range(n):
        i = int(rng.integers(0, len(data) // 3 if rng.random() < 0.5 else len(data)))
        data[i] ^= 1 << int(rng.integers(0, 8))
    return _bytes_case("bit flips", f"{base}: {n} bit(s) flipped", bytes(data))


def _attr(node: onnx.NodeProto, name: str, value: Any) -> None:
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(h.make_attribute(name, value))


def _damage(rng: np.random.Generator, m: onnx.ModelProto) -> str:
    """One graph-level change to `m`; returns what it was."""
    g = m.graph
    nodes = list(g.node)
    node = nodes[int(rng.integers(0, len(nodes)))]
    k = int(rng.integers(0, 30))
    big = int(rng.choice([0, -1, -7, 2**31, 2**40, 2**62]))
    if k == 0:
        g.node.remove(node)
        return f"node {node.name} removed"
    if k == 1 and len(g.initializer):
        t = g.initializer[int(rng.integers(0, len(g.initializer)))]
        g.initializer.remove(t)
        return f"initializer {t.name} removed"
    if k == 2 and node.input:
        node.input[int(rng.integers(0, len(node.input)))] = "missing_value"
        return f"{node.name} reads a value nothing makes"
    if k == 3:
        g.output.append(g.output[0])
        return "graph output listed twice"
    if k == 4:
        g.node.insert(0, g.node[-1])
        del g.node[-1]
        return "last node moved first (not topological)"
    if k == 5:
        node.output[0] = node.input[0] if node.input else "x"
        return f"{node.name} writes its own input (cycle / SSA)"
    if k == 6:
        node.op_type = str(rng.choice(["NoSuchOp", "Gemm", "Conv", "Softmax", "Loop"]))
        return f"{node.name} becomes {node.op_type}"
    if k == 7:
        node.domain = str(rng.choice(["com.nowhere", "ai.onnx.ml", "com.microsoft"]))
        return f"{node.name} in domain {node.domain}"
    if k == 8:
        del m.opset_import[:]
        if rng.random() < 0.5:
            m.opset_import.append(h.make_opsetid("", int(rng.choice([0, 1, 6, 9, 99]))))
        return "opset changed"
    if k == 9:
        m.ir_version = int(rng.choice([0, 1, 3, 99]))
        return f"IR version {m.ir_version}"
    if k in (10, 11, 12):
        attr = str(rng.choice(["strides", "pads", "dilations", "kernel_shape", "group",
                               "axis", "perm", "transB", "keepdims", "alpha"]))
        rank = int(rng.choice([1, 2, 4]))
        value: Any = big if attr in ("group", "axis", "transB", "keepdims") else (
            float(big) if attr == "alpha" else [big] * rank)
        _attr(node, attr, value)
        return f"{node.name}.{attr} = {value}"
    if k == 13 and g.input:
        vi = g.input[0]
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            d = dims[int(rng.integers(0, len(dims)))]
            d.Clear()
            choice = int(rng.integers(0, 4))
            if choice == 3:
                d.dim_param = "n"
            else:
                d.dim_value = [0, 2**31, 7][choice]
        return f"input dims {vi.type.tensor_type.shape}".replace("\n", " ")
    if k == 14 and g.input:
        g.input[0].type.tensor_type.elem_type = int(rng.choice([T.INT64, T.DOUBLE, T.STRING,
                                                                T.BOOL, T.FLOAT16, T.UINT8]))
        return f"input type {g.input[0].type.tensor_type.elem_type}"
    if k == 15 and g.input:
        dims = g.input[0].type.tensor_type.shape.dim
        dims.add().dim_value = 1
        return "input rank + 1"
    if k == 16 and len(g.initializer):
        t = g.initializer[int(rng.integers(0, len(g.initializer)))]
        t.dims[0] = int(rng.choice([0, 1, t.dims[0] * 2, 2**40]))
        return f"initializer {t.name} dims {list(t.dims)} (data unchanged)"
    if k == 17 and len(g.initializer):
        t = g.initializer[int(rng.integers(0, len(g.initializer)))]
        t.data_type = int(rng.choice([T.INT64, T.DOUBLE, T.FLOAT16, T.STRING, 0]))
        return f"initializer {t.name} type {t.data_type}"
    if k == 18:
        vi = h.make_tensor_value_info(node.output[0], T.FLOAT, [int(rng.integers(1, 9))] * 3)
        g.value_info.append(vi)
        return f"value_info of {node.output[0]} contradicts inference"
    if k == 19:
        g.output[0].type.tensor_type.elem_type = T.INT64
        return "graph output declared int64"
    if k == 20:
        del g.output[:]
        return "no graph outputs"
    if k == 21:
        g.node.append(node)
        return f"{node.name} twice"
    if k == 22:
        g.input.append(h.make_tensor_value_info(g.input[0].name, T.FLOAT, [1]))
        return "input listed twice"
    if k == 23 and len(g.initializer):
        t = g.initializer[0]
        g.input.append(h.make_tensor_value_info(t.name, T.FLOAT, [int(d) for d in t.dims]))
        return f"initializer {t.name} also a graph input (old form)"
    if k == 24:
        shape = nh.from_array(np.array([8, 3, 60000, 60000], np.int64), "huge_shape")
        g.initializer.append(shape)
        target = node.input[1] if len(node.input) > 1 else "unused_w"
        g.node.insert(0, h.make_node("ConstantOfShape", ["huge_shape"], [target],
                                     name="/huge/ConstantOfShape",
                                     value=h.make_tensor("v", T.FLOAT, [1], [0.02])))
        for t in list(g.initializer):
            if t.name == target:
                g.initializer.remove(t)
        return f"{target} from ConstantOfShape of 8.6e10 elements"
    if k == 25:
        del node.output[:]
        return f"{node.name} has no outputs"
    if k == 26:
        del node.input[:]
        return f"{node.name} has no inputs"
    if k == 27:
        node.input.append(node.input[0] if node.input else "x")
        return f"{node.name} one input too many"
    if k == 28:
        for a in node.attribute:
            a.type = int(rng.choice([1, 2, 3, 4, 7]))
        return f"{node.name} attributes retyped"
    m.functions.add().name = "f"
    return "an empty function"


def graph_damage(rng: np.random.Generator, base: str, model: onnx.ModelProto) -> Case:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    done = []
    for _ in range(int(rng.integers(1, 3))):
        try:
            done.append(_damage(rng, m))
        except (IndexError, ValueError, TypeError):     # the change does not apply here
            done.append("a change that did not apply")
    what = "; ".join(done)
    return Case("graph damage", f"{base}: {what}", lambda folder: save(m, folder))


def external_data(rng: np.random.Generator, base: str, model: onnx.ModelProto) -> Case:
    """The model with its weights in external files, one thing about them hostile or odd."""
    k = int(rng.integers(0, 21))
    m = onnx.ModelProto()
    m.CopyFrom(model)
    from eqsat_nb.onnx_io.external import all_tensors
    tensors = [t for t in all_tensors(m) if len(t.raw_data) or t.dims]
    # OUT named like the data, as a folder the data need, in a folder that does not exist
    out_name = str(rng.choice(["o.onnx"] * 5 + ["w.bin", "sub", "new/o.onnx"]))
    extra: list[str] = []

    t0_index = int(rng.integers(0, len(tensors)))       # drawn here: write() draws nothing
    surprise = bool(rng.random() < 0.5)

    def write(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        loc = {0: "../escape.bin", 1: "/etc/hostname", 2: "link.bin", 3: "sub/../w.bin",
               4: "sub", 5: "nothere.bin", 6: "o.onnx", 7: "m.onnx", 8: "w b ü.bin",
               9: "deep/er/w.bin", 10: "link_in.bin", 11: ".", 12: "w.bin",
               20: "sub/w.bin"}.get(k, "w.bin")
        if k == 2:
            (folder.parent / "outside.bin").write_bytes(b"\0" * 4096)
            os.symlink("../outside.bin", folder / "link.bin")
        if k in (4, 20):
            (folder / "sub").mkdir()
        if k == 10:
            (folder / "real.bin").write_bytes(b"")
        t0 = tensors[t0_index]
        for t in tensors:
            entries: dict[str, Any] = {}
            if t is t0 and k == 13:
                entries["offset"] = str(2**62)
            if t is t0 and k == 14:
                entries["length"] = str(2**40)
            if t is t0 and k == 15:
                entries["offset"] = "-4"
            if t is t0 and k == 16:
                entries["length"] = "12abc"
            if t is t0 and k == 17:
                entries["length"] = None            # no length: the rest of the file
            if t is t0 and k == 18:
                entries["checksum"] = "0"
                if surprise:
                    entries["surprise"] = "1"
            target = "w.bin" if loc in ("../escape.bin", "/etc/hostname", "link.bin",
                                        "sub", "nothere.bin", ".", "link_in.bin") else loc
            if target == "m.onnx":
                target = "w.bin"
            to_external(t, folder, target, **entries)
            if loc != target:           # the entry names the hostile place instead
                for e in t.external_data:
                    if e.key == "location":
                        e.value = loc
        if k == 10:
            (folder / "real.bin").unlink()
            os.replace(folder / "w.bin", folder / "real.bin")
            os.symlink("real.bin", folder / "link_in.bin")
        if k == 19:                     # two tensors share bytes: legal, read twice
            for t in tensors[1:2]:
                for e in t.external_data:
                    if e.key == "offset":
                        e.value = "0"
        (folder / "m.onnx").write_bytes(m.SerializeToString())
        if k == 12:                     # OUT named like the data file, in in/ itself
            pass

    if k == 12:
        out_name = "../in/w.bin"
        extra = ["--force"]
    return Case("external data", f"{base}: external data case {k}", write, out_name, extra)


ODD = ["", " ", "ü∂ƒ", "a/b\\c", "%x", "eqsat/0", "'quote\"", "new\nline", "x" * 5000,
       "input", "output", "hidden", "y", "../../etc", "con", "nul\x00byte"]


def odd_names(rng: np.random.Generator, base: str, model: onnx.ModelProto) -> Case:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    k = int(rng.integers(0, 5))
    name = ODD[int(rng.integers(0, len(ODD)))]
    if k == 0:              # a node's name
        g.node[int(rng.integers(0, len(g.node)))].name = name
        what = "node"
    elif k == 1:            # every node named the same
        for n in g.node:
            n.name = name
        what = "all nodes"
    elif k == 2:            # an intermediate value renamed everywhere
        v = g.node[0].output[0]
        for n in g.node:
            for i, x in enumerate(n.input):
                if x == v:
                    n.input[i] = name
            for i, x in enumerate(n.output):
                if x == v:
                    n.output[i] = name
        for o in g.output:
            if o.name == v:
                o.name = name
        what = f"value {v!r}"
    elif k == 3:            # the graph input renamed
        v = g.input[0].name
        g.input[0].name = name
        for n in g.node:
            for i, x in enumerate(n.input):
                if x == v:
                    n.input[i] = name
        what = "graph input"
    else:
        g.name = name
        m.producer_name = name
        what = "graph and producer"
    return Case("odd names", f"{base}: {what} named {name[:20]!r}", lambda folder: save(m,
                                                                                       folder))


def mutants(n: int, seed: int = 0) -> list[Case]:
    """`n` mutants, drawn in turn from each class. Deterministic: mutant `i` depends only on
    `seed` and `i` (its own generator), and writing it draws nothing, so a case can be rerun
    alone and laid out twice alike."""
    models = {name: make(np.random.default_rng(1)) for name, make in BASES.items()}
    makers = [truncated, bit_flips, graph_damage, graph_damage, external_data, odd_names]
    out = []
    for i in range(n):
        base = list(models)[i % len(models)]
        make = makers[(i // len(models)) % len(makers)]
        out.append(make(np.random.default_rng([seed, i]), base, models[base]))
    return out


# ------------------------------------------------------------------ running one
@dataclass
class Outcome:
    case: Case
    code: int
    stderr: str
    kind: str                         # "error", "unchanged", "optimized" or a failure's name
    failures: list[str] = field(default_factory=list)


def _snapshot(root: Path) -> dict[str, str]:
    """Every file and link under `root` with a digest of its content (links: their target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p)
            else:
                with open(p, "rb") as f:
                    out[rel] = hashlib.sha1(f.read()).hexdigest()
    return out


class _Hang(BaseException):
    """Raised by the alarm; a BaseException, so that main() cannot report it as its own."""


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def run_case(case: Case, folder: Path, rules: Path) -> Outcome:
    """Lay the case out in `folder`, run the command there, check what came back."""
    from eqsat_nb.cli import main

    inp, outdir = folder / "in", folder / "out"
    case.write(inp)
    outdir.mkdir(parents=True, exist_ok=True)
    (folder / "decoy.txt").write_text("not to be touched")
    before = _snapshot(folder)
    out = outdir / case.out_name
    argv = ["run", str(inp / "m.onnx"), "--onnx", str(out), "--rules", str(rules), *OPTIONS,
            *case.extra]
    err, std = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        os.chdir(folder)
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            code = main(argv)
    except _Hang:
        code = -1
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    except BaseException as e:      # noqa: BLE001 - escaping main() is a traceback
        code = -2
        err.write(f"Traceback: {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.chdir(cwd)
    text = err.getvalue()
    o = Outcome(case, code, text, "error" if code == 1 else "")
    if code == -1:
        o.failures.append("hang")
    if code not in (0, 1, -1):
        o.failures.append(f"exit code {code}")
    if "internal error" in text:
        o.failures.append("internal error")
    if "Traceback" in text:
        o.failures.append("traceback")
    if code == 1 and ": error: " not in text:
        o.failures.append("error without a file")
    after = _snapshot(folder)
    written = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    outside = sorted(k for k in written if not k.startswith("out" + os.sep))
    if outside:
        o.failures.append(f"wrote outside out/: {outside}")
    if code == 0:
        kind = _check_written(inp / "m.onnx", out, o)
        o.kind = kind
    if o.failures:
        o.kind = o.failures[0].split(":")[0]
    return o


def _check_written(model: Path, out: Path, o: Outcome) -> str:
    """OUT loads in onnxruntime and equals the input there; the input is valid."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        a = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    except Exception as e:      # noqa: BLE001
        o.failures.append(f"accepted an input onnxruntime refuses: {str(e)[:200]}")
        return "accepted invalid"
    try:
        b = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"])
    except Exception as e:      # noqa: BLE001
        o.failures.append(f"broken output: {str(e)[:200]}")
        return "broken output"
    rng = np.random.default_rng(0)
    feeds = {}
    for i in a.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 2 for d in i.shape]
        kind = i.type[len("tensor("):-1]
        dtype = {"float": np.float32, "double": np.float64, "float16": np.float16,
                 "int64": np.int64, "int32": np.int32, "bool": np.bool_,
                 "uint8": np.uint8}.get(kind, np.float32)
        feeds[i.name] = (rng.standard_normal(shape) if np.dtype(dtype).kind == "f" else
                         rng.integers(0, 2, shape)).astype(dtype)
    try:
        want = a.run(None, feeds)
    except Exception as e:      # noqa: BLE001
        o.failures.append(f"accepted an input onnxruntime cannot run: {str(e)[:200]}")
        return "accepted invalid"
    try:
        got = b.run(None, feeds)
    except Exception as e:      # noqa: BLE001
        o.failures.append(f"broken output: {str(e)[:200]}")
        return "broken output"
    for x, y in zip(want, got):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        finite = np.abs(x[np.isfinite(x)])         # a flipped bit may make a weight inf/nan
        scale = float(finite.max()) if finite.size else 0.0
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-4, atol=1e-5 * scale + 1e-6,
                                                 equal_nan=True):
            o.failures.append("broken output: outputs differ from the input model's")
            return "broken output"
    return "unchanged" if out.read_bytes() == model.read_bytes() else "optimized"


def run_all(cases: list[Case], root: Path) -> list[Outcome]:
    rules = root / "fuzz.rules"
    rules.write_text(RULES)
    return [run_case(c, root / f"case{i:03d}", rules) for i, c in enumerate(cases)]


COLUMNS = ("located error", "written, equal", "unchanged copy", "internal error",
           "broken output", "other failure")


def column(o: Outcome) -> str:
    """The table column of an outcome: what came back, or the worst thing that went wrong
    (other failures: traceback, hang, an error naming no file, a write outside OUT's folder,
    an input onnxruntime refuses accepted silently)."""
    if any(f.startswith("internal error") for f in o.failures):
        return "internal error"
    if any(f.startswith("broken output") for f in o.failures):
        return "broken output"
    if o.failures:
        return "other failure"
    return {"error": "located error", "optimized": "written, equal",
            "unchanged": "unchanged copy"}[o.kind]


def table(outcomes: list[Outcome]) -> str:
    """Classes x outcomes, as a Markdown table (every column shown, zeros included)."""
    rows = ["| class | " + " | ".join(COLUMNS) + " | total |",
            "|---" * (len(COLUMNS) + 2) + "|"]
    for cls in CLASSES + ("all",):
        sel = [column(o) for o in outcomes if cls == "all" or o.case.cls == cls]
        rows.append(f"| {cls} | " + " | ".join(str(sel.count(k)) for k in COLUMNS)
                    + f" | {len(sel)} |")
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    """`python tests/onnx_fuzz.py [--table] [N] [--seed S]`: run N mutants (the test's 300 by
    default), print the table and every failure; exit 1 if any."""
    import argparse
    import tempfile
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("n", nargs="?", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", action="store_true", help="the table only (the default too)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        res = run_all(mutants(args.n, args.seed), Path(tmp))
        print(table(res))
        print(f"\n{args.n} mutants (seed {args.seed}) in {time.perf_counter() - t:.1f} s")
        for o in res:
            if o.failures:
                print(f"FAIL {o.case.cls}: {o.case.what}: {o.failures} | {o.stderr[:300]}")
    return 1 if any(o.failures for o in res) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
