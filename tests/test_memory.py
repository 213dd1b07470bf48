"""egraph/memory.fresh: same contents as NumPy's constructors, huge-page advice or not."""
import numpy as np
import pytest

from eqsat_nb.egraph import memory
from eqsat_nb.egraph.memory import fresh


@pytest.mark.parametrize("shape, dtype, fill", [
    ((3, 5), np.int32, 0), (7, np.int64, -1), ((2, 3 << 20), np.int32, -1),   # 24 MiB: advised
    ((9, 1 << 20), np.int32, 0), (0, np.int64, -1)])
def test_fresh_matches_numpy(shape, dtype, fill):
    got = fresh(shape, dtype, fill)
    assert got.shape == np.empty(shape).shape and got.dtype == dtype and got.flags.c_contiguous
    assert np.array_equal(got, np.full(shape, fill, dtype))


def test_fresh_without_madvise(monkeypatch):
    """Where madvise is unavailable (not Linux) it is NumPy's allocation as is."""
    monkeypatch.setattr(memory, "_MADVISE", None)
    assert np.array_equal(fresh((2, 3 << 20), np.int32, -1), np.full((2, 3 << 20), -1, np.int32))
