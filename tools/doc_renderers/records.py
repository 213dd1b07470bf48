"""The committed records the docs' tables are printed from, read once per process."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
DATA = "docs/data"                  # records written for the docs (each names its command)
GPU_TRUTH = "docs/gpu_truth"        # tools/gpu_truth.py's runs


@lru_cache(maxsize=None)
def load(relpath: str) -> Any:
    """A JSON record by its path from the repository root."""
    return json.loads((ROOT / relpath).read_text(encoding="utf-8"))


def rows_by(relpath: str, key: str = "model", section: str = "rows") -> dict[str, dict]:
    """A record's rows (its `section`) by their `key` field, in the record's order."""
    return {r[key]: r for r in load(relpath)[section]}
