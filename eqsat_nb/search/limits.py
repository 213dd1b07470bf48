"""Saturation limits, importable without loading the Numba kernels (the CLI builds its option
defaults from them)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """TENSAT's defaults: 50 000 nodes, 15 iterations, multi-pattern rules in iteration 1 only."""

    node_limit: int = 50_000
    iter_limit: int = 15
    time_limit: float = 3600.0
    k_multi: int = 1
    multi_match_limit: int = 1_000_000   # pairs per multi rule and iteration
    filter_cycles: bool = True
    incremental: bool = True     # search only for matches that involve something new
    # False (TENSAT): the node limit is checked after each rule. True (MCTS, one rule per step):
    # a rule's matches are applied in chunks that fit under the limit, so a single rule cannot
    # add tens of thousands of nodes past it
    chunked_node_limit: bool = False
