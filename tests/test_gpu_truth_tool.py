"""What tools/gpu_truth.py computes without a GPU or torch: the configurations each precision's
table measures, the tables it writes (rows keyed in the precision's float type, loaded and
picked by `--device <gpu> --precision`), what the tf32 table takes from the fp32 one, the
attribution of a whole-graph difference to an operator kind and the report's line for it, and
the compile-time prediction that decides which models are compiled."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from tool_module import load_tool

from eqsat_nb.cost import table as table_mod
from eqsat_nb.cost.model import graph_signatures
from eqsat_nb.cost.select import make_cost_model
from eqsat_nb.cost.table import TableCostModel, load_table
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.parse import load

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "ir_examples"


@pytest.fixture(scope="module")
def tool():
    return load_tool("gpu_truth")


def _sigs(name: str) -> list:
    return list(graph_signatures(load(EXAMPLES / f"{name}.tir")))


def _as_f16(sig):
    from dataclasses import replace
    f16 = tuple(TensorType(t.shape, "f16") if t.dtype == "f32" else t for t in sig.inputs)
    return replace(sig, inputs=f16)


def test_each_precision_measures_its_own_configurations_once(tool):
    sigs = _sigs("tiny_mlp")
    first, seen = [], set()
    for s in sigs:
        if tool.config_key(s) not in seen:
            seen.add(tool.config_key(s))
            first.append(s)
    assert len(first) < len(sigs)                   # tiny_mlp repeats a configuration
    mixed = sigs + [_as_f16(s) for s in sigs]       # an fp32 and an fp16 model's configurations
    for precision, dtype in (("fp32", "f32"), ("tf32", "f32"), ("fp16", "f16"), ("bf16", "bf16")):
        order = tool.precision_order(mixed, precision)
        assert len(order) == len(first)             # they meet in one configuration each
        assert {t.dtype for s in order for t in s.inputs} == {dtype}
        assert [s.op for s in order] == [s.op for s in first]             # first seen first


def test_tables_are_written_in_their_precision_and_picked_for_it(tool, tmp_path, monkeypatch):
    """The rows of an fp16 table are keyed with f16 operands whatever the signatures measured;
    shipped as h100-measured-fp16 it prices `--device h100 --precision fp16`, an fp32 graph's
    nodes looked up as f16."""
    sigs = _sigs("bert")
    measured = {}
    for i, s in enumerate(tool.precision_order(sigs, "fp16")):
        measured[tool.config_key(s)] = (s, 10.0 + i)
    assert tool.table_file_name("h100-measured", "fp16") == "h100-measured-fp16"
    assert tool.table_file_name("h100-measured", "fp32") == "h100-measured"
    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "h100-measured.json").write_text(
        table_mod.shipped_tables()["h100-measured"].read_text())
    text = tool.table_text("h100-measured-fp16", measured, "fp16", "gpu|test", "h100",
                           {"precision": "fp16"})
    (folder / "h100-measured-fp16.json").write_text(text)
    doc = json.loads(text)
    assert doc["precision"] == "fp16" and len(doc["rows"]) == len(measured)
    assert {o[1] for r in doc["rows"] for o in r["operands"]} == {"f16"}
    monkeypatch.setattr(table_mod, "TABLES_DIR", folder)
    model = make_cost_model("analytic", "h100", precision="fp16")
    assert isinstance(model, TableCostModel) and model.table.name == "h100-measured-fp16"
    got = [model.cost(s) for s in sigs if s.op in ("matmul", "transpose")]
    assert got and model.misses == 0 and all(us >= 10.0 for us in got)
    assert make_cost_model("analytic", "h100", precision="fp32").table.name == "h100-measured"
    bf16 = make_cost_model("analytic", "h100", precision="bf16")     # none shipped: roofline
    assert not isinstance(bf16, TableCostModel) and "no bf16 measurements" in bf16.note
    t = load_table(folder / "h100-measured-fp16.json")
    assert t.precision == "fp16" and len(t.samples()) == len(measured)


def test_the_tf32_table_takes_only_non_gemm_non_conv_times_from_fp32(tool):
    sigs = tool.precision_order(_sigs("tiny_conv") + _sigs("tiny_mlp"), "fp32")
    fp32 = {tool.config_key(s): (s, 1.0 + i) for i, s in enumerate(sigs)}
    reused = tool.reuse_for_tf32(fp32, tool.precision_order(sigs, "tf32"))
    assert reused and all(s.op not in ("matmul", "conv2d") for s, _ in reused.values())
    kept = {k for k, (s, _) in fp32.items() if s.op not in ("matmul", "conv2d")}
    assert set(reused) == kept and any(s.op in ("matmul", "conv2d") for s in sigs)


def test_a_whole_graph_difference_is_attributed_to_an_operator_kind(tool):
    est_orig = {"matmul": 300.0, "relu": 20.0, "ewadd": 10.0}
    est_opt = {"matmul": 200.0, "relu": 0.0, "ewadd": 10.0, "split": 0.0}
    kern_orig = {"matmul": 280.0, "conv2d": 0.0, "other": 60.0}
    kern_opt = {"matmul": 270.0, "conv2d": 0.0, "other": 55.0}
    kinds = tool.kind_savings(est_orig, est_opt, kern_orig, kern_opt, 400.0, 380.0)
    assert kinds["matmul"] == {"estimated_us": 100.0, "measured_us": 10.0}
    assert kinds["conv2d"] == {"estimated_us": 0.0, "measured_us": 0.0}
    assert kinds["other"] == {"estimated_us": 20.0, "measured_us": 10.0}   # 120 -> 110 µs
    by_op = {op: (est_orig.get(op, 0.0), est_opt.get(op, 0.0)) for op in set(est_orig) | set(est_opt)}
    line = tool.compile_line("m", 30.0, 25.0, 5.3, kinds, by_op)
    assert line.startswith("m: estimated 30.0 %, measured 5.3 % under torch.compile (25.0 % as-is)")
    assert "matmul: the rewrite saves 100.0 µs estimated, 10.0 µs of GEMM kernel time" in line
    kinds["matmul"]["measured_us"] = 95.0                      # now the rest differs most
    line = tool.compile_line("m", 30.0, None, 5.3, kinds, by_op)
    assert "the other operators (estimated: relu 20.0 µs)" in line
    assert tool.kind_savings(est_orig, est_opt, None, None, None, None)["matmul"]["measured_us"] \
        is None
    assert tool.differs(30.0, 5.3) and not tool.differs(30.0, 25.0)
    assert not tool.differs(0.5, 1.2)           # within a point: noise
    assert not tool.differs(None, 3.0)


def test_compile_time_prediction(tool):
    times = tool.CompileTimes()
    assert times.predict(100) is None
    times.add(10.0, 100)
    assert times.predict(300) == pytest.approx(30.0)        # one size: scaled by nodes
    times.add(20.0, 300)
    assert times.predict(500) == pytest.approx(30.0)        # the line 5 + 0.05 n
    times.add(4.0, 100)
    assert times.predict(100) > 0


def test_plan_counts_every_precision(tool, capsys):
    assert tool.main(["tiny_mlp", "tiny_conv", "--plan", "--precisions", "fp32,tf32,bf16"]) == 0
    out = capsys.readouterr().out
    for p in ("fp32", "tf32", "bf16"):
        assert f"{p}: " in out
    with pytest.raises(SystemExit):
        tool.main(["tiny_mlp", "--plan", "--precisions", "fp32", "--e2e-precision", "bf16"])


@pytest.mark.parametrize("name,kind", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "matmul"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "matmul"),
    ("ampere_sgemm_128x64_tn", "matmul"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "conv2d"),
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5>", "conv2d"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float>", "conv2d"),
    ("triton_poi_fused_convolution_relu_3", "other"),       # Inductor's epilogue of a conv
    ("triton_per_fused__softmax_2", "other"),
    ("void at::native::vectorized_elementwise_kernel<4, add>", "other"),
    ("aten::addmm", "matmul"), ("aten::mm", "matmul"), ("mkldnn::_linear_pointwise", "matmul"),
    ("aten::mkldnn_convolution", "conv2d"), ("cpp_fused_add_relu_0", "other"),
])
def test_profiled_kernels_are_sorted_by_kind(name, kind):
    from eqsat_nb.cost.torch_graph import kernel_kind
    assert kernel_kind(name) == kind


def test_the_report_has_a_row_per_model_and_the_compile_lines(tool):
    errors = {"matmul": {"configs": 3, "median_ratio": 1.1, "worst_ratio": 2.0}}
    tables = {p: {"name": f"h200-measured-{p}", "measured": 10, "configs": 12, "measure_s": 3.0,
                  "op_errors": errors} for p in ("fp32", "bf16")}
    run = {"original": {"us": 200.0}, "optimized": {"us": 160.0}, "pct": 25.0,
           "check": {"ok": True, "rel_error": {"original": 4e-3, "optimized": 5e-3}}}
    compiled = dict(run, pct=2.0, compile_s={"original": 3.0, "optimized": 2.0},
                    background_compile_s={"original": 20.0, "optimized": 15.0})
    doc = {"device": "NVIDIA H200", "fingerprint": "gpu|NVIDIA H200", "torch": "2.11.0",
           "budget_s": 400, "total_s": 390, "method": "graph", "e2e_precision": "bf16",
           "compile_mode": None, "compile_workers": 6, "profile": "h100", "tables": tables,
           "skipped": ["vit_huge under torch.compile (predicted 120 s)"],
           "models": [{"name": "bert", "est": {"fp32": {"pct": 30.0},
                                               "bf16": {"pct": 28.0, "misses": 1}},
                       "e2e": {"asis": run, "compiled": compiled},
                       "note": "bert: estimated 28.0 %, measured 2.0 % under torch.compile"},
                      {"name": "vgg19", "est": {"fp32": {"pct": 0.0}}}]}
    text = tool.markdown(doc)
    assert "| bert | 30.0 | 28.0 | 25.0 | 2.0 | 0.200 | 0.200 | 5 (35) | 1 | ok (5.0e-03) |" \
        in text
    assert "| vgg19 | 0.0 | – | – | – | – | – | – | – | – |" in text
    assert "| matmul | 1.10 (2.00), 3 | 1.10 (2.00), 3 |" in text
    assert "(1 of 1 compiled)" in text and "- bert: estimated 28.0 %" in text
    assert "6 background processes" in text and "Not done: vit_huge" in text
