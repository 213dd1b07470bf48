"""The docs' results tables are printed, not pasted: every Markdown table in README.md and
docs/*.md is marked as a results table or as text, every results table is what its renderer
prints from the committed records (tools/doc_tables.py), and each record names the command,
machine and versions behind its numbers. Nothing here measures anything: the renderers read
committed files."""
from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from tool_module import load_tool

dt = load_tool("doc_tables")                # puts tools/ on sys.path for doc_renderers

from doc_renderers import REGISTRY, Renderer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = dt.doc_pages(ROOT)


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_table_is_marked(page):
    assert dt.marker_problems(rel(page), dt.read_lines(page), REGISTRY) == []


def marked(name: str) -> list[tuple[Path, list[str]]]:
    """(page, table lines) of every table marked with `name`."""
    out = []
    for page in PAGES:
        lines = dt.read_lines(page)
        out += [(page, lines[t.start:t.end]) for t in dt.tables(lines) if t.name == name]
    return out


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_results_table_is_what_its_renderer_prints(name):
    found = marked(name)
    assert found, f"no table in README.md or docs/*.md is marked {name!r}"
    want = list(REGISTRY[name].render())
    for page, lines in found:
        diff = "\n".join(difflib.unified_diff(lines, want, rel(page), "rendered", lineterm=""))
        assert lines == want, (f"{rel(page)}: table {name!r} differs from what its renderer "
                               f"prints (python tools/doc_tables.py --write):\n{diff}")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_renderer_reads_committed_files(name):
    for source in REGISTRY[name].sources:
        assert (ROOT / source).is_file(), f"{name}: {source} is not in the repository"


def sections(doc, inherited=frozenset()):
    """(path, keys in scope) of every part of a record that holds results."""
    keys = inherited | set(doc)
    if "rows" in doc or "egraphs" in doc:
        yield keys
    for value in doc.values():
        if isinstance(value, dict):
            yield from sections(value, frozenset(keys))


@pytest.mark.parametrize("path", sorted((ROOT / "docs" / "data").glob("*.json")), ids=rel)
def test_each_record_names_its_command_machine_and_versions(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    found = list(sections(doc))
    assert found, f"{rel(path)} holds no rows"
    for keys in found:
        missing = {"command", "machine", "versions"} - keys
        assert not missing, f"{rel(path)}: a part of it does not name {sorted(missing)}"


# ------------------------------------------------------------------ the checker itself
def demo_root(tmp_path: Path, value: float) -> tuple[Path, dict]:
    """A repository with a README holding one results table and docs/ one text table; the
    results table's renderer prints `value` from a records file."""
    (tmp_path / "docs").mkdir()
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"x": value}))

    def render() -> list[str]:
        x = json.loads(record.read_text())["x"]
        return ["| model | speed-up % |", "|---|---|", f"| demo | {x:.1f} |"]

    (tmp_path / "README.md").write_text(
        "# Demo\n\n<!-- table: demo (tools/doc_tables.py) -->\n" + "\n".join(render())
        + "\n\nText.\n", encoding="utf-8")
    (tmp_path / "docs" / "page.md").write_text(
        "# Page\n\n<!-- table: text -->\n| option | what |\n|---|---|\n| `-q` | quiet |\n\n"
        "```\n| not | a table |\n|---|---|\n```\n", encoding="utf-8")
    return record, {"demo": Renderer(render, ("record.json",))}


def test_the_checker_passes_a_table_that_matches_its_records(tmp_path, capsys):
    _, registry = demo_root(tmp_path, 12.5)
    assert dt.main(["--check"], root=tmp_path, registry=registry) == 0
    assert capsys.readouterr().out == ""


def test_the_checker_finds_a_planted_drift_and_write_mends_it(tmp_path, capsys):
    record, registry = demo_root(tmp_path, 12.5)
    readme = tmp_path / "README.md"
    readme.write_text(readme.read_text().replace("| demo | 12.5 |", "| demo | 13.0 |"))
    assert dt.main(["--check"], root=tmp_path, registry=registry) == 1
    out = capsys.readouterr().out
    assert "-| demo | 13.0 |" in out and "+| demo | 12.5 |" in out and "a/README.md" in out
    # new records: the table follows them once rewritten, and only the table changes
    record.write_text(json.dumps({"x": 7.25}))
    assert dt.main(["--write"], root=tmp_path, registry=registry) == 0
    assert "| demo | 7.2 |" in readme.read_text()
    assert readme.read_text().endswith("\n\nText.\n")
    assert dt.main(["--check"], root=tmp_path, registry=registry) == 0


@pytest.mark.parametrize("page, problem", [
    ("| a | b |\n|---|---|\n| x | y |\n", "a table without a marker"),
    ("<!-- table: nope (tools/doc_tables.py) -->\n| a | b |\n|---|---|\n| x | 1 |\n",
     "no renderer named 'nope'"),
    ("<!-- table: Bad Name -->\n| a | b |\n|---|---|\n| x | y |\n", "malformed table marker"),
    ("<!-- table: text -->\n\n| a | b |\n|---|---|\n| x | y |\n", "no table right under it"),
    ("<!-- table: text -->\n| model | ms | % |\n|---|---|---|\n"
     "| bert | 0.46 → 0.31 | +55.3 % |\n", "mostly numbers"),
])
def test_the_checker_reports_each_marker_problem(tmp_path, capsys, page, problem):
    _, registry = demo_root(tmp_path, 1.0)
    (tmp_path / "docs" / "bad.md").write_text(page, encoding="utf-8")
    assert dt.main(["--check"], root=tmp_path, registry=registry) == 1
    err = capsys.readouterr().err
    assert "docs/bad.md" in err and problem in err


# ------------------------------------------------------------------ records the tools write
def test_extract_egraphs_prints_the_same_table_from_a_run_and_from_its_records(tmp_path):
    tool = load_tool("extract_egraphs")
    info = {"egraph": "g", "nodes": 10, "classes": 4, "dag_cost": 5.0}
    run = {"machine_info": {"eqsat_nb": {"cpu_model": "CPU", "python": "3.11"}},
           "benchmarks": [
               {"extra_info": {**info, "method": "ocf+switch"}, "stats": {"median": 0.1}},
               {"extra_info": {**info, "method": "ilp15", "status": "optimal", "seconds": 0.4,
                               "simplified": [3, 8], "layers": [{}, {}]},
                "stats": {"median": 0.5}},
               {"extra_info": {**info, "method": "ilp30", "seconds_to_answer": 0.2,
                               "bound": 5.0, "ilp_gap_pct": 0.0, "seconds_to_proof": 0.3,
                               "simplified": [3, 8], "layers": [{}, {}]},
                "stats": {"median": 0.5}}]}
    refs = {"g": {"best": 5.0, "gap": 0.0}}
    rec = tool.records(run, ["table", "RUN.json", "--records", "OUT.json"])
    assert rec["command"] == "python tools/extract_egraphs.py table RUN.json --records OUT.json"
    assert rec["machine"]["cpu_model"] == "CPU" and rec["versions"]["python"] == "3.11"
    rec = json.loads(json.dumps(rec))                       # as read back from the file
    assert tool.table_of_rows(rec["egraphs"], refs) == tool.table(run, refs)
    assert "| g | 10 / 4 | 3 (2) | 5.00 | 5.00 (optimal, 0.4 s) |" in tool.table(run, refs)
