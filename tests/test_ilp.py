"""ILP extraction (DESIGN §6): exact against brute force, valid, lazy cycle cuts, warm start,
time limit, and the killable subprocess path."""
from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.extract import dag
from eqsat_nb.extract import problem as pb
from eqsat_nb.extract.ilp import IlpResult, extract_ilp
from fake_highs import FakeHighs

REPO = Path(__file__).resolve().parents[1]


def random_nodes(rng: np.random.Generator, C: int) -> tuple[list, list, list]:
    """1-3 candidates per class, cost 0-5, 0-3 children in any classes: (class, cost, kids)."""
    node_class, cost, kids = [], [], []
    for c in range(C):
        for _ in range(int(rng.integers(1, 4))):
            node_class.append(c)
            cost.append(float(rng.integers(0, 6)))
            k = int(rng.choice([0, 1, 1, 2, 2, 3]))
            kids.append([int(x) for x in rng.integers(0, C, size=k)])
    return node_class, cost, kids


def random_problem(rng: np.random.Generator) -> pb.ExtractionProblem:
    C = int(rng.integers(2, 6))
    node_class, cost, kids = random_nodes(rng, C)
    # a guaranteed cycle: a node of class 0 uses class 1, a node of class 1 uses class 0
    node_class += [0, 1]
    cost += [0.0, 0.0]
    kids += [[1], [0]]
    return pb.from_arrays(C, node_class, cost, kids, [0])


def brute_force(p: pb.ExtractionProblem) -> float:
    best = float("inf")
    options = [list(p.candidates(c)) for c in range(p.n_classes)]
    for combo in itertools.product(*options):
        choice = np.array(combo, np.int64)
        if dag.is_valid(p, choice):
            best = min(best, dag.dag_cost(p, choice))
    return best


def check(p: pb.ExtractionProblem, r: IlpResult) -> None:
    assert r.choice.shape == (p.n_classes,)
    if np.isfinite(r.cost):
        assert dag.is_valid(p, r.choice)
        assert r.cost == pytest.approx(dag.dag_cost(p, r.choice))
        assert r.bound <= r.cost + 1e-6


def test_random_against_brute_force():
    rng = np.random.default_rng(7)
    n_cuts = 0
    for _ in range(40):
        p = random_problem(rng)
        r = extract_ilp(p, time_limit=10, in_process=True)
        check(p, r)
        opt = brute_force(p)
        if np.isfinite(opt):
            assert r.optimal and r.status == "optimal"
            assert r.cost == pytest.approx(opt)
            assert r.bound == pytest.approx(opt)
            assert r.gap == 0.0
        else:
            assert r.status == "infeasible" and r.cost == float("inf")
        n_cuts += r.cuts
    assert n_cuts > 0          # the generator's cycles do get cut somewhere


def cyclic_problem() -> pb.ExtractionProblem:
    # class 0 (root): n0 = f(class 1) cost 1, n1 = big leaf cost 100
    # class 1:        n2 = g(class 0) cost 1 (cheap but cyclic), n3 = h(class 2) cost 3
    # class 2:        n4 = leaf cost 4, n5 = k(class 1) cost 0 (cyclic, free)
    return pb.from_arrays(3, [0, 0, 1, 1, 2, 2], [1, 100, 1, 3, 4, 0],
                          [[1], [], [0], [2], [], [1]], [0])


def test_cycle_forces_cut():
    p = cyclic_problem()
    r = extract_ilp(p, in_process=True)
    check(p, r)
    assert r.cuts > 0
    assert r.optimal and r.cost == 8.0
    assert list(r.choice) == [0, 3, 4]
    assert brute_force(p) == 8.0


def test_order_formulation_agrees():
    rng = np.random.default_rng(3)
    for _ in range(10):
        p = random_problem(rng)
        a = extract_ilp(p, in_process=True)
        b = extract_ilp(p, in_process=True, acyclic="order")
        check(p, b)
        assert b.stats.get("rounds", 0) <= 1      # ordering rows: no lazy cuts, one solve
        assert a.cost == b.cost


def test_shared_subexpression_counted_once():
    # root = add(x, x) where x = relu(leaf) cost 5, or x = expensive leaf cost 6: DAG cost 1+5
    p = pb.from_arrays(3, [0, 1, 1, 2], [1, 5, 6, 0], [[1, 1], [2], [], []], [0])
    r = extract_ilp(p, in_process=True)
    assert r.cost == 6.0 and list(r.choice) == [0, 1, 3]


def test_dominated_and_unproductive_nodes():
    # class 1: n1 dominated by n2 (same cost, superset children); n3 uses a class with no
    # acyclic derivation (class 3 only derives from itself)
    p = pb.from_arrays(4, [0, 1, 1, 1, 2, 3], [1, 2, 2, 0, 1, 0],
                       [[1], [2, 2], [], [3], [], [3]], [0])
    r = extract_ilp(p, in_process=True)
    check(p, r)
    assert r.cost == 3.0 and r.choice[1] == 2 and r.choice[3] == -1


def test_dominated_nodes_map_to_a_kept_dominator_in_one_step():
    """Class 1: n1 (cost 1, child class 2) dominates n2 and n3 (costs 2 and 3, child classes 2
    and 3); both map straight to n1, so a selection using n3 becomes one using n1."""
    from eqsat_nb.extract.ilp import model as ilp, selection

    p = pb.from_arrays(4, [0, 1, 1, 1, 2, 3], [1, 1, 2, 3, 1, 1],
                       [[1], [2], [2, 3], [2, 3], [], []], [0])
    pre = ilp._presolve(selection._arrays(p))
    rep = pre["rep"]
    assert list(rep[1:4]) == [1, 1, 1] and (rep[rep] == rep).all()
    assert list(ilp._kept(pre, np.array([0, 3, 4, 5]))) == [0, 1, 4, 5]
    assert list(ilp._kept(pre, np.array([0, 2, 4, -1]))) == [0, 1, 4, -1]


def test_infeasible_root():
    p = pb.from_arrays(1, [0], [1.0], [[0]], [0])
    r = extract_ilp(p, in_process=True)
    assert r.status == "infeasible" and r.cost == float("inf") and not r.optimal


def _model_problem(name: str):
    from eqsat_nb import load
    from eqsat_nb.egraph import graph_to_egraph, original_choice

    eg = graph_to_egraph(load(REPO / "ir_examples" / f"{name}.tir"))
    costs = np.array([0.0 if eg.op_name(n) in ("lit", "input", "weight") else 1.0
                      for n in range(eg.num_nodes)])
    p = pb.from_egraph(eg, costs)
    oc = original_choice(eg)
    where = {int(n): i for i, n in enumerate(p.node_ids)}
    choice = np.array([where[int(oc[p.class_ids[c]])] for c in range(p.n_classes)], np.int64)
    return p, choice


@pytest.mark.parametrize("name", ["nasrnn", "tiny_branches"])
def test_initial_egraph_cost(name):
    p, orig = _model_problem(name)
    r = extract_ilp(p, in_process=True)
    check(p, r)
    assert r.optimal
    assert r.cost == dag.dag_cost(p, orig)


def test_warm_start_and_time_limit():
    p = cyclic_problem()
    warm = np.array([1, -1, -1], np.int64)          # the big leaf: valid, cost 100
    assert dag.is_valid(p, warm)
    r = extract_ilp(p, warm_start=warm, in_process=True)
    check(p, r)
    assert r.optimal and r.cost == 8.0
    # no time at all: the best known valid selection comes back, with a gap
    r = extract_ilp(p, time_limit=0.0, warm_start=warm, in_process=True)
    check(p, r)
    assert not r.optimal and r.status == "time_limit"
    assert np.isfinite(r.cost) and r.cost <= 100.0 and r.gap > 0
    # an invalid warm start is ignored
    r = extract_ilp(p, warm_start=np.array([0, 2, -1]), in_process=True)
    assert r.optimal and r.cost == 8.0
    # deterministic for a seed
    q, _ = _model_problem("nasrnn")
    a = extract_ilp(q, seed=5, in_process=True)
    b = extract_ilp(q, seed=5, in_process=True)
    assert np.array_equal(a.choice, b.choice)


def test_subprocess_path():
    p = cyclic_problem()
    r = extract_ilp(p, time_limit=20)
    check(p, r)
    assert r.status == "optimal" and r.cost == 8.0 and r.cuts > 0


def test_subprocess_killed_returns_warm_start():
    p = cyclic_problem()
    warm = np.array([1, -1, -1], np.int64)
    # a deadline shorter than the interpreter start-up: the worker is killed
    r = extract_ilp(p, time_limit=0.0, warm_start=warm, kill_margin=0.001)
    assert r.status == "killed" and not r.optimal
    assert list(r.choice) == [1, -1, -1] and r.cost == 100.0


# ---------------------------------------------------------------------------------------------
# Trust: what HiGHS returns is checked against what it reports (issue 18)

def _set_cover(highspy):
    """8 elements on a ring, set j = {j, j+1 mod 8} at cost 1 (optimum 4: every other set), and a
    ninth binary z of cost 1 that is in no row. Returns (model, objective vector)."""
    n = 9
    obj = np.ones(n)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.addVars(n, np.zeros(n), np.ones(n))
    h.changeColsCost(n, np.arange(n, dtype=np.int32), obj)
    h.changeColsIntegrality(n, np.arange(n, dtype=np.int32), np.ones(n, np.uint8))
    for e in range(8):
        cols = np.array([e, (e - 1) % 8], np.int32)
        h.addRow(1.0, highspy.kHighsInf, 2, cols, np.ones(2))
    return h, obj


SET_COVER_START = np.array([1, 0, 1, 0, 1, 0, 1, 0, 1], np.float64)   # the optimum, plus z = 1


def _covers(colv: np.ndarray) -> bool:
    return all(colv[e] + colv[(e - 1) % 8] > 0.5 for e in range(8))


def test_highs_mip_start_optimal_after_presolve():
    """The minimal reproduction: started from the optimum plus z, presolve drops z and the start
    is optimal in the reduced space. highspy 1.16 then returns the start itself (cost 5) while its
    objective and dual bound say 4; earlier releases return a cost-4 solution. `run_checked`
    notices the mismatch and re-solves without the start; either way the answer is checked."""
    import time

    import highspy
    from eqsat_nb.extract.ilp import run_checked

    h, obj = _set_cover(highspy)                      # raw HiGHS, as the ILP used to read it
    sol = highspy.HighsSolution()
    sol.col_value = SET_COVER_START.tolist()
    sol.value_valid = True
    h.setSolution(sol)
    h.run()
    info = h.getInfo()
    raw = np.asarray(h.getSolution().col_value)
    assert h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    assert info.objective_function_value == pytest.approx(4.0)
    assert info.mip_dual_bound == pytest.approx(4.0)
    raw_ok = float(obj @ raw) == pytest.approx(4.0)   # False on highspy 1.16: raw == the start

    h, obj = _set_cover(highspy)                      # the start set with setSolution
    kind, ms, colv, bound, repeats = run_checked(h, obj, SET_COVER_START,
                                                 time.perf_counter() + 30, start_callback=False)
    assert kind == "ok" and ms == highspy.HighsModelStatus.kOptimal
    assert float(obj @ colv) == pytest.approx(4.0) and _covers(colv) and colv[8] < 0.5
    assert bound == pytest.approx(4.0)
    assert repeats == (0 if raw_ok else 1)
    h, obj = _set_cover(highspy)                      # the default: a user solution, where it can
    kind, ms, colv, bound, repeats = run_checked(h, obj, SET_COVER_START,
                                                 time.perf_counter() + 30)
    assert kind == "ok" and float(obj @ colv) == pytest.approx(4.0) and _covers(colv)
    assert bound == pytest.approx(4.0)
    has_user_solution = hasattr(getattr(highspy, "cb", None), "HighsCallbackInput") and \
        hasattr(highspy.cb.HighsCallbackInput, "setSolution")
    assert repeats == (0 if raw_ok or has_user_solution else 1)


def _joint_switch_problem() -> pb.ExtractionProblem:
    """x; A = a(x) | proj0(T); B = b(x) | proj1(T); T = split(M); M = m(x) 1.5; R = f(A, B): the
    tree-cost greedy takes a and b (DAG cost 3), the optimum shares the merge (2.5)."""
    #                       x  a  p0 b  p1 split m    f
    return pb.from_arrays(6, [0, 1, 1, 2, 2, 3, 4, 5], [0, 1, 0, 1, 0, 0, 1.5, 1],
                          [[], [0], [3], [0], [3], [4], [0], [1, 2]], [5])


def _echoing_highs(highspy, always: bool):
    """highspy.Highs whose getSolution() hands back the MIP start set before run(), as highspy
    1.16 does when the start is optimal after presolve; with `always` it keeps handing back the
    first start ever set, even after a run without one (a solver that cannot be trusted). It
    offers no improving-solution callback, so what getSolution returns is all the ILP sees."""
    class Echo(highspy.Highs):
        def setCallback(self, *args):
            raise AttributeError("no callbacks")

        def setSolution(self, *args):
            self._start = list(args[-1].col_value)
            if always and getattr(self, "_echo", None) is None:
                self._echo = self._start
            return super().setSolution(*args)

        def run(self):
            if not always:
                self._echo, self._start = getattr(self, "_start", None), None
            return super().run()

        def getSolution(self):
            s = super().getSolution()
            if getattr(self, "_echo", None) is not None:
                s.col_value = list(self._echo)
            return s
    return Echo


def test_ilp_rejects_a_returned_start_that_is_not_optimal(monkeypatch):
    """Through extract_ilp: the solver returns the (suboptimal, cost 3) warm start while reporting
    objective 2.5. The ILP must notice, re-solve without the start and return the 2.5 selection
    (before the fix: cost 3, "optimal", bound 3)."""
    import highspy
    from eqsat_nb.extract.greedy import extract_greedy

    p = _joint_switch_problem()
    warm = extract_greedy(p)
    assert dag.dag_cost(p, warm) == 3.0
    monkeypatch.setattr(highspy, "Highs", _echoing_highs(highspy, always=False))
    r = extract_ilp(p, warm_start=warm, in_process=True)
    check(p, r)
    assert r.resolves >= 1
    assert r.optimal and r.status == "optimal" and r.cost == 2.5
    assert r.bound == pytest.approx(2.5)


def test_ilp_never_trusts_a_solver_that_contradicts_itself(monkeypatch):
    """If even the solve without a start returns a solution that is not the one the objective
    describes, the result is the best verified selection (never worse than the warm start), not
    optimal, and the bound is HiGHS's dual bound (2.5), not a primal cost."""
    import highspy
    from eqsat_nb.extract.greedy import extract_greedy

    p = _joint_switch_problem()
    warm = extract_greedy(p)
    monkeypatch.setattr(highspy, "Highs", _echoing_highs(highspy, always=True))
    r = extract_ilp(p, warm_start=warm, in_process=True)
    check(p, r)
    assert r.status == "inconsistent" and not r.optimal
    assert r.cost == 3.0 and np.array_equal(r.choice, np.where(r.choice >= 0, warm, -1))
    assert r.bound == pytest.approx(2.5) and r.gap == pytest.approx(0.5 / 3.0)


def test_optimal_means_bound_meets_cost():
    """On every random problem: "optimal" exactly when the reported bound meets the cost, and the
    result is never worse than the warm start it was given."""
    rng = np.random.default_rng(11)
    for _ in range(25):
        p = random_problem(rng)
        options = [list(p.candidates(c)) for c in range(p.n_classes)]
        valid = [np.array(c, np.int64) for c in itertools.product(*options)
                 if dag.is_valid(p, np.array(c, np.int64))]
        if not valid:
            continue
        warm = max(valid, key=lambda ch: dag.dag_cost(p, ch))      # the worst valid selection
        r = extract_ilp(p, warm_start=warm, in_process=True)
        check(p, r)
        assert r.cost <= dag.dag_cost(p, warm)
        assert r.optimal == (r.cost - r.bound <= 1e-6 * max(1.0, r.cost))
        assert r.optimal and r.cost == pytest.approx(brute_force(p))


# ---------------------------------------------------------------------------------------------
# Issue 18: cycles of any length, restricted primal phases, the worker's progress reports

def random_cyclic_problem(rng: np.random.Generator) -> pb.ExtractionProblem:
    """4-7 classes, 1-3 candidates each whose children are any classes (cycles of every length,
    through zero-cost nodes too), a leaf in the last class so a derivation usually exists."""
    C = int(rng.integers(4, 8))
    node_class, cost, kids = random_nodes(rng, C)
    node_class.append(C - 1)
    cost.append(7.0)
    kids.append([])
    return pb.from_arrays(C, node_class, cost, kids, [0])


def _highspy_version() -> tuple[int, ...]:
    from importlib.metadata import version
    return tuple(int(p) for p in version("highspy").split(".")[:2] if p.isdigit())


@pytest.mark.parametrize("options", [{}, {"acyclic": "order"}, {"restrict": (1,)},
                                     {"restrict": ()}], ids=["cuts", "order", "restrict1",
                                                             "no-restrict"])
def test_cyclic_against_brute_force(options):
    """Longer cycles than the 2-cycles cut up front: the lazy cut-set rows (or the ordering
    rows on cyclic components) must still give the brute-force optimum, and a restricted
    phase that keeps one candidate per class must not change it."""
    rng = np.random.default_rng(23)
    longer = 0
    for _ in range(30):
        p = random_cyclic_problem(rng)
        r = extract_ilp(p, time_limit=10, in_process=True, **options)
        check(p, r)
        opt = brute_force(p)
        if np.isfinite(opt):
            assert r.optimal and r.cost == pytest.approx(opt) and r.gap == 0.0
        else:
            assert r.status == "infeasible"
        longer += r.stats.get("rounds", 0) > 1
    if not options and longer == 0 and _highspy_version() < (1, 8):
        # the answers above were checked; whether an incumbent carries a longer cycle is
        # the solver's path (highspy 1.7's never does here, since the dominator rows)
        pytest.skip(f"highspy {'.'.join(map(str, _highspy_version()))}: no incumbent had a "
                    "cycle longer than 2, so the lazy cut rows were not exercised")
    if not options:
        assert longer > 0          # some incumbents had cycles the 2-cycle rows missed


def test_cycle_cut_rows_are_valid_for_every_acyclic_selection():
    """The cut-set rows of a cycle's class set S (a_c <= Σ x over candidates of S that use no
    class of S) hold for every valid selection of every random cyclic problem, on the model's
    columns: so they never cut off an acyclic answer."""
    from eqsat_nb.extract.ilp import model, selection

    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(20):
        p = random_cyclic_problem(rng)
        P = selection._arrays(p)
        pre = model._presolve(P)
        if not pre["feasible"]:
            continue
        m = model._Model(P, pre, {})
        classes = [c for c in range(p.n_classes) if pre["model"][c]]
        sets = [frozenset(s) for n in (2, 3) for s in itertools.combinations(classes, n)]
        options = [list(p.candidates(c)) for c in range(p.n_classes)]
        for combo in itertools.product(*options):
            sel = np.array(combo, np.int64)
            if not dag.is_valid(p, sel):
                continue
            v = m.start_vector(sel)
            if v is None:
                continue
            for S in sets:
                entry = sum(v[m.x_col[i]] for c in S for i in pre["cand"][c]
                            if not (pre["kids"][i] & S))
                for c in S:
                    assert v[m.a_col[c]] <= entry + 1e-9, (S, c, combo)
            checked += 1
    assert checked > 20


def _vit_like(n_pairs: int = 4) -> pb.ExtractionProblem:
    """Shared input x (class 0); per pair j two projections A_j, B_j (cost 4 each) or a merged
    op M_j (cost 5) feeding split S_j whose proj nodes (cost 0) are alternatives in A_j and B_j;
    every A_j, B_j also has two decoys (own cost 1 and 1.5) on inputs D_j, E_j of cost 8 that
    A_j and B_j share (not dominated, and kept by the simplifications). Root R = f(all A_j,
    B_j). The optimum merges every pair: 1 + 5 per pair."""
    node_class, cost, kids = [0], [0.0], [[]]          # x
    cls = 1
    users = []
    for _ in range(n_pairs):
        A, B, M, S, D, E = cls, cls + 1, cls + 2, cls + 3, cls + 4, cls + 5
        cls += 6
        node_class += [M, S, D, E]
        cost += [5.0, 0.0, 8.0, 8.0]
        kids += [[0], [M], [], []]
        for c in (A, B):
            node_class += [c, c, c, c]
            cost += [4.0, 0.0, 1.0, 1.5]
            kids += [[0], [S], [D], [E]]
        users += [A, B]
    node_class.append(cls)
    cost.append(1.0)
    kids.append(users)
    return pb.from_arrays(cls + 1, node_class, cost, kids, [cls])


def test_restricted_phase_finds_the_optimum_and_full_model_proves_it():
    p = _vit_like()
    r = extract_ilp(p, in_process=True, restrict=(2,))
    check(p, r)
    assert r.optimal and r.cost == 1.0 + 4 * 5.0
    phases = r.stats["restricted"]
    assert phases and phases[0]["k"] == 2 and phases[0]["cost"] == pytest.approx(21.0)


def test_incumbent_accepts_only_valid_improvements():
    from eqsat_nb.extract.ilp import selection, solve

    p = cyclic_problem()
    P = selection._arrays(p)
    seen = []
    inc = solve._Incumbent(P, seen.append)
    assert not inc.offer(np.array([0, 2, -1]))          # cyclic: 0 -> 1 -> 0
    assert not inc.offer(np.array([0, -1, -1]))         # class 1 has no choice
    assert inc.offer(np.array([1, -1, -1])) and inc.cost == 100.0
    assert inc.offer(np.array([0, 3, 4])) and inc.cost == 8.0
    assert not inc.offer(np.array([1, -1, -1]))         # worse
    inc.offer_bound(8.0)
    assert [s["cost"] for s in seen] == [100.0, 8.0, 8.0] and seen[-1]["bound"] == 8.0


def test_improving_callback_is_checked():
    """The improving-solution callback passes a solution on only when its objective agrees with
    its columns (and it is in the model's own columns); what it passes on is still walked by
    _Incumbent before it counts. A callback that raises never reaches HiGHS."""
    from types import SimpleNamespace

    import highspy

    from eqsat_nb.extract.ilp import solve as ilp

    h = FakeHighs()
    got = []
    obj = np.array([1.0, 2.0, 0.0])
    cbs = ilp._Callbacks(h, obj, got.append, want_start=False)
    kind = highspy.cb.HighsCallbackType.kCallbackMipImprovingSolution
    for sol, value in (([1.0, 1.0, 0.0], 3.0), ([1.0, 0.0, 0.0], 3.0),    # agrees; a liar
                       ([1.0, 0.0], 1.0)):                                 # presolved columns
        h.fn(kind, "", SimpleNamespace(mip_solution=sol, objective_function_value=value),
             None, None)
    assert len(got) == 1 and list(got[0]) == [1.0, 1.0, 0.0]
    boom = ilp._Callbacks(h, obj, lambda v: 1 / 0, want_start=False)
    h.fn(kind, "", SimpleNamespace(mip_solution=[1.0, 1.0, 0.0], objective_function_value=3.0),
         None, None)                                   # raises inside: swallowed
    boom.stop()
    cbs.stop()


def test_killed_worker_hands_back_its_last_checked_report(tmp_path, monkeypatch):
    """A worker that reports an improvement and then hangs: the parent kills it at the deadline
    and returns that report (checked with dag_cost), status "killed", never worse than the warm
    start; a report that is not a valid selection is ignored (the warm start comes back)."""
    import sys

    from eqsat_nb.extract.ilp import worker

    p = cyclic_problem()
    warm = np.array([1, -1, -1], np.int64)

    def fake_worker(report):
        script = tmp_path / "worker.py"
        script.write_text(
            "import os, pickle, sys, time\n"
            "pickle.load(sys.stdin.buffer)\n"
            f"b = pickle.dumps(('progress', {report!r}))\n"
            "os.write(1, len(b).to_bytes(8, 'little') + b)\n"
            "time.sleep(60)\n")
        monkeypatch.setattr(worker, "_WORKER", [sys.executable, str(script)])

    fake_worker({"choice": [0, 3, 4], "cost": 8.0, "bound": 6.0})
    r = extract_ilp(p, time_limit=0.0, warm_start=warm, kill_margin=3.0)
    check(p, r)
    assert r.status == "killed" and not r.optimal
    assert list(r.choice) == [0, 3, 4] and r.cost == 8.0 and r.bound == 6.0
    assert r.gap == pytest.approx(0.25)
    fake_worker({"choice": [0, 2, -1], "cost": 1.0, "bound": 1.0})      # a cycle: not taken
    r = extract_ilp(p, time_limit=0.0, warm_start=warm, kill_margin=3.0)
    check(p, r)
    assert r.status == "killed" and list(r.choice) == [1, -1, -1] and r.cost == 100.0
    assert r.bound == 0.0


def test_a_deadline_holds_as_wall_time(tmp_path, monkeypatch):
    """With a deadline the call returns by it, whatever the worker does: a worker that reports
    and then hangs is killed DEADLINE_RETURN before the deadline (not time_limit + kill_margin
    later), its report kept. A deadline already past
    gives the warm start back at once, in process too."""
    import sys
    import time

    from eqsat_nb.extract import ilp
    from eqsat_nb.extract.ilp import worker

    p = cyclic_problem()
    warm = np.array([1, -1, -1], np.int64)
    script = tmp_path / "worker.py"
    script.write_text(
        "import os, pickle, sys, time\n"
        "P, opts = pickle.load(sys.stdin.buffer)\n"
        "b = pickle.dumps(('progress', {'choice': [0, 3, 4], 'cost': 8.0, 'bound': 6.0}))\n"
        "os.write(1, len(b).to_bytes(8, 'little') + b)\n"
        "time.sleep(60)\n")
    monkeypatch.setattr(worker, "_WORKER", [sys.executable, str(script)])
    t = time.perf_counter()
    r = extract_ilp(p, time_limit=30.0, warm_start=warm, kill_margin=30.0, deadline=t + 3.0)
    elapsed = time.perf_counter() - t
    check(p, r)
    assert r.status == "killed" and list(r.choice) == [0, 3, 4] and r.cost == 8.0
    assert elapsed < 20.0       # killed at the deadline, not after 30 + 30 s
    monkeypatch.setattr(worker, "_WORKER", None)
    for in_process in (False, True):
        t = time.perf_counter()
        r = extract_ilp(p, time_limit=30.0, warm_start=warm, in_process=in_process,
                        deadline=t - 1.0)
        check(p, r)
        assert not r.optimal and r.cost <= 100.0 and time.perf_counter() - t < 20.0
    assert ilp.DEADLINE_RETURN < ilp.DEADLINE_GRACE


def test_extract_ilp_gets_the_callers_time_limit_as_a_deadline(monkeypatch):
    """`extract(..., "ilp", time_limit)` (the extract command) gives extract_ilp a deadline
    time_limit after the call, so the warm start's time counts against the user's limit."""
    import time

    from eqsat_nb.extract import ilp
    from eqsat_nb.extract.run import extract

    seen = {}
    real = ilp.extract_ilp

    def spy(problem, **kw):
        seen.update(kw)
        return real(problem, **kw)

    monkeypatch.setattr(ilp, "extract_ilp", spy)
    p = cyclic_problem()
    t = time.perf_counter()
    res = extract(p, "ilp", time_limit=7.0)
    assert t + 7.0 <= seen["deadline"] <= time.perf_counter() + 7.0 and seen["time_limit"] == 7.0
    assert dag.is_valid(p, res.choice)


def _projections_problem() -> tuple[pb.ExtractionProblem, np.ndarray, float]:
    """Four projections of one input x, each a matmul of its own (cost 10) or a proj of the
    split of a merged matmul over two (15) or three (18) of them: the optimum re-partitions the
    four into a three-way merge and a single (28 + x's 1), which no switch of one merge reaches
    from four singles (40 + 1). Returns the problem, the four-singles selection and the optimum."""
    node_class, cost, kids = [0, 6], [1.0, 0.0], [[6], []]    # class 0: x = norm(input)
    single = []
    for i in range(4):                                # classes 1-4: P_i = matmul_i(x)
        single.append(len(node_class))
        node_class.append(1 + i), cost.append(10.0), kids.append([0])
    groups = [s for r in (2, 3) for s in itertools.combinations(range(4), r)]
    c = 7                                             # class 5: the root; 6: the input
    for s in groups:                                  # M_s = matmul(x); T_s = split(M_s)
        m, t = c, c + 1
        c += 2
        node_class += [m, t]
        cost += [15.0 if len(s) == 2 else 18.0, 0.0]
        kids += [[0], [m]]
        for i in s:                                   # P_i = proj_i(T_s)
            node_class.append(1 + i), cost.append(0.0), kids.append([t])
    node_class.append(5), cost.append(0.0), kids.append([1, 2, 3, 4])
    p = pb.from_arrays(c, node_class, cost, kids, [5])
    singles = np.full(c, -1, np.int64)
    singles[[0, 5, 6]] = 0, len(node_class) - 1, 1
    singles[1:5] = single
    return p, singles, 29.0


def test_neighbourhood_phase_repartitions_the_merges_of_one_input(monkeypatch):
    """The large-neighbourhood phase frees every class reading x (and the glue below) around
    the four-singles start and solves that exactly: it alone reaches the optimum, a three-way
    merge and a single. (The share is lifted: here x's readers are most of the model.)"""
    from eqsat_nb.extract.ilp import solve
    monkeypatch.setattr(solve, "NEIGHBOURHOOD_MAX_SHARE", 1.0)
    p, singles, best = _projections_problem()
    assert dag.is_valid(p, singles) and dag.dag_cost(p, singles) == 41.0
    r = extract_ilp(p, time_limit=20, warm_start=singles, in_process=True, neighbourhoods=True)
    check(p, r)
    phase = r.stats["neighbourhoods"]
    assert phase["cost_before"] == 41.0 and phase["cost"] == best and phase["improved"] >= 1
    assert r.optimal and r.cost == best
    off = extract_ilp(p, time_limit=20, warm_start=singles, in_process=True, neighbourhoods=False)
    assert "neighbourhoods" not in off.stats and off.cost == best


def test_neighbourhoods_leave_out_groups_of_most_of_the_model():
    """A class read by more than the share of the model's classes (an attribute every op reads)
    is no neighbourhood: solving it would be solving the whole model."""
    from eqsat_nb.extract.ilp.model import _neighbourhoods, _presolve
    from eqsat_nb.extract.ilp.selection import _arrays
    p, _, _ = _projections_problem()
    P = _arrays(p)
    pre = _presolve(P)
    assert len(list(_neighbourhoods(P, pre, 1.0, 4))) >= 1
    assert list(_neighbourhoods(P, pre, 0.1, 4)) == []
