"""Checking a rewrite carried over to many copies: every copy, one at a time, with its weights.

Each rewritten piece (every copy of every layer class whose representative changed, and the rest
of the graph if it changed) is checked as a function of its own: the copy before and after, run
in the reference interpreter on the same random activations at its inputs' shapes, with the
real weights of that copy (`check_outputs.verify_graphs`, under the rule of the piece's
precision). One copy at a time, so the memory needed is one layer's, whatever the model's size
(a mapped model's pages are given back after each copy, mapped_data.release):
this is what checks a model whose whole-graph check does not fit `--verify-memory`, and it
checks the renaming too (a copy that read another copy's weights would differ).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..check_outputs import Verification, estimate_verification, verify_graphs
from ..mapped_data import release
from .repeat import LayerRun


@dataclass
class LayerCheck:
    """What the per-copy checks found."""

    pieces: list[tuple[str, int, int]] = field(default_factory=list)   # (kind, copies, checked)
    worst: Verification | None = None     # the worst copy's check (largest excess)
    failed: str = ""                      # the first copy that differed, in words
    skipped: str = ""                     # why some were not checked (memory)

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def copies_checked(self) -> int:
        return sum(n for _, _, n in self.pieces)

    def summary(self) -> str:
        """e.g. 'per layer class: 1 class x 12 copies checked, 1 part of the rest checked;
        worst 1 output, ... max |err| = 2.1e-07 of max |ref| (tolerance ...)'."""
        parts = []
        classes = [n for kind, _, n in self.pieces if kind == "class"]
        if len(classes) == 1:
            parts.append(f"1 class x {classes[0]} cop{'y' if classes[0] == 1 else 'ies'} checked")
        elif classes:
            parts.append(f"{len(classes)} classes x {' + '.join(map(str, classes))} copies "
                         f"checked")
        rest = sum(n for kind, _, n in self.pieces if kind == "rest")
        if rest:
            parts.append(f"{rest} part{'s' if rest != 1 else ''} of the rest checked")
        if not parts:
            return "per layer class: not checked: " + (self.skipped or "nothing changed")
        text = "per layer class: " + ", ".join(parts)
        if self.worst is not None:
            text += f"; worst {self.worst.summary()}"
        if self.failed:
            text += f"; MISMATCH in {self.failed}"
        if self.skipped:
            text += f"; {self.skipped}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {"pieces": [{"kind": n, "copies": c, "checked": k} for n, c, k in self.pieces],
                "ok": self.ok, "copies_checked": self.copies_checked,
                "failed": self.failed or None, "skipped": self.skipped or None,
                "worst": None if self.worst is None else self.worst.summary(),
                "summary": self.summary()}


def check_copies(run: LayerRun, weights: Mapping[str, Any] | None, seeds: Sequence[int] = (0,),
                 deadline: float | None = None, memory: int | None = None,
                 seconds: float | None = None) -> LayerCheck:
    """Check every rewritten copy against its original (module doc); stops at the first
    mismatch. `memory`: bytes one check may plan to use (a piece over it is not checked);
    `seconds`: the time the checks may plan to take (over it, none is run); `skipped` says
    what was not checked. `deadline` as for `verify_graphs`."""
    out = LayerCheck()
    run.check = out
    changed = [r for r in run.runs if r.changed]
    costs = {id(r): estimate_verification(r.originals[0], r.optimized[0], weights, len(seeds))
             for r in changed}
    total = sum(costs[id(r)].seconds * len(r.copies) for r in changed)
    if seconds is not None and total > seconds:
        out.skipped = (f"the copies were not checked one by one: that would take about "
                       f"{total:.0f} s (estimated), more than the time limit leaves")
        return out
    for r in changed:
        if memory is not None and costs[id(r)].peak_bytes > memory:
            out.skipped = (f"{r.name} not checked copy by copy: one copy would need "
                           f"{costs[id(r)].peak_bytes >> 20} MiB, over the memory "
                           f"verification may use")
            continue
        checked = 0
        for k, (before, after) in enumerate(zip(r.originals, r.optimized)):
            v = verify_graphs(before, after, weights, seeds=seeds, deadline=deadline)
            release()       # the copy's mapped weights leave memory before the next is read
            checked += 1
            if out.worst is None or _excess(v) > _excess(out.worst):
                out.worst = v
            if not v.ok:
                out.failed = f"{r.name}, copy {k + 1} of {len(r.copies)}: {v.summary()}"
                break
        out.pieces.append((r.kind, len(r.copies), checked))
        if out.failed:
            break
    return out


def _excess(v: Verification) -> float:
    return max((o.worst_excess for o in v.outputs), default=0.0)
