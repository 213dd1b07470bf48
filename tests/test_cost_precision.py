"""Costs priced in a precision: bytes per element and the GEMM rate of the precision, measured
tables chosen by precision, the report naming what it priced."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eqsat_nb.cli import main
from eqsat_nb.cost.analytic import A100, H100, AnalyticCostModel, load_profile, profile_to_json
from eqsat_nb.cost.model import OpSignature, graph_cost
from eqsat_nb.cost.select import make_cost_model
from eqsat_nb.cost.table import TableCostModel, load_table, table_json
from eqsat_nb.errors import TirError
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.ops import infer_types, normalize_attrs, op_def
from eqsat_nb.ir.parse import load

ROOT = Path(__file__).resolve().parent.parent


def _sig(op: str, shapes: list[tuple[int, ...]], dtype: str = "f32", const=()) -> OpSignature:
    attrs = normalize_attrs(op_def(op), {})
    ins = tuple(TensorType(s, dtype) for s in shapes)
    return OpSignature(op, attrs, ins, tuple(infer_types(op, list(ins), attrs)), tuple(const))


def test_a_gemm_is_priced_at_its_precisions_tensor_core_rate():
    big = _sig("matmul", [(4096, 4096), (4096, 4096)], const=(1,))
    fp32 = AnalyticCostModel("h100", "fp32").cost(big)
    tf32 = AnalyticCostModel("h100", "tf32").cost(big)
    fp16 = AnalyticCostModel("h100", "fp16").cost(big)
    assert fp32 > 3 * tf32 > 3 * fp16 * 1.5            # 35.9 -> 265 -> 531 TFLOP/s
    assert AnalyticCostModel("h100", "bf16").cost(big) == fp16
    assert H100.gemm_flops("fp16") == pytest.approx(35.9e12 * 989.4 / 66.9)
    assert A100.gemm_flops("tf32") == 156e12 and A100.gemm_flops("fp32") == 19.5e12


def test_a_memory_bound_op_moves_half_the_bytes_in_half_precision():
    relu = _sig("relu", [(64, 1024, 1024)])
    fp32 = AnalyticCostModel("h100", "fp32")
    fp16 = AnalyticCostModel("h100", "fp16")
    floor = H100.floor_us("relu")
    assert fp16.cost(relu) - floor == pytest.approx((fp32.cost(relu) - floor) / 2)
    # an fp16 graph priced in its own types costs what fp16 pricing of the fp32 graph does
    relu16 = _sig("relu", [(64, 1024, 1024)], "f16")
    assert AnalyticCostModel("h100").cost(relu16) == pytest.approx(fp16.cost(relu))


def test_measured_tables_price_their_own_precision_only():
    fp32 = make_cost_model("analytic", "h100", precision="fp32")
    assert isinstance(fp32, TableCostModel) and fp32.precision == "fp32"
    assert isinstance(make_cost_model("analytic", "h100"), TableCostModel)
    fp16 = make_cost_model("analytic", "h100", precision="fp16")
    assert isinstance(fp16, AnalyticCostModel) and fp16.precision == "fp16"
    assert "no fp16 measurements of the h100" in fp16.note
    with pytest.raises(TirError, match="unknown precision 'fp8'"):
        make_cost_model("analytic", "h100", precision="fp8")
    with pytest.raises(TirError, match="measured in fp32, not bf16"):
        make_cost_model("analytic", "h100-measured", precision="bf16")


def test_a_half_precision_table_prices_a_model_in_its_precision(tmp_path):
    """A table measured in fp16 holds f16 operands; an fp32 graph priced by it is looked up
    with its floats as f16 (priced as deployed in fp16)."""
    sig32 = _sig("matmul", [(128, 256), (256, 256)], const=(1,))
    sig16 = _sig("matmul", [(128, 256), (256, 256)], "f16", const=(1,))
    from eqsat_nb.cost.table import table_rows
    path = tmp_path / "t.json"
    path.write_text(table_json("gpu-fp16", table_rows([(sig16, 7.5)]), "torch", "gpu|test",
                               "h100", precision="fp16"))
    t = load_table(path)
    assert t.precision == "fp16" and t.lookup(sig32) == 7.5 == t.lookup(sig16)
    bad = json.loads(path.read_text())
    bad["precision"] = "fp12"
    path.write_text(json.dumps(bad))
    with pytest.raises(TirError, match="precision 'fp12'"):
        load_table(path)


def test_profiles_keep_their_precision_rates_through_json(tmp_path):
    p = tmp_path / "h.json"
    p.write_text(profile_to_json(H100))
    assert load_profile(p).precision_flops == H100.precision_flops
    doc = json.loads(p.read_text())
    doc["precision_flops"] = {"fp9": 1e12}
    p.write_text(json.dumps(doc))
    with pytest.raises(TirError, match="precision_flops"):
        load_profile(p)


def test_run_names_the_precision_it_priced(tmp_path, capsys):
    model = str(ROOT / "ir_examples" / "bert.tir")
    rep = tmp_path / "r.json"
    costs = {}
    for precision in ("fp32", "tf32", "fp16"):
        assert main(["run", model, "--device", "h100", "--precision", precision, "-q",
                     "--no-verify", "--report", str(rep), "--force"]) == 0
        r = json.loads(rep.read_text())
        assert f", {precision}" in r["cost_model"]
        costs[precision] = r["cost_before_us"]
    assert costs["fp32"] > costs["tf32"] > costs["fp16"]
    with pytest.raises(SystemExit) as e:                # argparse's usage error
        main(["run", model, "--precision", "fp64x", "-q"])
    assert e.value.code == 2 and "invalid choice: 'fp64x'" in capsys.readouterr().err
    g = load(ROOT / "ir_examples" / "bert.tir")
    assert graph_cost(make_cost_model("analytic", "h100", precision="fp32"), g) == \
        pytest.approx(costs["fp32"])
