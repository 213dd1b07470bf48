"""docs/extraction.md's tables: every extractor on the reference e-graphs
(docs/data/extraction.json, from tools/extract_egraphs.py; the references from
perf/data/extract/reference.json)."""
from __future__ import annotations

from .markdown import table
from .records import load
from .tools import tool

EXTRACTION = "docs/data/extraction.json"
REFERENCE = "perf/data/extract/reference.json"


def reference_egraphs() -> list[str]:
    """The table `tools/extract_egraphs.py table` prints, from the recorded run."""
    text = tool("extract_egraphs").table_of_rows(load(EXTRACTION)["egraphs"], load(REFERENCE))
    return text.split("\n")


def _n(x: float, digits: int = 0) -> str:
    """A number with a space between thousands: 50 003, 3 685.36."""
    return f"{x:,.{digits}f}".replace(",", " ")


def tensat_schedule() -> list[str]:
    """The TENSAT-schedule e-graphs: the ILP 30 s runs' times to a good answer and a proof."""
    runs, refs = load(EXTRACTION)["egraphs"], load(REFERENCE)
    rows = []
    for r in load(EXTRACTION)["tensat_schedule"]["rows"]:
        ref, ilp = refs[r["egraph"]], runs[r["egraph"]]["ilp30"]
        digits = 3 if ref["best"] < 1000 else 2
        best = (f"{_n(ref['best'], digits)}, proven optimal in {ref['seconds']:.1f} s"
                if ref["optimal"] else
                f"{_n(ref['best'], digits)} ({ref['time_limit']:.0f} s: bound "
                f"{_n(ref['bound'], 2)}, {100 * ref['gap']:.1f} %)")
        answer = f"{ilp['seconds_to_answer']:.1f} s ({r['answer_note']})"
        proof = ("no" if ilp["seconds_to_proof"] is None
                 else f"{ilp['seconds_to_proof']:.1f} s") + f" ({r['proof_note']})"
        stop = f"{_n(ilp['bound'], 2)}, {ilp['ilp_gap_pct']:.2f} %" + (
            f" ({r['stop_note']})" if r.get("stop_note") else "")
        rows.append([r.get("label", r["egraph"]),
                     f"{_n(r['egraph_nodes'])} ({_n(ref['nodes'])}) / {_n(ref['classes'])}",
                     best, answer, proof, stop])
    return table(["e-graph (cyclic, TENSAT's schedule)", "e-graph nodes (candidates) / classes",
                  "best known (solve)", "answer within 0.5 % by (target ≤ 10 s)",
                  "1 % proof by (target ≤ 30 s)", "bound, gap when it stopped"], rows)
