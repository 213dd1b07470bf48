"""Fresh names: `base`, else `base_1`, `base_2`, ... — the first one not yet taken."""
from __future__ import annotations


def unique(base: str, taken: set[str]) -> str:
    """The first of base, base_1, base_2, ... not in `taken`; added to it."""
    name, k = base, 1
    while name in taken:
        name = f"{base}_{k}"
        k += 1
    taken.add(name)
    return name
