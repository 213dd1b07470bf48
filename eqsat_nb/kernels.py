"""`@kernel`: a Numba kernel that Python calls, compiled ahead of time when the package is built.

Numba compiles a kernel the first time it runs with an empty cache: about 30 s of a first `run`
on a 2-core machine, and again whenever the cache is new (a fresh NUMBA_CACHE_DIR, a read-only
install, a changed source file). So the kernels Python calls are declared with the argument types
they are called with, and the package build compiles them with Numba's ahead-of-time compiler
into one extension module, `eqsat_nb._kernels` (`build_kernels.py`, run by setup.py). A call
whose arguments match a declared signature exactly (dtype, rank, C-contiguous, writeable, aligned
arrays; Python or NumPy scalars) runs the compiled code; any other call, and every call when the
module is missing, stale or was built for another CPU, runs the ordinary `@njit(cache=True)`
dispatcher, so the answer is the same either way. Kernels called only from other kernels stay
plain `@njit`: the compiled module includes them.

`EQSAT_NB_JIT=1` forces the dispatchers (as do NUMBA_DISABLE_JIT and NUMBA_BOUNDSCHECK, whose
checks only the just-in-time code has); `eqsat-nb --version` says which kernels are in use.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
from numba import njit
from numba.core import config, sigutils, types
from numba.extending import typeof_impl

__all__ = ["Kernel", "kernel", "REGISTRY", "aot_status", "build_stamp", "kernel_modules",
           "kernel_sources"]

MODULE = "_kernels"             # eqsat_nb._kernels, built by build_kernels.py
PACKAGE = Path(__file__).resolve().parent
REGISTRY: list["Kernel"] = []   # every @kernel, in definition order
_state: dict[str, Any] = {"module": None, "loaded": False, "why": "not loaded yet"}

# a declared scalar type -> the Python and NumPy scalars Numba itself types as it (so the
# dispatcher would compile the same specialization; a np.int32 goes to the dispatcher)
_SCALARS: dict[types.Type, tuple[type, ...]] = {
    types.int64: (int, np.int64),
    types.float64: (float, np.float64),
    types.boolean: (bool, np.bool_),
}


class Kernel:
    """A `@njit(cache=True)` dispatcher (`.jit`) plus its ahead-of-time compiled signatures.

    Python calls go to the compiled function whose signature the arguments match, else to the
    dispatcher. Numba sees a Kernel as its dispatcher (typeof below; `py_func` and
    `targetoptions` are what its inliner reads), so kernels call each other as before."""

    def __init__(self, dispatcher: Callable, signatures: tuple[str, ...]):
        self.jit = dispatcher
        self.py_func = getattr(dispatcher, "py_func", dispatcher)
        self.targetoptions = getattr(dispatcher, "targetoptions", {})
        self.signatures = signatures
        self.__name__ = self.py_func.__name__
        self.__qualname__ = self.py_func.__qualname__
        self.__module__ = self.py_func.__module__
        self.__doc__ = self.py_func.__doc__
        self.__wrapped__ = self.py_func
        short = self.__module__.removeprefix("eqsat_nb.").replace(".", "_")
        self.symbols = tuple(f"{short}__{self.__name__}__{i}" for i in range(len(signatures)))
        self._specs = tuple(_arg_specs(s) for s in signatures)
        self._compiled: list[tuple[tuple, Callable]] | None = None

    def __repr__(self) -> str:
        return f"<kernel {self.__module__}.{self.__qualname__}>"

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = self._load()
        for spec, fn in compiled:
            if _matches(spec, args):
                return fn(*args)
        return self.jit(*args)

    def matched(self, args: tuple) -> bool:
        """Whether `args` match one of the declared signatures (what the compiled module has)."""
        return any(_matches(spec, args) for spec in self._specs)

    def _load(self) -> list[tuple[tuple, Callable]]:
        module = compiled_module()
        if module is None:
            return []
        return [(spec, getattr(module, sym)) for spec, sym in zip(self._specs, self.symbols)]


@typeof_impl.register(Kernel)
def _typeof_kernel(val: Kernel, c: Any) -> types.Type:
    return typeof_impl(val.jit, c)


def kernel(*signatures: str, **options: Any) -> Callable[[Callable], Kernel]:
    """`@njit(cache=True, **options)` for a kernel Python calls, declaring the Numba signatures
    (e.g. "i8(i4[:, ::1], i8)") it is called with; these are compiled ahead of time."""
    for s in signatures:
        sigutils.normalize_signature(s)          # a typo fails at import, not at build

    def wrap(fn: Callable) -> Kernel:
        k = Kernel(njit(cache=True, **options)(fn), signatures)
        REGISTRY.append(k)
        return k
    return wrap


def _arg_specs(signature: str) -> tuple:
    """Per argument: (dtype, ndim) for an array (C-contiguous), or the scalar classes."""
    args, _ = sigutils.normalize_signature(signature)
    out = []
    for t in args:
        if isinstance(t, types.Array):
            if t.layout != "C":
                raise ValueError(f"kernel signature {signature!r}: arrays must be C-contiguous")
            out.append((np.dtype(str(t.dtype)), t.ndim))
        elif t in _SCALARS:
            out.append(_SCALARS[t])
        else:
            raise ValueError(f"kernel signature {signature!r}: unsupported argument type {t}")
    return tuple(out)


def _matches(spec: tuple, args: tuple) -> bool:
    if len(args) != len(spec):
        return False
    for a, s in zip(args, spec):
        if isinstance(s, tuple) and isinstance(s[0], np.dtype):
            if type(a) is not np.ndarray or a.ndim != s[1] or a.dtype != s[0]:
                return False
            f = a.flags
            if not (f.c_contiguous and f.writeable and f.aligned):
                return False
        elif not isinstance(a, s) or (s[0] is not bool and isinstance(a, (bool, np.bool_))):
            return False
    return True


# ------------------------------------------------------------------ the compiled module
def kernel_modules() -> list[str]:
    """Every module of the package that declares a @kernel."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name != "kernels.py" and "@kernel(" in path.read_text(encoding="utf-8"):
            names.append(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    return names


def kernel_sources() -> list[Path]:
    """The files the compiled kernels are made of: the modules declaring kernels and everything
    they import from the package, at any depth, with their packages' __init__ files (Numba
    freezes the constants it reads into the machine code, so a changed constant anywhere among
    them makes the compiled module stale). Found from the import statements alone."""
    todo, seen = kernel_modules(), set()
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        package = parts if path.name == "__init__.py" else parts[:-1]
        for dots, module, names, plain in _IMPORT.findall(path.read_text(encoding="utf-8")):
            if plain:
                todo += re.findall(r"[\w.]+", plain)
                continue
            base = package[:len(package) - len(dots) + 1] if dots else []
            base = ".".join(base + ([module] if module else []))
            todo += [base] + [f"{base}.{n}" for n in re.findall(r"\w+", names)]
    return sorted(seen)


# `from .x import a, b` (names possibly in parentheses over lines) or `import x.y`, anywhere
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)"
                     r"|import[ \t]+([^\n]*))", re.M)


def _module_file(name: str) -> Path | None:
    """The source file of package module `name` (None outside the package or not a module)."""
    parts = name.split(".")
    if parts[0] != PACKAGE.name:
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def build_stamp(cpu: str) -> int:
    """What a compiled module must carry to be used: a digest of the kernels' sources
    (kernel_sources) and of the CPU it was compiled for ("" = the architecture's generic model)."""
    h = hashlib.sha256(cpu.encode())
    for path in kernel_sources():
        h.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return int(h.hexdigest()[:15], 16)


def compiled_module() -> Any:
    """eqsat_nb._kernels when it is present, current and wanted; else None (see aot_status)."""
    if not _state["loaded"]:
        _state["loaded"] = True
        _state["module"], _state["why"] = _load_module()
    return _state["module"]


def aot_status() -> str:
    """One line: which kernels run (for `eqsat-nb --version` and the tests)."""
    module = compiled_module()
    if module is not None:
        return f"compiled ahead of time ({os.path.basename(module.__file__)})"
    return f"just in time ({_state['why']})"


def _load_module() -> tuple[Any, str]:
    if os.environ.get("EQSAT_NB_JIT", "") not in ("", "0"):
        return None, "EQSAT_NB_JIT is set"
    if config.DISABLE_JIT:
        return None, "NUMBA_DISABLE_JIT is set"
    if config.BOUNDSCHECK:
        return None, "NUMBA_BOUNDSCHECK is set"
    try:
        module = importlib.import_module(f"{__package__}.{MODULE}")
    except ImportError as e:
        return None, f"no compiled kernels: {e}; reinstall with a C compiler to build them"
    try:
        stamp = module._stamp()
    except Exception as e:                       # a module from an older build scheme
        return None, f"unusable compiled kernels: {e}"
    if stamp not in (build_stamp(""), build_stamp(_host_cpu())):
        return None, ("the compiled kernels are not those of these sources and this CPU; "
                      "reinstall to rebuild them")
    return module, ""


def _host_cpu() -> str:
    """The CPU name Numba compiles for ('host' in pycc means this)."""
    from llvmlite import binding
    return config.CPU_NAME or binding.get_host_cpu_name()
