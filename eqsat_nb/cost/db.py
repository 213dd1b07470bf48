"""Persistent cost cache in SQLite (standard library only).

One row per measured configuration, keyed by (backend, device fingerprint, op, attributes, input
shapes) -> microseconds and the time it was measured. Safe with several processes at once: WAL
journal, a busy timeout, every write in its own `BEGIN IMMEDIATE` transaction, so a process killed
mid-write leaves the database as it was before that transaction (SQLite rolls the hot journal /
uncommitted WAL frames back on the next open). Location: `CostCache(path)`, else the environment
variable EQSAT_NB_COST_DB, else `$XDG_CACHE_HOME/eqsat-nb/costs.sqlite` (`~/.cache/...`).
"""
from __future__ import annotations

import json
import os
import platform
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

ENV_VAR = "EQSAT_NB_COST_DB"
BUSY_TIMEOUT_MS = 60_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS costs (
    backend     TEXT NOT NULL,
    device      TEXT NOT NULL,
    op          TEXT NOT NULL,
    attrs_json  TEXT NOT NULL,
    shapes_json TEXT NOT NULL,
    us          REAL NOT NULL,
    measured_at REAL NOT NULL,
    PRIMARY KEY (backend, device, op, attrs_json, shapes_json)
) WITHOUT ROWID
"""

_SIGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS signatures (
    key        TEXT PRIMARY KEY,
    model      TEXT NOT NULL,
    sigs_json  TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""

Key = tuple[str, str, str, str, str]


def default_path() -> Path:
    """EQSAT_NB_COST_DB, else the user cache directory (XDG_CACHE_HOME honoured)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "eqsat-nb" / "costs.sqlite"


def canonical_json(value: Any) -> str:
    """Deterministic JSON for key parts (sorted keys, tuples as lists, no spaces)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def make_key(backend: str, device: str, op: str, attrs: Any, shapes: Any) -> Key:
    """The cache key; `attrs` and `shapes` may be JSON strings or JSON-able values."""
    if not isinstance(attrs, str) and not isinstance(attrs, dict):
        attrs = dict(attrs)                   # an Attrs tuple of (name, value) pairs
    return (backend, device, op, canonical_json(attrs), canonical_json(shapes))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown-cpu"


def device_fingerprint() -> str:
    """A string that changes when measured CPU costs may: machine, CPU model, usable cores,
    onnxruntime version."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    from importlib import metadata
    try:                     # the version without importing onnxruntime (a cached run is fast)
        ort_version = metadata.version("onnxruntime")
    except metadata.PackageNotFoundError:  # pragma: no cover
        try:
            import onnxruntime
            ort_version = onnxruntime.__version__
        except ImportError:
            ort_version = "none"
    return (f"cpu|{platform.system()}|{platform.machine()}|{_cpu_model()}|{cores} cores"
            f"|ort {ort_version}")


class CostCache:
    """The cost database. Opens (and creates) lazily, one connection per process, so an instance
    may be inherited across fork."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_path()
        self._conn_obj: sqlite3.Connection | None = None
        self._pid: int | None = None

    # ------------------------------------------------------------------ connection
    def _conn(self) -> sqlite3.Connection:
        if self._conn_obj is not None and self._pid == os.getpid():
            return self._conn_obj
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        for attempt in range(50):          # journal-mode switch needs a moment alone
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(_SCHEMA)
                conn.execute(_SIGS_SCHEMA)
                break
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or attempt == 49:
                    raise
                time.sleep(0.05)
        self._conn_obj, self._pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        if self._conn_obj is not None and self._pid == os.getpid():
            self._conn_obj.close()
        self._conn_obj = None

    def __enter__(self) -> "CostCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads
    def get(self, backend: str, device: str, op: str, attrs: Any, shapes: Any) -> float | None:
        """Microseconds stored for this key, or None."""
        row = self._conn().execute(
            "SELECT us FROM costs WHERE backend=? AND device=? AND op=? AND attrs_json=? "
            "AND shapes_json=?", make_key(backend, device, op, attrs, shapes)).fetchone()
        return None if row is None else float(row[0])

    def get_many(self, keys: Iterable[Sequence[Any]]) -> dict[Key, float]:
        """The stored values of those `keys` (each (backend, device, op, attrs, shapes)) that are
        present, by canonical key; one read transaction."""
        wanted = [make_key(*k) for k in keys]
        out: dict[Key, float] = {}
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            for k in wanted:
                row = conn.execute(
                    "SELECT us FROM costs WHERE backend=? AND device=? AND op=? AND attrs_json=? "
                    "AND shapes_json=?", k).fetchone()
                if row is not None:
                    out[k] = float(row[0])
        finally:
            conn.execute("COMMIT")
        return out

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM costs").fetchone()[0])

    def rows(self) -> list[tuple]:
        return self._conn().execute(
            "SELECT backend, device, op, attrs_json, shapes_json, us, measured_at FROM costs "
            "ORDER BY backend, device, op, attrs_json, shapes_json").fetchall()

    # ------------------------------------------------------------------ writes
    def put(self, backend: str, device: str, op: str, attrs: Any, shapes: Any, us: float) -> None:
        """Store (or replace) one value, in its own transaction."""
        self.put_many([((backend, device, op, attrs, shapes), us)])

    def put_many(self, items: Iterable[tuple[Sequence[Any], float]]) -> None:
        """Store several (key, microseconds) pairs in one transaction."""
        rows = [(*make_key(*k), float(us), time.time()) for k, us in items]
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # ------------------------------------------------------------------ signature lists
    def get_signatures(self, key: str) -> str | None:
        """The JSON list of op signatures stored under `key` (a digest of model, rules and
        code; see `eqsat-nb profile`), or None."""
        row = self._conn().execute("SELECT sigs_json FROM signatures WHERE key=?",
                                   (key,)).fetchone()
        return None if row is None else str(row[0])

    def put_signatures(self, key: str, model: str, sigs_json: str) -> None:
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT OR REPLACE INTO signatures VALUES (?, ?, ?, ?)",
                         (key, model, sigs_json, time.time()))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def integrity_ok(self) -> bool:
        return self._conn().execute("PRAGMA integrity_check").fetchone()[0] == "ok"
