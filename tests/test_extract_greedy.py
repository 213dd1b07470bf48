"""Tree-cost greedy and the DAG cost / validity checker."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from eqsat_nb.egraph import egraph_to_graph, graph_to_egraph
from eqsat_nb.extract.dag import InvalidSelection, dag_cost, is_valid, reachable
from eqsat_nb.extract.greedy import extract_greedy
from eqsat_nb.extract.problem import egraph_choice, from_arrays, from_egraph
from eqsat_nb.extract.run import extract
from eqsat_nb.ir.cse import cse
from eqsat_nb.ir.parse import load

ROOT = Path(__file__).resolve().parent.parent
FREE = ("lit", "input", "weight", "proj")   # a split is paid once, by its split node


def unit_costs(eg) -> np.ndarray:
    return np.array([0.0 if eg.op_name(n) in FREE else 1.0 for n in range(eg.num_nodes)])


@pytest.mark.parametrize("path", sorted((ROOT / "ir_examples").glob("*.tir")), ids=lambda p: p.stem)
def test_initial_egraph_gives_back_the_original(path):
    graph = load(path)
    eg = graph_to_egraph(graph)
    problem = from_egraph(eg, unit_costs(eg))
    original = sum(1 for _ in cse(graph).compute_nodes())
    for method in ("greedy", "ocf", "ilp"):      # every extractor gives back the original
        choice = extract(problem, method).choice
        assert is_valid(problem, choice), method
        assert dag_cost(problem, choice) == original, method
        assert egraph_to_graph(eg, egraph_choice(problem, choice, eg.num_nodes)) == cse(graph)


def shared_problem():
    """Class 0 (root) = f(1, 1') or g(2); class 1 = h(3); class 2 = k(1); class 3 leaf."""
    # candidates: 0: f(1, 1) cost 1; 1: g(2) cost 1; 2: h(3) cost 5; 3: k(1) cost 2; 4: leaf 0
    return from_arrays(4, [0, 0, 1, 2, 3], [1, 1.5, 5, 0.1, 0],
                       [[1, 1], [2], [3], [1], []], [0])


def test_tree_cost_counts_shared_children_twice():
    p = shared_problem()
    choice = extract_greedy(p)
    assert choice[0] == 1                    # tree: f = 1 + 5 + 5 = 11 > g = 1.5 + 0.1 + 5
    assert dag_cost(p, choice) == pytest.approx(6.6)
    forced = choice.copy()
    forced[0] = 0
    assert dag_cost(p, forced) == pytest.approx(6.0)   # the DAG cost of f counts h once


def test_dag_checker_rejects_bad_selections():
    p = from_arrays(2, [0, 1, 1], [1, 1, 1], [[1], [0], []], [0])
    with pytest.raises(InvalidSelection, match="cycle"):
        dag_cost(p, np.array([0, 1]))
    with pytest.raises(InvalidSelection, match="no chosen"):
        dag_cost(p, np.array([0, -1]))
    with pytest.raises(InvalidSelection, match="another class"):
        dag_cost(p, np.array([1, 2]))
    assert dag_cost(p, np.array([0, 2])) == 2
    assert reachable(p, np.array([0, 2])).tolist() == [True, True]


def test_greedy_never_picks_a_cycle_with_zero_costs():
    rng = np.random.default_rng(0)
    for _ in range(200):
        c = int(rng.integers(2, 7))
        node_class = list(range(c)) + [int(x) for x in rng.integers(0, c, size=c)]
        kids = [[] for _ in range(c)] + [[int(k) for k in rng.integers(0, c, size=2)]
                                         for _ in range(c)]
        costs = rng.choice([0.0, 1.0, 2.0], size=2 * c)
        p = from_arrays(c, node_class, costs, kids, [0])
        choice = extract_greedy(p)
        assert is_valid(p, choice)


def test_cli_extract_reads_a_serialized_egraph(tmp_path, capsys):
    from eqsat_nb.cli import main
    from eqsat_nb.egraph.serialize import write_json

    graph = load(ROOT / "ir_examples" / "tiny_mlp.tir")
    eg = graph_to_egraph(graph)
    path = tmp_path / "eg.json"
    write_json(eg, path, unit_costs(eg))
    assert main(["extract", str(path), "--method", "greedy"]) == 0
    out = capsys.readouterr().out
    assert f"DAG cost {sum(1 for _ in cse(graph).compute_nodes())} " in out


def test_cli_extract_ilp_reads_gzip_and_says_what_stopped_it(tmp_path, capsys):
    """`extract --method ilp` on a gzip file: the ILP's bound, gap and the rule that ended it
    (as `run`'s: optimal here, the bound meets the answer); a broken file is a located error."""
    import gzip
    import json

    from eqsat_nb.cli import main
    from eqsat_nb.egraph.serialize import to_json

    eg = graph_to_egraph(load(ROOT / "ir_examples" / "tiny_branches.tir"))
    path = tmp_path / "eg.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(to_json(eg, unit_costs(eg)), f)
    assert main(["extract", str(path), "--method", "ilp", "--ilp-gap", "1"]) == 0
    out = capsys.readouterr().out
    assert "; bound " in out and "gap 0.00 %" in out
    assert "stopped: optimal (the bound meets the answer)" in out
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(gzip.compress(b"{not json"))
    assert main(["extract", str(bad), "--method", "ilp"]) == 1
    assert f"{bad}" in capsys.readouterr().err
