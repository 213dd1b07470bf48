"""A whole `.tir` graph as one ONNX model, built from the one-node lowerings (`onnx_node._lower`),
for timing a model end to end with the same runtime settings as the per-op `ort` backend (the
cost-accuracy check in `tools/cost_accuracy.py`). Not the project's ONNX exporter (that is
`eqsat_nb.onnx_io`): weights get random values, names are the IR's.

Inputs are graph inputs, weights are initializers (random; those feeding a batchnorm variance are
positive), so weight-only sub-expressions are constant-folded by onnxruntime exactly as the cost
model assumes (they cost 0). `noop` nodes (joins of several outputs) add nothing: their operands
become graph outputs.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..ir.graph import Graph
from .onnx_node import GELU_OPSET, IR_VERSION, ONNX_DTYPES, OPSET, _Lowering, _lower, random_array


def graph_model(graph: Graph, seed: int = 0, check: bool = True) -> onnx.ModelProto:
    """The ONNX model computing `graph` (random weights)."""
    rng = np.random.default_rng(seed)
    env = dict(graph.inputs)
    positive = {n.inputs[4] for n in graph.nodes if n.op == "batchnorm"}
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    noop_outs: dict[str, tuple[str, ...]] = {}
    opset = OPSET
    for k, node in enumerate(graph.nodes):
        if node.op == "weight":
            (r,) = node.results
            ty = node.types[0]
            inits.append(numpy_helper.from_array(random_array(ty, rng, r in positive), r))
            env[r] = ty
            continue
        if node.op == "input":
            env.update(zip(node.results, node.types))
            continue
        if node.op == "noop":
            noop_outs[node.results[0]] = tuple(node.inputs)
            env.update(zip(node.results, node.types))
            continue
        types = [env[v] for v in node.inputs]
        lw = _Lowering(types, set(), seed + k, set())
        _, op_opset = _lower(lw, node.op, dict(node.attrs), list(node.types))
        opset = max(opset, op_opset)
        ren = {f"in{i}": v for i, v in enumerate(node.inputs)}
        ren.update({f"out{j}": r for j, r in enumerate(node.results)})

        def name(x: str) -> str:
            return ren.get(x, f"n{k}_{x}") if x else x
        for n in lw.nodes:
            n.input[:] = [name(x) for x in n.input]
            n.output[:] = [name(x) for x in n.output]
            nodes.append(n)
        for t in lw.inits:
            t.name = name(t.name)
            inits.append(t)
        env.update(zip(node.results, node.types))
    outs: list[str] = []
    for o in graph.outputs:
        outs += list(noop_outs.get(o, (o,)))
    g = helper.make_graph(
        nodes, graph.name if hasattr(graph, "name") else "model",
        [helper.make_tensor_value_info(n, ONNX_DTYPES[t.dtype], list(t.shape))
         for n, t in graph.inputs],
        [helper.make_tensor_value_info(o, ONNX_DTYPES[env[o].dtype], list(env[o].shape))
         for o in dict.fromkeys(outs)],
        initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=IR_VERSION, producer_name="eqsat-nb")
    if check:
        onnx.checker.check_model(model, full_check=False)
    assert opset in (OPSET, GELU_OPSET)
    return model
