"""The analytic (roofline) cost model: basic properties, zero-cost nodes on real e-graphs, and the
target-dependence the issue asks for (NasRNN extracts merged matmuls for a GPU, not for the CPU)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.cost.analytic import PROFILES, AnalyticCostModel
from eqsat_nb.cost.model import OpSignature, graph_cost
from eqsat_nb.egraph import graph_to_egraph
from eqsat_nb.egraph.convert import egraph_to_graph
from eqsat_nb.extract.problem import egraph_choice, from_egraph
from eqsat_nb.extract.run import extract
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.ops import OPS, infer_types, normalize_attrs
from eqsat_nb.ir.parse import load

ROOT = Path(__file__).resolve().parent.parent


def sig(op: str, inputs: list[tuple[int, ...]], **attrs) -> OpSignature:
    a = normalize_attrs(OPS[op], attrs)
    ins = [TensorType(s) for s in inputs]
    return OpSignature(op, a, tuple(ins), tuple(infer_types(op, ins, a)))


@pytest.mark.parametrize("device", sorted(PROFILES))
def test_bigger_conv_costs_more(device):
    m = AnalyticCostModel(device)
    small = m.cost(sig("conv2d", [(1, 64, 56, 56), (64, 64, 3, 3)], stride=(1, 1)))
    big = m.cost(sig("conv2d", [(1, 128, 56, 56), (128, 128, 3, 3)], stride=(1, 1)))
    bigger = m.cost(sig("conv2d", [(8, 128, 56, 56), (128, 128, 3, 3)], stride=(1, 1)))
    assert 0 < small < big < bigger


@pytest.mark.parametrize("device", sorted(PROFILES))
def test_launch_floor_and_views(device):
    m = AnalyticCostModel(device)
    p = PROFILES[device]
    launch, floor = p.launch_us, p.floor_us("ewadd")   # GEMM calls; every other kernel
    assert floor <= launch
    tiny = m.cost(sig("ewadd", [(1, 4), (1, 4)]))
    assert floor <= tiny < floor * 1.01
    assert m.cost(sig("matmul", [(64, 64), (64, 64)])) >= launch
    for s in (sig("tanh", [(1, 512)]), sig("transpose", [(32, 64)], perm=(1, 0))):
        assert m.cost(s) >= floor
    layout = (sig("concat", [(1, 8), (1, 8)], axis=1),
              sig("split", [(1, 16)], axis=1, sizes=(8, 8)))
    for s in layout:        # copies on the CPU; a view / written in place where the profile says
        free = p.split_view if s.op == "split" else p.concat_in_place
        assert (m.cost(s) == 0.0) if free else (m.cost(s) >= floor)
    assert m.cost(sig("reshape", [(32, 64)], shape=(64, 32))) == 0.0
    assert m.cost(OpSignature("noop", (), (TensorType((1,)),), (TensorType(()),))) == 0.0


def test_transcendental_and_transpose_rates():
    m = AnalyticCostModel("cpu")
    x = [(256, 1024)]
    assert m.cost(sig("tanh", x)) > m.cost(sig("relu", x))
    assert m.cost(sig("transpose", x, perm=(1, 0))) > m.cost(sig("relu", x))


@pytest.mark.parametrize("device", sorted(PROFILES))
def test_activation_times_weight_is_one_gemm_over_the_rows(device):
    """[B, S, H] @ [H, N] (ONNX MatMul broadcasting the weight) runs as one GEMM over B*S rows,
    as cuBLAS and MLAS run it: priced like the flattened [B*S, H] @ [H, N], weight read once.
    A batched product with per-batch operands stays a batched GEMM."""
    m = AnalyticCostModel(device)
    assert m.cost(sig("matmul", [(2, 197, 768), (768, 768)])) == pytest.approx(
        m.cost(sig("matmul", [(394, 768), (768, 768)])))
    batched = m.cost(sig("matmul", [(2, 197, 768), (2, 768, 768)]))
    assert batched >= m.cost(sig("matmul", [(394, 768), (768, 768)]))


def test_gpu_wave_quantization_rewards_merged_matmuls():
    """Three 197x768x768 matmuls take 3 x 2 waves of an A100's 108 SMs, the merged
    197x768x2304 one 5 waves: merging pays beyond the two saved launches. The CPU profile prices
    FLOPs only (merged = the three separate ones less their launches, within the cache model)."""
    a100, cpu = AnalyticCostModel("a100"), AnalyticCostModel("cpu")
    one = sig("matmul", [(197, 768), (768, 768)])
    merged = sig("matmul", [(197, 768), (768, 2304)])
    p = PROFILES["a100"]
    assert p.gemm_s(1, 197, 768, 768) == pytest.approx(2 * 108 * 2 * 32 * 32 * 768 / 19.5e12)
    assert p.gemm_s(1, 197, 2304, 768) == pytest.approx(5 * 108 * 2 * 32 * 32 * 768 / 19.5e12)
    saved_launches = 2 * a100.launch_us
    assert 3 * a100.cost(one) - a100.cost(merged) > saved_launches + 5.0
    assert PROFILES["cpu"].gemm_s(1, 197, 768, 768) == pytest.approx(2 * 197 * 768 * 768 / 113e9)
    assert cpu.cost(merged) > 3 * cpu.cost(one) - 2 * cpu.launch_us - 1e-9
    # a one-row product is not padded to a full tile: memory-bound, near the launch floor
    gemv = a100.cost(sig("matmul", [(1, 512), (512, 512)]))
    assert gemv < a100.launch_us + 1.0
    # grouped convs: the CPU keeps the plain roofline (the GPU rules: test_cost_gpu_profiles.py)
    grouped = sig("conv2d", [(1, 128, 56, 56), (128, 4, 3, 3)], stride=(1, 1))
    f = 2 * 56 * 56 * 128 * 4 * 9
    c = PROFILES["cpu"]
    assert cpu.cost(grouped) == pytest.approx(
        c.launch_us + max(f / c.matmul_flops, c.memory_s(4 * (2 * 128 * 56 * 56 + 128 * 36)))
        * 1e6)


def test_memo_is_per_signature():
    m = AnalyticCostModel("a100")
    s = sig("matmul", [(1, 512), (512, 512)])
    assert m.cost(s) == m.cost(sig("matmul", [(1, 512), (512, 512)]))
    assert len(m._memo) == 1


@pytest.mark.parametrize("model", ["tiny_mlp", "tiny_conv", "nasrnn"])
def test_egraph_costs_zero_for_free_nodes(model):
    g = load(ROOT / "ir_examples" / f"{model}.tir")
    eg = graph_to_egraph(g)
    for device in PROFILES:
        cm = AnalyticCostModel(device)
        costs = cm.egraph_costs(eg)
        assert costs.shape == (eg.num_nodes,)
        assert np.all(np.isfinite(costs)) and np.all(costs >= 0)
        ops = [eg.op_name(n) for n in range(eg.num_nodes)]
        for n, op in enumerate(ops):
            if op in ("lit", "input", "weight", "proj", "noop") or eg.is_const(eg.node_class(n)):
                assert costs[n] == 0.0, (op, n)
            elif op in ("split", "concat") and PROFILES[device].sms:
                assert costs[n] >= 0.0, (op, n)     # a view / in place: 0 unless copied
            elif op not in ("reshape", "dropout"):
                assert costs[n] >= cm.profile.floor_us(op), (op, n)
        assert any(eg.op_name(n) == "weight" for n in range(eg.num_nodes))
        # the e-graph costs of the original nodes add up to the graph's cost
        assert costs.sum() == pytest.approx(graph_cost(cm, g))


def test_const_subexpression_is_free():
    from eqsat_nb.ir.builder import GraphBuilder
    b = GraphBuilder("f")
    x = b.input((1, 8))
    w1 = b.weight((8, 8), "w1")
    w2 = b.weight((8, 8), "w2")
    wc = b.op("concat", w1, w2, axis=1)          # weight-only: folded
    y = b.op("matmul", x, wc)
    g = b.build(y)
    eg = graph_to_egraph(g)
    cm = AnalyticCostModel("cpu")
    costs = cm.egraph_costs(eg)
    by_op = {eg.op_name(n): costs[n] for n in range(eg.num_nodes)}
    assert by_op["concat"] == 0.0 and by_op["matmul"] > 0
    assert graph_cost(cm, g) == pytest.approx(by_op["matmul"])


# ------------------------------------------------------------------ target dependence

@pytest.fixture(scope="module")
def nasrnn_saturated():
    from eqsat_nb.rules.parse import load_rules
    from eqsat_nb.search.saturate import Limits, saturate
    g = load(ROOT / "ir_examples" / "nasrnn.tir")
    eg = graph_to_egraph(g)
    saturate(eg, load_rules(ROOT / "rules"), Limits())      # TENSAT's settings
    return g, eg


def _extract_counts(eg, device: str, method: str):
    cm = AnalyticCostModel(device)
    problem = from_egraph(eg, cm.egraph_costs(eg))
    ex = extract(problem, method, time_limit=30)
    out = egraph_to_graph(eg, egraph_choice(problem, ex.choice, eg.num_nodes))
    return out, Counter(n.op for n in out.compute_nodes()), cm


@pytest.mark.parametrize("method", ["ocf+switch", "ilp"])
def test_gpu_profile_merges_matmuls_cpu_does_not(nasrnn_saturated, method):
    """Same e-graph, different targets: the GPU profiles pick fewer, merged matmuls (launch
    overhead dominates small matmuls there), the CPU profile keeps them separate (bigger working
    sets leave the cache; launches are cheap next to the weights' memory traffic)."""
    g, eg = nasrnn_saturated
    orig = Counter(n.op for n in g.compute_nodes())["matmul"]
    got = {d: _extract_counts(eg, d, method) for d in ("cpu", "a100", "h100")}
    cpu_graph, cpu_ops, cpu_model = got["cpu"]
    for gpu in ("a100", "h100"):
        gpu_graph, gpu_ops, gpu_model = got[gpu]
        assert gpu_ops["matmul"] < cpu_ops["matmul"], (gpu, gpu_ops, cpu_ops)
        assert gpu_ops != cpu_ops
        # each selection is the better one under its own model
        assert graph_cost(gpu_model, gpu_graph) < graph_cost(gpu_model, cpu_graph)
        assert graph_cost(cpu_model, cpu_graph) < graph_cost(cpu_model, gpu_graph)
    assert cpu_ops["matmul"] >= orig * 0.9
