"""onnxruntime runs that stop at a deadline.

A legal ONNX model can run for as long as it likes: a Loop with a trip count of 2^40 is a valid
model that onnxruntime executes for days. Every run of a user's graph during `eqsat-nb run`
(the import's test run, the control-flow and symbolic-size probes, opaque nodes in the reference
interpreter, the comparison of the optimized model with the input, the timing guard) goes through
`run_until`, which stops it when the deadline passes and raises `RunStopped` naming what was
stopped and the node onnxruntime was running.

Stopping uses onnxruntime's own cancellation: a watchdog thread sets `RunOptions.terminate` on
the options the run was started with, and onnxruntime leaves the run between two kernels (a
Loop checks the flag at every iteration). The run itself is not in a separate process, so
nothing is copied and the session is reused.

Deadlines are on the work clock (`work_clock.work_clock`, what `--time-limit` counts): the
wall clock less Numba compilation time. No compilation happens while onnxruntime runs, so a
run's remaining time on the work clock is its remaining wall time.

`time_limit(deadline)` sets a deadline for everything run inside it (the `run` command sets its
budget's end once), so code deep in the importer need not pass one along; a deadline passed to
`run_until` itself applies too, whichever comes first.
"""
from __future__ import annotations

import contextlib
import re
import threading
from contextvars import ContextVar
from typing import Any, Iterator, Mapping, Sequence

from .errors import RunStopped
from .work_clock import work_clock

__all__ = ["RunStopped", "Watchdog", "current_deadline", "run_until", "time_limit"]

_DEADLINE: ContextVar[float | None] = ContextVar("eqsat_nb_ort_deadline", default=None)
_RUNNING_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


@contextlib.contextmanager
def time_limit(deadline: float | None) -> Iterator[None]:
    """Within the block, every `run_until` stops at `deadline` (work clock; None: no limit
    added). Nested limits keep the earlier deadline."""
    token = _DEADLINE.set(current_deadline(deadline))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline(deadline: float | None = None) -> float | None:
    """The earlier of `deadline` and the one `time_limit` set (None when neither is set)."""
    outer = _DEADLINE.get()
    if deadline is None:
        return outer
    return deadline if outer is None else min(deadline, outer)


class Watchdog:
    """One RunOptions for any number of runs, terminated when `deadline` passes: a single timer
    thread for all of them (a thread per run would add its start-up to every timed run).

        with Watchdog(deadline, "the timing of the optimized model") as w:
            for _ in range(n):
                w.run(sess, None, feeds)

    Raises RunStopped from `run` once the deadline has passed, also before starting a run."""

    def __init__(self, deadline: float | None, what: str) -> None:
        import onnxruntime as ort

        self.deadline = current_deadline(deadline)
        self.what = what
        self.options = ort.RunOptions()
        self.options.log_severity_level = 4     # a failure is reported by the caller
        self.fired = False
        self.runs = 0                           # runs started
        self._started = work_clock()
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Watchdog":
        if self.deadline is not None:
            left = self.deadline - work_clock()
            if left <= 0:
                self._fire()
            else:
                self._timer = threading.Timer(left, self._fire)
                self._timer.daemon = True
                self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self.fired = True
        self.options.terminate = True

    def run(self, sess: Any, names: Sequence[str] | None,
            feeds: Mapping[str, Any]) -> list[Any]:
        """`sess.run(names, feeds)`, stopped at the deadline (RunStopped)."""
        if self.fired:              # the deadline has passed: nothing more is started
            raise RunStopped(self.what, work_clock() - self._started, None,
                             started=self.runs > 0)
        self.runs += 1
        try:
            return sess.run(None if names is None else list(names), dict(feeds), self.options)
        except Exception as e:   # noqa: BLE001 - onnxruntime's own types; re-raised unless ours
            if self.fired:
                raise self.stopped(e) from None
            raise

    def stopped(self, error: BaseException) -> RunStopped:
        m = _RUNNING_NODE.search(str(error))
        node = (m.group(2), m.group(1)) if m else None
        return RunStopped(self.what, work_clock() - self._started, node)


def run_until(sess: Any, names: Sequence[str] | None, feeds: Mapping[str, Any],
              deadline: float | None = None, what: str = "an onnxruntime run") -> list[Any]:
    """`sess.run(names, feeds)`, stopped when `deadline` (work clock) or the enclosing
    `time_limit`'s passes: RunStopped, naming `what` and the node that was running. Without
    any deadline it is a plain run. Errors of the run itself are onnxruntime's, unchanged."""
    if current_deadline(deadline) is None:
        from .runtime import quiet_run
        return sess.run(None if names is None else list(names), dict(feeds), quiet_run())
    with Watchdog(deadline, what) as w:
        return w.run(sess, names, feeds)
