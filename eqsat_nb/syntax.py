"""Shared pieces of the two Lark front ends (.tir files and rule files): describing the tokens a
parser expected, and where 'end of file' is."""
from __future__ import annotations

from typing import Iterable, Mapping

from lark import Lark, Token

from .errors import Loc


def expected_tokens(parser: Lark, names: Iterable[str], describe: Mapping[str, str]) -> str:
    """'a value (%name), ')'' — readable names of terminals, at most six."""
    items = set()
    for name in names:
        if name in describe:
            items.add(describe[name])
            continue
        try:
            items.add(f"'{parser.get_terminal(name).pattern.value}'")
        except KeyError:
            items.add(name.lower())
    shown = sorted(items)
    return ", ".join(shown[:6] + (["..."] if len(shown) > 6 else []))


def end_loc(tok: Token, text: str) -> Loc:
    """Just past the last token (Lark puts the end token on it), or the end of an empty text."""
    if tok.end_line is not None and tok.end_column is not None:
        return Loc(tok.end_line, tok.end_column)
    return Loc(text.count("\n") + 1, len(text) - (text.rfind("\n") + 1) + 1)
