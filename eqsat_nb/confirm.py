"""The cost model's pick confirmed end to end on the GPU it is for (`run --device cuda`).

A sum of per-operator times is not a graph's time (X-RLflow): kernels overlap, share caches and
pay launch gaps the per-operator measurements do not see. Where the machine running `run` has
the GPU, the few distinct graphs the extractors found (the ILP's answer, its ocf+switch warm
start, ocf) and the original run end to end in PyTorch on it (`cost.torch_graph`: weights
folded, each graph captured as a CUDA graph, the graphs timed alternately in rounds, medians),
each checked first against the original on the device; the fastest measured one is written,
the original included. Without PyTorch or a CUDA GPU, `--device cuda` is refused with what is
missing.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .errors import TirError
from .ir.graph import Graph

MISMATCH = 1e-2          # relative error on the device above which a candidate is not timed
#: the device's own rounding (TF32 off, fp32) stays far below this; a wrong graph far above


@dataclass
class Confirmation:
    """What ran end to end and which graph won."""

    device: str
    chosen: str                                   # a label of `medians`
    medians: dict[str, float]                     # label -> microseconds
    rounds: int
    dropped: dict[str, str] = field(default_factory=dict)   # label -> why it was not timed

    def describe(self) -> str:
        runs = ", ".join(f"{k} {v:.1f} us" for k, v in self.medians.items())
        text = (f"measured on {self.device} end to end (CUDA graphs, {self.rounds} alternating "
                f"rounds, medians): {runs}; wrote {self.chosen}")
        for k, why in self.dropped.items():
            text += f"; {k} not timed: {why}"
        return text


def is_device(name: str | None) -> bool:
    """Whether `--device name` asks for measurement on this machine's GPU."""
    return bool(name) and (name == "cuda" or name.startswith("cuda:"))


def require_device(name: str) -> None:
    """TirError naming what is missing when `name` cannot be measured on here."""
    from .cost.torch_backend import unavailable
    why = unavailable(name)
    if why is not None:
        raise TirError(f"--device {name} measures on this machine's GPU with PyTorch, but {why}; "
                       f"to price for a GPU without one, pass --device h100, h200 or a100")


def confirm(original: Graph, candidates: Sequence[tuple[str, Graph]],
            weights: Mapping[str, Any] | None, device: str, budget_s: float = 10.0,
            method: str = "graph") -> tuple[Graph, Confirmation]:
    """Time `original` and the distinct `candidates` (label, graph) end to end on `device`;
    return the fastest by median and what was measured. Candidates that differ from the
    original on the device by more than MISMATCH are not timed (said in `dropped`)."""
    from .cost.torch_graph import Leaves, TorchGraph, relative_error, time_alternately

    distinct: list[tuple[str, Graph]] = [("original", original)]
    for label, g in candidates:
        if all(g != other for _, other in distinct):
            distinct.append((label, g))
    leaves = Leaves(device, weights, seed=0)
    graphs = {label: TorchGraph(g, leaves) for label, g in distinct}
    ref = graphs["original"].outputs()
    dropped: dict[str, str] = {}
    for label in list(graphs)[1:]:
        err = relative_error(ref, graphs[label].outputs())
        if not err <= MISMATCH:
            dropped[label] = f"differs from the original on the device (relative error {err:.1e})"
            graphs.pop(label).release()
    labels = list(graphs)
    try:
        samples = time_alternately([graphs[k] for k in labels], method, budget_s=budget_s)
    finally:
        for g in graphs.values():
            g.release()
    medians = {k: statistics.median(xs) for k, xs in zip(labels, samples)}
    chosen = min(labels, key=lambda k: (medians[k], k != "original"))
    by_label = dict(distinct)
    return by_label[chosen], Confirmation(device, chosen, medians, len(samples[0]), dropped)
