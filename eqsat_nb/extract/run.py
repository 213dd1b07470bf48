"""One entry point over the extractors, so the CLI and the optimizer pick them by name."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from . import METHODS  # defined in __init__: the CLI reads it without loading kernels
from .problem import ExtractionProblem


@dataclass(frozen=True)
class Extraction:
    choice: np.ndarray
    bound: float | None = None      # ILP: best lower bound
    gap: float | None = None
    status: str = "ok"


def extract(problem: ExtractionProblem, method: str, time_limit: float = 60.0,
            stall: float = 0.0, stop_gap: float = 0.0) -> Extraction:
    """The selection `method` finds; for "ilp" also its bound, gap and what stopped it (`stall`
    seconds and `stop_gap`, a fraction: the ILP's stall and gap rules, 0 off). The ILP returns
    within `time_limit` seconds of the call, its warm start included (a wall-time limit)."""
    if method == "greedy":
        from .greedy import extract_greedy
        return Extraction(extract_greedy(problem))
    if method == "ocf":
        from .ocf import extract_ocf
        return Extraction(extract_ocf(problem))
    if method == "ocf+switch":
        from .ocf import extract_ocf
        from .switch import joint_switch
        return Extraction(joint_switch(problem, extract_ocf(problem)))
    if method == "ilp":     # warm-started from ocf+switch, never worse than it (extract_ilp)
        deadline = time.perf_counter() + time_limit
        from .ilp import extract_ilp
        from .ocf import extract_ocf
        from .switch import joint_switch
        res = extract_ilp(problem, time_limit=time_limit,
                          warm_start=joint_switch(problem, extract_ocf(problem)),
                          stall=stall, stop_gap=stop_gap, deadline=deadline)
        return Extraction(res.choice, res.bound, res.gap, res.status)
    raise ValueError(f"unknown extraction method {method!r} (known: {', '.join(METHODS)})")
