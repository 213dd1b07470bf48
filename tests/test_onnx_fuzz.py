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
    columns = {fuzz.column(o) for o in outcomes}
    # the mutants reach every good outcome: refused, copied unchanged and optimized (spliced)
    assert columns == {"located error", "unchanged copy", "written, equal"}, table
    for cls in fuzz.CLASSES:
        assert sum(o.case.cls == cls for o in outcomes) >= 40, table


def test_mutants_are_the_same_for_a_seed(tmp_path):
    """Deterministic: two draws of the same seed lay out identical files; another seed differs."""
    def layout(cases, root):
        for i, c in enumerate(cases):
            c.write(root / f"case{i:03d}" / "in")
        return fuzz._snapshot(root)

    first = layout(fuzz.mutants(N_MUTANTS, seed=0), tmp_path / "a")
    assert first == layout(fuzz.mutants(N_MUTANTS, seed=0), tmp_path / "b")
    assert first != layout(fuzz.mutants(N_MUTANTS, seed=1), tmp_path / "c")
