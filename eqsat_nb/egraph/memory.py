"""Allocation of the e-graph's large arrays on ordinary (4 KiB) pages.

NumPy asks Linux for transparent huge pages on every array of 4 MiB or more. For arrays that are
mostly written once, right after allocation, as the e-graph's are when it grows, the first touch
of each huge page can stall on the kernel compacting memory to find 2 MiB of contiguous frames.
Measured on mm_chain 80 (the egglog side-by-side workload, 2.4 M nodes at its peak): whole
saturations, 12 alternated runs each, median 3.35 s with huge pages and 3.00 s without. `fresh` allocates as NumPy does and withdraws that request
before any page is touched. Elsewhere than Linux it is plain NumPy.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

import numpy as np

_MADV_NOHUGEPAGE = 15
_PAGE = 4096
_MIN_BYTES = 4 << 20          # NumPy's own threshold for asking for huge pages


def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()


def fresh(shape, dtype, fill: int = 0) -> np.ndarray:
    """A new array of `shape` filled with `fill`, on 4 KiB pages (see the module docstring).
    A zero fill leaves the pages untouched: the OS zeroes each on first use."""
    out = np.zeros(shape, dtype) if fill == 0 else np.empty(shape, dtype)
    if _MADVISE is not None and out.nbytes >= _MIN_BYTES:
        start = out.ctypes.data
        first = (start + _PAGE - 1) // _PAGE * _PAGE
        last = (start + out.nbytes) // _PAGE * _PAGE
        if last > first:
            _MADVISE(first, last - first, _MADV_NOHUGEPAGE)   # advice only: failure is harmless
    if fill != 0:
        out.fill(fill)
    return out
