#!/usr/bin/env python
"""Convert TENSAT rule files (egg syntax, one `lhs=>rhs` a line) into eqsat-nb .rules files.

Your own TENSAT rules:

    python tools/import_tensat.py my_rules.txt --multi my_multi.txt -o my.rules
    eqsat-nb verify-rules my.rules

`FILE` arguments hold one rule a line; `--multi FILE` holds two-source multi-pattern rules as
consecutive line pairs; in `--mixed FILE` lines starting with '#' are comments and a comment that
mentions "multi" starts a section of pairs (TENSAT's predefined_rules.txt). Each rule is written
with its TENSAT origin as a comment (`// tensat FILE:LINE: TEXT`). TENSAT's shape checks happened
when a rule was applied; ours are `where` conditions, so run `eqsat-nb verify-rules` on the result:
it reports rules whose right-hand side cannot be built, or is wrong, for some valid left-hand side,
and you add the missing conditions.

The shipped rule set (rules/*.rules) is this tool's output for TENSAT's three files:

    python tools/import_tensat.py --shipped [--src DIR] [--out rules]

which also adds the conditions listed in EXTRA below (each with its reason, written as a comment on
the rule) and groups the rules into themed files. tests/test_rules.py checks that the shipped files
are exactly what this command writes, and that every shipped rule equals the conversion of the
TENSAT text in its comment.
"""
from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from eqsat_nb.errors import TirError  # noqa: E402
from eqsat_nb.rules.parse import parse_rules  # noqa: E402
from eqsat_nb.rules.pattern import Cond, Rule  # noqa: E402
from eqsat_nb.rules.printer import format_pattern, format_rule  # noqa: E402
from eqsat_nb.rules.tensat import (TensatEntry, convert_entry, read_tensat,  # noqa: E402
                                   suggest_name)

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SRC = Path(os.environ.get("TENSAT_RULES", "/work/shared/reference/tensat_rules"))
SHIPPED_SOURCES = (("converted.txt", False), ("converted_multi.txt", True),
                   ("predefined_rules.txt", None))

# Conditions the shipped rules add to TENSAT's, keyed by TENSAT origin. TENSAT checked shapes when
# it applied a rule (and its concat/split bookkeeping hid some cases); our verifier requires the
# right-hand side to be buildable and equal whenever the left-hand side and conditions are valid.
_CONV_1 = "dim(?x, 1) == dim(?w, 1) and dim(?x, 1) == dim(?v, 1)"
_KERNELS = "dim(?w, 2) == dim(?v, 2) and dim(?w, 3) == dim(?v, 3)"
_WHY_KERNELS = "the two weights are concatenated, so their kernels must be the same size"
_WHY_UNGROUPED = ("concatenating weights along the output channels regroups them: only sound "
                  "for ungrouped convolutions")
_WHY_RATIO = ("joining two convs into one grouped conv over the concatenated input is sound only "
              "when both have the same outputs per group (O1 * C2 == O2 * C1)")
_CONCAT_IN = ("the two inputs are concatenated along {axis}, so the other dimensions must agree "
              "(the sources alone do not force it)")
_SWAP = ("the pieces swap partners, so the first pieces must have the same size along the concat "
         "axis (otherwise the new concats have different shapes)")
_TRANSPOSE = ("the blocks are regrouped by rows instead of columns, so they must have matching "
              "sizes along axis 1")
_BATCH = ("TENSAT's matmuls are 2-D; ours is ONNX MatMul, whose batch dims broadcast, so {what} "
          "must be a matrix ({why})")
_BATCH_CONCAT = "the concat and split axes count from the front and would miss the matrix axes"
_BATCH_SUM = "operands of different batch shapes can give products of one shape but not add"

EXTRA: dict[str, tuple[str, str]] = {
    "converted.txt:3": ("rank(?c) == 2", _BATCH.format(what="?c", why=_BATCH_CONCAT)),
    "converted.txt:6": ("rank(?c) == 2", _BATCH.format(
        what="?c", why="?b and ?b @ ?c are added, so ?c must not add batch dims")),
    "converted.txt:22": ("rank(?b) == 2", _BATCH.format(what="the shared ?b", why=_BATCH_SUM)),
    "converted.txt:31": ("rank(?b) == 2 and rank(?c) == 2",
                         _BATCH.format(what="?b and ?c", why=_BATCH_SUM)),
    "converted.txt:70": ("rank(?b) == 2", _BATCH.format(what="?b", why=_BATCH_CONCAT)),
    "converted.txt:73": ("rank(?b) == 2", _BATCH.format(what="?b", why=_BATCH_CONCAT)),
    "converted.txt:74": ("rank(?b) == 2", _BATCH.format(what="?b", why=_BATCH_CONCAT)),
    "converted.txt:85": ("rank(?b) == 2", _BATCH.format(what="?b", why=_BATCH_CONCAT)),
    "converted_multi.txt:9,10": ("rank(?a) == 2 and rank(?c) == 2",
                                 _BATCH.format(what="each operand", why=_BATCH_CONCAT)),
    "converted_multi.txt:11,12": ("rank(?b) == 2 and rank(?c) == 2",
                                  _BATCH.format(what="each operand", why=_BATCH_CONCAT)),
    "converted.txt:78": ("dim(?a, 1) == dim(?c, 1)", _TRANSPOSE),
    "converted.txt:120": ("dim(?a, 1) == dim(?b, 1)", _TRANSPOSE),
    "converted.txt:91": (f"dim(?x, 1) == dim(?w, 1) and dim(?y, 1) == dim(?v, 1) and {_KERNELS}",
                         "summing two convs as one conv over concatenated inputs and weights is "
                         "sound only for ungrouped convs with kernels of one size"),
    "converted.txt:98": (f"dim(?x, 1) == dim(?w, 1) and dim(?y, 1) == dim(?v, 1) and {_KERNELS}",
                         "summing two convs as one conv over concatenated inputs and weights is "
                         "sound only for ungrouped convs with kernels of one size"),
    "converted.txt:96": ("dim(?a, 1) == dim(?c, 1)", _SWAP),
    "converted.txt:97": ("dim(?a, 1) == dim(?c, 1)", _SWAP),
    "converted.txt:103": ("dim(?a, 0) == dim(?c, 0)", _SWAP),
    "converted.txt:104": ("dim(?a, 0) == dim(?c, 0)", _SWAP),
    "converted.txt:105": ("dim(?a, 0) == dim(?c, 0)", _SWAP),
    "converted.txt:106": ("dim(?a, 0) == dim(?c, 0)", _SWAP),
    "converted.txt:107": ("dim(?x, 1) == dim(?y, 1)", _CONCAT_IN.format(axis="the batch axis")),
    "converted.txt:108": ("dim(?x, 1) == dim(?y, 1)", _CONCAT_IN.format(axis="the batch axis")),
    "converted.txt:109": ("dim(?x, 1) == dim(?y, 1)", _CONCAT_IN.format(axis="the batch axis")),
    "converted.txt:115": (f"{_CONV_1} and {_KERNELS}", f"{_WHY_UNGROUPED}; {_WHY_KERNELS}"),
    "converted.txt:116": (f"{_CONV_1} and {_KERNELS}", f"{_WHY_UNGROUPED}; {_WHY_KERNELS}"),
    "converted.txt:117": (f"{_CONV_1} and {_KERNELS}", f"{_WHY_UNGROUPED}; {_WHY_KERNELS}"),
    "converted_multi.txt:23,24": (f"{_CONV_1} and {_KERNELS}", f"{_WHY_UNGROUPED}; {_WHY_KERNELS}"),
    "converted_multi.txt:25,26": (f"{_CONV_1} and {_KERNELS}", f"{_WHY_UNGROUPED}; {_WHY_KERNELS}"),
    **{f"converted.txt:{n}": (f"dim(?w, 1) == dim(?v, 1) and {_KERNELS} and "
                              "dim(?w, 0) * dim(?y, 1) == dim(?v, 0) * dim(?x, 1)",
                              f"{_WHY_KERNELS}; {_WHY_RATIO}")
       for n in (92, 93, 118, 119)},
    "converted_multi.txt:7,8": ("dim(?a, 0) == dim(?b, 0)", _CONCAT_IN.format(axis="axis 1")),
    "converted_multi.txt:13,14": ("dim(?a, 1) == dim(?b, 1)", _CONCAT_IN.format(axis="axis 0")),
    "converted_multi.txt:15,16": ("dim(?a, 0) == dim(?b, 0) and dim(?a, 2) == dim(?b, 2) and "
                                  "dim(?a, 3) == dim(?b, 3)", _CONCAT_IN.format(axis="axis 1")),
    "converted_multi.txt:21,22": ("dim(?a, 1) == dim(?b, 1) and dim(?a, 2) == dim(?b, 2) and "
                                  "dim(?a, 3) == dim(?b, 3)", _CONCAT_IN.format(axis="axis 0")),
    "converted_multi.txt:17,18": ("dim(?x, 1) == dim(?y, 1) and dim(?x, 2) == dim(?y, 2) and "
                                  "dim(?x, 3) == dim(?y, 3)",
                                  _CONCAT_IN.format(axis="the batch axis")),
    "converted_multi.txt:19,20": ("dim(?x, 1) == dim(?y, 1) and dim(?x, 2) == dim(?y, 2) and "
                                  "dim(?x, 3) == dim(?y, 3)",
                                  _CONCAT_IN.format(axis="the batch axis")),
    **{f"predefined_rules.txt:{n}": ("dim(?x, 1) / dim(?w, 1) % 2 == 0",
                                     "merging pairs of groups needs an even number of groups "
                                     "(TASO only applied it where groups == count)")
       for n in (2, 3, 4, 5)},
    **{f"predefined_rules.txt:{n}": (f"{_CONV_1} and dim(?w, 2) <= dim(?v, 2) and "
                                     "dim(?w, 3) <= dim(?v, 3) and "
                                     "(dim(?v, 2) - dim(?w, 2)) % 2 == 0 and "
                                     "(dim(?v, 3) - dim(?w, 3)) % 2 == 0",
                                     f"{_WHY_UNGROUPED}; the first kernel is zero-padded, "
                                     "centred, to the second's size, so it must be no larger "
                                     "and differ by an even amount")
       for n in ("7,8", "9,10")},
}

FILES = {
    "elementwise.rules": "ewadd / ewmul: reassociation, commutation, distribution",
    "matmul.rules": "matmul: reassociation, distribution over ewadd, concat of matmuls",
    "conv.rules": "conv2d: operand reordering, linearity, activation fusion, merged groups",
    "concat.rules": "concat: moving concats through element-wise ops, relu and convolutions",
    "multi.rules": "multi-pattern rules: two sources rewritten together (merged matmuls / convs "
                   "via concat + split, and paired rewrites)",
}


def theme(rule: Rule) -> str:
    def ops(p) -> set[str]:
        return set() if not hasattr(p, "op") else {p.op}.union(*(ops(o) for o in p.operands))
    used = set().union(*(ops(p) for p in rule.lhs + rule.rhs))
    if rule.is_multi:
        return "multi.rules"
    if "merge" in used:
        return "conv.rules"
    if "matmul" in used:
        return "matmul.rules"
    if "concat" in used:
        return "concat.rules"
    if "conv2d" in used:
        return "conv.rules"
    return "elementwise.rules"


def _extra_conds(rule: Rule, text: str) -> tuple[Cond, ...]:
    """Parse `text` as conditions in the context of `rule`."""
    lhs = ", ".join(format_pattern(p) for p in rule.lhs)
    rhs = ", ".join(format_pattern(p) for p in rule.rhs)
    return parse_rules(f"rule tmp: {lhs} => {rhs} where {text}")[0].conds


def convert_all(entries: list[TensatEntry], extra: dict[str, tuple[str, str]] | None = None
                ) -> list[tuple[TensatEntry, Rule, str | None]]:
    """Convert and name every entry: (entry, rule, reason for added conditions or None)."""
    extra = extra or {}
    out = []
    counts: Counter[str] = Counter()
    bases = []
    for e in entries:
        r = convert_entry(e, "tmp")
        base = suggest_name(r)
        bases.append(base)
        counts[base] += 1
    seen: Counter[str] = Counter()
    for e, base in zip(entries, bases):
        seen[base] += 1
        name = f"{base}_{seen[base]}" if counts[base] > 1 else base
        r = convert_entry(e, name)
        reason = None
        if e.origin() in extra:
            conds_text, reason = extra[e.origin()]
            r = Rule(r.name, r.lhs, r.rhs, r.conds + _extra_conds(r, conds_text), False,
                     r.file, r.loc)
        out.append((e, r, reason))
    return out


def render(items: list[tuple[TensatEntry, Rule, str | None]], header: str) -> str:
    parts = [header]
    for e, r, reason in items:
        lines = [f"// tensat {Path(e.file).name}:{n}: {t}" for n, t in zip(e.lines, e.texts)]
        if reason:
            lines += textwrap.wrap(reason, 100, initial_indent="// restricted: ",
                                   subsequent_indent="//   ")
        lines.append(format_rule(r))
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def shipped(src: Path) -> dict[str, str]:
    """The text of every shipped rule file, generated from TENSAT's files in `src`."""
    entries = []
    for name, multi in SHIPPED_SOURCES:
        entries += read_tensat(src / name, multi)
    items = convert_all(entries, EXTRA)
    unused = set(EXTRA) - {e.origin() for e in entries}
    if unused:
        raise SystemExit(f"EXTRA names rules that do not exist: {sorted(unused)}")
    out = {}
    for fname, what in FILES.items():
        mine = [it for it in items if theme(it[1]) == fname]
        header = ("\n".join(textwrap.wrap(f"{what}.", 100, initial_indent="// ",
                                           subsequent_indent="// ")) + "\n"
                  f"// TASO's rules as TENSAT uses them, converted by tools/import_tensat.py "
                  f"--shipped ({len(mine)} rules).\n"
                  "// Each rule keeps its TENSAT origin in a `// tensat FILE:LINE: TEXT` comment; "
                  "`// restricted:`\n"
                  "// marks conditions added to TENSAT's (see the tool's EXTRA table).")
        out[fname] = render(mine, header)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", metavar="FILE", help="TENSAT rules, one a line")
    p.add_argument("--multi", action="append", default=[], metavar="FILE",
                   help="TENSAT multi-pattern rules, consecutive line pairs")
    p.add_argument("--mixed", action="append", default=[], metavar="FILE",
                   help="'#' comments; a comment mentioning 'multi' starts pairs")
    p.add_argument("-o", "--output", help="write here instead of standard output")
    p.add_argument("--shipped", action="store_true",
                   help="regenerate the shipped rule set from TENSAT's three files")
    p.add_argument("--src", type=Path, default=DEFAULT_SRC,
                   help=f"folder with TENSAT's files for --shipped (default {DEFAULT_SRC})")
    p.add_argument("--out", type=Path, default=REPO / "rules",
                   help="folder for --shipped (default: the repository's rules/)")
    args = p.parse_args(argv)
    try:
        if args.shipped:
            args.out.mkdir(parents=True, exist_ok=True)
            for fname, text in shipped(args.src).items():
                (args.out / fname).write_text(text, encoding="utf-8")
                print(f"{args.out / fname}: {text.count(chr(10) + 'rule ')} rules")
            return 0
        entries = []
        for f in args.files:
            entries += read_tensat(f, False)
        for f in args.multi:
            entries += read_tensat(f, True)
        for f in args.mixed:
            entries += read_tensat(f, None)
        if not entries:
            p.error("no input files")
        text = render(convert_all(entries), "// converted from TENSAT by tools/import_tensat.py")
        parse_rules(text, args.output or "<output>")       # what we write must load
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)
        return 0
    except TirError as e:
        print(e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
