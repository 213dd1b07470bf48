"""Kernels compiled ahead of time (eqsat_nb/kernels.py): which code a call runs, when the compiled
module is refused, that every kernel Python calls is declared with the types it is called with,
and that the compiled and the just-in-time kernels give the same answers."""
from __future__ import annotations

import os
import subprocess
import sys
import types as pytypes
from pathlib import Path

import numpy as np
import pytest

import eqsat_nb.kernels as K
from eqsat_nb.kernels import REGISTRY, Kernel, kernel

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "ir_examples"


def _all_kernel_modules() -> None:
    import importlib
    for name in K.kernel_modules():
        importlib.import_module(name)


@pytest.fixture
def fake_module(monkeypatch):
    """Installs a stand-in for eqsat_nb._kernels whose functions record their calls, in a
    process where nothing forces the just-in-time code (EQSAT_NB_JIT unset, Numba's bounds
    checking off: a suite run under NUMBA_BOUNDSCHECK=1 still tests the dispatch itself;
    test_the_switches_that_force_just_in_time_code turns each switch back on)."""
    def install(stamp: int, kernels: list[Kernel]) -> list:
        calls: list = []
        mod = pytypes.ModuleType("eqsat_nb._kernels")
        mod.__file__ = "/nowhere/_kernels.so"
        mod._stamp = lambda: stamp
        for k in kernels:
            for sym in k.symbols:
                setattr(mod, sym, lambda *a, _s=sym: calls.append(_s) or "compiled")
        monkeypatch.setitem(sys.modules, "eqsat_nb._kernels", mod)
        monkeypatch.delenv("EQSAT_NB_JIT", raising=False)
        monkeypatch.setattr(K.config, "BOUNDSCHECK", None)
        monkeypatch.setattr(K, "_state", {"module": None, "loaded": False, "why": ""})
        for k in kernels:
            monkeypatch.setattr(k, "_compiled", None)
        return calls
    return install


@kernel("i8(i4[:, ::1], i8, b1)", "i8(f8[::1], f8, b1)")
def _probe(a, x, flag):
    return 7


def test_calls_that_match_a_signature_run_the_compiled_code(fake_module):
    calls = fake_module(K.build_stamp(""), [_probe])
    assert K.aot_status().startswith("compiled ahead of time")
    a = np.zeros((3, 2), np.int32)
    assert _probe(a, 5, True) == "compiled"
    assert _probe(a, np.int64(5), np.bool_(False)) == "compiled"
    equal = np.dtype("i4", metadata={"x": 1})          # equal to int32, another dtype object
    assert _probe(a.astype(equal), 5, True) == "compiled"
    assert _probe(np.zeros(4), 2.5, True) == "compiled"
    assert calls == [_probe.symbols[0]] * 3 + [_probe.symbols[1]]


@pytest.mark.parametrize("args", [
    (np.zeros((3, 2), np.int64), 5, True),                  # dtype
    (np.zeros((3, 4), np.int32)[:, ::2], 5, True),          # not C-contiguous
    (np.zeros(6, np.int32), 5, True),                       # rank
    (np.zeros((3, 2), np.int32), 5.0, True),                # float for an integer
    (np.zeros((3, 2), np.int32), True, True),               # bool for an integer
    (np.zeros((3, 2), np.int32), 5, 1),                     # int for a boolean
    (np.zeros(4, np.float32), 2.5, True),                   # float32 for float64
    (np.zeros(4), 2, True),                                 # int for a float
    (np.zeros((3, 2), np.int32), np.int32(5), True),        # int32 for an int64
])
def test_other_calls_run_the_dispatcher(fake_module, args):
    calls = fake_module(K.build_stamp(""), [_probe])
    assert _probe(*args) == 7 and calls == []


def test_the_other_byte_order_is_the_dispatchers_error(fake_module):
    """'>i4' is not 'i4' (the compiled code would read it as native): the dispatcher refuses it."""
    from numba.core.errors import TypingError
    calls = fake_module(K.build_stamp(""), [_probe])
    with pytest.raises(TypingError):
        _probe(np.zeros((3, 2), ">i4"), 5, True)
    assert calls == []


def test_a_call_with_too_few_arguments_is_the_dispatchers_error(fake_module):
    calls = fake_module(K.build_stamp(""), [_probe])
    with pytest.raises(TypeError):
        _probe(np.zeros((3, 2), np.int32), 5)
    assert calls == []


def test_a_readonly_array_runs_the_dispatcher(fake_module):
    calls = fake_module(K.build_stamp(""), [_probe])
    a = np.zeros((3, 2), np.int32)
    a.flags.writeable = False
    assert _probe(a, 1, True) == 7 and calls == []


def test_a_module_built_for_this_cpu_is_used_and_for_another_refused(fake_module):
    fake_module(K.build_stamp(K.host_target()), [_probe])
    assert K.aot_status().startswith("compiled ahead of time")
    fake_module(K.build_stamp("some-other-cpu"), [_probe])
    assert K.aot_status().startswith("just in time")


def test_a_stale_module_is_refused_with_the_reason(fake_module):
    calls = fake_module(K.build_stamp("") + 1, [_probe])
    assert _probe(np.zeros((3, 2), np.int32), 5, True) == 7 and calls == []
    assert "not those of these sources" in K.aot_status()


@pytest.mark.parametrize("var", ["EQSAT_NB_JIT", "NUMBA_BOUNDSCHECK", "NUMBA_DISABLE_JIT"])
def test_the_switches_that_force_just_in_time_code(fake_module, monkeypatch, var):
    calls = fake_module(K.build_stamp(""), [_probe])
    if var == "EQSAT_NB_JIT":
        monkeypatch.setenv(var, "1")
    else:
        monkeypatch.setattr(K.config, var.removeprefix("NUMBA_"), True)
    assert _probe(np.zeros((3, 2), np.int32), 5, True) == 7 and calls == []
    assert var in K.aot_status()


def test_kernels_call_kernels_inside_numba():
    """A Kernel in a jitted function's globals is typed as its dispatcher."""
    from numba import njit

    @njit
    def twice(a):
        return _probe(a, 1, True) * 2
    assert twice(np.zeros((2, 2), np.int32)) == 14


def test_signatures_must_be_c_contiguous_arrays_or_known_scalars():
    with pytest.raises(ValueError, match="C-contiguous"):
        kernel("i8(i4[:])")(lambda a: 0)
    with pytest.raises(ValueError, match="unsupported argument type"):
        kernel("i8(f4)")(lambda a: 0)


def _workload() -> None:
    """What the commands do, small: build, saturate (single and multi-pattern rules), every
    extractor, MCTS, snapshot and fingerprint, verify-rules."""
    from eqsat_nb.cost.select import make_cost_model
    from eqsat_nb.ir.parse import load
    from eqsat_nb.optimize import Options, optimize
    from eqsat_nb.rules.parse import load_rules
    from eqsat_nb.rules.verify import verify_rules
    from eqsat_nb.search.limits import Limits
    from eqsat_nb.search.mcts import MctsOptions
    from eqsat_nb.warmup import warm_up

    warm_up()
    rules, cost = load_rules(), make_cost_model("analytic", "a100", None, progress=False)
    for model, search in (("nasrnn", "saturate"), ("squeezenet", "mcts")):
        graph = load(EXAMPLES / f"{model}.tir")
        for extract in ("ilp", "ocf", "greedy"):
            optimize(graph, cost, rules,
                     Options(search=search, extract=extract, ilp_time_limit=2.0,
                             limits=Limits(node_limit=3000, iter_limit=3),
                             mcts=MctsOptions(budget=4, depth=2, ilp_time_limit=2.0)))
    verify_rules(load_rules(ROOT / "rules" / "matmul.rules"))


def test_every_kernel_python_calls_is_declared(monkeypatch):
    """Run the workload recording Python's calls of Numba dispatchers: each must be a @kernel
    called with a declared signature (otherwise it would be compiled just in time)."""
    from numba._dispatcher import Dispatcher as CDispatcher
    from numba.core.registry import CPUDispatcher

    _all_kernel_modules()
    wrapped = {id(k.jit) for k in REGISTRY}
    undeclared, unmatched = set(), set()
    base_call = CDispatcher.__call__
    kernel_call = Kernel.__call__

    def dispatcher_call(self, *args, **kws):
        name = f"{self.py_func.__module__}.{self.py_func.__qualname__}"
        if id(self) not in wrapped and name.startswith("eqsat_nb."):
            undeclared.add(name)
        return base_call(self, *args, **kws)

    def checked_call(self, *args):
        if not self.matched(args):
            unmatched.add((self.__qualname__, tuple(
                (a.dtype.str, a.ndim, a.flags.c_contiguous) if isinstance(a, np.ndarray)
                else type(a).__name__ for a in args)))
        return kernel_call(self, *args)

    monkeypatch.setattr(CPUDispatcher, "__call__", dispatcher_call, raising=False)
    monkeypatch.setattr(Kernel, "__call__", checked_call)
    _workload()
    assert not undeclared, f"kernels Python calls without @kernel: {sorted(undeclared)}"
    assert not unmatched, f"calls matching no declared signature: {sorted(unmatched)}"


def test_declared_return_types_are_what_numba_infers():
    """The compiled module returns the declared type: it must be the jitted kernel's own. Run
    where the kernels are just in time (CI's oldest run), which has compiled them by now; with
    the compiled module in use it would compile every kernel (40 s) for this alone."""
    from numba.core import sigutils
    if K.compiled_module() is not None:
        pytest.skip("the kernels run compiled ahead of time here; "
                    "CI's just-in-time run checks this")
    _all_kernel_modules()
    wrong = []
    for k in REGISTRY:
        if not k.__module__.startswith("eqsat_nb."):
            continue
        for s in k.signatures:
            args, declared = sigutils.normalize_signature(s)
            k.jit.compile(args)
            inferred = k.jit.overloads[tuple(args)].signature.return_type
            if inferred != declared:
                wrong.append(f"{k.__qualname__}: declared {declared}, inferred {inferred}")
    assert not wrong


def test_the_built_module_is_in_use_when_expected():
    """CI installs with the ahead-of-time build and sets EQSAT_NB_EXPECT_AOT=1."""
    if os.environ.get("EQSAT_NB_EXPECT_AOT") != "1":
        pytest.skip("EQSAT_NB_EXPECT_AOT is not set (only CI's newest-dependency run sets it)")
    assert K.aot_status().startswith("compiled ahead of time"), K.aot_status()


@pytest.mark.slow
def test_compiled_and_jitted_kernels_write_the_same_graph(tmp_path, request):
    """`run` with the compiled module and with EQSAT_NB_JIT=1 give the same file, e-graph and
    cost. The just-in-time run uses the Numba cache that `first_jit_run` (conftest.py) filled
    from empty with the same kernels, so the suite compiles them cold once. The extractor is
    ocf+switch (kernels only): the ILP's answer under a time limit depends on the machine's
    speed (CI saw 353.0 against 356.4 us)."""
    import json
    if K.compiled_module() is None:
        pytest.skip(f"no compiled kernels: {K.aot_status()}")
    caches = {"aot": tmp_path / "cache-aot", "jit": request.getfixturevalue("first_jit_run")[1]}
    outs = []
    for mode in ("aot", "jit"):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(caches[mode]))
        env.pop("EQSAT_NB_JIT", None)
        if mode == "jit":
            env["EQSAT_NB_JIT"] = "1"
        out, rep = tmp_path / f"{mode}.tir", tmp_path / f"{mode}.json"
        done = subprocess.run([sys.executable, "-m", "eqsat_nb", "run",
                               str(EXAMPLES / "nasrnn.tir"), "--device", "a100", "-q",
                               "--extract", "ocf+switch", "-o", str(out), "--report", str(rep)],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(rep.read_text())
        outs.append((out.read_text(), report["egraph"], report["cost_after_us"]))
    assert outs[0] == outs[1]


def test_the_stamp_covers_what_the_kernels_are_made_of():
    """Modules declaring kernels, the constants they read (layout, ops), their packages; not the
    command line, whose edits must not make the compiled module stale."""
    names = {p.relative_to(K.PACKAGE).as_posix() for p in K.kernel_sources()}
    assert {"rules/apply.py", "egraph/layout.py", "ir/ops/__init__.py", "ir/ops/conv.py",
            "egraph/__init__.py", "kernels.py"} <= names
    assert not names & {"cli.py", "commands/run.py", "onnx_io/importer.py", "cost/analytic.py"}


def test_a_changed_source_clears_the_cache_numba_keeps_in_numba_cache_dir(tmp_path,
                                                                           monkeypatch):
    """With NUMBA_CACHE_DIR set, Numba keeps a folder's cache in <name>_<sha1 of its path>: a
    stale callee compiled into a caller there (an op id of the table frozen in) must go too."""
    import hashlib

    from eqsat_nb import jitcache
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    rules = K.PACKAGE / "rules"
    folder = tmp_path / f"rules_{hashlib.sha1(str(rules).encode()).hexdigest()}"
    folder.mkdir()
    stale = folder / "apply._apply_rows-1.py311.nbi"
    stale.write_text("x")
    other = tmp_path / "someone_else"
    other.mkdir()
    (other / "f.nbi").write_text("x")
    (tmp_path / "eqsat_nb.jitstamp").write_text("an older fingerprint")
    jitcache.ensure_fresh_cache()
    assert not stale.exists() and (other / "f.nbi").exists()
    assert (tmp_path / "eqsat_nb.jitstamp").read_text() == jitcache.source_fingerprint()
