"""Scripts of tools/ loaded as modules, so a table is formatted by the tool that prints it."""
from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from types import ModuleType

from .records import ROOT


@lru_cache(maxsize=None)
def tool(name: str) -> ModuleType:
    """tools/NAME.py as a module (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"tools_{name}", ROOT / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod            # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod
