"""Saturation limits and the command's time budget, importable without loading the Numba kernels
(the CLI builds its option defaults from them)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Saturation limits (search/saturate.py, search/schedule.py). Defaults: TENSAT's 50 000 nodes
    and 15 iterations; multi-pattern rules in 2 iterations each (TENSAT's published e-graphs were
    built with k_multi 2, its paper's tables mostly use 1: the first 2, or later ones for a rule
    the scheduler banned in between); egg's BackoffScheduler (a rule
    with more than `match_limit` matches in an iteration is banned for `ban_length` iterations,
    both doubled at each of its bans; None: every rule in every iteration, as TENSAT); a rule
    family that was banned before is banned again while its matches could take more than
    `budget_share` of the nodes left, and that ban is not cut short when nothing else changes
    (None: no such ban; multi-pattern merges are exempt); the node limit is enforced within a
    rule's application."""

    node_limit: int = 50_000
    iter_limit: int = 15
    time_limit: float = 3600.0
    k_multi: int = 2
    multi_match_limit: int = 1_000_000   # pairs per multi rule and iteration
    filter_cycles: bool = True
    incremental: bool = True     # search only for matches that involve something new
    # True: a rule's matches are applied in chunks that fit under the limit, so the e-graph never
    # passes it by more than one match's nodes. False (TENSAT): the limit is checked after each
    # rule, and one rule can add tens of thousands of nodes past it (ViT, TT: 135 000 of 50 000)
    chunked_node_limit: bool = True
    match_limit: int | None = 1000
    ban_length: int = 5
    # measured (a100, the 13 models): 0.35-0.6 keep BERT's matmul reassociations (35.3 %) and
    # ban ViT-Base's ewadd reassociations (22 000 nodes the ILP cannot close in 60 s)
    budget_share: float | None = 0.5


# ------------------------------------------------------------------ the command's time budget
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
