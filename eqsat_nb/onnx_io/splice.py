"""Optimized IR graph → ONNX, written into the model it came from.

The user's model is the reference: every value the optimizer left alone is computed by the
model's own nodes, written back verbatim (names, attributes, domains, order, opset), and only the
values a rewrite produced get new nodes. "Left alone" is structural: a value of the optimized
graph is kept when it is the same expression (same op, attributes and operands, down to the same
inputs and weights) as a value of the imported graph that carries an ONNX name.

New nodes are written in the model's opset and in the forms runtimes fuse: a Conv's bias as its
third input, Add/Mul with ONNX broadcasting instead of an Expand (onnxruntime folds an expanded
bias into an activation-sized constant and then no longer fuses Conv+Add+Relu), activations right
after the op they follow.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import TirError
from ..ir.graph import Graph, Node
from ..ir.opaque import DTYPE_TO_ONNX
from ..ir.tensors import as_dtype, from_array
from .exporter import _Writer
from .importer import default_opset
from .read import OnnxImport
from ..ir.names import unique
from .tidy import compact_concat, flatten_splits

Key = tuple


def value_keys(graph: Graph, ids: dict[Key, int]) -> dict[str, int]:
    """A structural id for every value: equal ids compute the same tensor. `ids` interns the
    (op, attributes, operand ids) keys, shared between the graphs compared (hash-consing keeps
    each key flat: nested keys would be rehashed whole at every level)."""
    def intern(k: Key) -> int:
        return ids.setdefault(k, len(ids))

    keys: dict[str, int] = {v: intern(("input", v)) for v, _ in graph.inputs}
    for node in graph.nodes:
        if node.op == "weight":
            keys[node.results[0]] = intern(("weight", node.attr["name"]))
            continue
        base = (node.op, node.attrs, tuple(keys[v] for v in node.inputs))
        for i, r in enumerate(node.results):
            keys[r] = intern(base + (i,))
    return keys


def _outer_inputs(node: Any) -> list[str]:
    """Every outer-scope value a node reads: its inputs and what its subgraphs capture."""
    names = [v for v in node.input if v]
    for a in node.attribute:
        graphs = list(a.graphs) + ([a.g] if a.HasField("g") else [])
        for g in graphs:
            inner = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                inner.update(o for o in n.output if o)
            for n in g.node:
                names.extend(v for v in _outer_inputs(n) if v not in inner)
            names.extend(o.name for o in g.output if o.name not in inner)
    return names


def _all_names(model: Any) -> set[str]:
    g = model.graph
    names = {i.name for i in g.input} | {o.name for o in g.output}
    names |= {t.name for t in g.initializer} | {t.name for t in g.sparse_initializer}
    for n in g.node:
        names.update(n.output)
        names.update(_outer_inputs(n))
        names.add(n.name)
    return names


class _Splicer:
    def __init__(self, imp: OnnxImport, optimized: Graph, weights: Mapping[str, np.ndarray]):
        self.imp = imp
        self.model = imp.model
        self.graph = optimized
        self.weights = weights
        self.opset = default_opset(self.model)
        ids: dict[Key, int] = {}
        self.orig_keys = orig_keys = value_keys(imp.graph, ids)
        named: dict[int, str] = {}
        producer = {o: i for i, n in enumerate(self.model.graph.node) for o in n.output if o}
        sources = {i.name for i in self.model.graph.input} | {
            t.name for t in self.model.graph.initializer}
        for onnx_name, ssa in imp.ssa_of.items():
            if onnx_name not in producer and onnx_name not in sources:
                continue                 # e.g. a folded constant's alias without a producer
            k = orig_keys[ssa]
            old = named.get(k)           # several names for one value: the earliest defined
            if old is None or producer.get(onnx_name, -1) < producer.get(old, -1):
                named[k] = onnx_name
        self.keys = value_keys(optimized, ids)
        self.onnx_name: dict[str, str] = {}      # SSA of the optimized graph → ONNX name
        for v, k in self.keys.items():
            if k in named:
                self.onnx_name[v] = named[k]
        self.taken = _all_names(self.model)
        self.producer = producer

    # ------------------------------------------------------------------ names
    def fresh(self, base: str) -> str:
        return unique("eqsat/" + base.lstrip("%"), self.taken)

    def served(self, v: str, out: Any) -> bool:
        """Is output value `v` the model's own output `out`, unchanged?"""
        ssa = self.imp.ssa_of.get(out.name)
        return ssa is not None and self.keys[v] == self.orig_keys[ssa]

    @property
    def changed(self) -> bool:
        """Does the optimized graph compute its outputs with anything the model lacks?"""
        return not all(self.served(v, o) for v, o in zip(self.graph.outputs,
                                                         self.model.graph.output))

    # ------------------------------------------------------------------ writing
    def write(self) -> Any:
        import onnx
        from onnx import helper

        g = self.graph
        writer = _Writer(g, self.weights, 0, self.opset, False)
        uses = g.consumers()
        prod = g.producers()
        for v in g.types():
            writer.name[v] = self.onnx_name[v] if v in self.onnx_name else self.fresh(v)
        self.writer, self.prod, self.uses = writer, prod, uses
        self.compact: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.pending: set[str] = set()     # values whose full-shape tensor is not written yet
        for node in g.nodes:
            if all(r in self.onnx_name for r in node.results):
                continue                              # the model's own node computes it
            if node.op == "weight":
                self.weight(writer, node)
            elif node.op == "broadcast":
                self.compact[node.results[0]] = self.compact_of(node.inputs[0])
                self.pending.add(node.results[0])
            elif node.op in ("ewadd", "ewmul"):
                self.elementwise(node)
            elif node.op == "matmul":
                self.matmul(node)
            elif node.op == "concat" and self.concat(node):
                continue
            elif node.op == "scale" and node.inputs[0] in self.pending:
                self.scale(node)
            else:
                for v in node.inputs:
                    self.full(v)
                writer.node(node, "")
        # the outputs, under the model's names and in its order
        out_names = [o.name for o in self.model.graph.output]
        sources: list[str] = []           # the value each output name must hold
        for v, o in zip(g.outputs, self.model.graph.output):
            if self.served(v, o):
                sources.append(o.name)
            else:
                self.full(v)
                sources.append(writer.name[v])
        new_nodes = _live(list(writer.nodes), set(sources))
        read = {x for n in new_nodes for x in _outer_inputs(n)} | set(sources)
        made = {o for n in new_nodes for o in n.output}
        keep = self.original_closure(read - made)
        kept_nodes = [_copy(self.model.graph.node[i]) for i in sorted(keep)]
        made_by_model = {o for n in kept_nodes for o in n.output}
        # a model value that has an output's name but not its value moves aside
        renamed = {name: self.fresh(name) for src, name in zip(sources, out_names)
                   if src != name and name in made_by_model}
        if renamed:
            captured = {x for n in kept_nodes for a in n.attribute if a.HasField("g") or a.graphs
                        for x in _outer_inputs(n)}
            if captured & set(renamed):
                raise TirError("cannot write the result: a graph output's name is also read "
                               "inside a subgraph of an unchanged node")
            _rename(kept_nodes, renamed)
            _rename(new_nodes, renamed, inputs_only=True)
            sources = [renamed.get(s, s) for s in sources]
        written: dict[str, str] = {}      # source value → the output name now holding it
        for src, name in zip(sources, out_names):
            if src == name:
                continue
            if src in made and src not in written:
                _rename(new_nodes, {src: name})        # the new node writes the output itself
                written[src] = name
            else:
                new_nodes.append(helper.make_node("Identity", [written.get(src, src)], [name]))
        made = {o for n in new_nodes for o in n.output}
        new_inits = list(writer.inits)
        if self.model.ir_version < 4:   # IR 3 lists every initializer as a graph input: new
            consts = [helper.make_node("Constant", [], [t.name], value=t) for t in new_inits
                      if t.name in {x for n in new_nodes for x in _outer_inputs(n)}]
            new_nodes = consts + new_nodes          # weights become Constants, inputs stay
            new_inits = []
        for n in new_nodes:
            if not n.name:
                n.name = self.fresh(n.op_type)
        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        del m.graph.node[:]
        m.graph.node.extend(kept_nodes)
        m.graph.node.extend(new_nodes)
        needed = {x for n in m.graph.node for x in _outer_inputs(n)} | set(out_names)
        needed |= {i.name for i in self.model.graph.input}     # IR 3: initializers as inputs
        inits = [t for t in self.model.graph.initializer if t.name in needed]
        inits += [t for t in new_inits if t.name in needed]
        del m.graph.initializer[:]
        m.graph.initializer.extend(inits)
        present = {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}
        vi = [v for v in self.model.graph.value_info
              if v.name in present and v.name not in renamed and v.name not in made]
        del m.graph.value_info[:]
        m.graph.value_info.extend(vi)
        return m

    def original_closure(self, names: set[str]) -> set[int]:
        """Indices of the model's nodes that compute `names`, and what those read, transitively."""
        nodes = self.model.graph.node
        keep: set[int] = set()
        todo = [n for n in names if n in self.producer]
        while todo:
            i = self.producer[todo.pop()]
            if i in keep:
                continue
            keep.add(i)
            todo.extend(v for v in _outer_inputs(nodes[i]) if v in self.producer)
        return keep

    def weight(self, writer: _Writer, node: Node) -> None:
        """A weight the model has no name for (e.g. a zero bias the importer made): an
        initializer from the weight values."""
        w = node.attr["name"]
        if w not in self.weights:
            raise TirError(f"weight @{w} has no value to write")
        dtype = node.types[0].dtype
        arr = as_dtype(self.weights[w], dtype)
        writer.values[node.results[0]] = arr
        writer.inits.append(from_array(arr, writer.name[node.results[0]], dtype))

    # ------------------------------------------------------------------ broadcasting forms
    def compact_of(self, v: str) -> tuple[str, tuple[int, ...]]:
        """An ONNX value that broadcasts (numpy rules) to `v`, and its shape: a broadcast is
        never written out while its consumers broadcast by themselves."""
        if v in self.compact:
            return self.compact[v]
        return self.writer.name[v], self.writer.types[v].shape

    def full(self, v: str) -> str:
        """The ONNX name holding `v` at its own shape (an Expand only where one is needed)."""
        w = self.writer
        if v in self.pending:
            self.pending.discard(v)
            name, shape = self.compact[v]
            if shape != w.types[v].shape:
                w.add("Expand", [name, w.named_ints(self.fresh("shape"), w.types[v].shape)],
                      [w.name[v]])
            else:
                w.add("Identity", [name], [w.name[v]])
        return w.name[v]

    def elementwise(self, node: Node) -> None:
        """Add/Mul with ONNX broadcasting; a conv's bias as the Conv's third input."""
        w = self.writer
        r = node.results[0]
        a, b = node.inputs
        if node.op == "ewadd" and (self.conv_bias(node, a, b) or self.conv_bias(node, b, a)):
            return
        (na, sa), (nb, sb) = self.compact_of(a), self.compact_of(b)
        shape = tuple(np.broadcast_shapes(sa, sb))
        op = "Add" if node.op == "ewadd" else "Mul"
        if shape == w.types[r].shape:
            w.add(op, [na, nb], [w.name[r]])
            return
        name = self.fresh(r)
        w.add(op, [na, nb], [name])
        self.compact[r] = (name, shape)
        self.pending.add(r)

    def matmul(self, node: Node) -> None:
        """MatMul broadcasts batch dims itself: a weight stays [K, N], not expanded to a batch."""
        w = self.writer
        (na, sa), (nb, sb) = (self.compact_of(v) for v in node.inputs)
        out = node.types[0].shape
        ok = (len(sa) >= 2 and len(sb) >= 2 and sa[-2:] == w.types[node.inputs[0]].shape[-2:]
              and sb[-2:] == w.types[node.inputs[1]].shape[-2:]
              and tuple(np.broadcast_shapes(sa[:-2], sb[:-2])) == out[:-2])
        ins = [na, nb] if ok else [self.full(v) for v in node.inputs]
        w.add("MatMul", ins, [w.name[node.results[0]]])

    def concat(self, node: Node) -> bool:
        """A concat of broadcast values (a merged projection's biases) as the Concat of their
        compact forms, itself broadcast by its readers (never expanded to activation size)."""
        if not any(v in self.pending for v in node.inputs):
            return False
        w = self.writer
        comp = [self.compact_of(v) for v in node.inputs]
        out = w.types[node.results[0]].shape
        ax = compact_concat([c for _, c in comp], [w.types[v].shape for v in node.inputs],
                            node.attr["axis"] % len(out))
        if ax is None:
            return False
        name = self.fresh(node.results[0])
        w.add("Concat", [n for n, _ in comp], [name], axis=ax)
        shape = list(comp[0][1])
        shape[ax] = sum(c[ax] for _, c in comp)
        self.compact[node.results[0]] = (name, tuple(shape))
        self.pending.add(node.results[0])
        return True

    def scale(self, node: Node) -> None:
        """A scale of a broadcast value (a bias folded with an attention scale) on the compact
        value, itself broadcast by its readers."""
        w = self.writer
        name, shape = self.compact_of(node.inputs[0])
        value = np.asarray(node.attr["value"], np.float64)
        out = self.fresh(node.results[0])
        w.add("Mul", [name, w.const(self.fresh("value"), value, doc=repr(node.attr["value"]),
                                    dtype=node.types[0].dtype)], [out])
        self.compact[node.results[0]] = (out, shape)
        self.pending.add(node.results[0])

    def conv_bias(self, node: Node, conv: str, bias: str) -> bool:
        """conv2d(x, w) + broadcast(reshape(b → [C,1,1])) → Conv(x, w, b), when the conv is new,
        has no fused activation and this add is its only use."""
        w = self.writer
        c = self.prod.get(conv)
        if (c is None or c.op != "conv2d" or len(c.inputs) != 2 or c.attr["act"] != "none"
                or conv in self.onnx_name):
            return False
        if len(self.uses.get(conv, ())) != 1 or conv in self.graph.outputs:
            return False
        channels = c.types[0].shape[1]
        name, shape = self.compact_of(bias)
        if shape not in ((channels, 1, 1), (1, channels, 1, 1)):
            return False
        bc = self.prod.get(bias)
        rs = self.prod.get(bc.inputs[0]) if bc is not None and bc.op == "broadcast" else None
        if rs is not None and rs.op == "reshape" and w.types[rs.inputs[0]].shape == (channels,):
            vector = self.full(rs.inputs[0])         # the bias vector the model had
        else:
            vector = self.fresh("bias")
            w.add("Reshape", [name, w.named_ints(self.fresh("shape"), [channels])], [vector])
        x, k = c.inputs
        xt, kt = w.types[x], w.types[k]
        w.add("Conv", [self.full(x), self.full(k), vector], [w.name[node.results[0]]],
              kernel_shape=list(kt.shape[2:]), strides=list(c.attr["stride"]),
              group=xt.shape[1] // kt.shape[1], **w.padding(c.attr, xt.shape[2:], kt.shape[2:]))
        return True


def _live(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """Drop new nodes none of whose results is read (by a later new node or an output)."""
    read = set(outputs)
    live: list[Any] = []
    for n in reversed(nodes):
        if any(o in read for o in n.output if o):
            live.append(n)
            read.update(_outer_inputs(n))
    return live[::-1]


def _copy(node: Any) -> Any:
    import onnx
    c = onnx.NodeProto()
    c.CopyFrom(node)
    return c


def _rename(nodes: list[Any], names: Mapping[str, str], inputs_only: bool = False) -> None:
    """Rename values in the top-level inputs and outputs of `nodes`, in place."""
    for n in nodes:
        for i, v in enumerate(n.input):
            if v in names:
                n.input[i] = names[v]
        if not inputs_only:
            for i, v in enumerate(n.output):
                if v in names:
                    n.output[i] = names[v]


def splice(imp: OnnxImport, optimized: Graph, weights: Mapping[str, np.ndarray] | None = None
           ) -> Any | None:
    """The model with `optimized` written into it, or None when it computes nothing the model
    does not already compute (then the input file is the result, unchanged)."""
    weights = weights if weights is not None else imp.weights
    s = _Splicer(imp, optimized, weights)
    for v, t in optimized.types().items():
        if t.dtype not in DTYPE_TO_ONNX:
            raise TirError(f"value {v} has element type {t.dtype}, which ONNX cannot hold")
    if not s.changed:
        return None
    flat = flatten_splits(optimized, keep=s.onnx_name)   # merged Q/K/V: one Split, not two
    if flat != optimized:
        s = _Splicer(imp, flat, weights)
    return s.write()


def _ops(p: Any) -> set[str]:
    from ..rules.pattern import PNode
    if not isinstance(p, PNode):
        return set()
    return {p.op}.union(*(_ops(o) for o in p.operands))


def rules_for_opset(rules: list[Any], opset: int) -> tuple[list[Any], dict[str, str]]:
    """The rules whose results can be written into a model of this default-domain opset, and
    for each dropped rule the op that cannot (checked before the search, never after it)."""
    from .exporter import OPSET_MIN

    kept, dropped = [], {}
    for rule in rules:
        made: set[str] = set()
        for _, sources, targets in rule.directions():
            made |= set().union(*(_ops(t) for t in targets)) - set().union(
                *(_ops(s) for s in sources))
        bad = sorted(op for op in made if OPSET_MIN.get(op, 1) > opset)
        if bad:
            dropped[rule.name] = f"{bad[0]} needs opset {OPSET_MIN[bad[0]]}"
        else:
            kept.append(rule)
    return kept, dropped
