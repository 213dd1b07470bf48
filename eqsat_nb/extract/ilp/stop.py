"""The rules that stop a solve before its time limit: stalled, or within a gap (see _Progress).

The stall rule (`stall` seconds, 0 off; `optimize` and `run --ilp-stall` default to
STALL_SECONDS): HiGHS's MIP-interrupt callback (highspy 1.7.1 has it) reports its primal and dual
bounds during the full model's solve, and the solve is interrupted, status "stalled", when over
the last max(stall, STALL_SHARE x elapsed) seconds neither the best primal cost (checked or
HiGHS's own) improved nor the bound closed the gap at STALL_CLOSE per STALL_CLOSE_SECONDS (a
window of w seconds asks for w / STALL_CLOSE_SECONDS of that, at most all). Its answer and bound
are taken as at a time limit; the trajectory is kept in the result's stats["trajectory"].
Without the callback only the time limit stops a solve.

The gap rule (`stop_gap`, a fraction, 0 off; `optimize` and `run --ilp-gap PERCENT` default to
GAP_PERCENT), on the same reports: the full model's solve is interrupted, status "within_gap",
when the checked answer is within `stop_gap` of HiGHS's dual bound, (cost - bound) / cost <=
stop_gap, and the answer (checked, or HiGHS's own incumbent) has not improved for GAP_WAIT seconds
counted from the later of its last improvement and HiGHS's first report on the full model. The
bound proves the answer loses at most `stop_gap` to the optimum; the result's bound and gap are
the ones the rule saw (or better), and it is never called optimal unless the bound meets the
answer. The restricted phases are not affected. With highspy 1.7.1 (improving solutions reported
in the presolved space only) the checked answer changes only when a solve ends, so the rule acts
on the warm start's or the restricted phase's answer and waits while HiGHS holds a better one.
"""
from __future__ import annotations

import bisect
import math
import time
from typing import Callable

from .selection import _tol

# The stall rule (see _Progress), from the trajectories of the 13 reference e-graphs and the TT,
# NasRNN, ViT-Large and BERT run problems, 30 s without the rules (docs/extraction.md): the longest
# time its condition held before the checked answer still improved is 0.87 s (BERT's run, then
# 4 %; a 2.4 s flat on the reference BERT e-graph set 8 s before the large-neighbourhood phase
# found that answer first), so the window is 3 s, 3.4x that. The bound's progress is a rate, so
# that a shorter window does not stop a bound that closes the gap slowly but steadily: cyclic
# SqueezeNet stops at 19 s with 24.1 % (8 s and a share per window: 21 s, 25.9 %), TENSAT's
# NasRNN at 26 s with 3.40 % as before, while a flat solve (TENSAT's VGG-19) stops after 3 s.
STALL_SECONDS = 3.0             # the shortest window (optimize's default; 0: off)
STALL_SHARE = 0.25              # ... which grows to this share of the solve's elapsed time
STALL_CLOSE = 0.05              # the share of the gap the bound must close in STALL_CLOSE_SECONDS
STALL_CLOSE_SECONDS = 8.0       # ... (a shorter window: that share in proportion to its length)
# The gap rule (see _Progress). Its wait is short: once the answer is proven within the gap, the
# time still spent is mostly HiGHS proving an answer it already holds. Measured on the 12
# benchmark runs (`run --device a100`) and the perf reference e-graphs, a 0.5 s wait returns the
# same answers as the 4 s wait used before, and ends NasRNN's run extraction 1.2 s earlier (its
# NasRNN cells are within 2 % long before they are proven). What a short wait can lose is bounded
# by the gap; an older TT e-graph trajectory (tests, TT_20K) lost 0.09 % to it, which the
# restricted phase now finds before the full model starts.
GAP_PERCENT = 2.0               # the largest gap at which the rule stops (optimize's default)
GAP_WAIT = 0.5                  # seconds without improvement it waits for
TRACE_STEP = 0.1                # seconds between the recorded trajectory's points

_CLOCK: Callable[[], float] = time.perf_counter     # the rules' (tests drive it in-process)


class _Progress:
    """One model's solve over time, as HiGHS's MIP-interrupt callback reports it: the best
    primal cost (the checked incumbent's or HiGHS's own, the lower) and the best dual bound
    (every round's holds), and the two rules that stop it on them (`stopped` says which, None
    while neither has).

    The stall rule: over the last w = max(`stall`, STALL_SHARE x elapsed) seconds the primal cost
    did not improve and the bound closed less than STALL_CLOSE x min(1, w / STALL_CLOSE_SECONDS)
    of the gap there was at the window's start; `stall` 0 never stops.

    The gap rule: the checked cost (what the solve returns, or better) is within `gap` of the
    bound, (cost - bound) <= gap x cost, and the primal cost has not improved (by more than
    _tol) for GAP_WAIT seconds since the later of its last improvement and the first report;
    `gap` 0 never stops.

    Elapsed time counts from `start` (the clock's reading; the clock is injectable so tests can
    drive the rules). `trace` keeps the trajectory (seconds, checked cost, HiGHS's primal bound,
    dual bound), thinned to TRACE_STEP seconds, for the result's stats."""

    def __init__(self, upper: Callable[[], float], stall: float, start: float | None = None,
                 clock: Callable[[], float] | None = None, gap: float = 0.0):
        self.upper, self.stall, self.gap = upper, float(stall), float(gap)
        self.clock = clock or _CLOCK
        self.start = self.clock() if start is None else start
        self.ts: list[float] = []           # change points of (ups, lows)
        self.ups: list[float] = []
        self.lows: list[float] = []
        self.trace: list[tuple[float, float, float, float]] = []
        self.first: float | None = None     # seconds: the first report
        self.best = math.inf                # primal cost at its last improvement ...
        self.improved: float | None = None  # ... and when (seconds)
        self.stopped: str | None = None     # "stalled" | "within_gap" once a rule fired
        self.stopped_at = math.inf          # time.perf_counter() when it fired

    @property
    def stalled(self) -> bool:
        return self.stopped == "stalled"

    @property
    def bound(self) -> float:
        """The best dual bound reported (-inf before the first finite one)."""
        return self.lows[-1] if self.lows else -math.inf

    def observe(self, primal: float, bound: float) -> bool:
        """Record HiGHS's primal and dual bound now; True once a rule has stopped the solve."""
        t = self.clock() - self.start
        checked = self.upper()
        primal = primal if math.isfinite(primal) else math.inf
        low = bound if math.isfinite(bound) else -math.inf
        if self.lows:
            low = max(low, self.lows[-1])
        up = min(checked, primal)
        if not self.ts or up != self.ups[-1] or low != self.lows[-1]:
            self.ts.append(t)
            self.ups.append(up)
            self.lows.append(low)
        if self.first is None:
            self.first = t
        if up < self.best - (_tol(self.best) if math.isfinite(self.best) else 0.0):
            self.best, self.improved = up, t
        self._trace(t, checked, primal, low)
        if self.stopped is None:
            if self.stall > 0 and self._stalled(t):
                self.stopped = "stalled"
            elif self.gap > 0 and self._within_gap(t, checked, low):
                self.stopped = "within_gap"
            if self.stopped is not None:
                self.stopped_at = time.perf_counter()
        return self.stopped is not None

    def _trace(self, t: float, checked: float, primal: float, low: float) -> None:
        """A point every TRACE_STEP seconds, and one at every improvement."""
        if not self.trace or t - self.trace[-1][0] >= TRACE_STEP or \
                checked < self.trace[-1][1] or primal < self.trace[-1][2]:
            self.trace.append((round(t, 3), checked, primal, low))

    def _stalled(self, t: float) -> bool:
        """The stall rule at time t: no primal improvement and too little bound progress over
        the window (never before a full window with a finite gap has been seen)."""
        w = max(self.stall, STALL_SHARE * t)
        i = bisect.bisect_right(self.ts, t - w) - 1
        if i < 0:
            return False
        up0, low0, up, low = self.ups[i], self.lows[i], self.ups[-1], self.lows[-1]
        gap0 = up0 - low0
        if not math.isfinite(gap0) or gap0 <= _tol(up0) or up < up0 - _tol(up0):
            return False
        return low - low0 < STALL_CLOSE * gap0 * min(1.0, w / STALL_CLOSE_SECONDS)

    def _within_gap(self, t: float, checked: float, low: float) -> bool:
        """The gap rule at time t on the checked cost and the bound. A bound above the checked
        cost proves nothing (the solve calls that inconsistent): the rule waits."""
        if not (math.isfinite(checked) and math.isfinite(low)) or \
                checked - low > self.gap * max(abs(checked), 1e-9) or \
                low > checked + _tol(checked):
            return False
        since = self.first if self.improved is None else max(self.first, self.improved)
        return t - since >= GAP_WAIT

    def record(self) -> dict:
        """The trajectory for the result's stats, its last point included."""
        points = list(self.trace)
        if points:
            last = (round(self.clock() - self.start, 3), self.upper(), points[-1][2],
                    self.lows[-1])
            if last != points[-1]:
                points.append(last)
        return {"stalled": self.stalled, "stopped": self.stopped, "points": points}


