"""Is the optimized graph the same function as the original? Checked numerically.

Both graphs run in the NumPy reference interpreter on the same random inputs and weights (values
are drawn per input/weight *name*, so a rewritten graph that reads the same weights sees the same
numbers; imported models pass their real weights). Tolerance: |opt - ref| <= rtol*|ref| +
atol_rel*max|ref| element-wise, with rtol 1e-4 and atol_rel 1e-5: fp32 reassociation noise was
measured at <= 4e-7 of max|ref| here, while NumPy's default allclose rejects correct rewrites
(near-zero elements of a large-valued output).

Both graphs run as one (`ir.interp.shared_graph`): an expression the optimized graph shares with
the original (same op, attributes and operand expressions down to the same inputs and weight
names) is computed once and both read that value, as recomputing it would give (the interpreter
is deterministic); the rewritten part is computed for each graph, and so is whatever depends on
it unless the rewritten part gave the same value to the bit (`ir.interp.EqualValues`: then the
nodes after it that are the same op on the same values run once; ViT-Large's check 3.7 -> 2.3 s,
its merged Q/K/V matmuls' splits being its separate matmuls' values); every output of each graph
is compared as before. Each weight is drawn once.

Memory and time: the interpreter runs in float32 (the comparison converts to float64 a chunk at a
time), frees every value after its last use, and draws random tensors a chunk at a time; still, a
model's activations and weights must fit. `estimate_verification` predicts the peak memory and
the time from the shapes alone, simulating the same merged run, so `eqsat-nb run` can skip (and
say so) a verification that would not fit its memory budget or time limit, and `verify_graphs`
takes a deadline.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from math import prod
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .ir.graph import Graph
from .ir.interp import RANDOM_CHUNK, run, shared_graph
from .ir.ops import OPS
from .precision import ATOL_REL, RTOL, Tolerance, half_precision, tolerance
COMPARE_CHUNK = 1 << 20     # elements compared at a time
# values past their last use kept so a twin computed later reuses what follows them
# (ir.interp.EqualValues): ViT-Large's merged run needs 64 MiB for all of its 470 reused nodes,
# 16 MiB gives 340; more held memory made fresh allocations slower (256 MiB: BERT +15 %)
EQUAL_VALUES_BYTES = 64 << 20


@dataclass(frozen=True)
class OutputCheck:
    name: str
    shape_ok: bool
    max_abs_err: float
    max_abs_ref: float
    worst_excess: float      # max of |err| / allowed; <= 1 passes
    base_err: float | None = None   # relative rule: the original's own max |err|

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
    tolerance: Tolerance | None = None   # None: the fixed rule with rtol, atol_rel
    note: str = ""                       # how it was checked, when not the usual way

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def rule(self) -> str:
        """The rule the outputs were judged by, in words."""
        tol = self.tolerance or Tolerance(rtol=self.rtol, atol_rel=self.atol_rel)
        return tol.describe()

    @property
    def max_relative_err(self) -> float:
        return max((o.relative_err for o in self.outputs), default=0.0)

    def summary(self) -> str:
        bad = [o for o in self.outputs if not o.ok]
        n = len(self.outputs)
        base = [o.base_err / o.max_abs_ref for o in self.outputs
                if o.base_err is not None and o.max_abs_ref]
        own = f", the original's own {max(base):.1e}" if base else ""
        note = f"; {self.note}" if self.note else ""
        head = (f"{n} output{'' if n == 1 else 's'}, {len(self.seeds)} random "
                f"input set{'' if len(self.seeds) == 1 else 's'}, max |err| = "
                f"{self.max_relative_err:.1e} of max |ref|{own} ({self.rule}){note}")
        if not bad:
            return head
        worst = ", ".join(f"{o.name}: " + ("shape differs" if not o.shape_ok else
                                           f"{o.worst_excess:.3g}x over tolerance") for o in bad)
        return f"{head}; MISMATCH in {worst}"


@dataclass(frozen=True)
class NotVerified:
    """Verification did not run: the graph is unchanged, or checking would not fit the memory
    budget or the time limit. `ok` is True (nothing failed); `message` says what was not checked
    and how to check it."""

    reason: str                 # "unchanged" | "memory" | "time"
    message: str
    seeds: tuple[int, ...] = (0,)

    ok = True

    @property
    def limited(self) -> bool:
        """Skipped for a memory or time limit (anything else that would check is skipped too)."""
        return self.reason in ("memory", "time")

    def summary(self) -> str:
        return self.message


class VerificationStopped(Exception):
    """Raised inside the interpreter when verification passes its deadline."""


def compare(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray],
            names: Sequence[str], rtol: float = RTOL, atol_rel: float = ATOL_REL
            ) -> list[OutputCheck]:
    """Element-wise check of `candidate` against `reference`, one record per output (in float64,
    COMPARE_CHUNK elements at a time, so the memory it needs beyond the outputs is bounded)."""
    out = []
    for name, ref, got in zip(names, reference, candidate):
        ref, got = np.asarray(ref), np.asarray(got)
        if ref.shape != got.shape:
            out.append(OutputCheck(name, False, float("inf"), 0.0, float("inf")))
            continue
        r, g = _flat(ref), _flat(got)
        n = ref.size
        chunks = range(0, n, COMPARE_CHUNK)
        scale = float(np.max([np.max(np.abs(r[i:i + COMPARE_CHUNK])) for i in chunks])
                      ) if n else 0.0      # np.max: a NaN propagates, as in one np.max
        max_err, worst, finite_ok = 0.0, float("nan") if n else 0.0, True
        for i in chunks:
            rc = r[i:i + COMPARE_CHUNK].astype(np.float64)
            gc = g[i:i + COMPARE_CHUNK].astype(np.float64)
            err = np.abs(gc - rc)
            allowed = rtol * np.abs(rc) + atol_rel * scale
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(allowed > 0, err / np.where(allowed > 0, allowed, 1.0),
                                 np.where(err > 0, np.inf, 0.0))
            finite_ok = finite_ok and bool(np.all(np.isfinite(gc) == np.isfinite(rc)))
            max_err = float(np.maximum(max_err, err.max()))        # NaN propagates, as before
            worst = float(np.fmax(worst, np.fmax.reduce(ratio)))   # NaN ignored (nanmax)
        if not finite_ok:
            worst = float("inf")
        out.append(OutputCheck(name, True, max_err, scale, worst))
    return out


def compare_relative(reference: Sequence[np.ndarray], original: Sequence[np.ndarray],
                     candidate: Sequence[np.ndarray], names: Sequence[str], tol: Tolerance
                     ) -> list[OutputCheck]:
    """The relative rule (`Tolerance.relative`): each output's max |candidate - reference| must
    be at most `tol.factor` x max |original - reference| + `tol.floor` x max |reference|, where
    `reference` is a higher-precision evaluation of the original and `original` the original in
    its own precision. A non-finite element where the reference is finite fails unless the
    original has it too (a half model overflowing where float32 does not is the original's own
    behaviour)."""
    out = []
    for name, ref, base, got in zip(names, reference, original, candidate):
        ref, base, got = np.asarray(ref), np.asarray(base), np.asarray(got)
        if not ref.shape == base.shape == got.shape:
            out.append(OutputCheck(name, False, float("inf"), 0.0, float("inf")))
            continue
        r, b, g = _flat(ref), _flat(base), _flat(got)
        scale = base_err = err = 0.0
        finite_ok = True
        for i in range(0, ref.size, COMPARE_CHUNK):
            rc = r[i:i + COMPARE_CHUNK].astype(np.float64)
            bc = b[i:i + COMPARE_CHUNK].astype(np.float64)
            gc = g[i:i + COMPARE_CHUNK].astype(np.float64)
            fin = np.isfinite(rc) & np.isfinite(bc)
            finite_ok = finite_ok and bool(np.all(np.isfinite(gc)[fin]))
            finite_ok = finite_ok and bool(np.all(np.isfinite(gc) == np.isfinite(bc)))
            if fin.any():
                scale = max(scale, float(np.abs(rc[fin]).max()))
                base_err = max(base_err, float(np.abs(bc[fin] - rc[fin]).max()))
                err = max(err, float(np.nan_to_num(np.abs(gc[fin] - rc[fin]), nan=np.inf).max()))
        allowed = tol.factor * base_err + tol.floor * scale
        worst = err / allowed if allowed > 0 else (0.0 if err == 0 else float("inf"))
        if not finite_ok:
            worst = float("inf")
        out.append(OutputCheck(name, True, err, scale, worst, base_err))
    return out


def _flat(a: np.ndarray):
    """The elements in C order, sliceable: a view when contiguous, else `a.flat` (a slice of it
    copies that chunk only; kernels may return views, e.g. a transposed matrix)."""
    return a.reshape(-1) if a.flags.c_contiguous else a.flat


def verify_graphs(original: Graph, optimized: Graph, weights: Mapping[str, Any] | None = None,
                  seeds: Sequence[int] = (0,), rtol: float = RTOL, atol_rel: float = ATOL_REL,
                  deadline: float | None = None) -> Verification:
    """Run both graphs on the same random inputs (one set per seed) and compare every output.
    They run merged (`shared_graph`): what they share is computed once.

    The interpreter computes in float32, but a graph's opaque nodes run in their declared types
    (a Cast to fp16 rounds): a graph with half-precision values is judged by its precision's
    relative rule (`precision.tolerance`) against a run of the original without that rounding
    (`run(wide=True)`), the fixed rule otherwise.

    `weights` maps weight names (without '@') to real values; missing ones are random. With a
    `deadline` (on search.limits.work_clock) the interpreter raises VerificationStopped once it
    has passed it."""
    if len(original.outputs) != len(optimized.outputs):
        raise ValueError(f"the graphs return {len(original.outputs)} and "
                         f"{len(optimized.outputs)} values")
    env = {"@" + k: v for k, v in (weights or {}).items()}
    check = _deadline_check(deadline)
    both = shared_graph([original, optimized])
    n = len(original.outputs)
    tol = tolerance(half_precision(original.types().values()) or "fp32")

    def runs() -> Iterable[tuple[list, ...]]:
        for seed in seeds:
            outs = run(both, env, seed=seed, check=check, equal_values=EQUAL_VALUES_BYTES)
            if not tol.relative:
                yield outs[:n], outs[n:]
                continue
            ref = run(original, env, seed=seed, check=check, wide=True)
            yield ref, outs[:n], outs[n:]
    with one_blas_thread():
        return worst_over(list(original.outputs), runs(), seeds, rtol, atol_rel,
                          tolerance=tol if tol.relative else None)


BLAS_THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def usable_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def one_blas_thread() -> Any:
    """A context in which NumPy's BLAS runs on one thread, as the rest of the interpreter does,
    on machines with at most two usable CPUs (unless the user set a BLAS thread count): on the
    2-vCPU development machine, shared with other jobs, OpenBLAS's default two threads made
    verification 3-5x slower (ViT-Huge 38-45 s vs 9.5 s, NasNet-A 4.4 vs 1.4 s): each matmul
    waits for its slower thread, and one thread ran big matmuls faster even on an idle machine
    there (94 vs 58 GFLOP/s). With more CPUs BLAS keeps its threads, which pay off there.
    Restored on exit."""
    import contextlib
    if usable_cpus() > 2 or any(os.environ.get(v) for v in BLAS_THREAD_ENV):
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


def _deadline_check(deadline: float | None) -> Callable[[], None] | None:
    if deadline is None:
        return None
    from .search.limits import work_clock

    def check() -> None:
        if work_clock() > deadline:
            raise VerificationStopped
    return check


def _worst_over_seeds(original: Graph, env: dict, candidate: Callable[[int], Sequence[Any]],
                      seeds: Sequence[int], rtol: float, atol_rel: float,
                      stop: Callable[[], None] | None = None, wide: bool = False
                      ) -> Verification:
    """Compare `candidate(seed)` with the interpreter on `original` (`wide`: run without
    half-precision rounding), keeping each output's worst check over the seeds."""
    runs = ((run(original, env, seed=seed, check=stop, wide=wide), candidate(seed))
            for seed in seeds)
    note = "both widened to float32 (no half-precision rounding)" if wide else ""
    with one_blas_thread():
        return worst_over(list(original.outputs), runs, seeds, rtol, atol_rel, note=note)


def worst_over(names: Sequence[str], runs: Iterable[tuple[Sequence[Any], ...]],
               seeds: Sequence[int], rtol: float = RTOL, atol_rel: float = ATOL_REL,
               tolerance: Tolerance | None = None, note: str = "") -> Verification:
    """Compare each run's output lists, keeping each output's worst check over the runs (one
    run per seed). A run is (original, candidate) under the fixed rule, or (reference,
    original, candidate) under a relative `tolerance` (`compare_relative`)."""
    worst: list[OutputCheck | None] = [None] * len(names)
    relative = tolerance is not None and tolerance.relative
    if tolerance is not None and not relative:
        rtol, atol_rel = tolerance.rtol, tolerance.atol_rel
    for lists in runs:
        checks = (compare_relative(*lists, names, tolerance) if relative else
                  compare(*lists, names, rtol, atol_rel))
        for i, check in enumerate(checks):
            old = worst[i]
            if old is None or (not check.ok, check.worst_excess) > (not old.ok, old.worst_excess):
                worst[i] = check
    return Verification(tuple(w for w in worst if w is not None), tuple(seeds), rtol, atol_rel,
                        tolerance, note)


def verify_onnx(original: Graph, model: Any, weights: Mapping[str, Any] | None = None,
                seeds: Sequence[int] = (0,), rtol: float = RTOL, atol_rel: float = ATOL_REL,
                wide: bool = False) -> Verification:
    """Run an exported ONNX model in onnxruntime and compare it with the reference interpreter
    on `original`, same inputs (the exporter keeps the graph's input order).

    `wide`: the model runs widened to float32 (ir/widen.py; onnxruntime's CPU has bfloat16
    kernels for few operators) and the interpreter without half-precision rounding
    (`run(wide=True)`): given the weights as the model holds them, both compute the same
    float32 function, judged by the fixed rule. onnxruntime's runs stop at the enclosing
    `stopping.time_limit` (RunStopped)."""
    from .ir.interp import random_tensor
    from .runtime import session
    from .stopping import run_until

    inputs = list(model.graph.input)[:len(original.inputs)]
    if len(inputs) != len(original.inputs):
        raise ValueError(f"the ONNX model takes {len(inputs)} inputs, the graph "
                         f"{len(original.inputs)}")
    if wide:
        import onnx

        from .ir.widen import widen_graph
        widened = onnx.ModelProto()
        widened.CopyFrom(model)
        widen_graph(widened.graph)
        model = widened
    sess = session(model)
    env = {"@" + k: v for k, v in (weights or {}).items()}

    def onnx_outputs(seed: int) -> Sequence[Any]:
        feed = {vi.name: random_tensor(v, ty, seed) for (v, ty), vi in zip(original.inputs,
                                                                           inputs)}
        return run_until(sess, None, feed, what="onnxruntime's run of the exported model")

    return _worst_over_seeds(original, env, onnx_outputs, seeds, rtol, atol_rel, wide=wide)


# ------------------------------------------------------------------ what verification costs
# bytes per element as the interpreter holds values (floats in its float32)
_ITEMSIZE = {"f16": 4, "bf16": 4, "f32": 4, "f64": 4, "i32": 4, "i64": 8, "bool": 1}
# working memory of one node beyond its results: its op's `interp_temps` (multiples of the
# results' bytes: temporaries of its reference kernel) or `work` hook (ir/ops/, conv2d's paths)
# rough speeds of the interpreter (BLAS on one thread) on a 2-core machine, below what it
# measured on an idle one, since the machine may be shared: on ir_examples/, BLAS matmuls and
# convs on their im2col or 1x1 path 50-100 GFLOP/s (float32 GEMMs of ViT/BERT shapes 92-100),
# depthwise convs 2 GFLOP/s, memory-bound ops 5 GB/s written, random weights 260 M/s (100 where
# fresh memory is first touched). With these rates a `run`'s whole check of the 13 benchmark
# models is estimated at 1.2-4.8x (median 3.0x) the time it took, first in a fresh process, on
# an idle machine (ViT-Huge 22 s for 9.8 s; at 30 GFLOP/s GEMMs it was 34 s, and a
# `--time-limit` that would have fit skipped the check)
_GEMM_FLOPS_PER_S = 60e9        # matmul, conv2d on its im2col or 1x1 path
_FLOPS_PER_S = 1e9              # everything else
_BYTES_PER_S = 2e9              # bytes of results and temporaries written
_RANDOM_PER_S = 100e6           # random elements drawn
_SECONDS_PER_NODE = 2e-4
MEMORY_MARGIN = 2.0


@dataclass(frozen=True)
class VerifyCost:
    peak_bytes: int             # the interpreter's and the comparison's peak memory
    seconds: float              # estimated time, all seeds


def _bytes(ty) -> int:
    return prod(ty.shape) * _ITEMSIZE.get(ty.dtype, 8)


def _run_cost(graph: Graph, given: Mapping[str, Any]) -> tuple[int, int, float]:
    """(peak bytes, bytes of the outputs, seconds) of `ir.interp.run(graph)`, simulated from the
    shapes: the same freeing of values after their last use as the interpreter."""
    from .ir.ops import flops

    types = graph.types()
    remaining = {v: 1 for v in graph.outputs}
    for node in graph.nodes:
        for v in node.inputs:
            remaining[v] = remaining.get(v, 0) + 1
    live = peak = 0
    seconds = 0.0
    size: dict[str, int] = {}
    for name, ty in graph.inputs:
        size[name] = _bytes(ty)
        live += size[name]
        seconds += prod(ty.shape) / _RANDOM_PER_S
    peak = live + RANDOM_CHUNK * 8
    for node in graph.nodes:
        seconds += _SECONDS_PER_NODE
        if node.op == "weight":
            r = node.results[0]
            size[r] = _bytes(node.types[0])
            live += size[r]
            if node.attr["name"] not in given:
                seconds += prod(node.types[0].shape) / _RANDOM_PER_S
            peak = max(peak, live + RANDOM_CHUNK * 8)
            continue
        outs = sum(_bytes(t) for t in node.types)
        in_types = [types[v] for v in node.inputs]
        if node.op == "opaque":         # contiguous copies of the operands, ORT's results
            work, gemm = 2 * (outs + sum(size.get(v, 0) for v in node.inputs)), False
        else:
            d = OPS[node.op]
            if d.work is not None:
                work, gemm = d.work(in_types, list(node.types), node.attr, _bytes)
            else:
                work, gemm = int(d.interp_temps * outs), d.interp_gemm
        rate = _GEMM_FLOPS_PER_S if gemm else _FLOPS_PER_S
        peak = max(peak, live + outs + work)
        seconds += flops(node.op, in_types, list(node.types), node.attrs) / rate
        seconds += (outs + work) / _BYTES_PER_S
        for v in node.inputs:
            remaining[v] -= 1
            if remaining[v] == 0:
                live -= size.pop(v, 0)
        for r, t in zip(node.results, node.types):
            if r in remaining:
                size[r] = _bytes(t)
                live += size[r]
    outputs = sum(size.get(v, 0) for v in set(graph.outputs))
    return peak, outputs, seconds


def _computed_bytes(graph: Graph) -> int:
    """Bytes of every value the graph computes (what reuse could keep, at most)."""
    return sum(_bytes(t) for n in graph.nodes if n.op != "weight" for t in n.types)


def estimate_verification(original: Graph, optimized: Graph | None,
                          weights: Mapping[str, Any] | None = None, seeds: int = 1
                          ) -> VerifyCost:
    """What `verify_graphs(original, optimized, weights)` will need: the merged run
    (`shared_graph`, both graphs' outputs kept to its end, plus the values it keeps for reuse),
    then the chunked comparison. The time is that of running every node of the merged graph
    (the reuse of values computed twice is not predicted: an upper bound).

    `optimized` None: not known yet (planning before the search); the bound is then a graph
    that shares nothing with the original (every node computed twice)."""
    given = weights or {}
    compare_ws = 6 * COMPARE_CHUNK * 8
    if optimized is None:
        ref_peak, ref_out, ref_s = _run_cost(original, given)
        kept = min(EQUAL_VALUES_BYTES, 2 * _computed_bytes(original))
        peak = max(ref_peak + kept, ref_out + ref_peak + kept, 2 * ref_out + compare_ws)
        seconds = 2 * ref_s + 2 * ref_out / _BYTES_PER_S
    else:
        both = shared_graph([original, optimized])
        run_peak, outs, run_s = _run_cost(both, given)
        kept = min(EQUAL_VALUES_BYTES, _computed_bytes(both))
        peak = max(run_peak + kept, outs + compare_ws)
        seconds = run_s + outs / _BYTES_PER_S
    # weights read from a mapped file (mapped_data.py) stay resident while the graphs run:
    # their pages are memory the check takes, where weights held in memory already were
    peak += _mapped_bytes([original] + ([optimized] if optimized is not None else []), given)
    # the simulation was within -35 % .. +125 % of tracemalloc's peak on ir_examples/: a margin
    return VerifyCost(int(peak * MEMORY_MARGIN), seeds * seconds)


def _mapped_bytes(graphs: Sequence[Graph], given: Mapping[str, Any]) -> int:
    """Bytes of the mapped weights (mapped_data.is_mapped) the graphs read."""
    from .mapped_data import is_mapped

    names = {n.attr["name"] for g in graphs for n in g.weights()}
    return sum(given[k].nbytes for k in names if k in given and is_mapped(given[k]))


def memory_budget(given: int | None) -> tuple[int | None, str]:
    """(the bytes a check may plan to use, whose figure that is): `given` (--verify-memory),
    else half of the available memory (None when that cannot be read)."""
    if given is not None:
        return given, "--verify-memory"
    avail = available_memory()
    return (None if avail is None else avail // 2), "half of the available memory"


def available_memory() -> int | None:
    """Bytes this process can still allocate: the kernel's MemAvailable, bounded by a cgroup's
    memory limit when there is one (containers); None when neither can be read."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file) as f:
                text = f.read().strip()
            if text == "max":
                continue
            with open(usage_file) as f:
                left = max(0, int(text) - int(f.read().strip()))
        except (OSError, ValueError):
            continue
        if left < (1 << 60):        # cgroup v1 writes a huge number for "no limit"
            avail = left if avail is None else min(avail, left)
    return avail


def human_bytes(n: float) -> str:
    """1.5e9 → '1.4 GiB'."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
