"""Measured cost tables (cost/table.py): the shipped sample table loads, prices what it measured
by its measurement and the rest by its base profile, is reachable as `--device NAME|FILE.json`,
and bad tables are refused with the file and row named. The sample
(tests/data/cpu-torch-sample.json) was written by `tools/gpu_truth.py tiny_mlp tiny_conv nasrnn
--device-kind cpu` on this project's CPU: real torch timings, no GPU needed to read it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eqsat_nb.cost import table as table_mod
from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.cost.model import graph_cost, graph_signatures
from eqsat_nb.cost.select import make_cost_model
from eqsat_nb.cost.table import (TableCostModel, is_table_name, load_table, resolve_table,
                                 table_json, table_rows)
from eqsat_nb.errors import TirError
from eqsat_nb.ir.parse import load

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "tests" / "data" / "cpu-torch-sample.json"
EXAMPLES = ROOT / "ir_examples"


def test_the_shipped_sample_loads_and_prices_what_it_measured():
    t = load_table(SAMPLE)
    doc = json.loads(SAMPLE.read_text())
    assert t.name == "cpu-torch-sample" and t.backend == "torch" and t.base_profile == "cpu"
    assert len(t) == len(doc["rows"]) > 50
    model = TableCostModel(t)
    for name in ("tiny_mlp", "tiny_conv", "nasrnn"):
        g = load(EXAMPLES / f"{name}.tir")
        for sig in graph_signatures(g):
            assert t.lookup(sig) is not None, sig        # the sample measured every original op
            assert model.cost(sig) == t.lookup(sig)
    assert model.misses == 0 and model.hits > 0
    us = {json.dumps([r["op"], r["attrs"], r["operands"]]): r["us"] for r in doc["rows"]}
    assert all(v > 0 for v in us.values())


def test_signatures_the_table_lacks_fall_back_to_its_base_profile():
    t = load_table(SAMPLE)
    model = TableCostModel(t)
    g = load(EXAMPLES / "squeezenet.tir")          # not in the sample
    base = AnalyticCostModel("cpu")
    assert graph_cost(model, g) == pytest.approx(graph_cost(base, g))
    assert model.misses > 0 and model.hits == 0
    sig = next(graph_signatures(g))
    assert model.explain(sig).startswith("not measured: cpu")


def test_rows_round_trip_through_the_writer(tmp_path):
    g = load(EXAMPLES / "tiny_conv.tir")
    sigs = list(graph_signatures(g))
    rows = table_rows([(s, 10.0 + i) for i, s in enumerate(sigs)] + [(sigs[0], 99.0)])
    assert len(rows) == len({(r["op"], json.dumps(r["operands"]), json.dumps(r["attrs"]))
                             for r in rows})
    path = tmp_path / "t.json"
    path.write_text(table_json("t-measured", rows, "torch", "gpu|X", "h100", {"a": 1}))
    t = load_table(path)
    assert t.lookup(sigs[0]) == 10.0 and t.base_profile == "h100" and t.notes == {"a": 1}
    assert is_table_name(str(path)) and not is_table_name(str(tmp_path / "none.json"))


def test_device_option_loads_a_table_by_path_and_by_shipped_name(tmp_path, monkeypatch):
    m = make_cost_model("analytic", str(SAMPLE))
    assert isinstance(m, TableCostModel) and m.device == "cpu-torch-sample"
    assert resolve_table(str(SAMPLE)).name == "cpu-torch-sample"
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "x100-measured.json").write_text(SAMPLE.read_text())
    monkeypatch.setattr(table_mod, "TABLES_DIR", tables)
    assert isinstance(make_cost_model("analytic", "x100-measured"), TableCostModel)
    assert set(table_mod.shipped_tables()) == {"x100-measured"}


def test_an_unshipped_measured_table_says_how_to_make_one(monkeypatch, tmp_path):
    monkeypatch.setattr(table_mod, "TABLES_DIR", tmp_path / "absent")
    with pytest.raises(TirError, match="gpu_truth.py.*GPU_TRUTH.md"):
        make_cost_model("analytic", "h100-measured")
    with pytest.raises(TirError, match="unknown device profile"):
        make_cost_model("analytic", "h100-typo")


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(format="other"), "not a cost table"),
    (lambda d: d.update(version=7), "version 7"),
    (lambda d: d.update(rows={}), "no list of rows"),
    (lambda d: d["rows"][3].update(op="frobnicate"), "row 3 needs op"),
    (lambda d: d["rows"][2].update(us=-1), r"row 2 \(\w+\): us must be"),
    (lambda d: d["rows"][1].update(us="fast"), "row 1"),
    (lambda d: d["rows"][0].update(operands=[[1, 2]]), "row 0"),
    (lambda d: d.update(base_profile="z9000"), "base_profile"),
])
def test_bad_tables_are_refused_with_the_file_and_row(tmp_path, edit, message):
    doc = json.loads(SAMPLE.read_text())
    edit(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TirError, match=message) as e:
        load_table(path)
    assert str(path) in str(e.value)
    path.write_text("{not json")
    with pytest.raises(TirError, match="not valid JSON"):
        load_table(path)


def test_run_extracts_with_a_measured_table(tmp_path, capsys):
    from eqsat_nb.cli import main
    report = tmp_path / "r.json"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "--device", str(SAMPLE), "-q",
                 "--report", str(report)]) == 0
    assert "table cpu-torch-sample" in json.dumps(json.loads(report.read_text()))


def test_gpu_truth_plan_counts_configurations_without_torch(capsys):
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_truth", ROOT / "tools" / "gpu_truth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["tiny_mlp", "tiny_conv", "--plan", "--out", "unused"]) == 0
    out = capsys.readouterr().out
    from eqsat_nb.rules.parse import load_rules
    m = mod.load_model("tiny_mlp")
    mod.saturate_model(m, load_rules(None))                    # the plan's own e-graph
    assert f"tiny_mlp: {m['nodes']} nodes, {m['egraph_nodes']} e-graph nodes" in out
    assert "distinct configurations" in out
    assert mod.table_name("NVIDIA H100 80GB HBM3") == "h100-measured"
    assert mod.table_name("NVIDIA H200") == "h200-measured"
    assert mod.main(["no_such_model", "--plan"]) == 1
