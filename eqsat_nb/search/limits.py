"""Saturation limits, importable without loading the Numba kernels (the CLI builds its option
defaults from them), and the command's time budget (work_clock.py), importable from here too."""
from __future__ import annotations

from dataclasses import dataclass

from ..work_clock import (Budget, compile_seconds, compiling_for, track_compilation,  # noqa: F401
                          work_clock)


@dataclass(frozen=True)
class Limits:
    """Saturation limits (search/saturate.py, search/schedule.py). Defaults: TENSAT's 50 000 nodes
    and 15 iterations; multi-pattern rules in 2 iterations each (TENSAT's published e-graphs were
    built with k_multi 2, its paper's tables mostly use 1: the first 2, or later ones for a rule
    the scheduler banned in between); egg's BackoffScheduler (a rule
    with more than `match_limit` matches in an iteration is banned for `ban_length` iterations,
    both doubled at each of its bans; None: every rule in every iteration, as TENSAT); a rule
    family that was banned before is banned again while its matches could take more than
    `budget_share` of the nodes left, and that ban is not cut short when nothing else changes
    (None: no such ban; multi-pattern merges are exempt); the node limit is enforced within a
    rule's application."""

    node_limit: int = 50_000
    iter_limit: int = 15
    time_limit: float = 3600.0
    k_multi: int = 2
    multi_match_limit: int = 1_000_000   # pairs per multi rule and iteration
    filter_cycles: bool = True
    incremental: bool = True     # search only for matches that involve something new
    # True: a rule's matches are applied in chunks that fit under the limit, so the e-graph never
    # passes it by more than one match's nodes. False (TENSAT): the limit is checked after each
    # rule, and one rule can add tens of thousands of nodes past it (ViT, TT: 135 000 of 50 000)
    chunked_node_limit: bool = True
    match_limit: int | None = 1000
    ban_length: int = 5
    # measured (a100, the 13 models): 0.35-0.6 keep BERT's matmul reassociations (35.3 %) and
    # ban ViT-Base's ewadd reassociations (22 000 nodes the ILP cannot close in 60 s)
    budget_share: float | None = 0.5
