"""The results tables of README.md and docs/*.md, printed from committed records.

    python tools/doc_tables.py [--check]      # diff of every marked table against its renderer
    python tools/doc_tables.py --write        # rewrite the marked tables in place
    python tools/doc_tables.py --list         # each table's name, page and records

Every Markdown table in README.md and docs/*.md sits right under one of two markers:

    <!-- table: NAME (tools/doc_tables.py) -->     a results table: `NAME` in REGISTRY
    <!-- table: text -->                           a descriptive table, written by hand

A results table is the run of lines starting with "|" under its marker; its renderer
(tools/doc_renderers/) prints it from the records it names: docs/gpu_truth/*.json (GPU runs),
docs/data/*.json (each names the command, machine and versions behind its numbers),
perf/data/extract/reference.json, the shipped cost tables and profiles. `--check` exits 1 and
prints a unified diff when a marked table differs from what its renderer prints, or lists what
is wrong with the markers: a table without one, an unknown name, a marker with no table right
under it, a table marked text whose cells are mostly numbers. To change a results table, change
its records (re-run the command a record names) or its renderer, then `--write`.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(TOOLS))

TEXT_MARKER = "<!-- table: text -->"
RESULTS_MARKER = re.compile(r"<!-- table: ([a-z0-9][a-z0-9-]*) \(tools/doc_tables\.py\) -->")
DELIMITER = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# a cell of numbers, units and separators: "+1.4 %", "0.723 → 0.453, 59.7", "46.4 µs"
NUMBER = re.compile(r"(?=.*\d)(?:[\d\s.,:;/()+−–→%×-]|µs|ms|s|x|GiB)*")
NUMERIC_SHARE = 0.5     # a "text" table with more of its cells numbers is a pasted result


@dataclass(frozen=True)
class Table:
    """A Markdown table in a page: its lines [start, end) and the marker line above it."""

    start: int
    end: int
    marker: str | None          # the line above the table when it is a marker, else None

    @property
    def name(self) -> str | None:
        """The registry name of a results marker; None for a text marker or none."""
        m = RESULTS_MARKER.fullmatch(self.marker or "")
        return m.group(1) if m else None


def doc_pages(root: Path = ROOT) -> list[Path]:
    """The pages whose tables are marked: README.md and docs/*.md."""
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def tables(lines: Sequence[str]) -> list[Table]:
    """Every table in a page's lines (outside fenced code): a row, then a delimiter row."""
    out, fenced, i = [], False, 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            fenced = not fenced
        elif (not fenced and lines[i].startswith("|") and i + 1 < len(lines)
              and DELIMITER.match(lines[i + 1])):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            above = lines[i - 1].strip() if i else ""
            out.append(Table(i, end, above if above.startswith("<!-- table") else None))
            i = end
            continue
        i += 1
    return out


def cells(line: str) -> list[str]:
    """A table row's cells (a "|" inside backticks or escaped splits too: rough, for counting)."""
    return [c.strip() for c in line.strip().strip("|").split("|")]


def numeric_share(lines: Sequence[str]) -> float:
    """The share of a table's body cells, first column apart (a row's name), that hold only
    numbers (with units and separators: "0.723 → 0.453, 59.7", "+1.4 %")."""
    body = [c for line in lines[2:] for c in cells(line)[1:]]
    return sum(bool(NUMBER.fullmatch(c)) for c in body) / len(body) if body else 0.0


def marker_problems(path: Path, lines: Sequence[str],
                    registry: Mapping[str, Any]) -> list[str]:
    """What is wrong with a page's markers: tables without one, malformed or unknown markers,
    markers with no table right under them."""
    found = tables(lines)
    under = {t.start - 1 for t in found if t.marker is not None}
    out = []
    for t in found:
        where = f"{path}:{t.start + 1}"
        if t.marker is None:
            out.append(f"{where}: a table without a marker (`{TEXT_MARKER}` above a "
                       f"descriptive table; a results table needs a renderer in "
                       f"tools/doc_tables.py)")
        elif t.marker == TEXT_MARKER and numeric_share(lines[t.start:t.end]) > NUMERIC_SHARE:
            out.append(f"{where}: a table marked as text whose cells are mostly numbers: "
                       f"results come from a renderer in tools/doc_tables.py")
        elif t.marker != TEXT_MARKER and t.name is None:
            out.append(f"{where}: malformed table marker {t.marker!r}")
        elif t.name is not None and t.name not in registry:
            out.append(f"{where}: no renderer named {t.name!r} in tools/doc_tables.py")
    for i, line in enumerate(lines):
        if line.strip().startswith("<!-- table") and i not in under:
            out.append(f"{path}:{i + 1}: a table marker with no table right under it")
    return out


def rendered(lines: Sequence[str], registry: Mapping[str, Any]) -> list[str]:
    """The page's lines with every marked results table as its renderer prints it."""
    out, last = [], 0
    for t in tables(lines):
        if t.name in registry:
            out += list(lines[last:t.start]) + list(registry[t.name].render())
            last = t.end
    return out + list(lines[last:])


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


def check(pages: Iterable[Path], registry: Mapping[str, Any],
          root: Path = ROOT) -> tuple[list[str], str]:
    """(marker problems, unified diff of the marked tables against their renderers)."""
    problems, diff = [], []
    for path in pages:
        lines = read_lines(path)
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        problems += marker_problems(rel, lines, registry)
        new = rendered(lines, registry)
        diff += difflib.unified_diff(lines, new, f"a/{rel}", f"b/{rel}", lineterm="")
    return problems, "\n".join(diff)


def write(pages: Iterable[Path], registry: Mapping[str, Any]) -> list[Path]:
    """Rewrite the marked tables in place; the pages that changed."""
    changed = []
    for path in pages:
        lines = read_lines(path)
        new = rendered(lines, registry)
        if new != lines:
            path.write_text("\n".join(new), encoding="utf-8")
            changed.append(path)
    return changed


def listing(pages: Iterable[Path], registry: Mapping[str, Any], root: Path = ROOT) -> str:
    out = []
    for path in pages:
        for t in tables(read_lines(path)):
            rel = path.relative_to(root)
            if t.name in registry:
                out.append(f"{rel}:{t.start + 1}  {t.name}  <- "
                           + ", ".join(registry[t.name].sources))
            elif t.marker == TEXT_MARKER:
                out.append(f"{rel}:{t.start + 1}  (descriptive)")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None, root: Path = ROOT,
         registry: Mapping[str, Any] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="diff only (the default); exit 1 "
                      "on a difference or a marker problem")
    mode.add_argument("--write", action="store_true", help="rewrite the marked tables")
    mode.add_argument("--list", action="store_true", help="list the tables and their records")
    args = ap.parse_args(argv)
    if registry is None:
        from doc_renderers import REGISTRY as registry

    pages = doc_pages(root)
    if args.list:
        print(listing(pages, registry, root))
        return 0
    if args.write:
        for path in write(pages, registry):
            print(f"rewrote {path.relative_to(root)}")
    problems, diff = check(pages, registry, root)
    if diff:
        print(diff)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems or diff else 0


if __name__ == "__main__":
    sys.exit(main())
