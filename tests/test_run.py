"""`eqsat-nb run` / `bench` end to end, the optimize() pipeline and output verification."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb import optimize as optimize_mod
from eqsat_nb.check_outputs import compare, verify_graphs
from eqsat_nb.cli import main
from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.cost.model import graph_cost
from eqsat_nb.ir.parse import load
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.resources import data_dir
from eqsat_nb.rules.parse import load_rules

EXAMPLES = data_dir("ir_examples")
TINY = ("tiny_mlp", "tiny_conv", "tiny_branches")


@pytest.fixture(scope="module")
def rules():
    return load_rules()


@pytest.mark.parametrize("name", TINY)
def test_run_writes_a_verified_cheaper_or_equal_graph(tmp_path, capsys, name):
    out, rep = tmp_path / "out.tir", tmp_path / "report.json"
    assert main(["run", str(EXAMPLES / f"{name}.tir"), "-o", str(out), "--report", str(rep),
                 "-q"]) == 0
    text = capsys.readouterr().out
    assert "speed-up" in text
    original, optimized = load(EXAMPLES / f"{name}.tir"), load(out)
    report = json.loads(rep.read_text())
    if report["improved"]:
        assert "verified:" in text
        assert report["verification"]["ok"] is True
    else:       # the original is kept: nothing to verify
        assert "unchanged, nothing to verify" in text
        assert report["verification"]["status"] == "unchanged"
    model = AnalyticCostModel("cpu")
    assert graph_cost(model, optimized) == pytest.approx(report["cost_after_us"])
    assert report["cost_after_us"] <= report["cost_before_us"]
    assert verify_graphs(original, optimized, seeds=(3, 4)).ok
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp files left


def test_run_finds_the_conv_merge_on_tiny_conv(tmp_path):
    out = tmp_path / "o.tir"
    assert main(["run", str(EXAMPLES / "tiny_conv.tir"), "-o", str(out), "-q"]) == 0
    assert sum(1 for _ in load(out).compute_nodes()) < 6


def test_run_refuses_to_overwrite_without_force(tmp_path, capsys):
    out = tmp_path / "out.tir"
    out.write_text("mine\n")
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-o", str(out), "-q"]) == 1
    assert "file exists; pass --force" in capsys.readouterr().err
    assert out.read_text() == "mine\n"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-o", str(out), "-q", "--force"]) == 0
    assert out.read_text().startswith("func @tiny_mlp")


def test_run_refuses_a_tir_output_named_onnx(tmp_path, capsys):
    """`-o` writes .tir text: named .onnx it would be a file every ONNX reader rejects, so the
    run stops before any work and points at --onnx."""
    out = tmp_path / "model.onnx"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-o", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert err == f"{out}: error: -o writes the graph as .tir text, not ONNX; for ONNX pass " \
                  f"--onnx {out}\n"
    assert not out.exists()
    assert main(["print", str(EXAMPLES / "tiny_mlp.tir"), "-o", str(tmp_path / "m.ONNX")]) == 1
    assert "not ONNX" in capsys.readouterr().err and not (tmp_path / "m.ONNX").exists()


def _wrong(graph):
    """The same graph with its tanh replaced by a sigmoid: a different function."""
    from eqsat_nb.ir.parse import parse
    from eqsat_nb.ir.printer import print_graph

    text = print_graph(graph)
    assert " tanh(" in text
    return parse(text.replace(" tanh(", " sigmoid(", 1))


def test_verification_failure_is_a_hard_error_and_writes_nothing(tmp_path, capsys, monkeypatch):
    real = optimize_mod.optimize

    def broken(graph, *a, **k):
        result = real(graph, *a, **k)
        result.optimized = _wrong(graph)
        return result

    monkeypatch.setattr(optimize_mod, "optimize", broken)
    out = tmp_path / "out.tir"
    code = main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-o", str(out), "-q"])
    err = capsys.readouterr().err
    assert code == 1
    assert "does not match the original" in err and "Nothing was written" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_interrupt_leaves_no_partial_output(tmp_path, capsys, monkeypatch):
    import eqsat_nb.ir.printer as printer

    def interrupted(graph):
        raise KeyboardInterrupt

    monkeypatch.setattr(printer, "print_graph", interrupted)
    out = tmp_path / "out.tir"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-o", str(out), "--report",
                 str(tmp_path / "r.json"), "-q"]) == 130
    assert list(tmp_path.iterdir()) == []


def test_interrupt_while_writing_removes_the_temporary_file(tmp_path):
    from eqsat_nb.commands.run import write_atomic

    def half(path: Path) -> None:
        path.write_text("partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(str(tmp_path / "x.tir"), half)
    assert list(tmp_path.iterdir()) == []


def test_optimize_keeps_the_original_when_nothing_is_cheaper(rules):
    graph = load(EXAMPLES / "tiny_branches.tir")
    result = optimize(graph, AnalyticCostModel("cpu"), rules)
    assert not result.improved and result.optimized is graph
    assert result.speedup_pct == 0.0


def test_optimize_gpu_profile_merges_nasrnn_matmuls(rules):
    graph = load(EXAMPLES / "nasrnn.tir")
    result = optimize(graph, AnalyticCostModel("a100"), rules, Options(extract="ocf"))
    assert result.improved and result.speedup_pct > 20
    ops = lambda g: sum(1 for n in g.compute_nodes() if n.op == "matmul")  # noqa: E731
    assert ops(result.optimized) < ops(graph)
    assert verify_graphs(graph, result.optimized).ok


def test_ocf_switch_extractor_is_ocf_improved_and_repeatable(rules):
    """`--extract ocf+switch`: no solver, so the same graph every time; never dearer than ocf."""
    graph = load(EXAMPLES / "nasrnn.tir")
    cost = AnalyticCostModel("a100")
    ocf = optimize(graph, cost, rules, Options(extract="ocf"))
    first, again = (optimize(graph, cost, rules, Options(extract="ocf+switch")) for _ in "12")
    assert first.extraction == "ocf+switch"
    assert first.cost_after <= ocf.cost_after
    assert first.optimized == again.optimized and first.cost_after == again.cost_after
    assert verify_graphs(graph, first.optimized).ok


def test_one_saturation_extracted_with_several_cost_models(rules):
    """`extract_saturated` on one saturated e-graph gives, per cost model, what `optimize`
    gives with that model (ocf+switch: no solver, deterministic), and leaves the e-graph as
    it was."""
    from eqsat_nb.egraph.convert import graph_to_egraph
    from eqsat_nb.optimize import extract_saturated
    from eqsat_nb.search.saturate import Limits, saturate
    graph = load(EXAMPLES / "nasrnn.tir")
    eg = graph_to_egraph(graph)
    saturate(eg, rules, Limits())
    nodes = eg.num_nodes
    opts = Options(extract="ocf+switch")
    for cost in (AnalyticCostModel("a100"), AnalyticCostModel("cpu"),
                 AnalyticCostModel("h100", "bf16")):
        got = extract_saturated(eg, graph, cost, opts)
        want = optimize(graph, cost, rules, opts)
        assert got.optimized == want.optimized and got.cost_after == want.cost_after
        assert got.cost_before == want.cost_before and got.extraction == want.extraction
        assert eg.num_nodes == nodes
    assert got.improved and got.speedup_pct > 0


def test_compare_tolerance():
    ref = np.array([1000.0, 1e-6, -3.0])
    ok = compare([ref], [ref + np.array([0.05, 0.005, 0.0])], ["y"])[0]
    assert ok.ok                                # atol is relative to max|ref|: 1e-5 * 1000
    bad = compare([ref], [ref + np.array([0.0, 0.02, 0.0])], ["y"])[0]
    assert not bad.ok and bad.worst_excess > 1
    assert not compare([ref], [ref[:2]], ["y"])[0].ok
    assert not compare([ref], [np.array([1000.0, np.nan, -3.0])], ["y"])[0].ok
    assert compare([np.zeros(3)], [np.zeros(3)], ["z"])[0].ok


def test_bench_prints_the_table_with_published_numbers(capsys):
    assert main(["bench", str(EXAMPLES / "tiny_conv.tir"), "nasrnn", "--device", "a100",
                 "-q", "--extract", "ocf"]) == 0
    out = capsys.readouterr().out
    assert "paper TENSAT %" in out and "paper MCTS %" in out
    nas = next(line for line in out.splitlines() if line.startswith("| nasrnn"))
    assert "68.9" in nas and "41.2" in nas


def test_bench_json_is_a_record_naming_its_command_machine_and_versions(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", str(EXAMPLES / "tiny_conv.tir"), "--device", "a100", "-q", "--extract",
            "ocf", "--no-verify", "--json", str(out)]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["command"] == shlex.join(["eqsat-nb", *argv])
    assert doc["machine"]["cpu_model"] and doc["machine"]["usable_cores"] >= 1
    assert doc["versions"]["numba"] and doc["versions"]["eqsat-nb"]
    assert doc["cost_model"].startswith("analytic a100")
    assert [r["model"] for r in doc["rows"]] == ["tiny_conv"]


def test_bench_unknown_model_is_a_clear_error(capsys):
    assert main(["bench", "no_such_model", "-q"]) == 1
    assert "no such model file or shipped example" in capsys.readouterr().err


def test_run_exports_onnx_checked_in_onnxruntime(tmp_path, capsys):
    import onnx

    out = tmp_path / "o.onnx"
    assert main(["run", str(EXAMPLES / "tiny_conv.tir"), "--onnx", str(out), "-q"]) == 0
    assert "verified in onnxruntime" in capsys.readouterr().out
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    back = tmp_path / "back.tir"
    assert main(["run", str(out), "-o", str(back), "-q", "--extract", "ocf"]) == 0
    assert sum(1 for _ in load(back).compute_nodes()) == 5


def test_bench_measures_in_onnxruntime(capsys):
    assert main(["bench", str(EXAMPLES / "tiny_conv.tir"), "--repeats", "3", "-q",
                 "--extract", "ocf"]) == 0
    out = capsys.readouterr().out
    assert "ort speed-up %" in out and "| tiny_conv |" in out
    assert main(["bench", str(EXAMPLES / "tiny_branches.tir"), "--repeats", "3", "-q"]) == 0
    assert "0 (same model)" in capsys.readouterr().out


def test_run_with_mcts_search(tmp_path, capsys):
    out, rep = tmp_path / "o.tir", tmp_path / "r.json"
    args = ["run", str(EXAMPLES / "tiny_conv.tir"), "--search", "mcts", "--budget", "8",
            "--seed", "3", "-o", str(out), "--report", str(rep), "-q", "--extract", "ocf"]
    assert main(args) == 0
    report = json.loads(rep.read_text())
    assert report["verification"]["ok"] and report["cost_after_us"] < report["cost_before_us"]
    first = out.read_text()
    assert main(args + ["--force"]) == 0                  # same seed, same graph
    assert out.read_text() == first
