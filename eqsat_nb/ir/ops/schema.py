"""What an operator definition is (`OpDef`, `AttrSpec`) and the checks every op shares.

An `OpDef` is the one record the rest of the package reads about an operator: its attribute
schema and arity (parser, builder, rules), its shape function (`infer`), FLOPs and pricing class
(cost models), its reference semantics (`eval`, what the interpreter and rule verification run),
its ONNX form (`to_onnx`, written by the exporter, the splicer and the one-node models the
measuring cost backends time) and its PyTorch lowering (`torch`, the torch cost backend). The
definitions themselves live one module per operator family beside this one; `__init__.py`
collects them into the table. ONNX *import* maps ONNX op types, not IR ops (several ONNX ops map
to one IR op and back), so each family module also lists its `ONNX_IMPORT` mappers.

Shape functions reject invalid inputs with a `ShapeError` that names the operator. Element-wise
ops do not broadcast (TASO's implicit broadcasting let unsound rewrites through): `broadcast`
does. The one exception is `matmul`, which is ONNX/NumPy MatMul (matrix.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ...errors import ShapeError, TirError
from ..graph import DTYPES, Attrs, TensorType
from ..literal import format_literal
from ..shapes import normalize_axis

REQUIRED = object()
ACTIVATIONS = ("none", "relu", "sigmoid", "tanh")

InferFn = Callable[[list[TensorType], dict[str, Any]], list[TensorType]]
FlopsFn = Callable[[list[TensorType], list[TensorType], dict[str, Any]], int]
EvalFn = Callable[..., Any]          # (attrs dict, *operand arrays) -> array or tuple of arrays
OnnxFn = Callable[[Any, Any], None]  # (writer, OnnxNode) -> None; see onnx_map.py
TorchFn = Callable[[Any, dict[str, Any], list[TensorType]], Callable[..., Any]]
WorkFn = Callable[[list[TensorType], list[TensorType], dict[str, Any], Callable[[Any], int]],
                  tuple[int, bool]]

#: pricing classes the analytic cost model knows (cost/analytic.py says how each is priced)
COST_CLASSES = ("vector", "transcendental", "matrix", "pool", "transpose", "view", "split",
                "concat", "free")


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: its kind decides what literal is accepted and how it is stored.

    kinds: int, float, str (one of `choices`), ints (tuple of int), bool, padding ("same",
    "valid" or four ints [top, left, bottom, right]), dtype.
    """

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()


class AttrError(TirError):
    """A bad attribute; `attr` names it so the parser can point at it."""

    def __init__(self, message: str, attr: str | None = None) -> None:
        super().__init__(message)
        self.attr = attr


@dataclass(frozen=True)
class OpDef:
    """An operator. `arity` is (min, max) inputs, max None for variadic.

    Hooks (None where the op has none):
    - `eval(a, *xs)`: reference semantics on NumPy arrays, `a` the attributes as a dict; returns
      one array, or a tuple for a multi-result op. The ground truth of rule verification.
    - `to_onnx(w, n)`: write the ONNX node(s) computing it (onnx_map.OnnxNode `n`, writer `w`);
      a fused `act` is appended by the writer. `onnx_opset` = (oldest opset it can be written
      in, opset its usual form needs); `measure_opset`: the one-node model's opset at least.
    - `torch(torch, a, in_types)`: a function of torch tensors computing it (cost/torch_backend).
    - verification planning (check_outputs.py) reads what the reference kernel costs beyond its
      results: `interp_temps` x the results' bytes of temporaries, at BLAS speed when
      `interp_gemm`; or `work(in_types, out_types, a, nbytes)` -> (temporary bytes, runs as a
      GEMM) where that depends on the shapes (`nbytes(type)`: bytes of a value as held).
    `cost` is the analytic pricing class (COST_CLASSES); `positive` lists operands that random
    tests must draw positive (a batchnorm variance).
    """

    name: str
    arity: tuple[int, int | None]
    attrs: tuple[AttrSpec, ...]
    infer: InferFn
    flops: FlopsFn
    doc: str
    leaf: bool = False          # no inputs; its value comes from outside (input, weight)
    multi_result: bool = False  # number of results decided by attributes (split)
    eval: EvalFn | None = None
    to_onnx: OnnxFn | None = None
    onnx_opset: tuple[int, int] = (1, 1)
    measure_opset: int = 0
    torch: TorchFn | None = None
    cost: str = "vector"
    positive: tuple[int, ...] = ()
    interp_temps: float = 0.0
    interp_gemm: bool = False
    work: WorkFn | None = None
    unmeasured: str = ""        # why no one-node model can time it (leaves, noop)

    def attr_spec(self, name: str) -> AttrSpec | None:
        return next((s for s in self.attrs if s.name == name), None)


# ----------------------------------------------------------------------------------- helpers

def fail(msg: str) -> None:
    raise ShapeError(msg)


def same_dtype(ts: list[TensorType]) -> str:
    dtypes = {t.dtype for t in ts}
    if len(dtypes) > 1:
        fail(f"inputs have different element types {sorted(dtypes)}")
    return ts[0].dtype


def shape_text(t: TensorType) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def need_rank(t: TensorType, rank: int, what: str) -> None:
    if t.rank != rank:
        fail(f"{what} must have rank {rank}, got {shape_text(t)}")


def axis_of(axis: int, rank: int) -> int:
    try:
        return normalize_axis(axis, rank)
    except ValueError as e:
        raise ShapeError(str(e)) from None


def numel_out(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return sum(t.numel for t in outs)


def zero(ins: list[TensorType], outs: list[TensorType], a: dict) -> int:
    return 0


def act_flops(outs: list[TensorType], a: dict) -> int:
    return 0 if a.get("act", "none") == "none" else outs[0].numel


def unary(ins: list[TensorType], a: dict) -> list[TensorType]:
    """Shape function of an element-wise op of one operand: the operand's type."""
    return [ins[0]]


def elementwise_binary(ins: list[TensorType], a: dict) -> list[TensorType]:
    """Shape function of an element-wise op of two operands of one shape (no broadcasting)."""
    x, y = ins
    if x.shape != y.shape:
        fail(f"operand shapes differ: {shape_text(x)} vs {shape_text(y)} (use broadcast "
             f"explicitly)")
    same_dtype(ins)
    return [x]


# ----------------------------------------------------------------------------------- attributes

def _check_value(spec: AttrSpec, value: Any) -> Any:
    k = spec.kind
    if k == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if k == "float" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if k == "bool" and isinstance(value, bool):
        return value
    if k == "str" and isinstance(value, str):
        if spec.choices and value not in spec.choices:
            raise AttrError(f"attribute '{spec.name}' must be one of "
                            f"{', '.join(format_literal(c) for c in spec.choices)}, got "
                            f"{format_literal(value)}", spec.name)
        return value
    if k == "dtype" and value in DTYPES:
        return value
    if k == "ints" and isinstance(value, (list, tuple)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    if k == "padding":
        if value in ("same", "valid"):
            return value
        if isinstance(value, (list, tuple)) and len(value) == 4 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            return tuple(value)
        raise AttrError(f"attribute '{spec.name}' must be \"same\", \"valid\" or "
                        f"[top, left, bottom, right], got {format_literal(value)}", spec.name)
    want = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
            "ints": "a list of integers", "dtype": f"one of {', '.join(DTYPES)}"}[k]
    raise AttrError(f"attribute '{spec.name}' must be {want}, got {format_literal(value)}",
                    spec.name)


def _check_pair(name: str, value: tuple[int, ...]) -> None:
    if len(value) != 2 or any(v <= 0 for v in value):
        raise AttrError(f"attribute '{name}' must be two positive integers, got {list(value)}",
                        name)


def normalize_attrs(opdef: OpDef, given: dict[str, Any]) -> Attrs:
    """Validate `given` against the schema, fill defaults, return the canonical attribute tuple."""
    for name in given:
        if opdef.attr_spec(name) is None:
            known = ", ".join(s.name for s in opdef.attrs) or "none"
            raise AttrError(f"op '{opdef.name}' has no attribute '{name}' (attributes: {known})",
                            name)
    out = []
    for spec in opdef.attrs:
        if spec.name in given:
            value = _check_value(spec, given[spec.name])
        elif spec.default is REQUIRED:
            raise AttrError(f"op '{opdef.name}' requires attribute '{spec.name}'")
        else:
            value = spec.default
        if spec.name in ("stride", "kernel"):
            _check_pair(spec.name, value)
        out.append((spec.name, value))
    return tuple(out)


def check_arity(opdef: OpDef, n: int) -> None:
    lo, hi = opdef.arity
    if n < lo or (hi is not None and n > hi):
        want = (f"{lo}" if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}")
        raise TirError(f"op '{opdef.name}' takes {want} operand{'s' if want != '1' else ''}, "
                       f"got {n}")
