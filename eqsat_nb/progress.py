"""A small progress line on stderr for long phases (saturation, profiling, MCTS decisions).

On a terminal the line redraws in place; otherwise (logs, CI) each update is a plain line, at most
one per `min_interval` seconds, so piped output stays short. `quiet=True` prints nothing.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


def _draw(stream: TextIO, tty: bool, text: str) -> None:
    """The progress line: redrawn in place on a terminal, a plain line otherwise."""
    stream.write(("\r\x1b[2K" + text) if tty else text + "\n")
    stream.flush()


class Progress:
    """`with Progress("saturate", total=15) as p: p.update(3, "1234 nodes")`."""

    def __init__(self, label: str, total: int | None = None, quiet: bool = False,
                 stream: TextIO | None = None, min_interval: float = 0.5) -> None:
        self.label, self.total, self.quiet = label, total, quiet
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval = 0.0 if self.tty else min_interval
        self.start = time.perf_counter()
        self._last = -1e9
        self._drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def line(self, done: int, note: str = "") -> str:
        elapsed = time.perf_counter() - self.start
        if self.total:
            frac = min(max(done / self.total, 0.0), 1.0)
            bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
            head = f"{self.label} [{bar}] {done}/{self.total}"
        else:
            head = f"{self.label} {done}"
        return f"{head}  {elapsed:6.1f} s" + (f"  {note}" if note else "")

    def update(self, done: int, note: str = "", force: bool = False) -> None:
        if self.quiet:
            return
        now = time.perf_counter()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        _draw(self.stream, self.tty, self.line(done, note))
        self._drawn = True

    def close(self) -> None:
        if self.tty and self._drawn and not self.quiet:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


class CompileNotice:
    """While Numba compiles kernels (a first run, or after an upgrade: tens of seconds), say so on
    the progress line, so a user does not take the wait for the search. A daemon thread polls
    the compilation tracker (`search.limits.track_compilation`, which must be on); loading
    compiled kernels from the cache is not compilation and shows nothing."""

    def __init__(self, quiet: bool = False, stream: TextIO | None = None,
                 after: float = 0.5, poll: float = 0.25) -> None:
        self.quiet, self.after, self.poll = quiet, after, poll
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._stop = None
        self.shown = False

    def __enter__(self) -> "CompileNotice":
        if not self.quiet:
            import threading

            from .search.limits import track_compilation
            track_compilation()
            self._stop = threading.Event()
            threading.Thread(target=self._watch, name="eqsat-nb compile notice",
                             daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stop is not None:
            self._stop.set()

    def _watch(self) -> None:
        from .search.limits import compile_seconds, compiling_for
        last = -1e9
        while not self._stop.wait(self.poll):
            running = compiling_for()
            if running <= 0.0 or running < self.after:
                continue
            now = time.perf_counter()
            if not self.tty and now - last < 10.0:   # logs: one line per 10 s at most
                continue
            last = now
            text = (f"compiling kernels (first run only; cached afterwards)  "
                    f"{compile_seconds():6.1f} s")
            _draw(self.stream, self.tty, text)
            self.shown = True
