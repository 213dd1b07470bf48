"""`eqsat-nb profile MODEL --cost ort|trt|torch|analytic`: price every distinct operator
configuration the saturated e-graph of a model needs, filling the cost cache.

The model's e-graph is saturated with TENSAT's settings and the shipped rules (what `run` will
explore), every distinct `OpSignature` of it is collected, and the ones the cache does not hold
are measured, with a text progress bar on stderr (`-q`: none). A second run measures nothing.

`--calibrate` (with `--cost ort`) then fits the analytic `cpu` profile's rates to those measured
costs and writes the fitted profile as JSON to the calibrated-profile location
($EQSAT_NB_CPU_PROFILE, else `~/.config/eqsat-nb/cpu-calibrated.json`); an existing file is
replaced only with `--force`. Use it with `--cost analytic --device cpu-calibrated`.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from ..errors import TirError

def add_parser(sub) -> None:
    """Register `profile` on the CLI's sub-parsers."""
    from ..cost.select import BACKENDS

    c = sub.add_parser("profile", help="price every distinct op configuration of a model's "
                       "saturated e-graph with a cost backend, filling the cost cache")
    c.add_argument("model", metavar="MODEL", help="a .tir file")
    c.add_argument("--cost", choices=BACKENDS, default="analytic",
                   help="cost backend (default analytic)")
    c.add_argument("--device", help="analytic: cpu|a100|h100|h200|h100-roofline|cpu-calibrated|"
                   "FILE.json; "
                   "trt: GPU index; torch: cpu|cuda[:N]")
    c.add_argument("--cost-db", metavar="PATH", help="cost cache (SQLite; default "
                   "$EQSAT_NB_COST_DB, else the user cache directory)")
    c.add_argument("--calibrate", action="store_true", help="with --cost ort: fit the analytic "
                   "cpu profile to the measured costs and save it as cpu-calibrated")
    c.add_argument("--force", action="store_true", help="replace an existing calibrated profile")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=run)


def collect_signatures(path: str | Path):
    """(graph, saturated e-graph, saturation report, distinct signatures in first-seen order)."""
    from ..cost.model import egraph_signatures
    from ..egraph.convert import graph_to_egraph
    from ..ir.parse import load
    from ..resources import data_dir
    from ..rules.parse import load_rules
    from ..search.saturate import Limits, saturate

    graph = load(path)
    eg = graph_to_egraph(graph)
    report = saturate(eg, load_rules(data_dir("rules")), Limits())
    seen: dict = {}
    for _, sig in egraph_signatures(eg):
        if sig is not None and sig not in seen:
            seen[sig] = None
    return graph, eg, report, list(seen)


def signatures_key(path: str | Path) -> str:
    """Digest of everything the saturated e-graph's signature list depends on: the model file,
    the shipped rules, TENSAT's limits and the source of the code that parses, saturates and
    collects signatures (ir, egraph, rules, search, cost/model.py)."""
    import hashlib

    import eqsat_nb

    from ..resources import data_dir
    from ..search.saturate import Limits

    h = hashlib.sha256()
    try:
        h.update(Path(path).read_bytes())
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror}", file=str(path)) from None
    for f in sorted(data_dir("rules").glob("*.rules")):
        h.update(f.name.encode() + f.read_bytes())
    h.update(repr(Limits()).encode())
    pkg = Path(eqsat_nb.__file__).resolve().parent
    files = [pkg / "cost" / "model.py"]
    for sub in ("ir", "egraph", "rules", "search"):
        files += sorted((pkg / sub).rglob("*.py"))
    for f in files:
        h.update(f.relative_to(pkg).as_posix().encode() + f.read_bytes())
    return h.hexdigest()


def saturated_signatures(path: str | Path, cache=None) -> tuple[list, dict]:
    """(distinct signatures of the saturated e-graph, {nodes, stop, seconds, cached}). With a
    `CostCache`, the list is kept in it under `signatures_key`, so a second run of the same model
    neither parses nor saturates (nothing it depends on changed, or the key would differ)."""
    import json

    from ..cost.model import signature_from_json, signature_to_json

    key = signatures_key(path) if cache is not None else None
    if key is not None:
        got = cache.get_signatures(key)
        if got is not None:
            doc = json.loads(got)
            return [signature_from_json(d) for d in doc["sigs"]], {**doc["meta"], "cached": True}
    start = time.perf_counter()
    _, eg, report, sigs = collect_signatures(path)
    meta = {"nodes": eg.num_nodes, "stop": report.stop_reason,
            "seconds": time.perf_counter() - start}
    if key is not None:
        cache.put_signatures(key, str(path), json.dumps(
            {"meta": meta, "sigs": [signature_to_json(s) for s in sigs]}))
    return sigs, {**meta, "cached": False}


def run(args: argparse.Namespace) -> int:
    """The `profile` command."""
    from ..cost.measured import MeasuredCostModel
    from ..cost.select import make_cost_model
    from ..progress import Progress

    if args.calibrate and args.cost != "ort":
        raise TirError("--calibrate fits the cpu profile to ort measurements: use --cost ort")
    model = make_cost_model(args.cost, args.device, args.cost_db)
    if args.calibrate and model.name != "ort":      # pragma: no cover - ort never falls back
        raise TirError("--calibrate needs the ort backend")
    start = time.perf_counter()
    measuring = isinstance(model, MeasuredCostModel)
    sigs, meta = saturated_signatures(args.model, model.cache if measuring else None)
    samples = []
    t0 = time.perf_counter()
    with Progress("profile", len(sigs), quiet=args.quiet or not measuring) as bar:
        for i, sig in enumerate(sigs):
            samples.append((sig, model.cost(sig)))
            bar.update(i + 1, sig.op, force=i + 1 == len(sigs))
    t_cost = time.perf_counter() - t0
    name = model.name if model.name != "analytic" else f"analytic/{model.profile.name}"
    how = "signature list from the cache" if meta["cached"] else f"{meta['seconds']:.2f} s"
    line = (f"{args.model}: {name}: {len(sigs)} distinct op signatures in the saturated e-graph "
            f"({meta['nodes']} nodes, {meta['stop']}; {how})")
    if measuring:
        line += (f"; {model.measurements} measured, {model.cache_hits} cache hits, "
                 f"{t_cost:.2f} s; cache {model.cache.path}")
    else:
        line += f"; priced in {t_cost:.3f} s"
    print(line)
    print(f"total {time.perf_counter() - start:.2f} s; sum over signatures "
          f"{sum(us for _, us in samples) / 1000:.3f} ms")
    if args.calibrate:
        _calibrate(samples, args.force)
    return 0


def _calibrate(samples, force: bool) -> None:
    from ..cost.analytic import CPU, calibrated_path, profile_to_json
    from ..cost.calibrate import fit_profile
    from .files import write_atomic

    out = calibrated_path()
    if out.exists() and not force:
        raise TirError("calibrated profile exists; pass --force to replace it", file=str(out))
    try:
        fitted, before, after = fit_profile(samples, CPU)
    except ValueError as e:
        raise TirError(str(e)) from None
    print(f"calibration on {after.samples} signatures: built-in cpu profile gmean ratio "
          f"{before.gmean_ratio:.3f}, worst {before.worst_ratio:.2f} ({before.worst_op}); "
          f"fitted gmean {after.gmean_ratio:.3f}, worst {after.worst_ratio:.2f} "
          f"({after.worst_op})")
    print("fitted: " + ", ".join(
        f"{k} {getattr(fitted, k):.4g}" for k in ("matmul_flops", "vector_flops", "cache_bw",
                                                  "dram_bw", "transcendental", "pool",
                                                  "transpose_eff", "launch_us")))
    extra = {"samples": after.samples, "gmean_ratio": after.gmean_ratio,
             "worst_ratio": after.worst_ratio, "before_gmean_ratio": before.gmean_ratio,
             "before_worst_ratio": before.worst_ratio}
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TirError(f"cannot write calibrated profile: {e.strerror}", file=str(out)) from None
    body = profile_to_json(fitted, extra)
    write_atomic(str(out), lambda tmp: tmp.write_text(body, encoding="utf-8"))
    print(f"wrote {out} (use --cost analytic --device cpu-calibrated)")
