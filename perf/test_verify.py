"""Output verification (`check_outputs.verify_graphs`): the original and its optimized graph (the
a100 profile's, analytic costs, ILP extraction) run in the reference interpreter on one random
input set and every output compared. `shared` is what `eqsat-nb run` does: both graphs merged,
each distinct expression computed once, and what follows a value computed twice to the same bits
run once (`interp.EqualValues`); `structural` the merged run without that reuse; `separate` runs
each graph on its own with the same kernels and BLAS threads (the old path's shape), so the
medians show what each step saves.
`extra_info` has the node counts, the merged graph's size, the planner's estimate and the check's
max error. Quick tier: NasRNN; full tier: the models whose verification dominated `run`."""
from __future__ import annotations

from functools import lru_cache

import pytest
from benchutil import RULES, Rounds, example

from eqsat_nb import check_outputs
from eqsat_nb.check_outputs import (ATOL_REL, RTOL, _worst_over_seeds, estimate_verification,
                                    verify_graphs)
from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.ir import interp
from eqsat_nb.ir.parse import load
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.rules.parse import load_rules

pytestmark = pytest.mark.usefixtures("warm_jit")

FULL = ("vgg19", "bert", "inceptionv3", "nasneta", "vit_large", "vit_huge")


@lru_cache(maxsize=None)
def optimized(model: str):
    graph = load(example(model))
    result = optimize(graph, AnalyticCostModel("a100"), load_rules(RULES), Options())
    if not result.improved:
        pytest.skip(f"{model}: the a100 profile keeps the original, nothing to verify")
    return graph, result.optimized


def _separately(graph, opt) -> float:
    """The path before sharing: each graph run on its own (one BLAS thread), then compared."""
    return _worst_over_seeds(graph, {}, lambda s: interp.run(opt, seed=s), (0,), RTOL,
                             ATOL_REL).max_relative_err


@pytest.mark.parametrize("mode", ["shared", pytest.param("structural", marks=pytest.mark.full),
                                  pytest.param("separate", marks=pytest.mark.full)])
@pytest.mark.parametrize("model", ["nasrnn"] + [pytest.param(m, marks=pytest.mark.full)
                                               for m in FULL])
def test_verify(bench, benchmark, model, mode, monkeypatch):
    graph, opt = optimized(model)
    if mode == "structural":
        monkeypatch.setattr(check_outputs, "EQUAL_VALUES_BYTES", 0)
    if mode in ("shared", "structural"):
        check = bench(lambda: verify_graphs(graph, opt), rounds=Rounds(3, 3))
        assert check.ok
        err = check.max_relative_err
    else:
        err = bench(lambda: _separately(graph, opt), rounds=Rounds(3, 3))
    merged = interp.shared_graph([graph, opt])
    est = estimate_verification(graph, opt)
    benchmark.extra_info.update(
        model=model, mode=mode, original_nodes=len(graph.nodes), optimized_nodes=len(opt.nodes),
        merged_nodes=len(merged.nodes),
        lowered_nodes=[len(interp.shared_graph([g]).nodes) for g in (graph, opt)],
        outputs_shared=sum(a == b for a, b in zip(merged.outputs[:len(graph.outputs)],
                                                   merged.outputs[len(graph.outputs):])),
        estimate_s=round(est.seconds, 2), estimate_peak_mib=round(est.peak_bytes / 2**20),
        max_relative_err=err)
