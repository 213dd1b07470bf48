"""The measuring backends as `CostModel`s: ort on e-graphs and graphs (weight-only operands become
initializers), the torch lowering checked against the interpreter (skipped without PyTorch), the
TensorRT engine build (skipped without TensorRT and a GPU), and the analytic calibration fit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.cost import torch_backend, trt
from eqsat_nb.cost.analytic import CPU, AnalyticCostModel, DeviceProfile
from eqsat_nb.cost.calibrate import fit_profile, quality
from eqsat_nb.cost.db import CostCache
from eqsat_nb.cost.model import OpSignature, egraph_signatures, graph_cost, graph_signatures
from eqsat_nb.cost.onnx_node import one_node_model
from eqsat_nb.cost.ort import OrtCostModel
from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.ir import interp
from eqsat_nb.ir.builder import GraphBuilder
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.ops import OPS, infer_types, normalize_attrs
from eqsat_nb.ir.parse import load

from test_cost_ort import CASES, _case_id

ROOT = Path(__file__).resolve().parent.parent
T = TensorType


def _sig(op, shapes, consts=(), **attrs):
    a = normalize_attrs(OPS[op], attrs)
    ins = tuple(T(s) for s in shapes)
    return OpSignature(op, a, ins, tuple(infer_types(op, list(ins), a)), tuple(consts))


def test_signatures_mark_weight_operands():
    g = load(ROOT / "ir_examples" / "tiny_conv.tir")
    sigs = list(graph_signatures(g))
    convs = [s for s in sigs if s.op == "conv2d"]
    assert convs and all(s.const_inputs == (1,) for s in convs)
    assert all(s.const_inputs == () for s in sigs if s.op in ("relu", "ewadd"))
    eg = graph_to_egraph(g)
    esigs = {s for _, s in egraph_signatures(eg)}
    assert set(sigs) <= esigs


def test_ort_is_a_cost_model_on_egraphs(tmp_path):
    g = load(ROOT / "ir_examples" / "tiny_mlp.tir")
    eg = graph_to_egraph(g)
    m = OrtCostModel(CostCache(tmp_path / "c.sqlite"), repeats=5, warmups=1)
    costs = m.egraph_costs(eg)
    assert costs.shape == (eg.num_nodes,) and np.all(costs >= 0)
    for n in range(eg.num_nodes):
        if eg.op_name(n) in ("lit", "input", "weight", "noop", "proj") \
                or eg.is_const(eg.node_class(n)):
            assert costs[n] == 0.0
    assert costs.max() > 0
    measured = m.measurements
    assert measured == len({s for _, s in egraph_signatures(eg) if s is not None})
    assert costs.sum() == pytest.approx(graph_cost(m, g))    # same signatures, from memo
    m2 = OrtCostModel(CostCache(tmp_path / "c.sqlite"), repeats=5, warmups=1)
    assert np.array_equal(m2.egraph_costs(eg), costs) and m2.measurements == 0
    assert m2.cache_hits == measured


def test_const_inputs_select_initializers(tmp_path):
    m = OrtCostModel(CostCache(tmp_path / "c.sqlite"), repeats=3, warmups=1)
    act = _sig("matmul", [(4, 8), (8, 8)])
    wgt = _sig("matmul", [(4, 8), (8, 8)], consts=(1,))
    m.cost(act)
    m.cost(wgt)
    assert m.measurements == 2                 # different configurations, different rows
    keys = {r[4] for r in m.cache.rows()}
    assert any('"w"' in k for k in keys) and any('"a"]]' in k and '"w"' not in k for k in keys)
    model = one_node_model("matmul", dict(wgt.attrs), wgt.inputs, set(wgt.const_inputs))
    assert [i.name for i in model.graph.input] == ["in0"]


def test_bad_configuration_is_a_clear_error(tmp_path):
    from eqsat_nb.errors import TirError
    m = OrtCostModel(None, repeats=1, warmups=0)
    bad = OpSignature("conv2d", normalize_attrs(OPS["conv2d"], {}),
                      (T((1, 2, 5, 5), "i64"), T((3, 2, 3, 3), "i64")), (T((1, 3, 5, 5), "i64"),))
    with pytest.raises(TirError, match="ort: cannot time conv2d"):
        m.cost(bad)


# ------------------------------------------------------------------ calibration

def test_calibration_recovers_a_known_profile():
    truth = DeviceProfile("truth", matmul_flops=60e9, vector_flops=20e9, cache_bw=50e9,
                          dram_bw=15e9, cache_bytes=CPU.cache_bytes, transcendental=1e9,
                          pool=4e9, transpose_eff=0.4, launch_us=9.0)
    sigs = []
    for c in (8, 32, 64, 128):
        sigs += [_sig("conv2d", [(1, c, 28, 28), (c, c, 3, 3)], (1,)),
                 _sig("matmul", [(c, 256), (256, c)], (1,)),
                 _sig("ewadd", [(1, c, 56, 56), (1, c, 56, 56)]),
                 _sig("relu", [(1, c, 112, 112)]), _sig("tanh", [(c, 4096)]),
                 _sig("poolmax", [(1, c, 56, 56)], kernel=(3, 3), stride=(2, 2)),
                 _sig("transpose", [(c, 2048)], perm=(1, 0)),
                 _sig("ewmul", [(1, 16), (1, 16)]), _sig("sigmoid", [(c, 8)])]
    tm = AnalyticCostModel(truth)
    samples = [(s, tm.cost(s)) for s in sigs]
    fitted, before, after = fit_profile(samples, CPU)
    assert before.gmean_ratio > 1.3
    assert after.gmean_ratio < 1.02 and after.worst_ratio < 1.1
    assert fitted.launch_us == pytest.approx(9.0, rel=0.05)
    assert quality(fitted, samples) == after


def test_calibration_that_makes_the_fit_worse_is_discarded(monkeypatch):
    import dataclasses

    from eqsat_nb.cost import calibrate

    sigs = [_sig("matmul", [(c, 256), (256, c)], (1,)) for c in (8, 16, 32, 64, 128)]
    sigs += [_sig("ewadd", [(1, c, 56, 56), (1, c, 56, 56)]) for c in (8, 16, 32, 64)]
    cpu = AnalyticCostModel(CPU)
    samples = [(s, cpu.cost(s) * 1.5) for s in sigs]
    real = calibrate._profile
    monkeypatch.setattr(calibrate, "_profile", lambda base, theta, name, params=calibrate.PARAMS:
                        dataclasses.replace(real(base, theta, name, params),
                                            matmul_flops=CPU.matmul_flops * 1e3))   # a bad "fit"
    fitted, before, after = fit_profile(samples, CPU)
    assert after == before
    assert dataclasses.replace(fitted, name=CPU.name) == CPU and fitted.name == "cpu-calibrated"


def test_calibration_needs_enough_samples():
    with pytest.raises(ValueError, match="at least"):
        fit_profile([(_sig("relu", [(4,)]), 5.0)])


# ------------------------------------------------------------------ torch

TORCH_MISSING = torch_backend.unavailable("cpu")


@pytest.mark.skipif(TORCH_MISSING is not None, reason=f"torch backend: {TORCH_MISSING}")
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_torch_lowering_matches_interpreter(case):
    import torch
    op, attrs, shapes, weights = case
    types = [T(s) for s in shapes]
    a = dict(normalize_attrs(OPS[op], attrs))
    rng = np.random.default_rng(5)
    vals = [rng.uniform(0.5, 1.5, s).astype(np.float32) if op == "batchnorm" and i == 4
            else rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)]
    fn = torch_backend.lower(op, a, types)
    got = fn(*[torch.as_tensor(v) for v in vals])
    got = got if isinstance(got, (tuple, list)) else (got,)
    b = GraphBuilder("t")
    names = [b.input(s) for s in shapes]
    out = b.op(op, *names, **attrs)
    outs = out if isinstance(out, tuple) else (out,)
    want = interp.run(b.build(*outs), dict(zip(names, vals)), dtype=np.float32)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(TORCH_MISSING is not None, reason=f"torch backend: {TORCH_MISSING}")
def test_torch_cost_model_caches(tmp_path):
    m = torch_backend.TorchCostModel(CostCache(tmp_path / "c.sqlite"), device="cpu", repeats=5,
                                     warmups=1)
    small = m.cost(_sig("conv2d", [(1, 4, 8, 8), (4, 4, 3, 3)], (1,)))
    big = m.cost(_sig("conv2d", [(1, 32, 32, 32), (32, 32, 3, 3)], (1,)))
    assert 0 < small < big and m.measurements == 2
    assert {r[0] for r in m.cache.rows()} == {"torch"}


# ------------------------------------------------------------------ TensorRT

TRT_MISSING = trt.unavailable()


@pytest.mark.skipif(TRT_MISSING is not None, reason=f"trt backend: {TRT_MISSING}")
def test_trt_engine_times_and_caches(tmp_path):
    m = trt.TrtCostModel(CostCache(tmp_path / "c.sqlite"), repeats=5, warmups=1)
    small = m.cost(_sig("conv2d", [(1, 8, 16, 16), (8, 8, 3, 3)], (1,)))
    big = m.cost(_sig("conv2d", [(8, 128, 64, 64), (128, 128, 3, 3)], (1,)))
    assert 0 < small < big and m.measurements == 2
    assert m.timing_cache_path.exists()
    m2 = trt.TrtCostModel(CostCache(tmp_path / "c.sqlite"))
    assert m2.cost(_sig("conv2d", [(1, 8, 16, 16), (8, 8, 3, 3)], (1,))) == small
    assert m2.measurements == 0


def test_trt_unavailable_says_why():
    why = trt.unavailable()
    assert why is None or ("TensorRT" in why or "GPU" in why or "cuda" in why)


def test_ort_overheads_and_cold_weight_copies(tmp_path):
    m = OrtCostModel(CostCache(tmp_path / "c.sqlite"), repeats=5, warmups=1)
    floor, node = m.floor_us, m.node_us
    assert floor > 0 and 0 <= node < floor
    s = _sig("relu", [(1, 8)])
    assert m.cost(s) == pytest.approx(m.measure("relu", s.attrs, s.inputs) + node)
    m2 = OrtCostModel(CostCache(tmp_path / "c.sqlite"), repeats=5, warmups=1)
    assert (m2.floor_us, m2.node_us) == (floor, node)          # cached per device
    assert m.copies([T((4, 8)), T((8, 8))], {1}) == 1            # small weights: warm
    big = [T((1, 1024)), T((1024, 1024))]                        # 4 MiB of weights
    assert m.copies(big, {1}) == 2 * m.LLC_BYTES // (4 << 20)
    assert m.copies(big, set()) == 1
