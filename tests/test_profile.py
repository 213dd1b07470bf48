"""`eqsat-nb profile`: fills the cost cache from a model's saturated e-graph, a second run
measures nothing (and reuses the signature list), --calibrate writes a loadable profile, and bad
input is a one-line error."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from eqsat_nb.cli import main
from eqsat_nb.cost.analytic import PROFILE_ENV, load_profile
from eqsat_nb.cost.db import CostCache

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "ir_examples" / "tiny_mlp.tir")


def _summary(out: str) -> dict:
    line = out.splitlines()[0]
    nums = {}
    for part in ("distinct op signatures", "measured", "cache hits"):
        before = line.split(f" {part}")[0]
        nums[part] = int(before.rsplit(" ", 1)[-1].lstrip("(;,"))
    return nums


def test_profile_ort_fills_cache_then_measures_nothing(tmp_path, capsys):
    db = tmp_path / "c.sqlite"
    assert main(["profile", TINY, "--cost", "ort", "--cost-db", str(db)]) == 0
    out, err = capsys.readouterr()
    first = _summary(out)
    assert first["distinct op signatures"] > 0
    assert first["measured"] == first["distinct op signatures"] and first["cache hits"] == 0
    assert "[" in err and f"{first['measured']}/{first['measured']}" in err   # the bar
    with CostCache(db) as c:       # one row per signature, plus the session floor/node rows
        assert sum(r[2] != "__overhead__" for r in c.rows()) == first["measured"]
    assert main(["profile", TINY, "--cost", "ort", "--cost-db", str(db), "-q"]) == 0
    out, err = capsys.readouterr()
    second = _summary(out)
    assert second["measured"] == 0 and second["cache hits"] == first["measured"]
    assert "signature list from the cache" in out and err == ""


def test_profile_analytic_prices_without_db(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("EQSAT_NB_COST_DB", str(tmp_path / "never.sqlite"))
    assert main(["profile", TINY, "--device", "a100", "-q"]) == 0
    out = capsys.readouterr().out
    assert "analytic/a100" in out and "priced" in out
    assert not (tmp_path / "never.sqlite").exists()


def test_calibrate_writes_profile_and_respects_force(tmp_path, capsys, monkeypatch):
    prof = tmp_path / "cfg" / "cpu.json"
    monkeypatch.setenv(PROFILE_ENV, str(prof))
    db = str(tmp_path / "c.sqlite")
    model = str(ROOT / "ir_examples" / "tiny_conv.tir")
    assert main(["profile", model, "--cost", "ort", "--cost-db", db, "-q", "--calibrate"]) == 0
    out = capsys.readouterr().out
    assert "fitted gmean" in out and prof.exists()
    doc = json.loads(prof.read_text())
    assert doc["fit"]["gmean_ratio"] <= doc["fit"]["before_gmean_ratio"] + 1e-9
    assert load_profile(prof).launch_us > 0
    before = prof.read_text()
    assert main(["profile", model, "--cost", "ort", "--cost-db", db, "-q", "--calibrate"]) == 1
    assert "--force" in capsys.readouterr().err and prof.read_text() == before
    assert main(["profile", model, "--cost", "ort", "--cost-db", db, "-q", "--calibrate",
                 "--force"]) == 0
    capsys.readouterr()
    assert main(["profile", TINY, "--device", "cpu-calibrated", "-q"]) == 0
    assert "analytic/cpu-calibrated" in capsys.readouterr().out


@pytest.mark.parametrize("argv,match", [
    (["profile", "nope.tir", "--cost", "ort"], "cannot read file"),
    (["profile", TINY, "--calibrate"], "use --cost ort"),
    (["profile", TINY, "--device", "tpu"], "unknown device profile"),
])
def test_bad_input_is_one_line_error(tmp_path, capsys, argv, match):
    assert main(argv + ["--cost-db", str(tmp_path / "c.sqlite")]) == 1
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


def test_bad_model_text_is_located(tmp_path, capsys):
    bad = tmp_path / "bad.tir"
    bad.write_text("func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = relu(%y)\n"
                   "  return %0\n}\n")
    assert main(["profile", str(bad), "--cost", "ort", "--cost-db",
                 str(tmp_path / "c.sqlite")]) == 1
    assert "bad.tir:2" in capsys.readouterr().err
