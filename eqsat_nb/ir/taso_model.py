"""Reader for TASO's `.model` files (the graphs TASO and TENSAT optimize), so that our benchmark
graphs are built from the same source of truth as the published results.

A file is a sequence of 4-line records, in topological order:

    guid
    OpType (integer, TASO's `ops.h` numbering)
    dependencies "srcGuid:srcIdx,..." (inputs and weights depend on the reserved 10:0 / 11:0)
    parameters "comma-separated ints"

Parameter layouts, confirmed against the files in `shared/reference/taso_models/`:

    INPUT, WEIGHT, RELU, SIGMOID, TANH, DROPOUT, EW_ADD, EW_MUL, BATCHNORM: (first) input shape
    CONV2D     N,C,H,W, outC,inC/g,kH,kW, sH,sW, padMode,act, padH,padW
    POOL2D_*   N,C,H,W, type,kH,kW, sH,sW, padMode,act, padH,padW  (a second operand is a
               placeholder weight [C,1,kH,kW] that TASO threads through pools; it is dropped)
    CONCAT     axis                    SPLIT     axis, size...
    RESHAPE    output shape            MATMUL    act, output rank
    TRANSPOSE  perm..., shuffle  or  ndim, perm..., shuffle (both occur: bts.model vs vgg.model)
    ENLARGE    first operand's shape   MERGE_GCONV count (groups come from the consuming conv)

Operands are taken in the file's dependency order. Caution: TASO's own exporter keeps a node's
in-edges in a std::set ordered by source guid (EdgeCompare), so files it wrote (bts, inceptionv3,
nasnet_a and the *_optimized ones: every dependency list is ascending) list operands in creation
order, not operand order. Shape checks catch a swap that changes shapes (conv x/w, batchnorm);
a swap of equal-shaped operands cannot be seen: in bts.model the second attention matmul reads
(v, logits) where TASO's bert.py computes matmul(logits, v). The ONNX-imported files (squeezenet,
vgg, mobilenetv2) have non-ascending lists, i.e. real operand order.

padMode SAME=0, VALID=1; act NONE=0, SIGMOID=1, RELU=2, TANH=3. TASO's symmetric padH/padW are
not kept: SAME and VALID are our own padding modes with the same output sizes. Weights that no
operator consumes (the conv/FC biases dropped by TASO's ONNX importer) are skipped; a weight is
declared just before its first consumer and named after it (`conv3_w`, `bn7_var`, ...). Inputs are
`%input` (or `%input0`, `%input1`, ... when there are several). The graph's outputs are the values
nothing consumes, in file order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import Loc, ShapeError, TirError
from .builder import GraphBuilder
from .graph import Graph

TASO_OP_NAMES = (
    "INPUT", "WEIGHT", "ANY", "CONV2D", "DROPOUT", "LINEAR", "POOL2D_MAX", "POOL2D_AVG", "RELU",
    "SIGMOID", "TANH", "BATCHNORM", "CONCAT", "SPLIT", "RESHAPE", "TRANSPOSE", "EW_ADD", "EW_MUL",
    "MATMUL", "MUL", "ENLARGE", "MERGE_GCONV", "CONSTANT_IMM", "CONSTANT_ICONV", "CONSTANT_ONE",
    "CONSTANT_POOL", "SQUEEZE", "UNSQUEEZE", "EW_SUB", "EW_DIV", "EW_EQUAL", "EW_GREATER",
    "EW_LESS", "EW_MAX", "EW_MIN", "REDUCE_ARGMAX",
)
T = {name: i for i, name in enumerate(TASO_OP_NAMES)}
GUID_INPUT, GUID_WEIGHT = 10, 11
ACTIVATIONS = {0: "none", 1: "sigmoid", 2: "relu", 3: "tanh"}
PAD_MODES = {0: "same", 1: "valid"}

_SHAPE_OPS = {T["RELU"]: "relu", T["SIGMOID"]: "sigmoid", T["TANH"]: "tanh",
              T["DROPOUT"]: "dropout", T["EW_ADD"]: "ewadd", T["EW_MUL"]: "ewmul",
              T["BATCHNORM"]: "batchnorm"}
_ARITY = {T["CONV2D"]: (2, 2), T["POOL2D_MAX"]: (1, 2), T["POOL2D_AVG"]: (1, 2),
          T["RELU"]: (1, 1), T["SIGMOID"]: (1, 1), T["TANH"]: (1, 1), T["DROPOUT"]: (1, 1),
          T["EW_ADD"]: (2, 2), T["EW_MUL"]: (2, 2), T["BATCHNORM"]: (5, 5),
          T["CONCAT"]: (1, None), T["SPLIT"]: (1, 1), T["RESHAPE"]: (1, 1),
          T["TRANSPOSE"]: (1, 1), T["MATMUL"]: (2, 2), T["ENLARGE"]: (2, 2),
          T["MERGE_GCONV"]: (1, 1)}
# Weight names: `<prefix><ordinal>_<role of the operand>`.
_PREFIX = {"conv2d": "conv", "batchnorm": "bn"}
_ROLES = {"conv2d": ("x", "w"), "matmul": ("x", "w"),
          "batchnorm": ("x", "scale", "bias", "mean", "var"), "enlarge": ("w", "ref"),
          "ewadd": ("x", "y"), "ewmul": ("x", "y")}


@dataclass(frozen=True)
class TasoRecord:
    """One operator record; `line` is the 1-based line of its guid."""

    guid: int
    optype: int
    deps: tuple[tuple[int, int], ...]
    params: tuple[int, ...]
    line: int

    @property
    def type_name(self) -> str:
        if 0 <= self.optype < len(TASO_OP_NAMES):
            return TASO_OP_NAMES[self.optype]
        return f"OpType {self.optype}"


def _ints(text: str, what: str, line: int) -> tuple[int, ...]:
    text = text.strip()
    if not text:
        return ()
    try:
        return tuple(int(t) for t in text.split(","))
    except ValueError:
        raise TirError(f"{what} must be comma-separated integers, got {text!r}",
                       Loc(line, 1)) from None


def _one_int(text: str, what: str, line: int) -> int:
    values = _ints(text, what, line)
    if len(values) != 1:
        raise TirError(f"expected {what} (one integer), got {text!r}", Loc(line, 1))
    return values[0]


def _deps(text: str, line: int) -> tuple[tuple[int, int], ...]:
    out = []
    for item in filter(None, text.strip().split(",")):
        m = re.fullmatch(r"\s*(\d+):(\d+)\s*", item)
        if not m:
            raise TirError(f"dependency {item!r} is not 'guid:index'", Loc(line, 1))
        out.append((int(m.group(1)), int(m.group(2))))
    return tuple(out)


def parse_records(text: str) -> list[TasoRecord]:
    """Split a `.model` text into records; TirError (with its line) for a malformed one."""
    lines = text.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) % 4:
        raise TirError(f"{len(lines)} lines is not a whole number of 4-line operator records",
                       Loc(len(lines), 1))
    records = []
    for i in range(0, len(lines), 4):
        line = i + 1
        guid = _one_int(lines[i], "a guid", line)
        optype = _one_int(lines[i + 1], "an OpType", line + 1)
        records.append(TasoRecord(guid, optype, _deps(lines[i + 2], line + 2),
                                  _ints(lines[i + 3], "parameters", line + 3), line))
    return records


class _Reader:
    """Turns records into GraphBuilder calls, checking every record against what it claims."""

    def __init__(self, records: list[TasoRecord], name: str) -> None:
        self.b = GraphBuilder(name)
        self.records = records
        self.leaves: dict[int, TasoRecord] = {}       # guid -> INPUT/WEIGHT record
        self.weights: dict[int, str] = {}             # weight guid -> value, once declared
        self.values: dict[tuple[int, int], str] = {}  # (guid, idx) -> value
        self.used: set[tuple[int, int]] = set()
        self.order: list[tuple[int, int]] = []        # computed values in file order
        self.counts: dict[str, int] = {}
        self.inputs: list[TasoRecord] = []
        self.rec: TasoRecord | None = None

    def fail(self, message: str, line_offset: int = 0) -> TirError:
        rec = self.rec
        return TirError(f"{rec.type_name} (guid {rec.guid}): {message}",
                        Loc(rec.line + line_offset, 1))

    # ------------------------------------------------------------------ operands

    def operand(self, dep: tuple[int, int], consumer: str, position: int) -> str:
        self.used.add(dep)
        if dep in self.values:
            return self.values[dep]
        leaf = self.leaves.get(dep[0])
        if leaf is None or dep[1] != 0:
            raise self.fail(f"operand {dep[0]}:{dep[1]} is not defined by an earlier record", 2)
        if dep[0] not in self.weights:
            self.weights[dep[0]] = self.b.weight(leaf.params, self.weight_name(consumer, position))
        return self.weights[dep[0]]

    def weight_name(self, consumer: str, position: int) -> str:
        roles = _ROLES.get(consumer)
        role = roles[position] if roles and position < len(roles) else (
            "w" if len(self.rec.deps) == 1 else f"in{position}")
        return f"{_PREFIX.get(consumer, consumer)}{self.counts[consumer]}_{role}"

    def operands(self, op: str, deps: tuple[tuple[int, int], ...]) -> list[str]:
        self.counts[op] = self.counts.get(op, 0) + 1
        return [self.operand(d, op, i) for i, d in enumerate(deps)]

    def expect_shape(self, value: str, dims: tuple[int, ...], what: str = "operand") -> None:
        if self.b.shape(value) != tuple(dims):
            raise self.fail(f"{what} has shape {list(self.b.shape(value))} but the record says "
                            f"{list(dims)}", 3)

    def params(self, n: int) -> tuple[int, ...]:
        if len(self.rec.params) != n:
            raise self.fail(f"expected {n} parameters, got {len(self.rec.params)}", 3)
        return self.rec.params

    # ------------------------------------------------------------------ operators

    def conv2d(self) -> str:
        n, c, h, w, oc, cg, kh, kw, sh, sw, mode, act, ph, pw = self.params(14)
        x, wt = self.operands("conv2d", self.rec.deps)
        self.expect_shape(x, (n, c, h, w), "input")
        self.expect_shape(wt, (oc, cg, kh, kw), "weight")
        return self.b.op("conv2d", x, wt, stride=[sh, sw], pad=self.pad(mode, ph, pw),
                         act=self.act(act))

    def pool(self) -> str:
        n, c, h, w, kind, kh, kw, sh, sw, mode, act, ph, pw = self.params(13)
        op = "poolmax" if self.rec.optype == T["POOL2D_MAX"] else "poolavg"
        if kind != self.rec.optype:
            raise self.fail(f"pool type parameter {kind} differs from the record's OpType", 3)
        deps = self.rec.deps
        if len(deps) == 2:          # TASO's placeholder weight operand: consumed, not kept
            if deps[1][0] not in self.leaves or self.leaves[deps[1][0]].optype != T["WEIGHT"]:
                raise self.fail("second operand of a pool must be TASO's placeholder weight", 2)
            self.used.add(deps[1])
        (x,) = self.operands(op, deps[:1])
        self.expect_shape(x, (n, c, h, w), "input")
        return self.b.op(op, x, kernel=[kh, kw], stride=[sh, sw], pad=self.pad(mode, ph, pw),
                         act=self.act(act))

    def shaped(self) -> str:
        op = _SHAPE_OPS[self.rec.optype]
        args = self.operands(op, self.rec.deps)
        self.expect_shape(args[0], self.rec.params, "first operand")
        return self.b.op(op, *args)

    def concat(self) -> str:
        (axis,) = self.params(1)
        return self.b.op("concat", *self.operands("concat", self.rec.deps), axis=axis)

    def split(self) -> tuple[str, ...]:
        if len(self.rec.params) < 2:
            raise self.fail("expected an axis and at least one size", 3)
        axis, *sizes = self.rec.params
        (x,) = self.operands("split", self.rec.deps)
        return self.b.op("split", x, axis=axis, sizes=sizes)

    def reshape(self) -> str:
        (x,) = self.operands("reshape", self.rec.deps)
        return self.b.op("reshape", x, shape=list(self.rec.params))

    def transpose(self) -> str:
        (x,) = self.operands("transpose", self.rec.deps)
        rank, p = len(self.b.shape(x)), self.rec.params
        if len(p) == rank + 1:
            perm = p[:rank]
        elif len(p) == rank + 2 and p[0] == rank:
            perm = p[1:rank + 1]
        else:
            raise self.fail(f"parameters {list(p)} are neither 'perm..., shuffle' nor "
                            f"'ndim, perm..., shuffle' for a rank-{rank} operand", 3)
        return self.b.op("transpose", x, perm=list(perm))

    def matmul(self) -> str:
        act, ndim = self.params(2)
        x, y = self.operands("matmul", self.rec.deps)
        out = self.b.op("matmul", x, y, act=self.act(act))
        if len(self.b.shape(out)) != ndim:
            raise self.fail(f"result has rank {len(self.b.shape(out))}, the record says {ndim}", 3)
        return out

    def enlarge(self) -> str:
        w, ref = self.operands("enlarge", self.rec.deps)
        if self.rec.params:
            self.expect_shape(w, self.rec.params, "first operand")
        return self.b.op("enlarge", w, ref)

    def merge(self) -> str:
        (count,) = self.params(1)
        (w,) = self.operands("merge", self.rec.deps)
        return self.b.op("merge", w, count=count, groups=self.merge_groups(self.b.shape(w)))

    # ------------------------------------------------------------------ helpers

    def act(self, code: int) -> str:
        if code not in ACTIVATIONS:
            raise self.fail(f"unknown activation {code} (NONE=0, SIGMOID=1, RELU=2, TANH=3)", 3)
        return ACTIVATIONS[code]

    def pad(self, mode: int, ph: int, pw: int) -> str:
        if mode not in PAD_MODES:
            raise self.fail(f"unknown padding mode {mode} (SAME=0, VALID=1)", 3)
        if mode == 1 and (ph or pw):
            raise self.fail(f"VALID padding with explicit pads {ph},{pw}", 3)
        return PAD_MODES[mode]

    def merge_groups(self, weight: tuple[int, ...]) -> int:
        """Groups of the grouped conv whose weight a MERGE_GCONV rewrites (the record only has
        `count`): C_in of the conv that finally consumes the merged weight (through a chain of
        merges, as in resnext50_optimized.model) / C_in per group of this merge's operand."""
        guid = self.rec.guid
        while True:
            users = [r for r in self.records if (guid, 0) in r.deps]
            if len(users) != 1 or users[0].optype not in (T["CONV2D"], T["MERGE_GCONV"]):
                break
            user = users[0]
            if user.optype == T["MERGE_GCONV"]:
                guid = user.guid
                continue
            if (user.deps[1:] == ((guid, 0),) and len(user.params) == 14 and len(weight) == 4
                    and weight[1] > 0 and user.params[1] % weight[1] == 0):
                return user.params[1] // weight[1]
            break
        raise self.fail("cannot infer the number of groups: the merged weight does not feed "
                        "exactly one convolution (directly or through merges)")

    # ------------------------------------------------------------------ driver

    def run(self) -> Graph:
        seen: set[int] = set()
        for rec in self.records:
            self.rec = rec
            if rec.guid in seen or rec.guid in (GUID_INPUT, GUID_WEIGHT):
                raise self.fail(f"guid {rec.guid} is defined twice or reserved")
            seen.add(rec.guid)
            if rec.optype in (T["INPUT"], T["WEIGHT"]):
                self.leaf(rec)
        for i, rec in enumerate(self.inputs):   # "input", or input0, input1, ... when several
            name = "input" if len(self.inputs) == 1 else f"input{i}"
            self.values[(rec.guid, 0)] = self.b.input(rec.params, name=name)
        for rec in self.records:
            self.rec = rec
            if rec.optype not in (T["INPUT"], T["WEIGHT"]):
                self.compute(rec)
        outputs = [v for v in self.order if v not in self.used]
        if not outputs:
            raise TirError("the model computes nothing (no operator results)")
        return self.b.build(*(self.values[v] for v in outputs))

    def leaf(self, rec: TasoRecord) -> None:
        reserved = GUID_INPUT if rec.optype == T["INPUT"] else GUID_WEIGHT
        if rec.deps != ((reserved, 0),):
            raise self.fail(f"must depend on exactly {reserved}:0", 2)
        if not rec.params or any(d <= 0 for d in rec.params):
            raise self.fail(f"bad shape {list(rec.params)}", 3)
        self.leaves[rec.guid] = rec
        if rec.optype == T["INPUT"]:
            self.inputs.append(rec)

    def compute(self, rec: TasoRecord) -> None:
        lo, hi = _ARITY.get(rec.optype, (None, None))
        if lo is None:
            raise self.fail(f"unsupported operator type {rec.optype} ({rec.type_name})", 1)
        if len(rec.deps) < lo or (hi is not None and len(rec.deps) > hi):
            raise self.fail(f"expected {lo if lo == hi else f'{lo} or more'} operands, got "
                            f"{len(rec.deps)}", 2)
        t = rec.optype
        try:
            if t == T["CONV2D"]:
                out = self.conv2d()
            elif t in (T["POOL2D_MAX"], T["POOL2D_AVG"]):
                out = self.pool()
            elif t in _SHAPE_OPS:
                out = self.shaped()
            else:
                out = {T["CONCAT"]: self.concat, T["SPLIT"]: self.split,
                       T["RESHAPE"]: self.reshape, T["TRANSPOSE"]: self.transpose,
                       T["MATMUL"]: self.matmul, T["ENLARGE"]: self.enlarge,
                       T["MERGE_GCONV"]: self.merge}[t]()
        except ShapeError as e:
            raise self.fail(e.message) from None
        except TirError as e:
            if e.loc is not None:
                raise
            raise self.fail(e.message) from None
        for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
            self.values[(rec.guid, i)] = v
            self.order.append((rec.guid, i))


def _graph_name(stem: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return name or "main"


def taso_to_graph(text: str, name: str = "main", file: str | None = None) -> Graph:
    """Build a Graph from the text of a `.model` file. TirError names `file` and the line."""
    try:
        return _Reader(parse_records(text), name).run()
    except TirError as e:
        raise e.located(file, text) from None


def load_taso_model(path: str | Path, name: str | None = None) -> Graph:
    """Read a TASO `.model` file; the graph is named after the file unless `name` is given."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TirError(f"cannot read file: {e.strerror}", file=str(path)) from None
    except UnicodeDecodeError:
        raise TirError("file is not UTF-8 text", file=str(path)) from None
    return taso_to_graph(text, name or _graph_name(path.stem), str(path))
