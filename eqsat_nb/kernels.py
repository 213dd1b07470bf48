"""`@kernel`: a Numba kernel that Python calls, compiled ahead of time when the package is built.

Numba compiles a kernel the first time it runs with an empty cache: about 30 s of a first `run`
on a 2-core machine, and again whenever the cache is new (a fresh NUMBA_CACHE_DIR, a read-only
install, a changed source file). So the kernels Python calls are declared with the argument types
they are called with, and the package build compiles them with Numba's ahead-of-time compiler
into one extension module, `eqsat_nb._kernels` (`build_kernels.py`, run by setup.py). A call
whose arguments match a declared signature exactly (dtype, rank, C-contiguous, writeable, aligned
arrays; Python or NumPy scalars) runs the compiled code; any other call, and every call when the
module is missing, stale or was built for another CPU (name or features), runs the ordinary
`@njit(cache=True)` dispatcher, so the answer is the same either way. Kernels called only from
other kernels stay plain `@njit`: the compiled module includes them.

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

# a declared scalar type -> the Python and NumPy scalar types Numba itself types as it (so the
# dispatcher would compile the same specialization; a np.int32 or a bool goes to the dispatcher)
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
        self._checks = tuple(_argument_check(s) for s in signatures)
        self._compiled: list[tuple[Callable, Callable]] | None = None

    def __repr__(self) -> str:
        return f"<kernel {self.__module__}.{self.__qualname__}>"

    def __call__(self, *args: Any) -> Any:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = self._load()
        for check, fn in compiled:
            if check(args):
                return fn(*args)
        return self.jit(*args)

    def matched(self, args: tuple) -> bool:
        """Whether `args` match one of the declared signatures (what the compiled module has)."""
        return any(check(args) for check in self._checks)

    def _load(self) -> list[tuple[Callable, Callable]]:
        module = compiled_module()
        if module is None:
            return []
        return [(check, getattr(module, sym)) for check, sym in zip(self._checks, self.symbols)]


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


def _argument_check(signature: str) -> Callable[[tuple], bool]:
    """A function telling whether a call's argument tuple matches `signature` exactly: arrays of
    that dtype (equal, byte order included; not necessarily the same dtype object, which arrays
    made by kernels do not share) and rank, C-contiguous, aligned and writeable (numpy's
    `carray` flag); scalars of the types _SCALARS lists. Generated as straight-line code: a loop
    over a spec took 3 us for four arrays, this takes about half of one."""
    args, _ = sigutils.normalize_signature(signature)
    scope: dict[str, Any] = {"ndarray": np.ndarray}
    terms = []
    for i, t in enumerate(args):
        a = f"a{i}"
        if isinstance(t, types.Array):
            if t.layout != "C":
                raise ValueError(f"kernel signature {signature!r}: arrays must be C-contiguous")
            scope[f"D{i}"] = np.dtype(str(t.dtype))
            terms.append(f"type({a}) is ndarray and {a}.ndim == {t.ndim} and {a}.dtype == D{i} "
                         f"and {a}.flags.carray")
        elif t in _SCALARS:
            for j, cls in enumerate(_SCALARS[t]):
                scope[f"S{i}_{j}"] = cls
            terms.append("(" + " or ".join(f"type({a}) is S{i}_{j}"
                                           for j in range(len(_SCALARS[t]))) + ")")
        else:
            raise ValueError(f"kernel signature {signature!r}: unsupported argument type {t}")
    names = "".join(f"a{i}, " for i in range(len(args)))
    body = " and\n            ".join(terms) or "True"
    exec(f"def check(args):\n    if len(args) != {len(args)}:\n        return False\n"
         f"    {names}= args\n    return ({body})\n", scope)
    return scope["check"]


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


def build_stamp(target: str, sources: bytes | None = None) -> int:
    """What a compiled module must carry to be used: a digest of the kernels' sources
    (`sources`, else _sources_digest()) and of the CPU it was compiled for ("": the architecture's
    generic model; else host_target())."""
    if sources is None:
        sources = _sources_digest()
    h = hashlib.sha256(target.encode() + b"\0" + sources)
    return int(h.hexdigest()[:15], 16)


def _sources_digest() -> bytes:
    """SHA-256 of the kernels' source files (kernel_sources), names and contents."""
    h = hashlib.sha256()
    for path in kernel_sources():
        h.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return h.digest()


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
    sources = _sources_digest()       # read once for both targets a module may be built for
    if stamp not in (build_stamp("", sources), build_stamp(host_target(), sources)):
        return None, ("the compiled kernels are not those of these sources and this CPU; "
                      "reinstall to rebuild them")
    return module, ""


def host_target() -> str:
    """This machine's CPU name and features, as Numba's just-in-time code is compiled for them
    (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES override both): what a module built for 'host' records."""
    from llvmlite import binding
    name = config.CPU_NAME or binding.get_host_cpu_name()
    features = config.CPU_FEATURES
    if features is None:
        features = binding.get_host_cpu_features().flatten()
    return f"{name}|{features}"
