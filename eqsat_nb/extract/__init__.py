"""Extraction: choosing one node per e-class (greedy, constituent-cost greedy, ILP)."""

METHODS: tuple[str, ...] = ("greedy", "ocf", "ocf+switch", "ilp")
