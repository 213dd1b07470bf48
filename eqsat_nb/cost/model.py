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

`OpSignature.bound_inputs` (only for `IN_PLACE_OPS`, i.e. concat) lists the operands whose buffer
exists before the node runs and that no producer can write into its output: graph inputs, and a
repeat of an earlier operand of the same node (its producer writes one place). With
`const_inputs` these are what a GPU runtime must copy into a concat's buffer; every other operand
is written there by its producer (analytic.py). Both are properties of the operand's e-class
(weight-only, holds an `input` node), so an e-node's cost does not depend on the extraction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..ir.graph import Graph, TensorType
from ..ir.ops import OPS, infer_types

FREE_OPS = frozenset({"lit", "input", "weight", "noop", "proj"})
IN_PLACE_OPS = frozenset({"concat"})    # ops whose signature records `bound_inputs`
OPAQUE_LAUNCHES = 1.0


@dataclass(frozen=True)
class OpSignature:
    """What a cost depends on: operator, attributes (schema order, as `Node.attrs`), types."""

    op: str
    attrs: tuple[tuple[str, Any], ...]
    inputs: tuple[TensorType, ...]
    outputs: tuple[TensorType, ...]
    const_inputs: tuple[int, ...] = ()      # operand indices that are weight-only (sorted)
    bound_inputs: tuple[int, ...] = ()      # IN_PLACE_OPS: graph inputs and repeated operands

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
    bound: tuple[int, ...] = ()
    if op in IN_PLACE_OPS:
        canon = [eg.find(x) for x in operands]
        bound = tuple(i for i, x in enumerate(canon)
                      if x in canon[:i] or any(eg.op_name(m) == "input" for m in eg.class_nodes(x)))
    return OpSignature(op, attr_t, ins, outs, consts, bound)


def graph_node_signatures(graph: Graph) -> Iterator[tuple[int, OpSignature | None]]:
    """(index into graph.nodes, signature) for every node; None for free ops and weight-only
    nodes (folded before inference: they cost nothing)."""
    env = dict(graph.inputs)
    const = {name: False for name, _ in graph.inputs}
    inputs = {name for name, _ in graph.inputs}
    for k, node in enumerate(graph.nodes):
        ins = [env[v] for v in node.inputs]
        env.update(zip(node.results, node.types))
        is_const = node.op == "weight" or (node.op != "input" and bool(node.inputs)
                                           and all(const[v] for v in node.inputs))
        for r in node.results:
            const[r] = is_const
        if is_const or node.op in FREE_OPS:
            yield k, None
            continue
        consts = tuple(i for i, v in enumerate(node.inputs) if const[v])
        bound: tuple[int, ...] = ()
        if node.op in IN_PLACE_OPS:
            bound = tuple(i for i, v in enumerate(node.inputs)
                          if v in inputs or v in node.inputs[:i])
        yield k, OpSignature(node.op, node.attrs, tuple(ins), node.types, consts, bound)


def graph_signatures(graph: Graph) -> Iterator[OpSignature]:
    """The signature of every compute node of `graph` that depends on an input, in order
    (weight-only sub-graphs are folded before inference and are left out)."""
    for _, sig in graph_node_signatures(graph):
        if sig is not None:
            yield sig


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def signature_to_json(sig: OpSignature) -> list:
    """A JSON-able form of `sig` (`signature_from_json` gives it back equal)."""
    return [sig.op, [[k, list(v) if isinstance(v, tuple) else v] for k, v in sig.attrs],
            [[list(t.shape), t.dtype] for t in sig.inputs],
            [[list(t.shape), t.dtype] for t in sig.outputs], list(sig.const_inputs),
            list(sig.bound_inputs)]


def signature_from_json(doc: list) -> OpSignature:
    """Inverse of `signature_to_json` (also reads the older 5-element form without
    `bound_inputs`)."""
    op, attrs, ins, outs, consts = doc[:5]
    bound = doc[5] if len(doc) > 5 else ()
    return OpSignature(op, tuple((k, _tuples(v)) for k, v in attrs),
                       tuple(TensorType(tuple(s), d) for s, d in ins),
                       tuple(TensorType(tuple(s), d) for s, d in outs), tuple(consts),
                       tuple(bound))


def graph_cost(model: CostModel, graph: Graph) -> float:
    """Total cost of a graph: every compute node that depends on an input (weight-only
    sub-graphs are folded before inference and cost nothing)."""
    return float(sum(model.cost(sig) for sig in graph_signatures(graph)))
