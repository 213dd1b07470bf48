"""Sizes for symbolic input dims where 1 is degenerate.

A symbolic dim the user did not fix is analysed at DEFAULT_DIM (1). For many models that is a
fine stand-in for the batch, but not for every dim: silero-vad's audio length at 1 gives its STFT
convolution a zero-size output, which the IR cannot hold (onnxsim's users meet the same wall).
When the import fails for such a reason (`DegenerateShape`: a zero-size value, onnx's shape
inference rejecting the sizes, a shape it cannot derive), other sizes are tried:

1. the sizes the model itself suggests: a metadata value listing an input's dims;
2. a small search: every free symbol at 2, 4, ... 8192 together, then as many symbols as
   possible back to 1 (so a batch stays 1 while an audio length grows).

Sizes work when they import and the input model runs in onnxruntime at them (onnx's inference
lets a Conv window longer than its input through); sizes that only import are the last resort.
The first that work are used and reported (`OnnxImport.size_note`); the written model
keeps its symbols only if it also matches the input in onnxruntime at another size (as for
sizes of 1). When nothing works, the error names the symbolic inputs and the `--input-shape`
line to give.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Iterator, Mapping

from ..errors import TirError
from .input_types import DegenerateShape, input_dims

SEARCH = tuple(2 ** k for k in range(1, 14))     # 2 ... 8192
SEARCH_SECONDS = 120.0                            # the whole search, at most


def import_at_working_sizes(make: Callable[[Mapping[str, int]], Any],
                            model: Any) -> tuple[Any, Any]:
    """(importer, what its run() returned) for the first symbol sizes that import. `make(sizes)`
    builds an importer whose free symbolic dims take `sizes[symbol]` (else DEFAULT_DIM)."""
    imp = make({})
    try:
        return imp, imp.run()
    except DegenerateShape as first:
        symbols = dict(getattr(imp, "free_symbols", {}))
        if not symbols:
            raise
        failure = first
    start = time.monotonic()
    tried: set[tuple[tuple[str, int], ...]] = set()

    imported_only: list[tuple[Any, Any]] = []    # imports, but onnxruntime refuses the sizes

    def attempt(sizes: Mapping[str, int]) -> tuple[Any, Any] | None:
        key = tuple(sorted(sizes.items()))
        if key in tried or time.monotonic() - start > SEARCH_SECONDS:
            return None
        tried.add(key)
        imp = make(sizes)
        try:
            out = imp.run()
        except DegenerateShape:
            return None
        if not _runs(model, input_dims(imp)[0]):
            imported_only.append((imp, out))
            return None
        return imp, out

    found = None
    for sizes in _hinted(model, symbols):
        found = attempt(sizes)
        if found is not None:
            break
    if found is None:
        for n in SEARCH:
            sizes = {s: n for s in symbols}
            found = attempt(sizes)
            if found is not None:
                found = _back_to_one(list(symbols), sizes, attempt) or found
                break
    if found is None and imported_only:
        found = imported_only[0]
    if found is None:
        raise TirError(_nothing_works(imp, symbols, failure), file=failure.file) from None
    imp, out = found
    used = {s: imp.sizes.get(s, 1) for s in symbols}
    why = failure.message
    imp.size_note = (f"symbolic dims analysed at {_assignment(used)}: at 1, {why}")
    return imp, out


def _back_to_one(symbols: list[str], sizes: dict[str, int],
                 attempt: Callable[[Mapping[str, int]], Any]) -> Any:
    """The import with as many symbols as possible back at 1 (None if none can be): every
    subset, largest first, while there are few symbols (unnamed dims that must agree, such as a
    batch in two inputs, go back together), else one symbol at a time."""
    from itertools import combinations

    if len(symbols) <= 4:
        for k in range(len(symbols), 0, -1):
            for ones in combinations(symbols, k):
                found = attempt({**sizes, **{s: 1 for s in ones}})
                if found is not None:
                    return found
        return None
    found = None
    for s in symbols:
        smaller = attempt({**sizes, s: 1})
        if smaller is not None:
            sizes, found = {**sizes, s: 1}, smaller
    return found


def another_size(model: Any, defaulted: Mapping[str, list[int]],
                 shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]] | None:
    """`shapes` with every defaulted dim at another size at which the input model runs in
    onnxruntime (d + 2, then 2d, 3d, 4d: a U-Net's skip connections want even sizes), where a
    rewritten model must match it before its symbols are kept; None if it runs at none."""
    for grow in (lambda d: d + 2, lambda d: 2 * d, lambda d: 3 * d, lambda d: 4 * d):
        out = dict(shapes)
        for name, axes in defaulted.items():
            dims = list(out[name])
            for a in axes:
                dims[a] = grow(dims[a])
            out[name] = tuple(dims)
        if out != dict(shapes) and _runs(model, out):
            return out
    return None


def _runs(model: Any, shapes: Mapping[str, tuple[int, ...]]) -> bool:
    """Whether onnxruntime runs the input model at these input shapes (onnx's shape inference
    accepts some sizes the operators do not, e.g. a Conv window longer than its input).
    RunStopped at the enclosing `stopping.time_limit`."""
    from ..errors import RunStopped
    from ..runtime import session
    from ..stopping import run_until
    from .measure import random_feeds

    try:
        run_until(session(model), None, random_feeds(model, shapes=shapes),
                  what="onnxruntime's run of the input model at other sizes for its "
                  "symbolic dims")
    except RunStopped:
        raise
    except Exception:      # noqa: BLE001 - onnxruntime's own error types: the sizes do not run
        return False
    return True


def _assignment(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{s}={n}" for s, n in sizes.items())


def shape_hint(imp: Any) -> str:
    """The `--input-shape` options for the importer's symbolic inputs, each symbolic dim a
    placeholder named after its symbol: "--input-shape x=1x3x<height>x<width>"."""
    return " ".join(f"--input-shape {name}=" + "x".join(
        str(d) if isinstance(d, int) else f"<{_symbol_of(name, k, d)}>" for k, d in
        enumerate(dims)) for name, dims in getattr(imp, "symbolic", {}).items())


def _nothing_works(imp: Any, symbols: Mapping[str, list[tuple[str, int]]],
                   failure: TirError) -> str:
    inputs = getattr(imp, "symbolic", {})
    line = shape_hint(imp)
    written = ", ".join(f"'{n}' [{', '.join(str(d) for d in dims)}]"
                        for n, dims in inputs.items())
    return (f"{failure.message}; the symbolic input dims ({written}) were analysed at 1, then "
            f"at {SEARCH[0]} to {SEARCH[-1]}, and no size tried imports: give the sizes the "
            f"model is used at, e.g. {line}")


def _symbol_of(name: str, axis: int, label: str) -> str:
    return label if label != "?" else f"{name}[{axis}]"


def _hinted(model: Any, symbols: Mapping[str, list[tuple[str, int]]]) -> Iterator[dict]:
    """Sizes the model's own metadata gives: a metadata value that lists the dims of an input
    (e.g. {"input_shape": "[1, 3, 224, 224]"} or a JSON map of input names to dims)."""
    dims_of = {}
    for inp in model.graph.input:
        tt = inp.type.tensor_type
        dims_of[inp.name] = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                             for d in tt.shape.dim]
    at = {(name, axis): s for s, places in symbols.items() for name, axis in places}
    for prop in model.metadata_props:
        for name, dims in _dim_lists(prop.key, prop.value, dims_of):
            sizes = {at[(name, k)]: v for k, v in enumerate(dims) if (name, k) in at}
            if sizes and all(v > 0 for v in sizes.values()):
                yield sizes


def _dim_lists(key: str, value: str, dims_of: Mapping[str, list]) -> Iterator[tuple[str, list]]:
    """(input, dims) pairs a metadata entry states: a JSON object by input name, or one list of
    ints that fits exactly one input (its fixed dims equal, its rank the same)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        for name, dims in parsed.items():
            if name in dims_of and _ints(dims) is not None:
                yield name, _ints(dims)
        return
    dims = _ints(parsed) if parsed is not None else None
    if dims is None:
        nums = re.findall(r"-?\d+", value) if re.fullmatch(r"[\s\[\](),x\d-]+", value) else []
        dims = [int(v) for v in nums] or None
    if dims is None:
        return
    fits = [n for n, d in dims_of.items() if len(d) == len(dims)
            and all(a is None or a == b for a, b in zip(d, dims)) and None in d]
    named = [n for n in fits if n.lower() in key.lower()]
    if len(named) == 1 or len(fits) == 1:
        yield (named or fits)[0], dims


def _ints(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                         for x in v):
        return v
    return None
