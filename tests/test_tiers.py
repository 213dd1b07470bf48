"""The suite's tiers (tests/conftest.py), run on a small planted suite with pytest's own
`pytester`: the default run leaves the slow tier out, `--slow` adds it, `-m` replaces the
selection, and a slow test named by its node id runs; the marker is registered."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

CONFTEST = (Path(__file__).resolve().parent / "conftest.py").read_text()
PLANTED = """
import pytest

def test_quick():
    pass

@pytest.mark.slow
def test_slow():
    pass

@pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_param(x):
    pass
"""


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's `pytester`, its runs without the installed plugins (hypothesis, benchmark):
    loading them was most of each run's time."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    return pytester


def _outcomes(pytester: pytest.Pytester, *args: str) -> dict[str, int]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-markers", *args)
    out = result.parseoutcomes()
    return {k: out[k] for k in ("passed", "deselected", "failed", "errors") if k in out}


@pytest.mark.parametrize("args, outcomes", [
    ((), {"passed": 2, "deselected": 2}),
    (("--slow",), {"passed": 4}),
    (("-m", "slow"), {"passed": 2, "deselected": 2}),
    (("-m", "not slow", "--slow"), {"passed": 2, "deselected": 2}),
    (("test_planted.py::test_slow",), {"passed": 1}),
    (("test_planted.py::test_param",), {"passed": 2}),
    (("test_planted.py::test_param[2]", "test_planted.py::test_quick"), {"passed": 2}),
])
def test_tier_selection(pytester, args, outcomes):
    assert _outcomes(pytester, *args) == outcomes


def test_the_default_run_says_how_to_add_the_slow_tier(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_planted=PLANTED)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*`--slow` adds the slow tier*"])
