"""Hostile and unusual ONNX files: a seeded fuzz run of a few hundred mutants of small
models through `run --onnx` (tests/onnx_fuzz.py says what is mutated and what is checked). Every
mutant ends in a located error or in an OUT that loads in onnxruntime and equals the input; none
in an internal error, a traceback, a hang, or a write outside OUT's folder. The default tier runs
one mutant of each kind on each base model; the slow tier (`--slow`, CI) runs 300."""
from __future__ import annotations

import onnx_fuzz as fuzz
import pytest

N_MUTANTS = 300
N_QUICK = 18        # mutants 0-17 of a seed: each of the 6 mutators on each of the 3 models
QUICK_SEED = 2      # not the slow run's seed 0: the two tiers together try other mutants


def _failures(outcomes: list[fuzz.Outcome]) -> list[str]:
    return [f"{o.case.cls}: {o.case.what}: {o.failures} | {o.stderr[:300]}"
            for o in outcomes if o.failures]


def test_a_mutant_of_every_class_ends_in_a_located_error_or_a_correct_output(tmp_path):
    outcomes = fuzz.run_all(fuzz.mutants(N_QUICK, seed=QUICK_SEED), tmp_path)
    table = fuzz.table(outcomes)
    failed = _failures(outcomes)
    assert not failed, "\n".join(failed) + "\n" + table
    assert {o.case.cls for o in outcomes} == set(fuzz.CLASSES), table


@pytest.mark.slow
def test_every_mutant_ends_in_a_located_error_or_a_correct_output(tmp_path):
    outcomes = fuzz.run_all(fuzz.mutants(N_MUTANTS, seed=0), tmp_path)
    table = fuzz.table(outcomes)
    print("\n" + table)
    failed = _failures(outcomes)
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
