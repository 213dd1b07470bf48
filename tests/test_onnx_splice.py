"""ONNX out that is never slower: the splicing exporter, the byte-for-byte "unchanged" result,
the forms runtimes fuse, opset fidelity and the measured guard.

Models are built with onnx.helper the way torch.onnx writes them (value names like
`/c1/Conv_output_0`, biases as Conv inputs and broadcasting Adds), plus the onnx wheel's own
model-zoo copies with random weights. Every comparison of outputs here runs both models in
onnxruntime, independently of the tool's own checks.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from eqsat_nb.cli import main
from eqsat_nb.ir.parse import parse
from eqsat_nb.onnx_io import import_onnx, to_onnx
from eqsat_nb.onnx_io.measure import random_feeds, time_pair
from eqsat_nb.onnx_io.splice import rules_for_opset, splice
from eqsat_nb.onnx_io.zoo import light_models, reseeded
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.runtime import session

RNG = np.random.default_rng(0)


def _init(name: str, shape: list[int]) -> onnx.TensorProto:
    fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    return nh.from_array((RNG.standard_normal(shape) / np.sqrt(fan)).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset=17, ir=8) -> onnx.ModelProto:
    g = h.make_graph(nodes, "main_graph", inputs, outputs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="pytorch",
                     producer_version="2.1")
    m.ir_version = ir
    m.doc_string = "exported for a test"
    h.set_model_props(m, {"author": "someone"})
    onnx.checker.check_model(m)
    return m


def conv_sum_model() -> onnx.ModelProto:
    """relu(Conv(x) + Conv(y)), both Convs with bias, pads written out as torch writes them."""
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["/c1/Conv_output_0"], name="/c1/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
             h.make_node("Conv", ["y", "w2", "b2"], ["/c2/Conv_output_0"], name="/c2/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
             h.make_node("Add", ["/c1/Conv_output_0", "/c2/Conv_output_0"], ["/Add_output_0"],
                         name="/Add"),
             h.make_node("Relu", ["/Add_output_0"], ["out"], name="/Relu")]
    x = [h.make_tensor_value_info(n, T.FLOAT, [1, 16, 14, 14]) for n in ("x", "y")]
    return _model(nodes, x, [h.make_tensor_value_info("out", T.FLOAT, [1, 32, 14, 14])],
                  [_init("w1", [32, 16, 3, 3]), _init("b1", [32]), _init("w2", [32, 16, 3, 3]),
                   _init("b2", [32])])


def qkv_model() -> onnx.ModelProto:
    """Three MatMul + bias projections of one input, summed (Add with the bias first)."""
    nodes, inits = [], []
    for q in "qkv":
        nodes += [h.make_node("MatMul", ["input.1", f"W{q}"], [f"/{q}/MatMul_output_0"],
                              name=f"/{q}/MatMul"),
                  h.make_node("Add", [f"b{q}", f"/{q}/MatMul_output_0"], [f"/{q}/Add_output_0"],
                              name=f"/{q}/Add")]
        inits += [_init(f"W{q}", [64, 64]), _init(f"b{q}", [64])]
    nodes += [h.make_node("Add", ["/q/Add_output_0", "/k/Add_output_0"], ["/s"], name="/s"),
              h.make_node("Add", ["/s", "/v/Add_output_0"], ["last_hidden"], name="/o")]
    return _model(nodes, [h.make_tensor_value_info("input.1", T.FLOAT, [1, 50, 64])],
                  [h.make_tensor_value_info("last_hidden", T.FLOAT, [1, 50, 64])], inits)


def _ort_equal(a: onnx.ModelProto, b: onnx.ModelProto, seeds=(0, 1)) -> None:
    sa, sb = session(a), session(b)
    for seed in seeds:
        feeds = random_feeds(a, seed=seed)
        ra, rb = sa.run(None, feeds), sb.run(None, feeds)
        for x, y in zip(ra, rb):
            np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5 * float(np.abs(x).max()))


def _same_interface(a: onnx.ModelProto, b: onnx.ModelProto) -> None:
    assert [i.SerializeToString() for i in a.graph.input] == \
        [i.SerializeToString() for i in b.graph.input]
    assert [o.SerializeToString() for o in a.graph.output] == \
        [o.SerializeToString() for o in b.graph.output]
    assert list(a.opset_import) == list(b.opset_import) and a.ir_version == b.ir_version
    assert a.metadata_props == b.metadata_props and a.doc_string == b.doc_string


ZOO = light_models()
# the zoo models with over 50 M weights (VGG-19 143 M, ZFNet-512 62 M, AlexNet 61 M) take most of
# the ONNX tests' time: the default tier imports the others; the end-to-end runs keep SqueezeNet
# (the oldest-deps CI run's stand-in) and ShuffleNet; the slow tier runs every model
HEAVY = {"light_vgg19", "light_zfnet512", "light_bvlc_alexnet"}
IMPORT_QUICK = {p.stem for p in ZOO} - HEAVY
END_TO_END_QUICK = {"light_squeezenet", "light_shufflenet"}


def zoo_params(quick: set[str]) -> list:
    """The zoo models as test parameters, those not in `quick` in the slow tier."""
    return [pytest.param(p, id=p.stem, marks=() if p.stem in quick else pytest.mark.slow)
            for p in ZOO]


@pytest.mark.skipif(not ZOO, reason="this onnx wheel ships no model-zoo copies")
@pytest.mark.parametrize("path", zoo_params(IMPORT_QUICK))
def test_unchanged_graph_splices_to_the_input(path):
    model = reseeded(path)
    try:
        imp = import_onnx(model, path.name)
    except Exception as e:           # noqa: BLE001 - the import issue's territory
        pytest.skip(f"does not import yet: {e}")
    assert splice(imp, imp.graph) is None


@pytest.mark.skipif(not ZOO, reason="this onnx wheel ships no model-zoo copies")
def test_nothing_found_writes_the_input_byte_for_byte(tmp_path, capsys):
    src = tmp_path / "resnet50.onnx"
    onnx.save(reseeded(next(p for p in ZOO if "resnet50" in p.name)), str(src))
    out, rep = tmp_path / "out.onnx", tmp_path / "r.json"
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "-q"]) == 0
    assert out.read_bytes() == src.read_bytes()
    assert json.loads(rep.read_text())["onnx_output"]["written"] == "input unchanged"
    assert "ONNX written: input unchanged" in capsys.readouterr().out


def test_rewritten_conv_takes_its_bias_and_no_expand(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    model = conv_sum_model()
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "-q", "--no-measure"]) == 0
    got = onnx.load(str(out))
    assert got.SerializeToString() != model.SerializeToString()      # a rewrite fired
    onnx.checker.check_model(got, full_check=True)
    ops = [n.op_type for n in got.graph.node]
    assert "Expand" not in ops
    convs = [n for n in got.graph.node if n.op_type == "Conv"]
    assert any(len(n.input) == 3 and n.input[2] for n in convs)
    const = {t.name for t in got.graph.initializer}     # weight-only values
    for n in got.graph.node:
        if all(v in const for v in n.input):
            const.update(n.output)
    adds = [n for n in got.graph.node if n.op_type == "Add"]
    assert not [n for n in adds if any(v in const for v in n.input)
                and not all(v in const for v in n.input)], "a bias added after its Conv"
    assert all(n.name for n in got.graph.node)
    _same_interface(model, got)
    _ort_equal(model, got)


def test_unchanged_parts_keep_the_models_nodes(tmp_path):
    """Only what a rewrite produced is new: the model's own nodes come back as they were."""
    model = qkv_model()
    extra = h.make_node("Sigmoid", ["last_hidden"], ["gate"], name="/gate/Sigmoid")
    model.graph.node.append(extra)
    model.graph.output.append(h.make_tensor_value_info("gate", T.FLOAT, [1, 50, 64]))
    imp = import_onnx(model, "qkv")
    from eqsat_nb.cost.select import make_cost_model
    from eqsat_nb.optimize import optimize

    r = optimize(imp.graph, make_cost_model("analytic", "cpu", None, progress=False),
                 load_rules())
    assert r.improved
    got = splice(imp, r.optimized)
    onnx.checker.check_model(got, full_check=True)
    _same_interface(model, got)
    old = {n.name: n.SerializeToString() for n in model.graph.node}
    kept = [n for n in got.graph.node if n.name in old]
    assert all(n.SerializeToString() == old[n.name] for n in kept)
    assert any(n.name == "/gate/Sigmoid" for n in kept) or "gate" in {
        o for n in got.graph.node for o in n.output}
    assert sum(n.op_type == "MatMul" for n in got.graph.node) == 1    # x @ (Wq + Wk + Wv)
    _ort_equal(model, got)


@pytest.mark.parametrize("opset", [9, 11, 12])
def test_old_opsets_get_old_forms(opset):
    g = parse("""
func @f(%x: tensor<4x6xf32>) -> (tensor<2x6xf32>, tensor<2x6xf32>, tensor<4x8xf32>,
                                 tensor<2x3xf32>) {
  %a, %b = split(%x) {axis = 0, sizes = [2, 2]} : tensor<2x6xf32>, tensor<2x6xf32>
  %p = pad(%x) {pads = [0, 1, 0, 1], value = 0.0} : tensor<4x8xf32>
  %s = slice(%a) {axes = [1], starts = [0], ends = [3]} : tensor<2x3xf32>
  %d = dropout(%b) {ratio = 0.5} : tensor<2x6xf32>
  return %a, %d, %p, %s
}
""")
    m = to_onnx(g, opset=opset)
    assert m.opset_import[0].version == opset
    onnx.checker.check_model(m, full_check=True)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    a, d, p, s = session(m).run(None, {"x": x})
    np.testing.assert_array_equal(a, x[:2])
    np.testing.assert_array_equal(d, x[2:])
    np.testing.assert_array_equal(p, np.pad(x, ((0, 0), (1, 1))))
    np.testing.assert_array_equal(s, x[:2, :3])


def test_rules_the_opset_cannot_express_are_left_out_before_the_search():
    rules = load_rules()
    kept, dropped = rules_for_opset(list(rules), 7)
    assert dropped and len(kept) + len(dropped) == len(rules)
    assert all("needs opset" in why for why in dropped.values())
    assert rules_for_opset(list(rules), 21)[1] == {}


def test_session_of_a_model_too_big_for_protobuf_leaves_it_as_it_was(monkeypatch):
    """Over the protobuf limit a session goes through a file with external data and the model
    in memory keeps its weights (the guard and the writer use the same models after the
    onnxruntime check; onnx's save_model would have moved them out)."""
    from eqsat_nb import external_data, runtime
    from eqsat_nb.onnx_io.external import needs_external

    w = np.arange(3 * 128, dtype=np.float32).reshape(3, 128)     # over onnx's 1 KiB threshold
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 128])], [nh.from_array(w, "w")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    monkeypatch.setattr(external_data, "PROTOBUF_LIMIT", 16)
    assert needs_external(model)
    x = np.ones((2, 3), np.float32)
    for _ in range(2):
        assert np.array_equal(runtime.session(model).run(None, {"x": x})[0], x @ w)
        t = model.graph.initializer[0]
        assert not t.external_data and np.array_equal(nh.to_array(t), w)


def test_guard_times_both_models_alternating():
    m = qkv_model()
    t = time_pair(m, m, random_feeds(m), threads=1, budget_s=1.0)
    assert t.rounds >= 5 and t.before_ms > 0 and t.after_ms > 0 and t.spread >= 0


@pytest.mark.parametrize("ratios, keep, spread", [
    ((1.00, 1.00), False, 0.005),     # the same speed: the input stays
    ((1.005, 1.0), False, 0.005),     # under the 1 % floor
    ((1.20, 1.00), True, 0.005),      # faster at one thread, not slower at the default count
    ((1.20, 0.90), False, 0.005),     # slower at the default thread count
    ((1.05, 1.00), False, 0.08),      # within a wide noise: not faster, the input stays
])
def test_guard_verdicts(monkeypatch, ratios, keep, spread):
    """The CPU guard's decision rule, on given timings (timing itself is not asserted)."""
    from eqsat_nb.onnx_io import measure

    it = iter(ratios)
    monkeypatch.setattr(measure, "time_pair", lambda a, b, feeds, threads, budget_s:
                        measure.Timing(threads, 1.0, 1.0, next(it), spread, 9))
    assert measure.guard(None, None, {}).keep is keep


@pytest.mark.parametrize("device", ["h100", *(pytest.param(d, marks=pytest.mark.slow)
                                              for d in ("h200", "a100", "h100-roofline"))])
def test_a_gpu_target_is_decided_by_its_costs_never_by_a_cpu_timing(tmp_path, monkeypatch,
                                                                    capsys, device):
    """Whatever this CPU measures, a GPU target writes what its cost estimate chose: the
    timing functions are never called (they raise here), with or without --measure."""
    from eqsat_nb.onnx_io import measure

    def no_timing(*a, **k):
        raise AssertionError("a CPU timing was consulted for a GPU target")
    monkeypatch.setattr(measure, "time_pair", no_timing)
    monkeypatch.setattr(measure, "guard", no_timing)
    src = tmp_path / "m.onnx"
    onnx.save(qkv_model(), str(src))
    for i, extra in enumerate(([], ["--measure"])):
        out = tmp_path / f"o{i}.onnx"
        assert main(["run", str(src), "--device", device, "--onnx", str(out), "-q",
                     *extra]) == 0
        text = capsys.readouterr().out
        assert "optimized (a GPU target: chosen by the target's cost estimate" in text
        assert len(onnx.load(str(out)).graph.node) != len(qkv_model().graph.node)


def _dynamic_qkv() -> onnx.ModelProto:
    m = qkv_model()
    for vi in (m.graph.input[0], m.graph.output[0]):
        d = vi.type.tensor_type.shape.dim[0]
        d.Clear()
        d.dim_param = "batch"
    return m


def test_dynamic_batch_keeps_its_symbol_when_the_rewrites_hold_for_any_size(tmp_path):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    model = _dynamic_qkv()
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "-q", "--no-measure"]) == 0
    got = onnx.load(str(out))
    assert got.SerializeToString() != model.SerializeToString()
    _same_interface(model, got)                        # dims still [batch, 50, 64]
    sa, sb = session(model), session(got)
    for batch in (1, 4):
        x = RNG.standard_normal((batch, 50, 64)).astype(np.float32)
        np.testing.assert_allclose(sb.run(None, {"input.1": x})[0],
                                   sa.run(None, {"input.1": x})[0], rtol=1e-4, atol=1e-4)


def test_input_shape_optimizes_for_that_shape(tmp_path, capsys):
    src, out = tmp_path / "m.onnx", tmp_path / "o.onnx"
    onnx.save(_dynamic_qkv(), str(src))
    assert main(["run", str(src), "--onnx", str(out), "-q", "--no-measure",
                 "--input-shape", "input.1=3x50x64"]) == 0
    got = onnx.load(str(out))
    dims = [d.dim_value for d in got.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [3, 50, 64]
    assert main(["run", str(src), "--onnx", str(tmp_path / "x.onnx"), "-q",
                 "--input-shape", "input.1=3xfifty"]) == 1
    assert "--input-shape input.1=3xfifty: expected NAME=1x3x224x224" in capsys.readouterr().err


def test_a_result_valid_only_at_the_assumed_size_is_not_written(tmp_path, monkeypatch):
    """When the spliced model fails at another size of a defaulted dim, the input is written
    unchanged and the message names the dims and the option that fixes them."""
    from eqsat_nb.commands import onnx_out

    src, out, rep = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(_dynamic_qkv(), str(src))
    real = onnx_out.compare_in_onnxruntime
    calls = []

    def fails_at_other_sizes(a, b, feeds):
        calls.append(feeds)
        if next(iter(feeds[0].values())).shape[0] != 1:
            return False, "mismatch"
        return real(a, b, feeds)

    monkeypatch.setattr(onnx_out, "compare_in_onnxruntime", fails_at_other_sizes)
    assert main(["run", str(src), "--onnx", str(out), "--report", str(rep), "-q",
                 "--no-measure"]) == 0
    assert out.read_bytes() == src.read_bytes()
    reason = json.loads(rep.read_text())["onnx_output"]["reason"]
    assert "input 'input.1' has dims [batch, 50, 64]" in reason
    assert "analysed at input.1=1x50x64" in reason
    assert "--input-shape input.1=<batch>x50x64" in reason      # the sizes the model is used at


@pytest.mark.skipif(not ZOO, reason="this onnx wheel ships no model-zoo copies")
@pytest.mark.parametrize("device", ["cpu", "a100"])
@pytest.mark.parametrize("path", zoo_params(END_TO_END_QUICK))
def test_zoo_models_come_back_equal_with_the_same_interface(tmp_path, path, device):
    """`run M.onnx --onnx OUT.onnx` with the default options (a short measuring budget): exits
    0, OUT is a valid model with the input's interface, and onnxruntime computes the same."""
    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    model = reseeded(path)
    onnx.save(model, str(src))
    assert main(["run", str(src), "--onnx", str(out), "-q", "--device", device,
                 "--measure-time", "3"]) == 0
    got = onnx.load(str(out))
    onnx.checker.check_model(got, full_check=True)
    _same_interface(model, got)
    _ort_equal(model, got, seeds=(0,))


def test_unchanged_model_with_external_data_is_copied_with_its_data(tmp_path):
    src_dir, out_dir = tmp_path / "in", tmp_path / "out"
    src_dir.mkdir()
    out_dir.mkdir()
    model = conv_sum_model()
    src = src_dir / "m.onnx"
    onnx.save_model(model, str(src), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    out = out_dir / "o.onnx"
    (tmp_path / "none.rules").write_text("")          # no rules: nothing can be found
    assert main(["run", str(src), "--onnx", str(out), "-q", "--rules",
                 str(tmp_path / "none.rules")]) == 0
    assert out.read_bytes() == src.read_bytes()
    assert (out_dir / "m.onnx.data").read_bytes() == (src_dir / "m.onnx.data").read_bytes()
    _ort_equal(onnx.load(str(src)), onnx.load(str(out)))
