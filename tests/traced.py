"""Peak Python-heap memory of a call, for the tests of the verification memory estimate."""
from __future__ import annotations

import tracemalloc
from typing import Any, Callable


def traced_peak(fn: Callable[[], Any]) -> int:
    """Peak bytes that `fn()` allocated as tracemalloc sees them (NumPy arrays included)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
