"""`run --device cuda`: the extracted graph, the other extractors' answers and the original are
timed end to end and the fastest measured one is written. Without PyTorch or a CUDA GPU the
option is refused with what is missing (what CI sees); with PyTorch, the choosing itself is
tested on the CPU device (eager timings)."""
from __future__ import annotations

from pathlib import Path

import pytest

from eqsat_nb.cli import main
from eqsat_nb.confirm import is_device

ROOT = Path(__file__).resolve().parent.parent
NASRNN = str(ROOT / "ir_examples" / "nasrnn.tir")


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def test_device_names():
    assert is_device("cuda") and is_device("cuda:1")
    assert not is_device("h100") and not is_device(None) and not is_device("cpu")


@pytest.mark.skipif(_torch_cuda(), reason="this machine has a CUDA GPU")
def test_device_cuda_without_a_gpu_says_what_is_missing(capsys, tmp_path):
    out = tmp_path / "o.tir"
    assert main(["run", NASRNN, "--device", "cuda", "-o", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "--device cuda measures on this machine's GPU with PyTorch, but" in err
    assert "--device h100" in err and not out.exists()


def test_the_fastest_measured_graph_is_chosen(monkeypatch):
    """confirm() with given timings: the candidate with the lowest median wins, the original
    when nothing beats it, and a candidate that computes something else is never timed."""
    torch = pytest.importorskip("torch")
    from eqsat_nb import confirm as confirm_mod
    from eqsat_nb.cost import torch_graph
    from eqsat_nb.ir.parse import parse

    src = """func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w = weight @w : tensor<8x8xf32>
  %0 = matmul(%x, %w) : tensor<4x8xf32>
  %1 = relu(%0) : tensor<4x8xf32>
  return %1
}"""
    original = parse(src)
    same = parse(src.replace("func @f", "func @g"))          # computes the same
    wrong = parse(src.replace("relu(%0)", "tanh(%0)"))       # computes something else
    speeds = {}

    def fake_timing(graphs, method, budget_s):
        return [[speeds[g.graph.name]] * 5 for g in graphs]
    monkeypatch.setattr(torch_graph, "time_alternately", fake_timing)
    speeds.update(f=10.0, g=5.0, wrong=1.0)
    wrong = parse(src.replace("relu(%0)", "tanh(%0)").replace("func @f", "func @wrong"))
    chosen, how = confirm_mod.confirm(original, [("a", same), ("b", wrong)], None, "cpu")
    assert chosen is same and how.chosen == "a" and "b" in how.dropped
    assert "wrote a" in how.describe() and "b not timed: differs" in how.describe()
    speeds.update(g=20.0)
    chosen, how = confirm_mod.confirm(original, [("a", same)], None, "cpu")
    assert chosen is original and how.chosen == "original"
    assert torch is not None


def test_run_writes_the_graph_the_measurement_chose(monkeypatch, tmp_path, capsys):
    """The run path with the GPU measurement stubbed (CI has no torch): the extractors'
    alternatives reach the measurement, its choice is what is verified and written, and the
    report says what was measured."""
    from eqsat_nb import confirm as confirm_mod
    from eqsat_nb.cost import select
    from eqsat_nb.ir.parse import load
    from eqsat_nb.ir.printer import print_graph

    real_make = select.make_cost_model
    monkeypatch.setattr(confirm_mod, "require_device", lambda name: None)
    monkeypatch.setattr(select, "make_cost_model", lambda backend, device=None, *a, **k:
                        real_make("analytic", "h100"))
    seen = {}

    def measured(original, candidates, weights, device, **k):
        seen["labels"] = [label for label, _ in candidates]
        label, graph = candidates[-1]          # the cheapest extractor's answer "ran fastest"
        return graph, confirm_mod.Confirmation(device, label, {"original": 9.0, label: 4.0}, 20)
    monkeypatch.setattr(confirm_mod, "confirm", measured)
    out = tmp_path / "o.tir"
    assert main(["run", NASRNN, "--device", "cuda:0", "-o", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert seen["labels"] == ["extracted", "ocf+switch", "ocf", "greedy"]
    assert "measured on cuda:0 end to end" in text and "wrote greedy" in text
    assert "verified: " in text
    original = load(NASRNN)
    assert print_graph(load(str(out))) != print_graph(original)
