"""Where the shipped text files (grammars, rules, examples) live.

In a source checkout or an editable install they are the repository's top-level folders; a regular
install puts them under `<prefix>/share/eqsat-nb/` (setup.cfg's data_files).
"""
from __future__ import annotations

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
_SHARE = Path(sys.prefix) / "share" / "eqsat-nb"


def data_dir(name: str) -> Path:
    """The folder `name` (grammar, rules, ir_examples) of this installation."""
    for base in (_REPO, _SHARE):
        path = base / name
        if path.is_dir():
            return path
    raise FileNotFoundError(f"eqsat-nb data folder '{name}' not found under {_REPO} or {_SHARE}; "
                            "reinstall the package")


def grammar_path(name: str) -> Path:
    return data_dir("grammar") / name
