"""Compile every `@kernel` ahead of time into the extension module eqsat_nb._kernels.

setup.py runs this while building the package (`pip install`), in a subprocess, so a first `run`
loads machine code instead of compiling it (kernels.py says why and how calls are routed). The
module exports each declared signature under the kernel's symbol name, plus `_stamp()`: the
sources' fingerprint and target CPU, which the package checks before using the module.

    python -m eqsat_nb.build_kernels OUTPUT_FILE [--cpu host|generic]

The default target is this machine's CPU, name and features, as Numba's just-in-time code is
compiled (the package uses the module only on a CPU with the same name and features, else it
compiles just in time): measured in the same run, the generic x86-64 model made the e-graph
benchmarks 1.2-1.7x slower than the jitted kernels (no popcnt, no AVX), 'host' matches them.
'generic' (EQSAT_NB_AOT_CPU=generic) builds a module any machine of the architecture can use.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import warnings
from pathlib import Path

def _entry(dispatcher, signature: str):
    """A function that calls `dispatcher` with the signature's arguments: what is exported. The
    kernel itself is then compiled by its own dispatcher, as the just-in-time path compiles it
    (its options, e.g. _nrt=False, included), and linked in. (Exporting the kernel's Python
    function instead types it in pycc's shared state, where a kernel that an earlier export
    inlined, such as `find`, made _apply_rows fail to type.)"""
    from numba.core import sigutils
    args, _ = sigutils.normalize_signature(signature)
    names = ", ".join(f"a{i}" for i in range(len(args)))
    scope = {"kernel": dispatcher}
    exec(f"def entry({names}):\n    return kernel({names})\n", scope)
    return scope["entry"]


def _use_features(features: str) -> None:
    """Make pycc compile for this CPU's features too: for 'host' it takes the CPU's name only and
    the features that name implies, which a virtual machine may not all offer."""
    from numba.core.codegen import AOTCPUCodegen
    AOTCPUCodegen._customize_tm_features = lambda self: features


def _constant(value: int):
    def stamp() -> int:
        return value
    return stamp


def build(target: Path, cpu: str = "host") -> int:
    """Compile all kernels into `target` (a file name of the form Python gives extensions) for
    `cpu` ("host" or "generic"); returns how many signatures were exported."""
    if cpu not in ("host", "generic"):
        raise ValueError(f"--cpu must be host or generic, not {cpu!r}")
    from .kernels import MODULE, REGISTRY, build_stamp, host_target, kernel_modules
    for name in kernel_modules():
        importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # numba.pycc's pending-deprecation notice
        from numba.pycc import CC
    cc = CC(MODULE)
    cc.output_dir = str(target.parent)
    cc.output_file = target.name
    stamp = ""
    if cpu == "host":
        cc.target_cpu = "host"
        stamp = host_target()
        _use_features(stamp.split("|", 1)[1])
    count = 0
    for k in REGISTRY:
        for symbol, signature in zip(k.symbols, k.signatures):
            cc.export(symbol, signature)(_entry(k.jit, signature))
            count += 1
    cc.export("_stamp", "i8()")(_constant(build_stamp(stamp)))
    target.parent.mkdir(parents=True, exist_ok=True)
    cc.compile()
    return count


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("output", type=Path, help="the extension module file to write")
    p.add_argument("--cpu", default=os.environ.get("EQSAT_NB_AOT_CPU", "host"),
                   choices=("host", "generic"),
                   help="target CPU: this machine's (default) or the architecture's generic one")
    args = p.parse_args(argv)
    start = time.perf_counter()
    n = build(args.output.resolve(), args.cpu)
    print(f"eqsat-nb: compiled {n} kernel signatures ahead of time into {args.output.name} "
          f"in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
