"""The command's time budget: the work clock (wall clock less Numba compilation) and `Budget`.

Below every subpackage: saturation and MCTS (search/), output verification (check_outputs.py), the
onnxruntime runs of the user's model (stopping.py) and the progress line all read it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

# `eqsat-nb run --time-limit` is a wall-clock budget for the work. Numba compiles each kernel the
# first time it is used with an empty cache: tens of seconds on a first run. That time is not work
# and would make a first run's results differ from later ones, so it is not counted: the "work
# clock" is the wall clock less the time spent in Numba compilations ("numba:compile" events)
# since `track_compilation()`. Loading compiled kernels from the cache (about a second per run)
# is counted. Without tracking the work clock is the wall clock.
_compiling = {"depth": 0, "since": 0.0, "total": 0.0, "tracking": False}


def compile_seconds() -> float:
    """Seconds spent compiling or loading Numba kernels since `track_compilation()` (0 before)."""
    return _compiling["total"] + compiling_for()


def compiling_for() -> float:
    """Seconds the Numba compilation in progress has been running (0 when none is)."""
    c = _compiling
    return time.perf_counter() - c["since"] if c["depth"] else 0.0


def work_clock() -> float:
    """`time.perf_counter()` less the Numba compilation time (see above)."""
    return time.perf_counter() - compile_seconds()


def track_compilation() -> None:
    """Start counting Numba compilation time (once per process; loads numba)."""
    if _compiling["tracking"]:
        return
    from numba.core import event

    class _Timer(event.Listener):
        def on_start(self, ev) -> None:
            if _compiling["depth"] == 0:
                _compiling["since"] = time.perf_counter()
            _compiling["depth"] += 1

        def on_end(self, ev) -> None:
            _compiling["depth"] -= 1
            if _compiling["depth"] == 0:
                _compiling["total"] += time.perf_counter() - _compiling["since"]

    event.register("numba:compile", _Timer())
    _compiling["tracking"] = True


@dataclass
class Budget:
    """A wall-clock budget in seconds of work (compilation excluded), started at creation."""

    seconds: float
    start: float = field(default_factory=work_clock)
    compile_start: float = field(default_factory=compile_seconds)

    def elapsed(self) -> float:
        return work_clock() - self.start

    def left(self) -> float:
        return self.seconds - self.elapsed()

    @property
    def deadline(self) -> float:
        """The end of the budget on the work clock."""
        return self.start + self.seconds

    def compile_spent(self) -> float:
        """Seconds of Numba compilation since the budget started (not counted in it)."""
        return compile_seconds() - self.compile_start
