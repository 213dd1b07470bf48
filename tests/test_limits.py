"""Issue 20: the time limit is the command's budget, verification's memory is bounded, every
failure is a clean message with a documented exit code, outputs get the umask's mode.

No timed assertion but one (vit_huge under `--time-limit 5`, with a wide margin); the precise
figure is perf/test_time_limit.py's.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from traced import traced_peak
from eqsat_nb import check_outputs
from eqsat_nb.check_outputs import (NotVerified, compare, estimate_verification,
                                    verify_graphs)
from eqsat_nb.cli import main
from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.ir import interp
from eqsat_nb.ir.graph import TensorType
from eqsat_nb.ir.parse import load, parse
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.resources import data_dir
from eqsat_nb.rules.parse import load_rules
from eqsat_nb.search.limits import Budget, compile_seconds, track_compilation, work_clock

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = data_dir("ir_examples")
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

# two 30 000 x 30 000 f32 inputs (3.4 GiB each); the duplicate matmul is merged, so the graph
# changes and verification is due: it would need tens of GB
BIG = """\
func @big(%a: tensor<30000x30000xf32>, %b: tensor<30000x30000xf32>) -> tensor<30000x30000xf32> {
  %0 = matmul(%a, %b)
  %1 = matmul(%a, %b)
  %2 = ewadd(%0, %1)
  return %2
}
"""


@pytest.fixture(scope="module")
def rules():
    return load_rules()


# ------------------------------------------------------------------ 2. the time budget
def test_vit_huge_time_limit_5_is_the_whole_commands_budget(tmp_path, capsys):
    rep = tmp_path / "r.json"
    t = time.perf_counter()
    assert main(["run", str(EXAMPLES / "vit_huge.tir"), "--time-limit", "5", "-q",
                 "--report", str(rep)]) == 0
    wall = time.perf_counter() - t
    r = json.loads(rep.read_text())
    b = r["time_budget"]
    # compilation on a cold cache is not counted; everything else is (7 s asked, 15 s allowed
    # here: the machine running the tests may be loaded)
    assert wall - b["numba_compile_s"] < 15.0
    assert b["limit_s"] == 5.0 and b["used_s"] < 10.0
    assert set(r["times_s"]) >= {"load", "search", "extract"}
    out = capsys.readouterr().out
    assert "of the 5 s limit" in out
    if not r["improved"]:
        assert r["verification"]["status"] == "unchanged"
        assert "unchanged, nothing to verify" in out and "verify" not in r["times_s"]


def test_unchanged_graph_is_not_verified(tmp_path, capsys, monkeypatch):
    def never(*a, **k):
        raise AssertionError("verified an unchanged graph")

    monkeypatch.setattr(check_outputs, "verify_graphs", never)
    rep = tmp_path / "r.json"
    assert main(["run", str(EXAMPLES / "tiny_branches.tir"), "-q", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert not r["improved"]
    assert r["verification"] == {"status": "unchanged", "ok": None, "seeds": [0],
                                 "summary": "unchanged, nothing to verify"}
    assert "  unchanged, nothing to verify" in capsys.readouterr().out


def test_the_ilp_gets_what_is_left_and_is_skipped_without_time(rules):
    graph = load(EXAMPLES / "tiny_mlp.tir")
    spent = Budget(0.5, start=work_clock() - 1.0)          # already over
    result = optimize(graph, AnalyticCostModel("cpu"), rules, Options(budget=spent))
    assert result.extraction.startswith("ocf+switch (ilp skipped: the time limit was reached)")
    assert result.stop_reason == "time limit"            # the search got no share either
    roomy = optimize(graph, AnalyticCostModel("cpu"), rules, Options(budget=Budget(600.0)))
    assert roomy.extraction.startswith("ilp (optimal)")


def test_search_share_of_the_budget():
    from eqsat_nb.optimize import _with_search_budget

    opts = _with_search_budget(Options(budget=Budget(100.0), reserve=20.0, search_share=0.5))
    assert 39.0 < opts.limits.time_limit <= 40.0
    assert _with_search_budget(Options()).limits.time_limit == Options().limits.time_limit


def test_numba_compilation_is_not_counted():
    from numba import njit

    track_compilation()
    before = compile_seconds()

    @njit(cache=False)
    def fresh(x):          # a new function: compiled now
        return x * 2 + 1

    wall0, work0 = time.perf_counter(), work_clock()
    assert fresh(3) == 7
    compiled = compile_seconds() - before
    assert compiled > 0
    assert (time.perf_counter() - wall0) - (work_clock() - work0) == pytest.approx(compiled,
                                                                                   abs=1e-3)


def test_a_check_the_first_plan_ruled_out_is_planned_again(tmp_path, monkeypatch):
    """The plan before the search prices a graph that shares nothing with the original; after
    the search the real graph and the time left decide (ViT-Huge at --time-limit 45: 29 s
    planned first, 23 s for its optimized graph: verified)."""
    from eqsat_nb.commands import run as run_cmd

    real = run_cmd.plan_verification
    calls = []

    def first_plan_says_skip(original, optimized, *rest, **kw):
        calls.append(optimized is None)
        if optimized is None:
            return NotVerified("time", "not verified: planned out", (0,)), 0.0
        return real(original, optimized, *rest, **kw)

    monkeypatch.setattr(run_cmd, "plan_verification", first_plan_says_skip)
    rep = tmp_path / "r.json"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "--time-limit", "600", "-q",
                 "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert calls == [True, False]
    assert r["improved"] and r["verification"]["status"] == "verified", r["verification"]


def test_verification_that_would_not_fit_the_time_left_is_skipped(tmp_path, capsys):
    from argparse import Namespace

    from eqsat_nb.commands.run import plan_verification

    graph = load(EXAMPLES / "vit_base.tir")
    args = Namespace(verify_memory=None)
    skip, reserve = plan_verification(graph, graph, {}, args, Budget(2.0), (0,))
    assert isinstance(skip, NotVerified) and skip.reason == "time" and reserve == 0.0
    assert "not verified" in skip.message and "--time-limit" in skip.message
    skip, reserve = plan_verification(graph, graph, {}, args, Budget(3600.0), (0,))
    assert skip is None and reserve > 0


def test_verification_stops_at_its_deadline():
    graph = load(EXAMPLES / "tiny_mlp.tir")
    with pytest.raises(check_outputs.VerificationStopped):
        verify_graphs(graph, graph, deadline=work_clock() - 1.0)
    assert verify_graphs(graph, graph, deadline=work_clock() + 600).ok


# ------------------------------------------------------------------ 3. bounded memory
def _run_measured(args: list[str], cwd: Path) -> tuple[int, str, str, int]:
    """`eqsat-nb ARGS` in a fresh process: (exit code, stdout, stderr, its peak RSS in bytes).
    The peak is VmHWM, which belongs to the process's own memory: getrusage's ru_maxrss survives
    exec on Linux and reports the pytest parent's peak when an earlier test used more."""
    code = ("import sys\nfrom eqsat_nb.cli import main\nrc = main(sys.argv[1:])\n"
            "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')]\n"
            "print('MAXRSS', hwm[0], file=sys.stderr)\nsys.exit(rc)\n")
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=ENV,
                       capture_output=True, text=True, timeout=900)
    rss = int(p.stderr.rsplit("MAXRSS", 1)[1].split()[0]) * 1024
    return p.returncode, p.stdout, p.stderr.rsplit("MAXRSS", 1)[0], rss


@pytest.mark.parametrize("memory", [["--verify-memory", "1G"], []], ids=["1G", "default"])
def test_two_30000_squared_tensors_end_in_a_clean_skip(tmp_path, memory):
    src = tmp_path / "big.tir"
    src.write_text(BIG)
    out = tmp_path / "out.tir"
    rc, stdout, stderr, rss = _run_measured(["run", str(src), "-q", "-o", str(out), *memory],
                                            REPO)
    assert rc == 0, stderr
    assert "Traceback" not in stderr + stdout
    assert rss < 2 * 1024**3, f"peak RSS {rss / 2**30:.2f} GiB"
    assert "not verified" in stdout and "warning: not verified" in stderr
    if memory:
        assert "--verify-memory" in stdout and "were not compared" in stdout
    assert out.exists()                         # written, with the warning


def test_memory_budget_option_parses_sizes():
    from argparse import ArgumentTypeError

    from eqsat_nb.commands.run import parse_size

    assert parse_size("4G") == 4 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("1.5GiB") == int(1.5 * (1 << 30))
    assert parse_size("1000") == 1000
    for bad in ("", "G", "-1G", "lots", "0"):
        with pytest.raises(ArgumentTypeError):
            parse_size(bad)
    with pytest.raises(SystemExit) as info:         # argparse's usage error
        main(["run", "x.tir", "--verify-memory", "lots"])
    assert info.value.code == 2


def test_estimate_covers_the_interpreters_peak():
    for name in ("tiny_conv", "squeezenet", "mobilenetv2", "nasrnn"):
        graph = load(EXAMPLES / f"{name}.tir")
        est = estimate_verification(graph, graph)
        assert traced_peak(lambda: verify_graphs(graph, graph)) <= est.peak_bytes, name


def test_big_tensors_estimate_without_allocating():
    est = estimate_verification(parse(BIG), parse(BIG))
    assert est.peak_bytes > 4 * 30000**2 * 4          # inputs and outputs at least
    # at least a matmul of 30000^3 (computed once: both are one expression) at 100 GFLOP/s, more
    # than one BLAS thread of this machine reaches
    assert est.seconds > 2 * 30000**3 / 100e9


def test_chunked_compare_equals_the_whole_array_formula(monkeypatch):
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((37, 53)).astype(np.float32)
    got = ref + rng.standard_normal(ref.shape).astype(np.float32) * 1e-6
    got[3, 4] = ref[3, 4] + 0.1
    cases = [(ref, got), (ref, ref), (np.zeros(7, np.float32), np.zeros(7, np.float32)),
             (np.zeros(0, np.float32), np.zeros(0, np.float32))]
    nan_ref, nan_got = ref.copy(), got.copy()
    nan_ref[0, 0] = nan_got[0, 0] = np.nan
    cases.append((nan_ref, nan_got))
    inf_got = got.copy()
    inf_got[5, 5] = np.inf
    cases.append((ref, inf_got))
    monkeypatch.setattr(check_outputs, "COMPARE_CHUNK", 100)
    chunked = [compare([r], [g], ["y"])[0] for r, g in cases]
    for (r, g), b in zip(cases, chunked):
        np.testing.assert_equal((b.max_abs_err, b.max_abs_ref, b.worst_excess), _whole(r, g))
    assert not chunked[0].ok and chunked[1].ok and not chunked[5].ok


def _whole(ref, got, rtol=check_outputs.RTOL, atol_rel=check_outputs.ATOL_REL):
    """The comparison on whole float64 arrays, as it was before it was chunked."""
    import warnings

    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = np.abs(got - ref)
    allowed = rtol * np.abs(ref) + atol_rel * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0),
                         np.where(err > 0, np.inf, 0.0))
    if not np.all(np.isfinite(got) == np.isfinite(ref)):
        ratio = np.full(1, np.inf)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        worst = float(np.nanmax(ratio)) if ratio.size else 0.0
    return float(err.max()) if err.size else 0.0, scale, worst


def test_random_tensors_are_the_stream_and_do_not_depend_on_the_chunking(monkeypatch):
    ty = TensorType((300, 70), "f32")
    whole = {(n, p, d): interp.random_tensor(n, ty, 3, d, p)
             for n in ("@w", "%x") for p in (False, True) for d in (np.float32, np.float64)}
    u = _splitmix_uniform((3 << 32) | __import__("zlib").crc32(b"@w"), 300 * 70).reshape(ty.shape)
    expected = (u - np.float32(0.5)) * np.float32(2 * np.sqrt(3) / np.sqrt(70))
    np.testing.assert_array_equal(whole[("@w", False, np.float32)], expected)
    np.testing.assert_array_equal(whole[("@w", True, np.float32)], u + np.float32(0.5))
    assert abs(float(u.mean()) - 0.5) < 0.01 and abs(float(u.var()) - 1 / 12) < 0.005
    for (n, p, d), arr in whole.items():       # float64 runs see the float32 numbers
        assert arr.dtype == d
        np.testing.assert_array_equal(arr, whole[(n, p, np.float32)])
    for chunk in (1000, 999):       # float16 goes through a float32 buffer a chunk at a time
        monkeypatch.setattr(interp, "RANDOM_CHUNK", chunk)
        for n in ("@w", "%x"):
            np.testing.assert_array_equal(interp.random_tensor(n, ty, 3, np.float16),
                                          whole[(n, False, np.float32)].astype(np.float16))


def _splitmix_uniform(key: int, n: int) -> np.ndarray:
    """random_fill's stream written out in Python integers: number i is the top 24 bits of
    splitmix64's finaliser at mix(key) + i * golden, as a float32 in [0, 1)."""
    m = (1 << 64) - 1

    def mix(x: int) -> int:
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
        return x ^ (x >> 31)
    seed = mix(key)
    return np.array([mix((seed + i * 0x9E3779B97F4A7C15) & m) >> 40 for i in range(n)],
                    np.float32) * np.float32(2.0 ** -24)


def test_huge_dimensions_are_located_errors_in_check_and_run(tmp_path, capsys):
    bad = REPO / "tests" / "bad_inputs"
    for name in ("size_dim_overflow", "size_numel_overflow"):
        path = bad / f"{name}.tir"
        for cmd in (["check", str(path)], ["run", str(path), "-q"]):
            assert main(cmd) == 1
            err = capsys.readouterr().err
            assert f"{path}:" in err and "is too large" in err and "Traceback" not in err


# ------------------------------------------------------------------ 4. clean failures
def _onnx_with_external_data(folder: Path, location: str) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 2), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(g).SerializeToString())
    return path


def test_onnx_external_data_outside_the_folder_is_a_clean_error(tmp_path, capsys):
    pytest.importorskip("onnx")
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    path = _onnx_with_external_data(folder, "../../../../etc/hostname")
    assert main(["run", str(path), "-q"]) == 1
    err = capsys.readouterr().err
    # refused by the up-front validation (onnx_io/validate.py), before onnx reads any byte
    assert err.startswith(f"{path}: error: tensor 'w' keeps its data in "
                          "'../../../../etc/hostname' (external data), a path through '..'")
    assert "inside the model's folder" in err and "Traceback" not in err


def test_bad_protobuf_is_a_clean_error(tmp_path, capsys):
    pytest.importorskip("onnx")
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x08\x07garbage\xff\xff\xff")
    assert main(["run", str(path), "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: error: ") and "Traceback" not in err


def test_memory_error_anywhere_is_a_clean_message(tmp_path, capsys, monkeypatch):
    import eqsat_nb.optimize as optimize_mod

    def out_of_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(optimize_mod, "optimize", out_of_memory)
    out = tmp_path / "o.tir"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-q", "-o", str(out)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("eqsat-nb: error: out of memory") and "Traceback" not in err
    assert not out.exists()


def test_memory_error_in_verification_is_a_skip(tmp_path, capsys, monkeypatch):
    def out_of_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(check_outputs, "verify_graphs", out_of_memory)
    rep = tmp_path / "r.json"
    assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-q", "--report", str(rep)]) == 0
    r = json.loads(rep.read_text())
    assert r["improved"] and r["verification"]["status"] == "memory"
    assert "ran out of memory" in capsys.readouterr().err


def test_internal_error_is_one_paragraph_or_a_traceback_on_request(capsys, monkeypatch):
    import eqsat_nb.optimize as optimize_mod

    def bug(*a, **k):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(optimize_mod, "optimize", bug)
    args = ["run", str(EXAMPLES / "tiny_mlp.tir"), "-q"]
    assert main(args) == 70
    err = capsys.readouterr().err
    assert err.startswith("eqsat-nb: internal error: RuntimeError: boom. This is a bug")
    assert "second line" not in err
    monkeypatch.setenv("EQSAT_NB_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        main(args)


def test_ctrl_c_exits_130_cleanly_and_writes_nothing(tmp_path):
    out, rep = tmp_path / "out.tir", tmp_path / "r.json"
    # a shell without job control starts background jobs with SIGINT ignored, and Python keeps
    # an ignored SIGINT: the child gets the default back, as a terminal's command would have it
    proc = subprocess.Popen([sys.executable, "-m", "eqsat_nb", "run",
                             str(EXAMPLES / "vit_huge.tir"), "-o", str(out), "--report", str(rep)],
                            cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first: list[str] = []
    reader = threading.Thread(target=lambda: first.append(proc.stderr.readline()), daemon=True)
    reader.start()
    reader.join(600)                    # the first progress line: the search is under way
    assert first and first[0], "no progress line"
    proc.send_signal(signal.SIGINT)
    stdout, rest = proc.communicate(timeout=300)
    stderr = first[0] + rest
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr + stdout
    assert list(tmp_path.iterdir()) == []


def test_readme_documents_the_exit_codes():
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Exit codes"):]
    for code in ("0", "1", "2", "3", "70", "130"):
        assert f"| {code} |" in section


# ------------------------------------------------------------------ 5. file modes
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_outputs_get_the_mode_open_gives_under_the_umask(tmp_path, umask):
    from eqsat_nb.commands.run import write_atomic

    old = os.umask(umask)
    try:
        with open(tmp_path / "plain", "w") as f:
            f.write("x")
        write_atomic(str(tmp_path / "atomic.tir"), lambda p: p.write_text("x"))
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "atomic.tir") == mode(tmp_path / "plain") == 0o666 & ~umask


def test_run_outputs_get_the_umask_mode(tmp_path):
    out, rep = tmp_path / "o.tir", tmp_path / "r.json"
    old = os.umask(0o022)
    try:
        assert main(["run", str(EXAMPLES / "tiny_mlp.tir"), "-q", "-o", str(out),
                     "--report", str(rep)]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(rep).st_mode) == 0o644
