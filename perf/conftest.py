"""Benchmarks are pytest-benchmark suites; run with `pytest perf`."""
