"""Root parallelism for MCTS (mcts.py): an `Executor` maps "run k simulations from this root
with seed s" over workers; per-action visits and values are then summed into one decision.
`InlineExecutor` runs them here, `ProcessExecutor` in a process pool (anything with the same `run`
method, e.g. Ray tasks, can replace them). Every worker's seed is derived from (seed, decision,
worker), so a run is reproducible for a given seed and worker count.
"""
from __future__ import annotations

import signal
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from .mcts_tree import Context, Node, State, run_simulations


# ---------------------------------------------------------------------------- executors
@dataclass
class Job:
    """Run `n` simulations from `tree` (its root holds the decision's state) with `seed`."""

    tree: Node
    n: int
    seed: int


class Executor(Protocol):
    """Maps jobs over workers and hands back their trees, in job order."""

    def run(self, jobs: Sequence[Job]) -> list[Node]: ...

    def close(self) -> None: ...


class InlineExecutor:
    """Runs the jobs here, one after another; trees keep their e-graphs between decisions."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def run(self, jobs: Sequence[Job]) -> list[Node]:
        return [run_simulations(j.tree, self.ctx, j.n, j.seed) for j in jobs]

    def close(self) -> None:
        pass


_WORKER_CTX: Context | None = None


def _worker_init(ctx: Context) -> None:
    global _WORKER_CTX
    _WORKER_CTX = ctx
    # Ctrl-C reaches the whole process group: the parent handles it (a clean message, exit 130)
    # and shuts the pool down; a worker would print a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_job(root_state: State, tree: Node, n: int, seed: int) -> Node:
    """In a worker process: attach the shipped root state, simulate, strip the e-graphs."""
    ctx = _WORKER_CTX
    ctx.reset_caches()               # the shipped interner copy is not the previous task's
    ctx.hits = ctx.misses = ctx.steps = 0
    tree.state = root_state
    run_simulations(tree, ctx, n, seed)
    tree.strip()
    tree.state = None
    return tree


class ProcessExecutor:
    """Root parallelism over a process pool. Each job ships the root state and the job's tree
    without e-graphs (they are replayed on demand), so the result depends only on the job."""

    def __init__(self, ctx: Context, workers: int) -> None:
        self.ctx = ctx
        self.pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init,
                                        initargs=(ctx,))

    def run(self, jobs: Sequence[Job]) -> list[Node]:
        futures = []
        for j in jobs:
            state = j.tree.state
            j.tree.strip()
            futures.append(self.pool.submit(_worker_job, state, j.tree, j.n, j.seed))
        out = []
        for j, f in zip(jobs, futures):
            tree = f.result()
            tree.state = j.tree.state
            out.append(tree)
        return out

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _seed(seed: int, decision: int, worker: int) -> int:
    return int(np.random.SeedSequence([seed, decision, worker]).generate_state(1)[0])
