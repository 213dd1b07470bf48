"""The one-node ONNX builder, the SQLite cost cache and the `ort` cost backend.

The builder is checked semantically: each operator's one-node model, run by onnxruntime on random
inputs, must equal the reference interpreter on the same values (weights taken from the model's
initializers)."""
from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import statistics

import numpy as np
import onnx
import pytest

from eqsat_nb.cost.db import CostCache, default_path, device_fingerprint
from eqsat_nb.cost.onnx_node import (SUPPORTED, UNSUPPORTED, initializers, one_node_model,
                                     random_inputs, run_model)
from eqsat_nb.cost.ort import OrtCostModel
from eqsat_nb.ir import interp
from eqsat_nb.ir.builder import GraphBuilder
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.ops import OPS

T = TensorType

# (op, attrs, operand shapes, weight operands)
CASES = [
    ("ewadd", {}, [(2, 3, 4), (2, 3, 4)], set()),
    ("ewmul", {}, [(2, 3, 4), (2, 3, 4)], {1}),
    ("matmul", {}, [(5, 7), (7, 3)], {1}),
    ("matmul", {"act": "relu"}, [(2, 5, 7), (2, 7, 3)], set()),
    ("matmul", {"act": "tanh"}, [(5, 7), (7, 3)], {1}),
    ("conv2d", {}, [(1, 4, 9, 9), (6, 4, 3, 3)], {1}),
    ("conv2d", {"stride": (2, 2), "act": "sigmoid"}, [(2, 4, 10, 9), (6, 4, 3, 3)], {1}),
    ("conv2d", {"pad": "valid", "act": "relu"}, [(1, 4, 8, 8), (4, 4, 5, 3)], {1}),
    ("conv2d", {"pad": (1, 0, 2, 1), "stride": (2, 1)}, [(1, 4, 8, 8), (4, 4, 3, 3)], {1}),
    ("conv2d", {"act": "relu"}, [(1, 8, 7, 7), (8, 2, 3, 3)], {1}),          # 4 groups
    ("conv2d", {"stride": (2, 2)}, [(1, 6, 8, 8), (6, 1, 4, 4)], set()),    # depthwise, even k
    ("relu", {}, [(3, 4)], set()),
    ("tanh", {}, [(3, 4)], set()),
    ("sigmoid", {}, [(3, 4)], set()),
    ("poolmax", {"kernel": (3, 3), "stride": (2, 2)}, [(1, 3, 9, 8)], set()),
    ("poolmax", {"kernel": (2, 2), "stride": (2, 2), "pad": "valid", "act": "relu"},
     [(1, 3, 8, 8)], set()),
    ("poolavg", {"kernel": (3, 3), "stride": (1, 1)}, [(1, 3, 7, 7)], set()),
    ("poolavg", {"kernel": (3, 3), "stride": (2, 2), "pad": (1, 1, 2, 0), "act": "tanh"},
     [(2, 3, 8, 9)], set()),
    ("transpose", {"perm": (0, 2, 3, 1)}, [(2, 3, 4, 5)], set()),
    ("concat", {"axis": 1}, [(2, 3, 4), (2, 5, 4), (2, 1, 4)], set()),
    ("concat", {"axis": -1}, [(2, 3), (2, 2)], {1}),
    ("split", {"axis": 1, "sizes": (2, 3, 1)}, [(2, 6, 3)], set()),
    ("reshape", {"shape": (6, 4)}, [(2, 3, 4)], set()),
    ("batchnorm", {"eps": 1e-3}, [(2, 4, 3, 3), (4,), (4,), (4,), (4,)], {1, 2, 3, 4}),
    ("softmax", {"axis": 1}, [(2, 5, 3)], set()),
    ("softmax", {}, [(4, 6)], set()),
    ("layernorm", {}, [(2, 3, 8), (8,), (8,)], {1, 2}),
    ("layernorm", {"axis": 1, "eps": 1e-3}, [(2, 3, 4), (3, 4), (3, 4)], {1, 2}),
    ("gelu", {}, [(3, 7)], set()),
    ("reduce_mean", {"axes": (2, 3)}, [(2, 3, 4, 5)], set()),
    ("reduce_mean", {"axes": (1,), "keepdims": False}, [(2, 3, 4)], set()),
    ("slice", {"axes": (1, 2), "starts": (1, 0), "ends": (3, 2)}, [(2, 4, 5)], set()),
    ("pad", {"pads": (0, 1, 2, 0, 0, 3), "value": 1.5}, [(2, 3, 4)], set()),
    ("dropout", {"ratio": 0.3}, [(3, 4)], set()),
    ("broadcast", {"shape": (2, 3, 4)}, [(3, 1)], set()),
    ("scale", {"value": -2.5}, [(3, 4)], set()),
    ("gelu", {"approximate": "tanh"}, [(3, 7)], set()),
    ("ewsub", {}, [(2, 3, 4), (2, 3, 4)], {1}),
    ("ewdiv", {}, [(2, 3, 4), (2, 3, 4)], set()),
    ("shift", {"value": 1e-5}, [(3, 4)], set()),
    ("divide", {"value": 1.4142135}, [(3, 4)], set()),
    ("power", {"value": 2.0}, [(3, 4)], set()),
    ("erf", {}, [(3, 4)], set()),
    ("sqrt", {}, [(3, 4)], set()),
    ("reciprocal", {}, [(3, 4)], set()),
    ("silu", {}, [(3, 4)], set()),
    ("rmsnorm", {}, [(2, 3, 8), (8,)], {1}),
    ("rmsnorm", {"axis": 1, "eps": 1e-3}, [(2, 3, 4), (3, 4)], {1}),
    ("enlarge", {}, [(4, 2, 1, 3), (1, 1, 5, 5)], set()),
    ("merge", {"count": 2, "groups": 4}, [(8, 3, 3, 3)], set()),
    ("merge", {"count": 3, "groups": 3}, [(6, 2, 1, 1)], set()),
]


def _case_id(case):
    return f"{case[0]}-{'-'.join('x'.join(map(str, s)) for s in case[2])}-w{sorted(case[3])}"


def test_every_supported_op_has_a_case():
    assert set(SUPPORTED) | set(UNSUPPORTED) == set(OPS)
    assert {c[0] for c in CASES} == set(SUPPORTED)


@pytest.mark.parametrize("opset", [17, 21])       # the builder's default; the exporter's (ort)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_one_node_model_matches_interpreter(case, opset):
    op, attrs, shapes, weights = case
    types = [T(s) for s in shapes]
    model = one_node_model(op, attrs, types, weights, seed=1, opset=opset)
    assert model.opset_import[0].version >= opset
    onnx.checker.check_model(model, full_check=True)
    assert {i.name for i in model.graph.input}.isdisjoint(initializers(model))
    feed = random_inputs(model, seed=2)
    got = run_model(model, feed)

    inits = initializers(model)
    b = GraphBuilder("t")
    env, names = {}, []
    rng = np.random.default_rng(3)
    for i, ty in enumerate(types):
        value = inits.get(f"in{i}", feed.get(f"in{i}"))
        if value is None:                      # an operand the model does not read (enlarge ref)
            value = rng.standard_normal(ty.shape).astype(np.float32)
        if i in weights:
            names.append(b.weight(ty.shape, name=f"w{i}"))
            env[f"@w{i}"] = value
        else:
            names.append(b.input(ty.shape))
            env[names[-1]] = value
    out = b.op(op, *names, **attrs)
    outs = out if isinstance(out, tuple) else (out,)
    want = interp.run(b.build(*outs), env, dtype=np.float32)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", sorted(UNSUPPORTED))
def test_unsupported_ops_raise_clearly(op):
    with pytest.raises(NotImplementedError, match=op):
        one_node_model(op, {}, [T((2, 2))])


def test_all_weight_operands_become_initializers():
    model = one_node_model("conv2d", {}, [T((1, 2, 5, 5)), T((3, 2, 3, 3))], {1})
    assert [i.name for i in model.graph.input] == ["in0"]
    assert set(initializers(model)) == {"in1"}
    conv = model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in conv.attribute}
    assert attrs["pads"] == [1, 1, 1, 1] and attrs["group"] == 1


# ----------------------------------------------------------------------------------- cache

KEY = ("ort", "dev", "conv2d", {"act": "none", "pad": "same"}, [[[1, 2, 3, 3], "f32", "a"]])


def test_cache_round_trip_and_get_many(tmp_path):
    path = tmp_path / "c.sqlite"
    with CostCache(path) as c:
        assert c.get(*KEY) is None
        c.put(*KEY, 12.5)
        assert c.get(*KEY) == 12.5
        # attribute order does not matter; the value is replaced, not duplicated
        c.put("ort", "dev", "conv2d", {"pad": "same", "act": "none"}, KEY[4], 13.0)
        assert c.get(*KEY) == 13.0 and len(c) == 1
        other = ("ort", "dev", "relu", {}, [[[4], "f32", "a"]])
        c.put(*other, 1.0)
        got = c.get_many([KEY, other, ("ort", "dev", "tanh", {}, [])])
        assert sorted(got.values()) == [1.0, 13.0]
    with CostCache(path) as c:                 # persisted
        assert c.get(*KEY) == 13.0
        assert c._conn().execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_default_path_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("EQSAT_NB_COST_DB", str(tmp_path / "x.sqlite"))
    assert default_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("EQSAT_NB_COST_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_path() == tmp_path / "xdg" / "eqsat-nb" / "costs.sqlite"
    assert "ort" in device_fingerprint()


def _writer(path, tag, n):
    c = CostCache(path)
    for i in range(n):
        c.put("ort", "dev", "relu", {"w": tag}, [[[i], "f32", "a"]], float(i))
    c.close()


def test_two_writer_processes(tmp_path):
    path = tmp_path / "c.sqlite"
    CostCache(path).close()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, tag, 200)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with CostCache(path) as c:
        assert c.integrity_ok()
        assert len(c) == 400
        for tag in ("a", "b"):
            assert c.get("ort", "dev", "relu", {"w": tag}, [[[199], "f32", "a"]]) == 199.0


def _killed_mid_write(path):
    c = CostCache(path)
    conn = c._conn()
    conn.execute("BEGIN IMMEDIATE")
    for i in range(100):
        conn.execute("INSERT INTO costs VALUES ('ort', 'dev', 'tanh', '{}', ?, 1.0, 0.0)",
                     (f"[{i}]",))
    os._exit(3)                                # no commit, no cleanup


def test_process_killed_mid_write_leaves_db_usable(tmp_path):
    path = tmp_path / "c.sqlite"
    with CostCache(path) as c:
        c.put(*KEY, 5.0)
    p = mp.get_context("fork").Process(target=_killed_mid_write, args=(path,))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    with CostCache(path) as c:
        assert c.integrity_ok()
        assert len(c) == 1 and c.get(*KEY) == 5.0
        c.put("ort", "dev", "tanh", {}, [0], 2.0)   # the write lock was released
        assert len(c) == 2
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT COUNT(*) FROM costs").fetchone()[0] == 2
    raw.close()


# ----------------------------------------------------------------------------------- ort timing

def _conv(c, hw):
    return [T((1, c, hw, hw)), T((c, c, 3, 3))]


def test_second_measurement_comes_from_the_cache(tmp_path):
    path = tmp_path / "c.sqlite"
    m1 = OrtCostModel(CostCache(path), repeats=5, warmups=1)
    us = m1.measure("conv2d", {"act": "relu"}, _conv(4, 8), {1})
    assert us > 0 and m1.measurements == 1
    assert m1.measure("conv2d", {"act": "relu"}, _conv(4, 8), {1}) == us
    assert m1.measurements == 1
    m2 = OrtCostModel(CostCache(path), repeats=5, warmups=1)     # a "second run"
    assert m2.measure("conv2d", {"act": "relu", "stride": (1, 1)}, _conv(4, 8), {1}) == us
    assert m2.measurements == 0
    # weights vs activations are different configurations
    m2.measure("conv2d", {"act": "relu"}, _conv(4, 8), set())
    assert m2.measurements == 1


def test_ort_timing_is_positive_and_grows_with_size():
    m = OrtCostModel(None, repeats=20, warmups=3)
    small = m.measure("conv2d", {}, _conv(4, 8), {1})
    big = m.measure("conv2d", {}, _conv(32, 32), {1})   # ~256x the FLOPs
    assert 0 < small < big
    assert m.measurements == 2


# ----------------------------------------------------------------------------------- ort rules

def _sig(op, attrs, shapes, consts=()):
    from eqsat_nb.cost.model import OpSignature
    from eqsat_nb.ir.ops import infer_types, normalize_attrs, op_def

    ins = tuple(T(s) for s in shapes)
    norm = tuple(normalize_attrs(op_def(op), dict(attrs)))
    return OpSignature(op, norm, ins, tuple(infer_types(op, list(ins), norm)), tuple(consts))


def test_rules_price_what_a_whole_model_executes():
    m = OrtCostModel(None, repeats=5, warmups=1)
    m._floor = (5.0, 0.25)                     # no overhead measurement needed for rules
    assert m.cost(_sig("dropout", {"ratio": 0.1}, [(2, 8)])) == 0.0
    assert m.cost(_sig("reshape", {"shape": (4, 4)}, [(2, 8)])) == 0.25
    assert m.cost(_sig("relu", {}, [(1, 8, 4, 4)])) == 0.0
    bn = [(1, 8, 4, 4), (8,), (8,), (8,), (8,)]
    assert m.cost(_sig("batchnorm", {}, bn, (1, 2, 3, 4))) == 0.0
    assert m.measurements == 0
    # not covered by a rule: measured (2-D relu; batchnorm with computed parameters)
    assert m.rule_cost(_sig("relu", {}, [(8, 16)])) is None
    assert m.rule_cost(_sig("batchnorm", {}, bn, (1, 2, 3))) is None
    assert m.cost(_sig("relu", {}, [(8, 16)])) >= 0.25 and m.measurements == 1


def test_replicate_runs_every_copy_on_the_same_inputs():
    from eqsat_nb.cost.ort import replicate

    types = [T((2, 6)), T((6, 3))]
    models = [one_node_model("matmul", {"act": "relu"}, types, {1}, seed=i) for i in range(3)]
    rep = replicate(models)
    onnx.checker.check_model(rep, full_check=True)
    assert [i.name for i in rep.graph.input] == ["in0"] and len(rep.graph.output) == 1
    feed = random_inputs(models[0], seed=4)
    (got,) = run_model(rep, feed)           # the copies' outputs, joined on axis 0
    for k, m in enumerate(models):
        np.testing.assert_allclose(got[2 * k:2 * k + 2], run_model(m, feed)[0], rtol=1e-6)


def test_cold_weights_are_timed_as_side_by_side_copies():
    m = OrtCostModel(None, repeats=5, warmups=1)
    m._floor = (5.0, 0.25)
    model, k = m.node_model("matmul", {"act": "none"}, [T((1, 512)), T((512, 512))], {1})
    assert k == m.copies([T((1, 512)), T((512, 512))], {1}) > 1
    assert len(model.graph.node) == k + 1 and len(model.graph.initializer) == k   # + the join
    assert m.per_node(10.0 * k, k) == pytest.approx(10.0)
    assert m.per_node(42.0, 1) == 42.0


def test_node_kernels_leave_out_boundary_reorders_and_the_run_overhead():
    from eqsat_nb.cost.ort import BOUNDARY_KERNELS, KernelTimer, optimized_op_types

    conv = one_node_model("conv2d", {}, [T((1, 16, 28, 28)), T((16, 16, 1, 1))], {1})
    if not BOUNDARY_KERNELS & set(optimized_op_types(conv)):
        pytest.skip("this onnxruntime build does not use NCHWc layouts")
    timer = KernelTimer(conv)
    for _ in range(8):
        timer.run(2)
    assert len(timer.times) == 8 and len(timer.kernels()) == 8
    # the conv kernel alone: less than the whole run (reorders, output copy, session floor)
    assert 0 < timer.median(2) < statistics.median(timer.times[2:])
    relu = KernelTimer(one_node_model("relu", {}, [T((4, 8))]))
    relu.run()
    assert len(relu.kernels()) == 1 and relu.median() >= 0.0
