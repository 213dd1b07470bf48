"""Measured cost tables: per-operator times measured once on a device, loaded as a profile.

`tools/gpu_truth.py` measures every operator configuration the benchmark models' saturated
e-graphs need with the `torch` backend on a GPU and writes them as a table (JSON). The analytic
backend loads one by name, `--device h100-measured` (a table shipped in `eqsat_nb/cost/tables/`),
or by path, `--device FILE.json`: `TableCostModel` prices a signature by its measured time and
one the table lacks by the analytic profile the table names (`base_profile`), counting those
(`misses`) so a caller can say how much of an answer rests on measurement.

Format (`FORMAT`, version 1):

    {"format": "eqsat-nb cost table", "version": 1, "name": "h100-measured",
     "backend": "torch", "device": "gpu|NVIDIA H100 80GB HBM3|...", "base_profile": "h100",
     "precision": "fp32",
     "notes": {...}, "rows": [{"op": "conv2d", "attrs": {...},
                               "operands": [[[1, 64, 56, 56], "f32", "a"], ...], "us": 12.3}]}

`attrs` and `operands` are the cost cache's key parts (`measured.signature_key`: attributes with
defaults filled; per operand its shape, dtype and "w" for weight-only or "a"); `us` is the median
time of one call in microseconds. `precision` (default fp32) is what the kernels ran in: fp32
and tf32 tables hold f32 operands, fp16 and bf16 tables f16 and bf16 ones; a signature is looked
up with its float operands in the table's type, so a model is priced in the table's precision
whatever its own float type (a table of one precision never prices another: `cost.select`).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import TirError
from ..ir.graph import TensorType
from ..ir.ops import OPS, infer_types, normalize_attrs
from ..precision import IR_TYPE
from .analytic import FLOAT_TYPES, AnalyticCostModel, profile
from .db import canonical_json
from .measured import signature_key
from .model import CostModel, OpSignature

FORMAT = "eqsat-nb cost table"
VERSION = 1
TABLES_DIR = Path(__file__).resolve().parent / "tables"
GUIDE = "tools/GPU_TRUTH.md"


def shipped_tables() -> dict[str, Path]:
    """Tables shipped with the package, by name (file stem)."""
    if not TABLES_DIR.is_dir():
        return {}
    return {p.stem: p for p in sorted(TABLES_DIR.glob("*.json"))}


def is_table_name(name: str) -> bool:
    """Whether `--device name` means a cost table: a shipped table's name, any `*-measured`
    name (an error if none is shipped), or a JSON file whose "format" says so."""
    if name in shipped_tables() or name.endswith("-measured"):
        return True
    if name.endswith(".json") and os.path.isfile(name):
        try:
            doc = json.loads(Path(name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False            # the profile loader says what is wrong with it
        return isinstance(doc, dict) and doc.get("format") == FORMAT
    return False


def _key(op: str, attrs: Any, operands: Any) -> tuple[str, str, str]:
    return op, canonical_json(attrs), canonical_json(operands)


class CostTable:
    """A loaded table: measured µs by (op, attributes, operands) and what it was measured on."""

    def __init__(self, doc: Mapping[str, Any], path: str = "<table>") -> None:
        self.path = path
        self.name = str(doc.get("name") or Path(path).stem)
        self.backend = str(doc.get("backend", ""))
        self.device = str(doc.get("device", ""))
        self.base_profile = str(doc.get("base_profile", "h100"))
        self.precision = str(doc.get("precision", "fp32"))
        self._float = IR_TYPE.get(self.precision, "f32")
        self.notes = dict(doc.get("notes") or {})
        self.times: dict[tuple[str, str, str], float] = {}
        self.rows = list(doc["rows"])
        for row in self.rows:
            self.times[_key(row["op"], row["attrs"], row["operands"])] = float(row["us"])

    def __len__(self) -> int:
        return len(self.times)

    def lookup(self, sig: OpSignature) -> float | None:
        """The measured µs of `sig`, or None."""
        attrs, operands = signature_key(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
        for o in operands:
            if o[1] in FLOAT_TYPES:
                o[1] = self._float
        return self.times.get(_key(sig.op, attrs, operands))

    def samples(self) -> list[tuple[OpSignature, float]]:
        """Every row as (signature, measured µs): what a profile is fitted to
        (cost/calibrate.py). A row whose shapes its op no longer accepts is left out."""
        out = []
        for row in self.rows:
            op = row["op"]
            try:
                attrs = normalize_attrs(OPS[op], {k: tuple(v) if isinstance(v, list) else v
                                                  for k, v in row["attrs"].items()})
                ins = tuple(TensorType(tuple(shape), dtype) for shape, dtype, _ in row["operands"])
                outs = tuple(infer_types(op, list(ins), attrs))
            except (TirError, ValueError, TypeError):
                continue
            const = tuple(i for i, (_, _, kind) in enumerate(row["operands"]) if kind == "w")
            out.append((OpSignature(op, attrs, ins, outs, const), float(row["us"])))
        return out


def in_precision(sig: OpSignature, precision: str) -> OpSignature:
    """`sig` with its float operands and results in `precision`'s element type (f16 for fp16,
    bf16, f32 for fp32 and tf32): the configuration a model deployed in that precision runs,
    and the key a table of that precision holds it under. Integer and bool tensors keep their
    types."""
    want = IR_TYPE[precision]

    def retype(types: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
        return tuple(TensorType(t.shape, want) if t.dtype in FLOAT_TYPES else t for t in types)
    return replace(sig, inputs=retype(sig.inputs), outputs=retype(sig.outputs))


def table_rows(samples: Iterable[tuple[OpSignature, float]], precision: str | None = None
               ) -> list[dict[str, Any]]:
    """Table rows for (signature, measured µs) pairs, one per distinct key (the first kept).
    With `precision`, each signature is keyed with its floats in that precision's type
    (`in_precision`): the rows of a table of that precision."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for sig, us in samples:
        if precision is not None:
            sig = in_precision(sig, precision)
        attrs, operands = signature_key(sig.op, sig.attrs, sig.inputs, sig.const_inputs)
        k = _key(sig.op, attrs, operands)
        if k not in rows:
            rows[k] = {"op": sig.op, "attrs": attrs, "operands": operands, "us": float(us)}
    return list(rows.values())


def table_json(name: str, rows: list[dict[str, Any]], backend: str, device: str,
               base_profile: str, notes: Mapping[str, Any] | None = None,
               precision: str = "fp32") -> str:
    """The table as JSON text: the header indented, one row a line, rows in a stable order."""
    head = {"format": FORMAT, "version": VERSION, "name": name, "backend": backend,
            "device": device, "base_profile": base_profile, "precision": precision,
            "notes": dict(notes or {})}
    ordered = sorted(rows, key=lambda r: (r["op"], canonical_json(r["operands"]),
                                          canonical_json(r["attrs"])))
    lines = [json.dumps(r, sort_keys=True, separators=(", ", ": ")) for r in ordered]
    text = json.dumps(head, indent=1)[:-2]            # without the closing "\n}"
    return text + ',\n "rows": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"


def load_table(path: str | os.PathLike) -> CostTable:
    """A `CostTable` from a file (TirError, naming the file and row, if it is not one)."""
    where = str(path)
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise TirError(f"cannot read cost table: {e.strerror}", file=where) from None
    except json.JSONDecodeError as e:
        raise TirError(f"cost table is not valid JSON: {e.msg} (line {e.lineno})",
                       file=where) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TirError(f'not a cost table (expected "format": "{FORMAT}")', file=where)
    if doc.get("version") != VERSION:
        raise TirError(f"cost table version {doc.get('version')!r} is not {VERSION}", file=where)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise TirError("cost table has no list of rows", file=where)
    for i, row in enumerate(rows):
        ok = (isinstance(row, dict) and row.get("op") in OPS and isinstance(row.get("attrs"), dict)
              and isinstance(row.get("operands"), list)
              and all(isinstance(o, list) and len(o) == 3 for o in row["operands"]))
        if not ok:
            raise TirError(f"cost table row {i} needs op (an IR operator), attrs (an object) and "
                           "operands ([shape, dtype, 'w'|'a'] each)", file=where)
        us = row.get("us")
        if isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) \
                or us < 0:
            raise TirError(f"cost table row {i} ({row['op']}): us must be a finite number >= 0",
                           file=where)
    try:
        profile(str(doc.get("base_profile", "h100")))
    except (ValueError, TirError) as e:
        raise TirError(f"cost table's base_profile: {e}", file=where) from None
    from ..precision import PRECISIONS
    if doc.get("precision", "fp32") not in PRECISIONS:
        raise TirError(f"cost table's precision {doc.get('precision')!r} is not one of "
                       f"{', '.join(PRECISIONS)}", file=where)
    return CostTable(doc, where)


def resolve_table(name: str) -> CostTable:
    """A shipped table by name, or a table file by path."""
    shipped = shipped_tables()
    if name in shipped:
        return load_table(shipped[name])
    if name.endswith(".json"):
        return load_table(name)
    known = ", ".join(shipped) or "none yet"
    raise TirError(f"no measured cost table '{name}' is shipped (shipped: {known}); one is made "
                   f"by tools/gpu_truth.py on a machine with a GPU ({GUIDE}) and loaded with "
                   "--device FILE.json or, once committed to eqsat_nb/cost/tables/, by its name")


class TableCostModel(CostModel):
    """Measured costs from a `CostTable`; signatures it lacks are priced by its base profile."""

    name = "table"

    def __init__(self, table: CostTable | str) -> None:
        super().__init__()
        self.table = resolve_table(table) if isinstance(table, str) else table
        self.precision = self.table.precision
        self.base = AnalyticCostModel(self.table.base_profile, self.precision)
        self.launch_us = self.base.launch_us
        self.device = self.table.name
        self.hits = 0
        self.misses = 0

    def _cost(self, sig: OpSignature) -> float:
        got = self.table.lookup(sig)
        if got is None:
            self.misses += 1
            return self.base.cost(sig)
        self.hits += 1
        return got

    def measured(self, sig: OpSignature) -> bool:
        return self.table.lookup(sig) is not None

    def explain(self, sig: OpSignature) -> str:
        """"" for a measured signature; the base profile's rule, marked, for one the table
        lacks."""
        if self.measured(sig):
            return ""
        rule = self.base.explain(sig)
        return f"not measured: {self.table.base_profile} {rule or 'roofline'}"
