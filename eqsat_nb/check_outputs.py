"""Is the optimized graph the same function as the original? Checked numerically.

Both graphs run in the NumPy reference interpreter on the same random inputs and weights (values
are drawn per input/weight *name*, so a rewritten graph that reads the same weights sees the same
numbers; imported models pass their real weights). Tolerance: |opt - ref| <= rtol*|ref| +
atol_rel*max|ref| element-wise, with rtol 1e-4 and atol_rel 1e-5: fp32 reassociation noise was
measured at <= 4e-7 of max|ref| here, while NumPy's default allclose rejects correct rewrites
(near-zero elements of a large-valued output).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .ir.graph import Graph
from .ir.interp import run

RTOL = 1e-4
ATOL_REL = 1e-5


@dataclass(frozen=True)
class OutputCheck:
    name: str
    shape_ok: bool
    max_abs_err: float
    max_abs_ref: float
    worst_excess: float      # max of |err| / allowed; <= 1 passes

    @property
    def ok(self) -> bool:
        return self.shape_ok and self.worst_excess <= 1.0

    @property
    def relative_err(self) -> float:
        """max |err| as a fraction of max |ref|."""
        return self.max_abs_err / self.max_abs_ref if self.max_abs_ref else self.max_abs_err


@dataclass(frozen=True)
class Verification:
    outputs: tuple[OutputCheck, ...]
    seeds: tuple[int, ...]
    rtol: float
    atol_rel: float

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def max_relative_err(self) -> float:
        return max((o.relative_err for o in self.outputs), default=0.0)

    def summary(self) -> str:
        bad = [o for o in self.outputs if not o.ok]
        n = len(self.outputs)
        head = (f"{n} output{'' if n == 1 else 's'}, {len(self.seeds)} random "
                f"input set{'' if len(self.seeds) == 1 else 's'}, max |err| = "
                f"{self.max_relative_err:.1e} of max |ref| (tolerance rtol {self.rtol:g}, "
                f"atol {self.atol_rel:g}*max|ref|)")
        if not bad:
            return head
        worst = ", ".join(f"{o.name}: " + ("shape differs" if not o.shape_ok else
                                           f"{o.worst_excess:.3g}x over tolerance") for o in bad)
        return f"{head}; MISMATCH in {worst}"


def compare(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
            names: Sequence[str], rtol: float = RTOL, atol_rel: float = ATOL_REL
            ) -> list[OutputCheck]:
    """Element-wise check of `candidate` against `reference`, one record per output."""
    out = []
    for name, ref, got in zip(names, reference, candidate):
        ref = np.asarray(ref, np.float64)
        got = np.asarray(got, np.float64)
        if ref.shape != got.shape:
            out.append(OutputCheck(name, False, float("inf"), 0.0, float("inf")))
            continue
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        err = np.abs(got - ref)
        allowed = rtol * np.abs(ref) + atol_rel * scale
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0),
                             np.where(err > 0, np.inf, 0.0))
        if not np.all(np.isfinite(got) == np.isfinite(ref)):
            ratio = np.full(1, np.inf)
        out.append(OutputCheck(name, True, float(err.max()) if err.size else 0.0, scale,
                               float(np.nanmax(ratio)) if ratio.size else 0.0))
    return out


def verify_graphs(original: Graph, optimized: Graph, weights: Mapping[str, Any] | None = None,
                  seeds: Sequence[int] = (0,), rtol: float = RTOL, atol_rel: float = ATOL_REL
                  ) -> Verification:
    """Run both graphs on the same random inputs (one set per seed) and compare every output.

    `weights` maps weight names (without '@') to real values; missing ones are random."""
    if len(original.outputs) != len(optimized.outputs):
        raise ValueError(f"the graphs return {len(original.outputs)} and "
                         f"{len(optimized.outputs)} values")
    env = {"@" + k: v for k, v in (weights or {}).items()}
    return _worst_over_seeds(original, env, lambda seed: run(optimized, env, seed=seed), seeds,
                             rtol, atol_rel)


def _worst_over_seeds(original: Graph, env: dict, candidate: Callable[[int], Sequence[Any]],
                      seeds: Sequence[int], rtol: float, atol_rel: float) -> Verification:
    """Compare `candidate(seed)` with the interpreter on `original`, keeping each output's
    worst check over the seeds."""
    names = list(original.outputs)
    worst: list[OutputCheck | None] = [None] * len(names)
    for seed in seeds:
        ref = run(original, env, seed=seed)
        for i, check in enumerate(compare(ref, candidate(seed), names, rtol, atol_rel)):
            old = worst[i]
            if old is None or (not check.ok, check.worst_excess) > (not old.ok, old.worst_excess):
                worst[i] = check
    return Verification(tuple(w for w in worst if w is not None), tuple(seeds), rtol, atol_rel)


def verify_onnx(original: Graph, model: Any, weights: Mapping[str, Any] | None = None,
                seeds: Sequence[int] = (0,), rtol: float = RTOL, atol_rel: float = ATOL_REL
                ) -> Verification:
    """Run an exported ONNX model in onnxruntime and compare it with the reference interpreter
    on `original`, same inputs (the exporter keeps the graph's input order)."""
    from .ir.interp import random_tensor
    from .runtime import session

    inputs = list(model.graph.input)[:len(original.inputs)]
    if len(inputs) != len(original.inputs):
        raise ValueError(f"the ONNX model takes {len(inputs)} inputs, the graph "
                         f"{len(original.inputs)}")
    sess = session(model)
    env = {"@" + k: v for k, v in (weights or {}).items()}

    def onnx_outputs(seed: int) -> Sequence[Any]:
        feed = {vi.name: random_tensor(v, ty, seed) for (v, ty), vi in zip(original.inputs,
                                                                           inputs)}
        return sess.run(None, feed)

    return _worst_over_seeds(original, env, onnx_outputs, seeds, rtol, atol_rel)
