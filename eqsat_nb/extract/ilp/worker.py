"""The ILP's worker process: it solves what it reads on stdin and is killed at a hard deadline
(DESIGN §6).

HiGHS was seen to hang ignoring its time limit, and it overruns it by seconds on large models, so
by default the solve runs in a spawned subprocess with a hard deadline (time_limit +
kill_margin). The worker reports every improvement as it finds it (and, with highspy 1.16,
HiGHS's improving solutions during a solve), so a killed worker's answer is its last report,
status "killed"; without one, the warm start (or the internal acyclic greedy).

It imports this package alone, as the top-level package `ilp` (numpy and highspy, not eqsat_nb
with its parser and numba: 0.4 s less on this machine), and it is started before the parent
prepares the problem (`start`), so its imports overlap that work; it waits on stdin.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

from .solve import _solve

_WORKER: list[str] | None = None     # the worker's command line (tests stand in a fake one)
_BOOT = ("import sys; sys.path.insert(0, {!r}); import ilp.worker; ilp.worker._main()"
         .format(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


_spare: list = []        # [(command, process)]: one started ahead by prestart()


def _command() -> list[str]:
    return _WORKER or [sys.executable, "-c", _BOOT]


def _spawn(verbose: bool) -> subprocess.Popen:
    return subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=None if verbose else subprocess.PIPE)


def prestart() -> None:
    """Start a worker now, for the next `start` to hand out: `optimize` calls this before its
    search, so the worker's imports (0.3-1 s) are done when the ILP begins. One not used is
    killed at exit."""
    if not _spare:
        import atexit
        _spare.append((_command(), _spawn(False)))
        atexit.register(_drop_spare)


def _drop_spare() -> None:
    while _spare:
        proc = _spare.pop()[1]
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def start(verbose: bool = False) -> subprocess.Popen:
    """A worker process, importing while the caller prepares what it will send (the one
    prestart() started, where it is alive and was started the same way)."""
    if _spare and not verbose:
        command, proc = _spare.pop()
        if command == _command() and proc.poll() is None:
            return proc
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return _spawn(verbose)


def _run_subprocess(P: dict, opts: dict, deadline: float,
                    proc: subprocess.Popen | None = None) -> dict:
    """Solve in a worker (`proc`, or a new one: pickles over stdin, framed pickles back); kill it
    at `deadline` seconds. The worker reports every improvement as it is found, so a killed
    worker's result is its last report (status "killed"), not nothing."""
    if proc is None:
        proc = start(bool(opts.get("verbose")))
    data = pickle.dumps((P, opts), protocol=pickle.HIGHEST_PROTOCOL)
    try:
        out, err = proc.communicate(data, timeout=deadline)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()         # what the worker wrote before it was killed
        progress = [m for kind, m in _frames(out) if kind == "progress"]
        return dict(progress[-1] if progress else {}, status="killed")
    except BaseException:       # Ctrl-C, MemoryError...: leave no worker behind
        proc.kill()
        proc.wait()
        raise
    frames = _frames(out)
    final = [m for kind, m in frames if kind in ("ok", "error")]
    if proc.returncode != 0 or not final:
        tail = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        progress = [m for kind, m in frames if kind == "progress"]
        return dict(progress[-1] if progress else {},
                    status=f"error: ILP worker exited {proc.returncode}: {tail[0]}")
    kind, payload = frames[-1]
    return payload if kind == "ok" else {"status": f"error: {payload}"}


def _frames(out: bytes) -> list[tuple[str, Any]]:
    """The complete (kind, payload) messages in the worker's output (a cut-off last one is
    dropped)."""
    msgs = []
    pos = 0
    while pos + 8 <= len(out):
        n = int.from_bytes(out[pos: pos + 8], "little")
        if pos + 8 + n > len(out):
            break
        msgs.append(pickle.loads(out[pos + 8: pos + 8 + n]))
        pos += 8 + n
    return msgs


def _main() -> None:
    import highspy  # noqa: F401  (imported while the parent prepares the problem)

    P, opts = pickle.load(sys.stdin.buffer)
    result_fd = os.dup(1)           # whatever HiGHS prints goes to stderr, not into the pickles
    os.dup2(2, 1)

    def send(kind: str, payload: Any) -> None:
        b = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
        b = len(b).to_bytes(8, "little") + b
        while b:
            b = b[os.write(result_fd, b):]

    opts["emit"] = lambda progress: send("progress", progress)
    try:
        res = ("ok", _solve(P, opts))
    except Exception as e:      # reported to the parent as status "error: ..."
        res = ("error", f"{type(e).__name__}: {e}")
    send(*res)
    os.close(result_fd)


if __name__ == "__main__":
    _main()
