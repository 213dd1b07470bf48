"""Markdown table text and the number formats the docs' tables use."""
from __future__ import annotations

from typing import Iterable, Sequence

NONE = "–"          # an empty cell: not measured, not applicable
MINUS = "−"         # U+2212, as the docs write negative numbers


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """The lines of a Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row {list(row)} has {len(row)} cells, the header {len(header)}")
        lines.append("| " + " | ".join(row) + " |")
    return lines


def num(x: float | None, digits: int = 1, minus: str = MINUS) -> str:
    """`x` with `digits` decimals (Python's rounding), a typographic minus; NONE for None."""
    if x is None:
        return NONE
    s = f"{x:.{digits}f}"
    return minus + s[1:] if s.startswith("-") else s


def signed_pct(x: float | None, digits: int = 1, minus: str = MINUS) -> str:
    """+23.9 %, −1.3 %; NONE for None."""
    if x is None:
        return NONE
    return ("+" if x >= 0 else minus) + f"{abs(x):.{digits}f} %"


def ratio(x: float) -> str:
    """A ratio to about three significant digits: 408, 12.1, 2.26, 0.05."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def pct(before: float | None, after: float | None) -> float | None:
    """Speed-up as TASO and TENSAT report it, (before / after − 1) · 100; None if unknown."""
    if not before or not after:
        return None
    return (before / after - 1.0) * 100.0
