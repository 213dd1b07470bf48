"""What a recorded measurement was taken with: the command, the machine and the versions.

Records that the documentation's tables are printed from (`eqsat-nb bench --json`, the perf
baselines) carry this block, so that a number in the docs names where it came from.
"""
from __future__ import annotations

import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

# the libraries a result of `run` depends on (a timing also on the machine below)
LIBRARIES = ("numba", "numpy", "highspy", "onnx", "onnxruntime", "lark")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_gib() -> float | None:
    """Total memory in GiB (/proc/meminfo), None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def version(dist: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    """CPU, usable cores, RAM, OS and the load average when asked."""
    return {"cpu_model": cpu_model(), "usable_cores": usable_cores(), "ram_gib": ram_gib(),
            "os": f"{platform.system()} {platform.machine()}",
            "loadavg_at_start": load_average()}


def versions() -> dict[str, str | None]:
    """Python, eqsat-nb and the libraries its results depend on."""
    from . import __version__
    return {"python": platform.python_version(), "eqsat-nb": __version__,
            **{lib: version(lib) for lib in LIBRARIES}}


def command_line(argv: Sequence[str] | None = None, prog: str = "eqsat-nb") -> str:
    """The command as a user would type it: the program's name, then its arguments."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join([prog] + args)


def record(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The provenance block of a records file: command, machine, versions."""
    return {"command": command_line(argv), "machine": machine(), "versions": versions()}
