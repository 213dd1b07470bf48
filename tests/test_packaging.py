"""constraints-oldest.txt (the oldest-dependency CI run, `.ci/run`) pins every dependency of
setup.cfg's install_requires and test extra to exactly the floor setup.cfg allows."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _version(v: str) -> tuple[int, ...]:
    """"4" == "4.0.0": trailing zeros do not count (PEP 440)."""
    parts = [int(x) for x in v.split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def _floors() -> dict[str, tuple[int, ...]]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    reqs = cfg["options"]["install_requires"].split() + \
        cfg["options.extras_require"]["test"].split()
    out = {}
    for r in reqs:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9][0-9.]*)", r)
        assert m, f"setup.cfg: {r!r} is not NAME>=FLOOR"
        out[m[1].lower()] = _version(m[2])
    return out


def _pins() -> dict[str, tuple[int, ...]]:
    out = {}
    for line in (ROOT / "constraints-oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, ver = line.split("==")
            out[name.strip().lower()] = _version(ver.strip())
    return out


def test_oldest_constraints_pin_every_floor():
    assert _pins() == _floors()
