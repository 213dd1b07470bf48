"""Everything is in setup.cfg; this file only adds the ahead-of-time kernel build.

`eqsat_nb._kernels` is the engine's Numba kernels compiled ahead of time (eqsat_nb/kernels.py
says why). It is built by running eqsat_nb/build_kernels.py in a subprocess. It is optional: when
it cannot be built (no C compiler, EQSAT_NB_AOT=0) the install goes on, says so, and the kernels
are compiled just in time on first use instead.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class BuildKernels(build_ext):
    """build_ext for the one extension, eqsat_nb._kernels, made by Numba's AOT compiler."""

    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        if os.environ.get("EQSAT_NB_AOT", "1") == "0":
            print("eqsat-nb: EQSAT_NB_AOT=0: kernels will be compiled just in time on first use")
            return
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache,
                       PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                               os.environ.get("PYTHONPATH")])))
            done = subprocess.run([sys.executable, "-m", "eqsat_nb.build_kernels", str(target)],
                                  cwd=ROOT, env=env)
        if done.returncode != 0:
            target.unlink(missing_ok=True)
            print("eqsat-nb: WARNING: the kernels could not be compiled ahead of time (above); "
                  "they will be compiled just in time on first use (about 30 s once)")

    def get_outputs(self) -> list[str]:
        return [p for p in super().get_outputs() if os.path.exists(p)]


setup(ext_modules=[Extension("eqsat_nb._kernels", sources=[], optional=True)],
      cmdclass={"build_ext": BuildKernels})
