"""Extraction: choosing one node per e-class (greedy, constituent-cost greedy, ILP)."""
