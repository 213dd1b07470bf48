"""optimize's extraction step (issue 18): ocf+switch is the ILP's warm start and its fallback, and
an ILP answer is taken only when its checked DAG cost is no worse, so nothing ocf+switch found is
thrown away when the ILP is skipped, stops early, is killed or fails."""
from __future__ import annotations

import numpy as np
import pytest

from eqsat_nb.extract import ilp as ilp_module
from eqsat_nb.extract.dag import dag_cost, is_valid
from eqsat_nb.extract.ilp import IlpResult
from eqsat_nb.extract.ocf import extract_ocf
from eqsat_nb.extract.problem import from_arrays
from eqsat_nb.extract.run import extract
from eqsat_nb.optimize import Options, _extract
from eqsat_nb.search.limits import Budget, work_clock


def merge_problem():
    """x; A = a(x) | proj0(T); B = b(x) | proj1(T); T = split(M); M = m(x) 1.5; R = f(A, B):
    ocf takes a and b (DAG cost 3), the joint switch the shared merge (2.5), which is optimal."""
    #                       x  a  p0 b  p1 split m    f
    return from_arrays(6, [0, 1, 1, 2, 2, 3, 4, 5], [0, 1, 0, 1, 0, 0, 1.5, 1],
                       [[], [0], [3], [0], [3], [4], [0], [1, 2]], [5])


def test_ilp_is_warm_started_from_ocf_switch_and_takes_the_optimum(monkeypatch):
    p = merge_problem()
    assert dag_cost(p, extract_ocf(p)) == 3.0
    seen = {}
    real = ilp_module.extract_ilp

    def spy(problem, **kw):
        seen["warm"] = dag_cost(problem, kw["warm_start"])
        return real(problem, **kw)

    monkeypatch.setattr(ilp_module, "extract_ilp", spy)
    choice, how = _extract(p, Options(extract="ilp", ilp_time_limit=20))
    assert seen["warm"] == 2.5                  # ocf+switch, not ocf
    assert is_valid(p, choice) and dag_cost(p, choice) == 2.5 and how == "ilp (optimal)"


def _fake_ilp(monkeypatch, make):
    def fake(problem, **kw):
        return make(problem, np.asarray(kw["warm_start"]))
    monkeypatch.setattr(ilp_module, "extract_ilp", fake)


@pytest.mark.parametrize("status", ["killed", "error: ILP worker exited 1: boom",
                                    "inconsistent", "time_limit"])
def test_a_failed_or_stopped_ilp_keeps_ocf_switch(monkeypatch, status):
    p = merge_problem()
    _fake_ilp(monkeypatch, lambda q, warm: IlpResult(warm, dag_cost(q, warm), 0.0, 1.0, False,
                                                      1.0, 0, status))
    choice, how = _extract(p, Options(extract="ilp"))
    assert dag_cost(p, choice) == 2.5 and how.startswith(("ocf+switch (ilp", "ilp ("))
    if status == "killed":
        assert how == "ocf+switch (ilp: stopped at its time limit)"


def test_a_worse_ilp_answer_is_never_taken(monkeypatch):
    """Even if the ILP handed back something worse than its warm start (it must not), optimize
    keeps ocf+switch's selection."""
    p = merge_problem()
    ocf = extract_ocf(p)
    _fake_ilp(monkeypatch, lambda q, warm: IlpResult(ocf, dag_cost(q, ocf), 0.0, 0.0, True, 1.0,
                                                      0, "optimal"))
    choice, how = _extract(p, Options(extract="ilp"))
    assert dag_cost(p, choice) == 2.5 and how == "ocf+switch (ilp: optimal)"


def test_a_killed_ilp_that_improved_is_taken(monkeypatch):
    """A killed worker's last checked report, better than the warm start, is the answer (the
    switch pass is disabled here so that the warm start is ocf's 3.0)."""
    from eqsat_nb.extract import switch

    p = merge_problem()
    best = extract(p, "ocf+switch").choice
    assert dag_cost(p, best) == 2.5
    monkeypatch.setattr(switch, "joint_switch", lambda problem, choice: choice)
    _fake_ilp(monkeypatch, lambda q, warm: IlpResult(best, 2.5, 1.25, 0.5, False, 1.0, 0,
                                                      "killed"))
    choice, how = _extract(p, Options(extract="ilp"))
    assert list(choice) == list(best) and how == "ilp (killed, gap 50.0 %)"


def test_the_ilp_time_limit_holds_as_wall_time(monkeypatch):
    """optimize hands the ILP a deadline: --ilp-time-limit plus the worker's start-up
    (ILP_OVERHEAD_SECONDS), and never past what a --time-limit budget leaves; extract_ilp kills
    its worker there (HiGHS overruns its own limit by seconds on large models)."""
    import time

    from eqsat_nb.optimize import ILP_OVERHEAD_SECONDS

    p = merge_problem()
    seen = {}

    def fake(problem, **kw):
        seen.update(kw)
        warm = np.asarray(kw["warm_start"])
        return IlpResult(warm, dag_cost(problem, warm), 0.0, 1.0, False, 1.0, 0, "time_limit")

    monkeypatch.setattr(ilp_module, "extract_ilp", fake)
    t = time.perf_counter()
    _extract(p, Options(extract="ilp", ilp_time_limit=7.0))
    assert seen["time_limit"] == 7.0
    assert t + 7.0 + ILP_OVERHEAD_SECONDS <= seen["deadline"] <= \
        time.perf_counter() + 7.0 + ILP_OVERHEAD_SECONDS
    budget = Budget(5.0, start=work_clock())
    t = time.perf_counter()
    _extract(p, Options(extract="ilp", ilp_time_limit=60.0, budget=budget))
    assert seen["time_limit"] <= 5.0 - ILP_OVERHEAD_SECONDS
    assert seen["deadline"] <= time.perf_counter() + 5.0


def test_no_time_left_gives_ocf_switch_without_the_ilp(monkeypatch):
    p = merge_problem()

    def never(*a, **k):
        raise AssertionError("the ILP ran without time")

    monkeypatch.setattr(ilp_module, "extract_ilp", never)
    spent = Budget(0.5, start=work_clock() - 1.0)
    choice, how = _extract(p, Options(extract="ilp", budget=spent))
    assert dag_cost(p, choice) == 2.5
    assert how == "ocf+switch (ilp skipped: the time limit was reached)"


def test_extract_method_ilp_is_never_worse_than_ocf_switch():
    p = merge_problem()
    for method in ("ocf+switch", "ilp"):
        assert dag_cost(p, extract(p, method, time_limit=20).choice) == 2.5
