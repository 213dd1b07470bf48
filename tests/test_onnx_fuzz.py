"""Hostile and unusual ONNX files (issue 32): a seeded fuzz run of a few hundred mutants of small
models through `run --onnx` (tests/onnx_fuzz.py says what is mutated and what is checked). Every
mutant ends in a located error or in an OUT that loads in onnxruntime and equals the input; none
in an internal error, a traceback, a hang, or a write outside OUT's folder."""
from __future__ import annotations

import onnx_fuzz as fuzz

N_MUTANTS = 300


def test_every_mutant_ends_in_a_located_error_or_a_correct_output(tmp_path):
    outcomes = fuzz.run_all(fuzz.mutants(N_MUTANTS, seed=0), tmp_path)
    table = fuzz.table(outcomes)
    print("\n" + table)
    failed = [f"{o.case.cls}: {o.case.what}: {o.failures} | {o.stderr[:300]}"
              for o in outcomes if o.failures]
    assert not failed, "\n".join(failed[:20]) + "\n" + table
    kinds = {o.kind for o in outcomes}
    # the mutants reach every outcome: refused, copied unchanged and optimized (spliced)
    assert kinds == {"error", "unchanged", "optimized"}, table
    for cls in fuzz.CLASSES:
        assert sum(o.case.cls == cls for o in outcomes) >= 40, table
