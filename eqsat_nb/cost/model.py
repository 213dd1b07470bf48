"""Cost models: the cost of one e-node from its operator signature, in microseconds.

`CostModel.cost(sig)` prices one `OpSignature` (operator, attributes, input and output types);
results are memoised per instance, keyed by the signature. `egraph_costs` builds every node's
signature from an e-graph and returns the per-node cost array the extractors take.

Zero-cost nodes (TENSAT's treatment): `noop`, `input`, `weight`, literal leaves (`lit`), `proj`
(reading one result of a split computes nothing: the split node pays for producing them) and any
node whose e-class is weight-only (`is_const`): such sub-expressions are folded before inference.
`opaque` nodes (operators the IR does not model) cost one kernel launch, `OPAQUE_LAUNCHES` x the
model's `launch_us`. Layout-only ops are priced by the backend; see `analytic.py` and `ort.py` (rules).

`OpSignature.const_inputs` lists the operands that are weight-only (weights, or folded weight
expressions): measuring backends make them initializers of the one-node model (a runtime
pre-packs and never copies them) and feed the others as inputs. Callers that leave it empty get
every operand treated as an activation, as before.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..ir.graph import Graph, TensorType
from ..ir.ops import OPS, infer_types

FREE_OPS = frozenset({"lit", "input", "weight", "noop", "proj"})
OPAQUE_LAUNCHES = 1.0


@dataclass(frozen=True)
class OpSignature:
    """What a cost depends on: operator, attributes (schema order, as `Node.attrs`), types."""

    op: str
    attrs: tuple[tuple[str, Any], ...]
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    const_inputs: tuple[int, ...] = ()      # operand indices that are weight-only (sorted)

    @property
    def attr(self) -> dict[str, Any]:
        return dict(self.attrs)


class CostModel:
    """Base class: subclasses implement `_cost`; `cost` memoises it per signature."""

    name = "base"
    launch_us = 0.0       # the per-kernel floor; `opaque` nodes cost this

    def __init__(self) -> None:
        self._memo: dict[OpSignature, float] = {}

    def cost(self, sig: OpSignature) -> float:
        """Microseconds to run one node with this signature (0 for free ops)."""
        got = self._memo.get(sig)
        if got is None:
            if sig.op in FREE_OPS:
                got = 0.0
            elif sig.op == "opaque":
                got = OPAQUE_LAUNCHES * self.launch_us
            else:
                got = float(self._cost(sig))
            self._memo[sig] = got
        return got

    def _cost(self, sig: OpSignature) -> float:
        raise NotImplementedError

    # ------------------------------------------------------------------ e-graphs
    def egraph_costs(self, eg) -> np.ndarray:
        """float64[eg.num_nodes]: the cost of every e-graph node (dead nodes: 0)."""
        out = np.zeros(eg.num_nodes, np.float64)
        for n, sig in egraph_signatures(eg):
            out[n] = self._node_cost(eg, n, sig)
        return out

    def node_cost(self, eg, n: int) -> float:
        """The cost of live e-graph node n, not free and not in a weight-only class (what
        `egraph_costs` gives it)."""
        return self._node_cost(eg, n, node_signature(eg, n))

    def _node_cost(self, eg, n: int, sig: OpSignature | None) -> float:
        if sig is not None:
            return self.cost(sig)
        # opaque, or an untyped operand: cannot price, one launch
        return OPAQUE_LAUNCHES * self.launch_us if eg.op_name(n) == "opaque" else self.launch_us


def egraph_signatures(eg) -> Iterator[tuple[int, OpSignature | None]]:
    """(node, signature) for every live e-graph node that may cost something: free ops and
    weight-only classes are skipped; see `node_signature` for the None case."""
    for n in range(eg.num_nodes):
        if not eg.is_live(n) or eg.op_name(n) in FREE_OPS or eg.is_const(eg.node_class(n)):
            continue
        yield n, node_signature(eg, n)


def node_signature(eg, n: int) -> OpSignature | None:
    """The signature of e-graph node n; None for `opaque` nodes and nodes with an untyped
    operand (priced as launches)."""
    from ..egraph.convert import node_attrs_and_operands

    op = eg.op_name(n)
    if op == "opaque":
        return None
    attrs, operands = node_attrs_and_operands(eg, n)
    ins = tuple(eg.class_type(x) for x in operands)
    if any(t is None for t in ins):
        return None
    attr_t = tuple((s.name, attrs[s.name]) for s in OPS[op].attrs)
    if OPS[op].multi_result:
        outs = tuple(infer_types(op, list(ins), attr_t))
    else:
        t = eg.class_type(eg.node_class(n))
        outs = (t,) if t is not None else tuple(infer_types(op, list(ins), attr_t))
    consts = tuple(i for i, x in enumerate(operands) if eg.is_const(x))
    return OpSignature(op, attr_t, ins, outs, consts)


def graph_signatures(graph: Graph) -> Iterator[OpSignature]:
    """The signature of every compute node of `graph` that depends on an input, in order
    (weight-only sub-graphs are folded before inference and are left out)."""
    env = dict(graph.inputs)
    const = {name: False for name, _ in graph.inputs}
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        env.update(zip(node.results, node.types))
        is_const = node.op == "weight" or (node.op != "input" and bool(node.inputs)
                                           and all(const[v] for v in node.inputs))
        for r in node.results:
            const[r] = is_const
        if is_const or node.op in FREE_OPS:
            continue
        consts = tuple(i for i, v in enumerate(node.inputs) if const[v])
        yield OpSignature(node.op, node.attrs, tuple(ins), node.types, consts)


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def signature_to_json(sig: OpSignature) -> list:
    """A JSON-able form of `sig` (`signature_from_json` gives it back equal)."""
    return [sig.op, [[k, list(v) if isinstance(v, tuple) else v] for k, v in sig.attrs],
            [[list(t.shape), t.dtype] for t in sig.inputs],
            [[list(t.shape), t.dtype] for t in sig.outputs], list(sig.const_inputs)]


def signature_from_json(doc: list) -> OpSignature:
    op, attrs, ins, outs, consts = doc
    return OpSignature(op, tuple((k, _tuples(v)) for k, v in attrs),
                       tuple(TensorType(tuple(s), d) for s, d in ins),
                       tuple(TensorType(tuple(s), d) for s, d in outs), tuple(consts))


def graph_cost(model: CostModel, graph: Graph) -> float:
    """Total cost of a graph: every compute node that depends on an input (weight-only
    sub-graphs are folded before inference and cost nothing)."""
    return float(sum(model.cost(sig) for sig in graph_signatures(graph)))
