"""`make_cost_model`: every backend name, its device handling, clear errors, and the fallback
(with a warning that says what to install) when TensorRT / PyTorch / a GPU are missing."""
from __future__ import annotations

import json

import pytest

from eqsat_nb.cost import analytic, torch_backend, trt
from eqsat_nb.cost.analytic import AnalyticCostModel, profile_to_json
from eqsat_nb.cost.model import CostModel
from eqsat_nb.cost.ort import OrtCostModel
from eqsat_nb.cost.select import BACKENDS, make_cost_model
from eqsat_nb.errors import TirError


def test_analytic_default_and_devices():
    m = make_cost_model()
    assert isinstance(m, AnalyticCostModel) and m.profile.name == "cpu"
    for dev in ("cpu", "a100"):
        assert make_cost_model("analytic", dev).profile.name == dev
    assert make_cost_model("analytic", "h100-roofline").profile.name == "h100"
    assert m.fallback_reason is None and m.requested == "analytic"


def test_a_gpu_with_a_shipped_measurement_is_priced_by_it():
    """`--device h100` / `h200`: the shipped measured table, the configurations it lacks by
    the fitted h100 roofline (docs/gpu-costs.md)."""
    from eqsat_nb.cost.table import TableCostModel
    for dev in ("h100", "h200"):
        m = make_cost_model("analytic", dev)
        assert isinstance(m, TableCostModel) and m.device == f"{dev}-measured"
        assert m.table.base_profile == "h100" and m.base.profile.name == "h100"


@pytest.mark.parametrize("backend,device,match", [
    ("nope", None, "unknown cost backend"),
    ("analytic", "tpu", "unknown device profile"),
    ("ort", "a100", "CPU only"),
])
def test_bad_names_are_tirerrors(backend, device, match, tmp_path):
    with pytest.raises(TirError, match=match):
        make_cost_model(backend, device, db=tmp_path / "c.sqlite")


def test_ort_backend_uses_the_given_db(tmp_path):
    m = make_cost_model("ort", db=tmp_path / "c.sqlite")
    assert isinstance(m, OrtCostModel) and isinstance(m, CostModel)
    assert m.cache.path == tmp_path / "c.sqlite"


@pytest.mark.skipif(trt.unavailable() is None, reason="TensorRT is usable here: no fallback")
def test_trt_falls_back_with_install_hint(tmp_path, capsys):
    m = make_cost_model("trt", db=tmp_path / "c.sqlite")
    err = capsys.readouterr().err
    assert m.requested == "trt" and m.name in ("ort", "torch")
    assert "eqsat-nb[trt]" in err and "NVIDIA" in err and "falling back" in err
    assert trt.unavailable() in m.fallback_reason


@pytest.mark.skipif(torch_backend.unavailable("cuda") is None, reason="a CUDA GPU is usable")
def test_torch_gpu_falls_back_with_install_hint(tmp_path, capsys):
    m = make_cost_model("torch", "cuda", db=tmp_path / "c.sqlite")
    assert isinstance(m, OrtCostModel) and m.requested == "torch"
    assert "eqsat-nb[torch]" in capsys.readouterr().err


def test_calibrated_profile_by_name_and_path(tmp_path, monkeypatch):
    path = tmp_path / "prof.json"
    monkeypatch.setenv(analytic.PROFILE_ENV, str(path))
    with pytest.raises(TirError, match="--calibrate"):
        make_cost_model("analytic", "cpu-calibrated")
    fitted = analytic.DeviceProfile("cpu-calibrated", **{**{f: getattr(analytic.CPU, f)
                                    for f in analytic._FIELDS}, "launch_us": 7.5})
    path.write_text(profile_to_json(fitted, {"gmean_ratio": 1.1}))
    m = make_cost_model("analytic", "cpu-calibrated")
    assert m.launch_us == 7.5 and m.profile.matmul_flops == analytic.CPU.matmul_flops
    assert make_cost_model("analytic", str(path)).launch_us == 7.5
    # the built-in cpu profile is unaffected by the file
    assert make_cost_model("analytic", "cpu").launch_us == analytic.CPU.launch_us


@pytest.mark.parametrize("text,match", [
    ("{", "not valid JSON"),
    ("[]", "JSON object"),
    ('{"name": "x"}', "lacks"),
])
def test_bad_profile_files(tmp_path, text, match):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(TirError, match=match):
        make_cost_model("analytic", str(path))
    doc = json.loads(profile_to_json(analytic.CPU))
    doc["matmul_flops"] = -1
    path.write_text(json.dumps(doc))
    with pytest.raises(TirError, match="matmul_flops"):
        make_cost_model("analytic", str(path))


def test_gpu_profile_file_keeps_its_wave_model(tmp_path):
    """A profile file round-trips `sms`/`tile`; a file without them (older, or a CPU fit) has no
    wave model."""
    path = tmp_path / "gpu.json"
    path.write_text(profile_to_json(analytic.A100))
    assert analytic.load_profile(path) == analytic.A100
    doc = json.loads(profile_to_json(analytic.A100))
    del doc["sms"], doc["tile"]
    path.write_text(json.dumps(doc))
    assert analytic.load_profile(path).sms == 0
    doc["sms"] = -2
    path.write_text(json.dumps(doc))
    with pytest.raises(TirError, match="sms"):
        make_cost_model("analytic", str(path))


def test_all_backends_listed():
    assert BACKENDS == ("analytic", "ort", "trt", "torch")
