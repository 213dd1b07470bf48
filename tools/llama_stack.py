"""Stack a torch.onnx-exported Llama template to N decoder layers, as torch.onnx would write the
N-layer model, with fresh random weights written tensor by tensor (onnx and numpy only; the
method is in make_llama.py's docstring).

    from llama_stack import stack
    stack(TEMPLATE_DIR, OUT.onnx, layers)

TEMPLATE_DIR holds two exports of the same model, made by `make_llama.py export`: the template
(template.onnx, BASE_LAYERS decoder layers, with its data) and the probe (probe.onnx, one layer
fewer, its graph only), and template.json (the sizes; which initializer holds which parameter).

Names. The exporter names values and nodes with counters (`linear_7`, `val_167`,
`node_MatMul_138`) and module paths (`model.model.layers.1.self_attn`). Every number in a name
or in a node's metadata is a linear function of the layer j and of the model's depth N:
counters advance the same amount per decoder layer, and the names a late optimizer pass gives
(`node_Reshape_492`) start after all the nodes the model had, so they also move with N. Three
kinds of place are told apart, because the exporter treats them differently:
- the first layer (it also creates the constants the later layers share), everything before and
  after the layers, and shared constants: one name per model, read off the template (N = 4) and
  the probe (N = 3);
- the middle layers 1..N-2: read off the template's layers 1 and 2 and the probe's layer 1;
- the last layer (its outputs have one user fewer, `num_users` in its metadata): the template's
  layer 3 and the probe's layer 2.
A value a layer reads from the layer before it is named as that layer named it (the first
layer's step differs from the others', so references are resolved, not extrapolated).
"""
from __future__ import annotations

import json
import re
import resource
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

BASE_LAYERS = 4                 # the template's decoder layers; the probe has one fewer
_DIGITS = re.compile(r"\d+|\D+")
_LAYER = re.compile(r"layers\.(\d+)(?:\.|'|$)")
SCOPES = "pkg.torch.onnx.name_scopes"
CHUNK = 1 << 24                 # elements of random weights made at a time (64 MiB of float32)
STD = 0.02                      # transformers' initializer_range for Llama
FLOAT, FLOAT16, BFLOAT16 = 1, 10, 16    # TensorProto element types

FIRST, MIDDLE, LAST, SHARED = "first", "middle", "last", "shared"


class StackError(Exception):
    """The template is not a torch.onnx Llama export this stacker can extend."""


# ------------------------------------------------------------------ numbers in names
class Fit:
    """A string whose numbers are linear in (j, N), fitted to examples with the same text
    between the numbers: `Fit.model(probe, base)` for one string per model, `Fit.layer(b1, b2,
    p1)` for a middle layer (template layers 1, 2 at N = 4; probe layer 1 at N = 3)."""

    def __init__(self, parts: list[tuple[str | None, int, int, int]]) -> None:
        # (literal text, or None for a number: its value at j = 1 and N = BASE_LAYERS, its
        # step per layer j, its step per layer of depth N)
        self.parts = parts

    @staticmethod
    def _tokens(strings: Sequence[str], what: str) -> list[list[str]]:
        toks = [_DIGITS.findall(s) for s in strings]
        ok = all(len(t) == len(toks[0]) for t in toks) and all(
            len({t[k] for t in toks}) == 1 or all(t[k].isdigit() for t in toks)
            for k in range(len(toks[0])))
        if not ok:
            raise StackError(f"{what}: {' / '.join(repr(s[:80]) for s in strings)} differ in "
                             f"more than their numbers, so no per-layer rule can be read off")
        return toks

    @classmethod
    def model(cls, probe: str, base: str, what: str) -> "Fit":
        if probe == base:
            return cls([(base, 0, 0, 0)])
        tp, tb = cls._tokens([probe, base], what)
        return cls([(b, 0, 0, 0) if p == b else (None, int(b), 0, int(b) - int(p))
                    for p, b in zip(tp, tb)])

    @classmethod
    def layer(cls, b1: str, b2: str, p1: str, what: str) -> "Fit":
        if b1 == b2 == p1:
            return cls([(b1, 0, 0, 0)])
        t1, t2, tp = cls._tokens([b1, b2, p1], what)
        return cls([(x, 0, 0, 0) if x == y == z else
                    (None, int(x), int(y) - int(x), int(x) - int(z))
                    for x, y, z in zip(t1, t2, tp)])

    def at(self, n: int, j: int = 1) -> str:
        return "".join(str(v + (j - 1) * dj + (n - BASE_LAYERS) * dn) if lit is None else lit
                       for lit, v, dj, dn in self.parts)


# ------------------------------------------------------------------ one export
@dataclass
class Export:
    """One torch.onnx export: its graph and where each item sits (layer, role)."""

    model: Any
    path: Path
    layers: int
    node_layer: list[int | None]
    init_layer: list[int | None]
    info_layer: list[int | None]

    @property
    def graph(self) -> Any:
        return self.model.graph

    def segments(self, tags: Sequence[int | None]) -> list[tuple[str, list[list[int]]]]:
        return segments(tags, self.layers)


def _role(layer: int | None, layers: int) -> str:
    if layer is None:
        return SHARED
    return FIRST if layer == 0 else LAST if layer == layers - 1 else MIDDLE


def segments(tags: Sequence[int | None], layers: int) -> list[tuple[str, list[list[int]]]]:
    """A list of items tagged by decoder layer (None: none) as segments (role, runs):
    consecutive items of one layer form a run, and consecutive middle-layer runs one segment (a
    run per middle layer, in order); runs of the other roles are segments of their own."""
    out: list[tuple[str, list[list[int]]]] = []
    prev: Any = object()
    for i, t in enumerate(tags):
        role = _role(t, layers)
        if out and t == prev:
            out[-1][1][-1].append(i)
        elif out and role == MIDDLE and out[-1][0] == MIDDLE:
            out[-1][1].append([i])
        else:
            out.append((role, [[i]]))
        prev = t
    return out


def pair_segments(base: Sequence[int | None], probe: Sequence[int | None], base_layers: int,
                  what: str) -> list[tuple[str, list[list[int]], list[list[int]]]]:
    """The segments of a base list and of the probe's, paired (they must correspond: the same
    roles in the same order, runs of the same lengths, one middle run fewer in the probe)."""
    bs, ps = segments(base, base_layers), segments(probe, base_layers - 1)
    ok = len(bs) == len(ps) and all(
        rb == rp and len(b) == (2 if rb == MIDDLE else 1) * len(p) and
        all(len(x) == len(p[0]) for x in b + p) for (rb, b), (rp, p) in zip(bs, ps))
    if not ok:
        raise StackError(f"the {what} of the template and of the probe do not correspond "
                         f"layer for layer")
    return [(rb, b, p) for (rb, b), (_, p) in zip(bs, ps)]


_TEXT_LAYER = re.compile(r"layers[._](\d+)[._]")


def stack_lines(base: str, probe: str, n: int, what: str) -> str:
    """A text listing the model line by line (the graph's export signature: a line per
    parameter and lifted constant), with the middle layers' lines repeated for N layers."""
    bl, pl = base.split("\n"), probe.split("\n")

    def tags(lines: list[str]) -> list[int | None]:
        found = [_TEXT_LAYER.search(x) for x in lines]
        return [int(m.group(1)) if m else None for m in found]

    out = []
    for role, b_runs, p_runs in pair_segments(tags(bl), tags(pl), BASE_LAYERS, what):
        if role == MIDDLE:
            for j in range(1, n - 1):
                for i, k, pi in zip(b_runs[0], b_runs[1], p_runs[0]):
                    out.append(Fit.layer(bl[i], bl[k], pl[pi], what).at(n, j))
        else:
            for i, pi in zip(b_runs[0], p_runs[0]):
                out.append(Fit.model(pl[pi], bl[i], what).at(n))
    return "\n".join(out)


def read_export(path: Path) -> Export:
    import onnx

    if not path.is_file():
        raise StackError(f"{path}: no such file (make it with `make_llama.py export`)")
    model = onnx.load(str(path), load_external_data=False)
    g = model.graph
    node_layer: list[int | None] = []
    for n in g.node:
        scopes = next((p.value for p in n.metadata_props if p.key == SCOPES), None)
        if scopes is None:
            raise StackError(f"{path}: node '{n.name}' has no {SCOPES} metadata: not a "
                             f"torch.onnx (dynamo) export")
        m = _LAYER.search(scopes)
        node_layer.append(int(m.group(1)) if m else None)
    found = sorted({k for k in node_layer if k is not None})
    if found != list(range(len(found))) or len(found) < 3:
        raise StackError(f"{path}: decoder layers {found}; expected 0..L-1 with L >= 3")
    first = node_layer.index(0)
    last = len(node_layer) - 1 - node_layer[::-1].index(len(found) - 1)
    if any(node_layer[i] is None for i in range(first, last + 1)) or \
            any(node_layer[i] is not None and node_layer[i + 1] is not None and
                node_layer[i + 1] < node_layer[i] for i in range(len(node_layer) - 1)):
        raise StackError(f"{path}: the decoder layers' nodes are not one after the other")
    users: dict[str, set[int | None]] = {}
    for n, k in zip(g.node, node_layer):
        for v in n.input:
            users.setdefault(v, set()).add(k)
    init_layer = []
    for t in g.initializer:
        u = users.get(t.name, set())
        init_layer.append(next(iter(u)) if len(u) == 1 else None)   # read by one layer only
    defined = {t.name: k for t, k in zip(g.initializer, init_layer)}
    for n, k in zip(g.node, node_layer):
        for o in n.output:
            defined[o] = k
    info_layer = [defined.get(v.name) for v in g.value_info]
    return Export(model, path, len(found), node_layer, init_layer, info_layer)


# ------------------------------------------------------------------ the correspondence
class Plan:
    """The output's nodes, value_info and initializers for N layers, from the template (base)
    and the probe, with every name fitted (see the module doc)."""

    def __init__(self, base: Export, probe: Export, n: int) -> None:
        if base.layers != BASE_LAYERS or probe.layers != BASE_LAYERS - 1:
            raise StackError(f"the template has {base.layers} decoder layers and the probe "
                             f"{probe.layers}: expected {BASE_LAYERS} and {BASE_LAYERS - 1}")
        if n < 2:
            raise StackError(f"{n} layers: at least 2 (the first and the last)")
        self.base, self.probe, self.n = base, probe, n
        bg = base.graph
        self.node_segments = self._pair(base.node_layer, probe.node_layer, "nodes")
        self.init_segments = self._pair(base.init_layer, probe.init_layer, "initializers")
        self.info_segments = self._pair(base.info_layer, probe.info_layer, "value_info")
        # each value the base defines -> its name in output layer j (fitted, see Fit)
        self.fit: dict[str, Fit] = {}
        self._meta_fits: dict[tuple[str, int], list[Fit]] = {}    # metadata, per item
        # the decoder layer that defines each node output of a layer
        self.where: dict[str, int] = {}
        for role, b_runs, p_runs in self.node_segments:
            for r, run in enumerate(b_runs):
                for pos, (i, pi) in enumerate(zip(run, p_runs[min(r, len(p_runs) - 1)])):
                    node, pnode = bg.node[i], probe.graph.node[pi]
                    layer = base.node_layer[i]
                    twin = bg.node[b_runs[1][pos]] if role == MIDDLE else None
                    for s, o in enumerate(node.output):
                        if not o:
                            continue
                        if r == 0:              # the run written (a middle layer's: layer 1)
                            self._define(o, role, pnode.output[s],
                                         twin.output[s] if twin else None)
                        if layer is not None:
                            self.where[o] = layer
        # values the first layer computes for every layer (RoPE tables and the causal mask
        # when they are too large for the exporter to fold into constants)
        readers: dict[str, set[int]] = {}
        for n, k in zip(bg.node, base.node_layer):
            for v in n.input:
                readers.setdefault(v, set()).add(-1 if k is None else k)
        self.computed_for_all = {v for v, k in self.where.items()
                                 if k == 0 and any(r >= 2 for r in readers.get(v, ()))}
        # nodes of each decoder layer by place; the middle and last layers must line up
        self.node_place: dict[int, int] = {}
        by_layer: dict[int, list[Any]] = {}
        for i, (n, k) in enumerate(zip(bg.node, base.node_layer)):
            if k is not None:
                self.node_place[i] = len(by_layer.setdefault(k, []))
                by_layer[k].append(n)
        self.middle = [by_layer[1], by_layer[2]]
        last = by_layer[base.layers - 1]
        if [n.op_type for n in last] != [n.op_type for n in by_layer[1]]:
            raise StackError("the template's last decoder layer has other operators than its "
                             "middle layers")
        for role, b_runs, p_runs in self.init_segments:
            for pos, (i, pi) in enumerate(zip(b_runs[0], p_runs[0])):
                t = bg.initializer[i]
                twin = bg.initializer[b_runs[1][pos]].name if role == MIDDLE else None
                self._define(t.name, role, probe.graph.initializer[pi].name, twin)

    def _pair(self, b_tags: Sequence[int | None], p_tags: Sequence[int | None], what: str
              ) -> list[tuple[str, list[list[int]], list[list[int]]]]:
        return pair_segments(b_tags, p_tags, self.base.layers, what)

    def _define(self, name: str, role: str, probe_name: str, twin: str | None) -> None:
        what = f"value '{name}'"
        self.fit[name] = (Fit.layer(name, twin, probe_name, what) if role == MIDDLE else
                          Fit.model(probe_name, name, what))

    # -------------------------------------------------------------- names
    def value(self, name: str, j: int) -> str:
        """The output name of base value `name` as read by a node of output layer j (a middle
        layer's j; for other roles j does not matter) of the same role as its reader."""
        f = self.fit.get(name)
        return name if f is None else f.at(self.n, j)

    def read(self, i: int, q: int, j: int) -> str:
        """The output name of input q of base node i (of a decoder layer) in output layer j.
        A value of the layer before is named as that layer named it: the layer-2 node at the
        same place reads the corresponding value of layer 1, whose name in any middle layer is
        known (layer 0's nodes need not line up with the others': it also computes shared
        values)."""
        n = self.base.graph.node[i]
        v = n.input[q]
        w = self.where.get(v)
        layer = self.base.node_layer[i]
        if w is None or w == layer:
            return self.value(v, j)
        if v in self.computed_for_all:
            return self.value(v, 0)
        if w != layer - 1:
            raise StackError(f"node '{n.name}' of layer {layer} of the template reads '{v}' of "
                             f"layer {w}: only the layer before is expected")
        pos = self.node_place[i]
        if layer == 1:                        # a middle layer j: reads j - 1
            if j == 1:
                return self.value(v, 0)       # a value of the first layer
            return self.value(self.middle[1][pos].input[q], j - 1)
        if self.n == 2:                       # the last layer reads the first
            return self.value(self.middle[0][pos].input[q], 0)
        return self.value(self.middle[1][pos].input[q], self.n - 2)

    def read_after(self, name: str) -> str:
        """The output name of a value a node after the layers reads."""
        return self.value(name, self.n - 1)

    # -------------------------------------------------------------- the lists
    def _items(self, segments, make_one: Callable[[int, int, int, str], Any]) -> Iterator[Any]:
        """make_one(base index, probe index, j, role) over the output's items in order: a
        middle segment once per middle layer 1..N-2."""
        for role, b_runs, p_runs in segments:
            if role == MIDDLE:
                for j in range(1, self.n - 1):
                    for i, pi in zip(b_runs[0], p_runs[0]):
                        yield make_one(i, pi, j, role)
            else:
                for i, pi in zip(b_runs[0], p_runs[0]):
                    yield make_one(i, pi, self.n - 1 if role == LAST else 0, role)

    def _twin(self, segments, i: int) -> int:
        """The base index of item i's layer-2 twin (i in a middle segment's first run)."""
        for role, b_runs, _ in segments:
            if role == MIDDLE and i in b_runs[0]:
                return b_runs[1][b_runs[0].index(i)]
        raise KeyError(i)

    def _meta(self, key: tuple[str, int], props, twin_props, probe_props, role: str, j: int,
              what: str) -> None:
        """Fit each metadata value of item `key` (once) and write it for layer j."""
        fits = self._meta_fits.get(key)
        if fits is None:
            fits = [Fit.layer(mp.value, twin_props[k].value, probe_props[k].value, what)
                    if role == MIDDLE else Fit.model(probe_props[k].value, mp.value, what)
                    for k, mp in enumerate(props)]
            self._meta_fits[key] = fits
        for mp, f in zip(props, fits):
            mp.value = f.at(self.n, j)

    def nodes(self) -> Iterator[Any]:
        import onnx

        bg, pg = self.base.graph, self.probe.graph
        twins = {i: self._twin(self.node_segments, i) for role, b_runs, _ in
                 self.node_segments if role == MIDDLE for i in b_runs[0]}

        def one(i: int, pi: int, j: int, role: str) -> Any:
            n, p = bg.node[i], pg.node[pi]
            twin = bg.node[twins[i]] if role == MIDDLE else None
            c = onnx.NodeProto()
            c.CopyFrom(n)
            name_fit = (Fit.layer(n.name, twin.name, p.name, "node name") if twin else
                        Fit.model(p.name, n.name, "node name"))
            c.name = name_fit.at(self.n, j)
            layer = self.base.node_layer[i]
            if role == SHARED:
                c.input[:] = [self.read_after(v) if v else v for v in n.input]
            else:
                c.input[:] = [self.read(i, q, j) if v else v for q, v in enumerate(n.input)]
            c.output[:] = [self.value(v, j) if v else v for v in n.output]
            self._meta(("node", i), c.metadata_props, twin.metadata_props if twin else None,
                       p.metadata_props, role, j, f"metadata of node '{n.name}'")
            return c

        return self._items(self.node_segments, one)

    def value_info(self) -> Iterator[Any]:
        import onnx

        bg, pg = self.base.graph, self.probe.graph

        def one(i: int, pi: int, j: int, role: str) -> Any:
            v, p = bg.value_info[i], pg.value_info[pi]
            twin = bg.value_info[self._twin(self.info_segments, i)] if role == MIDDLE else None
            c = onnx.ValueInfoProto()
            c.CopyFrom(v)
            c.name = self.value(v.name, j)
            self._meta(("value_info", i), c.metadata_props,
                       twin.metadata_props if twin else None, p.metadata_props, role, j,
                       f"metadata of value '{v.name}'")
            return c

        return self._items(self.info_segments, one)

    def initializers(self) -> Iterator[tuple[Any, Any, int, str]]:
        """(output tensor without its data, base tensor, j, role)."""
        bg = self.base.graph

        def one(i: int, pi: int, j: int, role: str) -> tuple[Any, Any, int, str]:
            t = bg.initializer[i]
            return _header(t, self.value(t.name, j)), t, j, role

        return self._items(self.init_segments, one)

    def graph_metadata(self) -> Iterator[Any]:
        """The graph's metadata (torch.export's signature lists every parameter)."""
        import onnx

        probe = {p.key: p.value for p in self.probe.graph.metadata_props}
        for p in self.base.graph.metadata_props:
            c = onnx.StringStringEntryProto()
            c.CopyFrom(p)
            c.value = stack_lines(p.value, probe.get(p.key, p.value), self.n,
                                  f"graph metadata '{p.key}'")
            yield c

    def outputs(self) -> Iterator[Any]:
        import onnx

        for o in self.base.graph.output:
            c = onnx.ValueInfoProto()
            c.CopyFrom(o)
            c.name = self.read_after(o.name)
            yield c


# ------------------------------------------------------------------ writing
@dataclass
class StackReport:
    path: Path
    layers: int
    parameters: int
    data_bytes: int
    model_bytes: int
    seconds: float
    peak_rss: int

    def describe(self) -> str:
        return (f"{self.path}: {self.layers} layers, {self.parameters / 1e9:.3f} B parameters, "
                f"{self.model_bytes / 1e6:.1f} MB graph + {self.data_bytes / 1e9:.2f} GB data "
                f"({self.data_bytes} bytes), {self.seconds:.0f} s, peak RSS "
                f"{self.peak_rss / 2**30:.2f} GiB")


def stack(template_dir: Path, out: Path, layers: int, seed: int = 0) -> StackReport:
    """Write `out` and `out`.data: the template's model with `layers` decoder layers."""
    import onnx

    t0 = time.perf_counter()
    template_dir = Path(template_dir)
    base = read_export(template_dir / "template.onnx")
    probe = read_export(template_dir / "probe.onnx")
    meta_path = template_dir / "template.json"
    if not meta_path.is_file():
        raise StackError(f"{meta_path}: no such file (make it with `make_llama.py export`)")
    params: dict[str, str] = json.loads(meta_path.read_text())["parameters"]
    plan = Plan(base, probe, layers)
    model = onnx.ModelProto()
    model.CopyFrom(base.model)
    g = model.graph
    del g.node[:], g.initializer[:], g.value_info[:], g.output[:], g.metadata_props[:]
    g.metadata_props.extend(plan.graph_metadata())
    g.node.extend(plan.nodes())
    g.value_info.extend(plan.value_info())
    g.output.extend(plan.outputs())
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data_name = f"{out.name}.data"
    count = 0
    with open(out.parent / data_name, "wb") as data:
        for t, source, j, role in plan.initializers():
            param = params.get(source.name)
            if param is not None:
                if role == MIDDLE:          # the parameter of output layer j
                    param = re.sub(r"layers\.\d+\.", f"layers.{j}.", param)
                elif role == LAST:
                    param = re.sub(r"layers\.\d+\.", f"layers.{layers - 1}.", param)
                count += int(np.prod(t.dims, dtype=np.int64))
                payload = _random_chunks(t, param, seed)
            else:
                payload = iter([_stored_bytes(template_dir, source)])
            if source.external_data:
                offset, length = data.tell(), 0
                for chunk in payload:
                    data.write(chunk)
                    length += len(chunk)
                t.data_location = onnx.TensorProto.EXTERNAL
                for key, value in (("location", data_name), ("offset", str(offset)),
                                   ("length", str(length))):
                    e = t.external_data.add()
                    e.key, e.value = key, value
            else:
                t.raw_data = b"".join(payload)
            g.initializer.append(t)
        data_bytes = data.tell()
    onnx.save_model(model, str(out))
    return StackReport(out, layers, count, data_bytes, out.stat().st_size,
                       time.perf_counter() - t0,
                       resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def _header(t: Any, name: str) -> Any:
    """A copy of tensor `t` under `name` without its data (written by `stack`)."""
    import onnx

    c = onnx.TensorProto()
    c.CopyFrom(t)
    c.name = name
    c.ClearField("raw_data")
    c.ClearField("external_data")
    c.ClearField("data_location")
    return c


def _stored_bytes(folder: Path, t: Any) -> bytes:
    """The bytes of a template tensor as stored (inline or in its data file)."""
    ext = {e.key: e.value for e in t.external_data}
    if not ext:
        if t.raw_data or not any(len(getattr(t, f)) for f in (
                "float_data", "int32_data", "int64_data", "double_data", "uint64_data")):
            return t.raw_data
        from onnx import numpy_helper
        return numpy_helper.from_array(numpy_helper.to_array(t)).raw_data
    with open(folder / ext["location"], "rb") as f:
        f.seek(int(ext.get("offset", 0)))
        return f.read(int(ext["length"]))


def _random_chunks(t: Any, param: str, seed: int) -> Iterator[bytes]:
    """Fresh random values for parameter `param` in `t`'s element type, CHUNK elements at a
    time: normal with std 0.02 (transformers' initialization), RMSNorm weights around 1.
    Seeded by `seed` and the parameter's name, so a layer's weights do not depend on N."""
    n = int(np.prod(t.dims, dtype=np.int64))
    rng = np.random.default_rng([seed, zlib.crc32(param.encode())])
    mean = 1.0 if param.endswith("norm.weight") else 0.0
    for start in range(0, n, CHUNK):
        x = rng.standard_normal(min(CHUNK, n - start), dtype=np.float32)
        x *= STD
        x += mean
        if t.data_type == FLOAT16:
            yield x.astype(np.float16).tobytes()
        elif t.data_type == BFLOAT16:            # round to nearest even, as torch converts
            u = x.view(np.uint32)
            yield ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()
        elif t.data_type == FLOAT:
            yield x.tobytes()
        else:
            raise StackError(f"parameter '{param}' has element type {t.data_type}: expected "
                             f"fp16, bf16 or fp32")

