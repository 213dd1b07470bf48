"""tools/make_llama.py's stacking stage (tools/llama_stack.py), without torch: a committed
torch.onnx export of the small configuration stacked to N layers is torch.onnx's own N-layer
export, loads, checks and runs, and holds fresh random weights in the stored element type.

tests/data/llama_small/ was made by the tool's export stage (torch 2.13, transformers 5.24):

    python tools/make_llama.py export DIR --small                       # template, probe, json
    python tools/make_llama.py export REF --small --reference-layers 5  # torch's own 5 layers
    gzip -9 DIR/template.onnx DIR/probe.onnx; cp REF/reference.onnx DIR/reference5.onnx; gzip -9 ..

(the graphs are gzipped: their node metadata, stack traces mostly, compresses 20-fold).
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from tool_module import load_tool

DATA = Path(__file__).parent / "data" / "llama_small"
stacker = load_tool("llama_stack")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """The committed template folder, graphs unpacked."""
    d = tmp_path_factory.mktemp("llama_small")
    for f in DATA.iterdir():
        if f.suffix == ".gz":
            (d / f.stem).write_bytes(gzip.decompress(f.read_bytes()))
        else:
            shutil.copy(f, d / f.name)
    return d


def params(template: Path) -> dict[str, str]:
    return json.loads((template / "template.json").read_text())["parameters"]


def comparable(path: Path, param_names: set[str]) -> onnx.ModelProto:
    """The model without its weights' values: parameters' inline bytes cleared, the data
    file's name replaced (offsets and lengths stay)."""
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        if t.name in param_names:
            t.ClearField("raw_data")
        for e in t.external_data:
            if e.key == "location":
                e.value = "DATA"
    return m


def stacked(template: Path, tmp_path: Path, layers: int, **kw) -> tuple[Path, object]:
    out = tmp_path / f"n{layers}" / "model.onnx"
    return out, stacker.stack(template, out, layers, **kw)


def param_names(model: onnx.ModelProto) -> set[str]:
    """Initializers holding parameters: the ones whose value_info says so or that hold folded
    parameters (torch.onnx records both)."""
    out = set()
    for vi in model.graph.value_info:
        meta = {p.key: p.value for p in vi.metadata_props}
        if meta.get("pkg.torch.export.graph_signature.InputSpec.kind") == "PARAMETER" or \
                re.search(r"(_proj|lm_head)\.weight'",
                          meta.get("pkg.onnxscript.optimizer.folded_from", "")):
            out.add(vi.name)
    return out


@pytest.mark.parametrize("layers,reference", [(3, "probe.onnx"), (4, "template.onnx"),
                                              (5, "reference5.onnx")])
def test_stacked_model_is_what_torch_onnx_writes(template, tmp_path, layers, reference):
    """Every node (name, inputs, outputs, attributes, metadata), value_info, initializer (name,
    type, dims, inline or external, offset, length), graph input and output, opset and model
    field equals torch.onnx's own export of that many layers; only the weights differ."""
    out, _ = stacked(template, tmp_path, layers)
    ref = onnx.load(str(template / reference), load_external_data=False)
    names = param_names(ref)
    assert len(names) == 9 * layers + 3
    a, b = comparable(out, names), comparable(template / reference, names)
    assert len(a.graph.node) == len(b.graph.node)
    for x, y in zip(a.graph.node, b.graph.node):
        assert x == y, (x.name, y.name)
    assert list(a.graph.initializer) == list(b.graph.initializer)
    assert list(a.graph.value_info) == list(b.graph.value_info)
    assert a == b


def test_stacked_model_passes_the_checker_and_runs(template, tmp_path):
    out, report = stacked(template, tmp_path, 7)
    onnx.checker.check_model(str(out), full_check=True)        # by path: data not loaded
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(0, 128, (1, 1024), dtype=np.int64)
    (logits,) = sess.run(None, {"input_ids": ids})
    assert logits.shape == (1, 1024, 128) and logits.dtype == np.float16
    assert np.isfinite(logits).all() and 0.05 < float(np.abs(logits).max()) < 10
    m = onnx.load(str(out), load_external_data=False)
    assert sorted(_layer_nodes(m)) == list(range(7)) and report.layers == 7


def _layer_nodes(model: onnx.ModelProto) -> dict[int, list[onnx.NodeProto]]:
    """Nodes by the decoder layer their name scopes name."""
    out: dict[int, list] = {}
    for n in model.graph.node:
        scopes = next(p.value for p in n.metadata_props if p.key == "pkg.torch.onnx.name_scopes")
        m = re.search(r"layers\.(\d+)'", scopes)
        if m:
            out.setdefault(int(m.group(1)), []).append(n)
    return out


def test_every_layer_is_layer_0_up_to_names_and_weights(template, tmp_path):
    """Layer k computes what layer 0 does: the same operators with the same attributes, each
    reading the same place (a value of its own layer, the layer before, a shared constant, or a
    weight of its own of the same type and shape). Layer 0 also computes the RoPE tables and
    the causal mask every layer reads; those nodes are not its own computation."""
    out, _ = stacked(template, tmp_path, 6)
    m = onnx.load(str(out), load_external_data=False)
    inits = {t.name: (t.data_type, tuple(t.dims)) for t in m.graph.initializer}
    layers = _layer_nodes(m)
    assert sorted(layers) == list(range(6))
    readers: dict[str, set[int]] = {}
    for k, ns in layers.items():
        for n in ns:
            for v in n.input:
                readers.setdefault(v, set()).add(k)
    for_all = [n for n in layers[0] if any(readers.get(o, set()) - {0, 1} for o in n.output)]
    assert [n.op_type for n in for_all] == ["Unsqueeze", "Unsqueeze", "Where"]
    shared = {o for n in for_all for o in n.output}
    own = [n for n in layers[0] if n not in for_all]

    def canonical(nodes, previous):
        here = {o: (p, s) for p, n in enumerate(nodes) for s, o in enumerate(n.output)}
        before = {o: (p, s) for p, n in enumerate(previous) for s, o in enumerate(n.output)}

        def where(v):
            if v in shared or v not in here and v not in before and v not in inits:
                return ("shared", v)
            if v in here:
                return ("here", here[v])
            if v in before:
                return ("layer before", before[v])
            if len(readers[v]) == 1:
                return ("own weight", inits[v])
            return ("shared", v)
        return [(n.op_type, n.domain, [a.SerializeToString() for a in n.attribute],
                 [where(v) for v in n.input]) for n in nodes]

    first = canonical(own, [])
    for k in range(1, 6):
        got = canonical(layers[k], [n for n in layers[k - 1] if n not in for_all])
        assert len(got) == len(first)
        for a, b in zip(first, got):
            assert a[:3] == b[:3]
            for x, y in zip(a[3], b[3]):
                if x == ("shared", "embedding") and y[0] == "layer before":
                    continue                      # layer 0 reads the embedding
                assert x == y


def _data(out: Path, t: onnx.TensorProto) -> bytes:
    ext = {e.key: e.value for e in t.external_data}
    if not ext:
        return t.raw_data
    with open(out.parent / ext["location"], "rb") as f:
        f.seek(int(ext["offset"]))
        return f.read(int(ext["length"]))


def test_weights_are_written_in_the_stored_type(template, tmp_path):
    """fp16 parameters are 2 bytes per element in the data file, densely packed in initializer
    order, and read back as the fresh N(0, 0.02) (norms N(1, 0.02)) draws rounded to fp16 once:
    no fp32 copy and no other layout. Constants that are no parameters (RoPE tables, the causal
    mask, shapes) are the template's bytes."""
    out, report = stacked(template, tmp_path, 5)
    m = onnx.load(str(out), load_external_data=False)
    tpl = onnx.load(str(template / "template.onnx"), load_external_data=False)
    tpl_init = {t.name: t for t in tpl.graph.initializer}
    names = param_names(m)
    offset = 0
    seen = 0
    for t in m.graph.initializer:
        n = int(np.prod(t.dims))
        if t.external_data:
            ext = {e.key: e.value for e in t.external_data}
            assert ext["location"] == "model.onnx.data" and int(ext["offset"]) == offset
            offset += int(ext["length"])
        data = _data(out, t)
        if t.name in names:
            assert t.data_type == TensorProto.FLOAT16 and len(data) == 2 * n, t.name
            x = np.frombuffer(data, np.float16).astype(np.float64)
            mean = 1.0 if "norm" in t.name else 0.0
            assert abs(x.mean() - mean) < 0.01 and 0.015 < x.std() < 0.025, t.name
            seen += n
        else:
            assert data == _data(template / "template.onnx", tpl_init[t.name]), t.name
    assert (out.parent / "model.onnx.data").stat().st_size == offset == report.data_bytes
    assert seen == report.parameters > 0


def test_weights_are_reproducible_per_parameter_and_chunked_alike(template, tmp_path,
                                                                  monkeypatch):
    """A parameter's values depend on the seed and its name only: layer 2's in a 5- and a
    6-layer model are the same bytes, another seed changes them, and writing in chunks of 1000
    elements gives the bytes of one chunk."""
    def weights(out: Path) -> dict[str, bytes]:
        m = onnx.load(str(out), load_external_data=False)
        return {t.name: _data(out, t) for t in m.graph.initializer}

    a5, _ = stacked(template, tmp_path / "a", 5)
    a6, _ = stacked(template, tmp_path / "b", 6)
    other, _ = stacked(template, tmp_path / "c", 5, seed=1)
    monkeypatch.setattr(stacker, "CHUNK", 1000)
    chunked, _ = stacked(template, tmp_path / "d", 5)
    w5, w6, wo, wc = weights(a5), weights(a6), weights(other), weights(chunked)
    assert w5 == wc
    norm = "model.model.layers.2.input_layernorm.weight"
    assert w5[norm] == w6[norm] and w5[norm] != wo[norm]
    q2 = [v for k, v in w5.items() if len(v) == 64 * 64 * 2]
    assert q2 and all(v in w6.values() for v in q2)


@pytest.mark.parametrize("dtype,decode", [
    (TensorProto.BFLOAT16, lambda b: (np.frombuffer(b, np.uint16).astype(np.uint32) << 16)
     .view(np.float32)),
    (TensorProto.FLOAT16, lambda b: np.frombuffer(b, np.float16).astype(np.float32)),
    (TensorProto.FLOAT, lambda b: np.frombuffer(b, np.float32))])
def test_random_weights_are_rounded_once_to_the_element_type(dtype, decode):
    """bf16 is the float32 draw rounded to nearest even (as torch converts), fp16 numpy's
    rounding, fp32 the draw itself."""
    t = TensorProto(name="w", data_type=dtype, dims=[3000])
    got = decode(b"".join(stacker._random_chunks(t, "model.layers.0.mlp.up_proj.weight", 0)))
    rng = np.random.default_rng([0, zlib.crc32(b"model.layers.0.mlp.up_proj.weight")])
    want = rng.standard_normal(3000, dtype=np.float32) * np.float32(stacker.STD)
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-30)
    limit = {TensorProto.BFLOAT16: 2**-8, TensorProto.FLOAT16: 2**-11, TensorProto.FLOAT: 0}
    small = np.abs(want) > 1e-4          # fp16's subnormals are coarser
    assert rel[small].max() <= limit[dtype]
    if dtype == TensorProto.BFLOAT16:
        u = want.view(np.uint32)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
        assert np.array_equal(got, rounded.view(np.float32))


def test_a_folder_without_a_template_is_a_clear_error(tmp_path):
    with pytest.raises(stacker.StackError, match=r"template.onnx: no such file \(make it with "
                                                 r"`make_llama.py export`\)"):
        stacker.stack(tmp_path, tmp_path / "o.onnx", 4)


def test_one_layer_is_refused(template, tmp_path):
    with pytest.raises(stacker.StackError, match="1 layers: at least 2"):
        stacker.stack(template, tmp_path / "o.onnx", 1)
