"""How attribute values are written in text (.tir and rule files alike)."""
from __future__ import annotations

from typing import Any


def format_literal(value: Any) -> str:
    """true, "same", [1, 2], 0.5, 3."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_literal(v) for v in value) + "]"
    if isinstance(value, float):
        return repr(value)
    return str(value)
