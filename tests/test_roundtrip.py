"""Parse/print round trips: `parse(print_graph(g)) == g`, the printed form is stable, and the
canonical form (what `print_graph` writes) always has result types and leaves out defaults."""
from __future__ import annotations

import re
from itertools import permutations
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eqsat_nb.ir.builder import GraphBuilder, check_graph
from eqsat_nb.ir.graph import Graph
from eqsat_nb.ir.ops import OPS, REQUIRED
from eqsat_nb.ir.parse import load, parse
from eqsat_nb.ir.printer import print_graph

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "ir_examples").glob("*.tir"))

# Hand-written inputs covering every syntax feature. Result types, attribute order and spacing are
# deliberately not canonical in places.
SNIPPETS = {
    "readme_block": """\
// one function per file; %values are SSA, @names are weights
func @block(%x: tensor<1x64x56x56xf32>) -> tensor<1x64x56x56xf32> {
  %w1 = weight @w1 : tensor<64x64x3x3xf32>   // OIHW
  %0 = conv2d(%x, %w1) {stride = [1, 1], pad = "same", act = "relu"} : tensor<1x64x56x56xf32>
  %1 = ewadd(%0, %x) : tensor<1x64x56x56xf32>
  %a, %b = split(%1) {axis = 1, sizes = [32, 32]} : tensor<1x32x56x56xf32>, tensor<1x32x56x56xf32>
  %2 = concat(%b, %a) {axis = 1} : tensor<1x64x56x56xf32>
  return %2
}
""",
    "multi_return_inferred": """\
func @heads(%x: tensor<1x96x8x8xf32>) -> (tensor<1x32x8x8xf32>, tensor<1x64x8x8xf32>, tensor<f32>) {
  // no result types: all inferred
  %a, %b, %c = split(%x) {axis = -3, sizes = [32, 32, 32]}
  %bc = concat(%b, %c) {axis = 1}
  %m = reduce_mean(%a) {axes = [0, 1, 2, 3], keepdims = false}
  return %a, %bc, %m
}
""",
    "every_attr_kind": """\
func @attrs(%x: tensor<2x3x4xf64>, %g: tensor<4xf64>, %h: tensor<4xf64>) -> tensor<2x4x3xf64> {
  %0 = scale(%x) {value = -2.5e-3}
  %1 = pad(%0) {value = -1.0, pads = [0, 1, 0, 0, 1, 0]}
  %2 = slice(%1) {ends = [4], axes = [1], starts = [1]}
  %3 = layernorm(%2, %g, %h) {axis = -1, eps = 1E-6}
  %4 = dropout(%3) {ratio = .1}
  %5 = softmax(%4) {axis = -2}
  %6 = scale(%5) {value = 2}
  %7 = scale(%6) {value = +0.5}
  %8 = scale(%7) {value = 1e3}
  %9 = reduce_mean(%8) {axes = [2], keepdims = true}
  %10 = broadcast(%9) {shape = [2, 3, 4]}
  %11 = transpose(%10) {perm = [0, 2, 1]}
  %12 = relu(%11) {}
  %13 = scale(%12) {value = -inf}
  return %12
}
""",
    "defaults_written_out": """\
func @defaults(%x: tensor<1x8x16x16xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>) -> tensor<1x8x8x8xf32> {
  %w = weight @w : tensor<8x8x1x1xf32>
  %0 = conv2d(%x, %w) {stride = [1, 1], pad = "same", act = "none"}
  %1 = batchnorm(%0, %s, %b, %m, %v) {eps = 1e-05}
  %2 = softmax(%1) {axis = -1}
  %3 = dropout(%2) {ratio = 0.5}
  %4 = pad(%3) {pads = [0, 0, 0, 0, 0, 0, 0, 0], value = 0.0}
  %5 = reduce_mean(%4) {axes = [1], keepdims = true}
  %6 = broadcast(%5) {shape = [1, 8, 16, 16]}
  %7 = poolmax(%6) {kernel = [2, 2], stride = [2, 2], pad = "valid", act = "none"}
  return %7
}
""",
    "explicit_pads_and_groups": """\
func @convs(%x: tensor<1x8x15x15xf16>) -> tensor<1x16x8x8xf16> {
  %dw = weight @dw : tensor<8x1x3x3xf16>
  %pw = weight @pw : tensor<16x8x1x1xf16>
  %0 = conv2d(%x, %dw) {stride = [2, 2], pad = [1, 1, 1, 1], act = "sigmoid"}
  %1 = conv2d(%0, %pw) {pad = "valid", act = "tanh"}
  %2 = poolavg(%1) {kernel = [3, 3], pad = [1, 1, 1, 1]}
  return %2
}
""",
    "odd_names_tabs_and_spacing": """\
func @odd.names$1(%in.0: tensor<4x4xi32>, %mask: tensor<4x4xbool>, %f: tensor<4x4xf32>) -> (tensor<4x4xi32>, tensor<4x4xbool>, tensor<4x4xf32>) {
\t%w.$x = weight @layer.0$w : tensor<4x4xf32>
\t%a_1=matmul(%f,%w.$x){act="relu"}:tensor<4x4xf32>
\t%n = tanh(%a_1)   // trailing comment
\treturn %in.0,%mask,   %n
}
// comment after the function
""",
    "scalar_types": """\
func @scalar(%s: tensor<f32>, %t: tensor<f32>) -> tensor<f32> {
  %0 = ewmul(%s, %t) : tensor<f32>
  %1 = gelu(%0)
  return %1
}
""",
    "weights_only_no_args": """\
func @consts() -> (tensor<4x4x3x3xf32>, tensor<4x4x3x3xf32>) {
  %w = weight @w : tensor<4x4x1x1xf32>
  %v = weight @v : tensor<4x4x3x3xf32>
  %e = enlarge(%w, %v)
  %0 = ewadd(%e, %v)
  %m = merge(%v) {count = 2, groups = 4}
  return %0, %v
}
""",
}

README_CANONICAL = """\
func @block(%x: tensor<1x64x56x56xf32>) -> tensor<1x64x56x56xf32> {
  %w1 = weight @w1 : tensor<64x64x3x3xf32>
  %0 = conv2d(%x, %w1) {act = "relu"} : tensor<1x64x56x56xf32>
  %1 = ewadd(%0, %x) : tensor<1x64x56x56xf32>
  %a, %b = split(%1) {axis = 1, sizes = [32, 32]} : tensor<1x32x56x56xf32>, tensor<1x32x56x56xf32>
  %2 = concat(%b, %a) {axis = 1} : tensor<1x64x56x56xf32>
  return %2
}
"""


def assert_round_trips(graph: Graph) -> str:
    text = print_graph(graph)
    again = parse(text)
    assert again == graph
    assert print_graph(again) == text
    return text


@pytest.mark.parametrize("name", SNIPPETS)
def test_snippet_round_trips(name):
    graph = parse(SNIPPETS[name])
    text = assert_round_trips(graph)
    assert "//" not in text and "\t" not in text and "{}" not in text
    for line in text.split("\n")[1:-3]:          # every statement has its result types
        assert re.search(r"\) ?(\{.*\})? : tensor<", line) or " = weight @" in line, line


def test_canonical_form_of_the_readme_block():
    assert print_graph(parse(SNIPPETS["readme_block"])) == README_CANONICAL


def test_canonical_form_of_multiple_returns_and_scalars():
    text = print_graph(parse(SNIPPETS["multi_return_inferred"]))
    assert text.split("\n")[0] == ("func @heads(%x: tensor<1x96x8x8xf32>) -> "
                                   "(tensor<1x32x8x8xf32>, tensor<1x64x8x8xf32>, tensor<f32>) {")
    assert ("  %a, %b, %c = split(%x) {axis = -3, sizes = [32, 32, 32]} : tensor<1x32x8x8xf32>, "
            "tensor<1x32x8x8xf32>, tensor<1x32x8x8xf32>") in text
    assert "  %m = reduce_mean(%a) {axes = [0, 1, 2, 3], keepdims = false} : tensor<f32>" in text
    assert text.endswith("  return %a, %bc, %m\n}\n")


def test_attribute_literals_are_normalized():
    text = print_graph(parse(SNIPPETS["every_attr_kind"]))
    for line in ["%0 = scale(%x) {value = -0.0025}",
                 "%1 = pad(%0) {pads = [0, 1, 0, 0, 1, 0], value = -1.0}",   # schema order
                 "%2 = slice(%1) {axes = [1], starts = [1], ends = [4]}",
                 "%3 = layernorm(%2, %g, %h) {eps = 1e-06}",                # axis -1 is default
                 "%4 = dropout(%3) {ratio = 0.1}",
                 "%5 = softmax(%4) {axis = -2}",
                 "%6 = scale(%5) {value = 2.0}",                           # int where float
                 "%7 = scale(%6) {value = 0.5}",
                 "%8 = scale(%7) {value = 1000.0}",
                 "%9 = reduce_mean(%8) {axes = [2]} : tensor<2x3x1xf64>",  # keepdims default
                 "%12 = relu(%11) : tensor<2x4x3xf64>",                    # empty {} dropped
                 "%13 = scale(%12) {value = -inf}"]:
        assert f"  {line}" in text, line


def test_defaults_are_omitted():
    text = print_graph(parse(SNIPPETS["defaults_written_out"]))
    assert text == """\
func @defaults(%x: tensor<1x8x16x16xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %m: tensor<8xf32>, %v: tensor<8xf32>) -> tensor<1x8x8x8xf32> {
  %w = weight @w : tensor<8x8x1x1xf32>
  %0 = conv2d(%x, %w) : tensor<1x8x16x16xf32>
  %1 = batchnorm(%0, %s, %b, %m, %v) : tensor<1x8x16x16xf32>
  %2 = softmax(%1) : tensor<1x8x16x16xf32>
  %3 = dropout(%2) : tensor<1x8x16x16xf32>
  %4 = pad(%3) {pads = [0, 0, 0, 0, 0, 0, 0, 0]} : tensor<1x8x16x16xf32>
  %5 = reduce_mean(%4) {axes = [1]} : tensor<1x1x16x16xf32>
  %6 = broadcast(%5) {shape = [1, 8, 16, 16]} : tensor<1x8x16x16xf32>
  %7 = poolmax(%6) {kernel = [2, 2], stride = [2, 2], pad = "valid"} : tensor<1x8x8x8xf32>
  return %7
}
"""


@pytest.mark.parametrize("name", SNIPPETS)
def test_printed_attributes_are_exactly_the_non_defaults(name):
    graph = parse(SNIPPETS[name])
    lines = print_graph(graph).split("\n")[1:]
    for node, line in zip(graph.nodes, lines):
        if node.op == "weight":
            continue
        shown = re.findall(r"(\w+) = ", line.split("(", 1)[1])
        want = [k for k, v in node.attrs
                if OPS[node.op].attr_spec(k).default is REQUIRED
                or OPS[node.op].attr_spec(k).default != v]
        assert shown == want, line


def test_equality_ignores_layout_but_not_meaning():
    g = parse(SNIPPETS["readme_block"])
    assert parse(README_CANONICAL) == g                  # comments, defaults, spacing
    assert parse(README_CANONICAL.replace('"relu"', '"tanh"')) != g
    assert parse(README_CANONICAL.replace("concat(%b, %a)", "concat(%a, %b)")) != g
    assert parse(README_CANONICAL.replace("@w1", "@w2")) != g


# ------------------------------------------------------------------ checked-in examples

@pytest.mark.parametrize(
    "path", EXAMPLES or [pytest.param(None, marks=pytest.mark.skip(reason="no ir_examples/*.tir"))],
    ids=[p.stem for p in EXAMPLES] or ["none"])
def test_examples_are_canonical(path):
    source = path.read_text(encoding="utf-8")
    graph = load(path)
    text = print_graph(graph)
    assert text == source, f"{path.name} is not in canonical form (eqsat-nb print rewrites it)"
    assert parse(text) == graph


# ------------------------------------------------------------------ random graphs

_DTYPES = st.sampled_from(["f32", "f64", "f16", "i32", "bool"])
_NAMES = st.from_regex(r"v[A-Za-z0-9_.$]{0,5}", fullmatch=True)
_FLOATS = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e-5, 1e16, -2.5e-300])


@st.composite
def graphs(draw) -> Graph:
    """A random valid graph: inputs, then a chain of ops, each on values already made."""
    dtype = draw(_DTYPES)
    b = GraphBuilder(draw(st.from_regex(r"[A-Za-z0-9_.$]{1,8}", fullmatch=True)))
    pool: list[str] = []
    names: set[str] = set()

    def hint():
        n = draw(st.none() | _NAMES)
        if n is None or n in names:
            return None
        names.add(n)
        return n

    for _ in range(draw(st.integers(1, 2))):
        shape = draw(st.lists(st.integers(1, 5), min_size=0, max_size=4))
        pool.append(b.input(shape, dtype, name=hint()))

    for _ in range(draw(st.integers(1, 8))):
        v = draw(st.sampled_from(pool))
        shape = b.shape(v)
        rank = len(shape)
        kind = draw(st.sampled_from(["unary", "scale", "dropout", "binary", "concat", "split",
                                     "matmul", "transpose", "reshape", "softmax"]))
        if kind == "unary":
            out = b.op(draw(st.sampled_from(["relu", "tanh", "sigmoid", "gelu"])), v, name=hint())
        elif kind == "scale":
            out = b.op("scale", v, value=draw(_FLOATS), name=hint())
        elif kind == "dropout":
            out = b.op("dropout", v, ratio=draw(st.floats(0, 1)), name=hint())
        elif kind == "binary":
            same = [u for u in pool if b.type_of(u) == b.type_of(v)]
            out = b.op(draw(st.sampled_from(["ewadd", "ewmul"])), v, draw(st.sampled_from(same)),
                       name=hint())
        elif kind == "concat" and rank > 0:
            axis = draw(st.integers(0, rank - 1))
            fits = [u for u in pool if b.type_of(u).dtype == dtype and len(b.shape(u)) == rank
                    and all(d == e for i, (d, e) in enumerate(zip(b.shape(u), shape)) if i != axis)]
            others = draw(st.lists(st.sampled_from(fits), min_size=0, max_size=2))
            out = b.op("concat", v, *others, axis=draw(st.sampled_from([axis, axis - rank])),
                       name=hint())
        elif kind == "split" and any(d >= 2 for d in shape):
            axis = draw(st.sampled_from([i for i, d in enumerate(shape) if d >= 2]))
            cuts = sorted(draw(st.sets(st.integers(1, shape[axis] - 1), min_size=1)))
            sizes = [e - s for s, e in zip([0] + cuts, cuts + [shape[axis]])]
            outs = b.op("split", v, axis=axis, sizes=sizes, name=hint())
            pool.extend(outs[:-1])
            out = outs[-1]
        elif kind == "matmul" and rank >= 2:
            w = b.weight(shape[:-2] + (shape[-1], draw(st.integers(1, 5))), dtype=dtype)
            pool.append(w)
            out = b.op("matmul", v, w, act=draw(st.sampled_from(["none", "relu", "sigmoid",
                                                                "tanh"])), name=hint())
        elif kind == "transpose":
            perm = draw(st.sampled_from(list(permutations(range(rank)))))
            out = b.op("transpose", v, perm=list(perm), name=hint())
        elif kind == "reshape":
            new = draw(st.sampled_from([[b.type_of(v).numel], list(reversed(shape)),
                                        [1, *shape]]))
            out = b.op("reshape", v, shape=new, name=hint())
        elif kind == "softmax" and rank > 0:
            out = b.op("softmax", v, axis=draw(st.integers(-rank, rank - 1)), name=hint())
        else:
            out = b.op("relu", v, name=hint())
        pool.append(out)

    outputs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    return b.build(*outputs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_round_trip(graph):
    check_graph(graph)
    text = assert_round_trips(graph)
    check_graph(parse(text))


def test_builder_never_reuses_a_name_within_one_node():
    """An explicit name that equals the next automatic one must not be handed out twice."""
    from eqsat_nb.ir.builder import GraphBuilder

    b = GraphBuilder()
    x = b.input((2, 4))
    first, second = b.op("split", x, axis=1, sizes=(2, 2), names=["%0", None])
    assert first == "%0" and second != first
    g = b.build(first, second)
    assert parse(print_graph(g)) == g
    b = GraphBuilder()
    x = b.input((2, 4))
    first, second = b.op("split", x, axis=1, sizes=(2, 2), names=[None, "%0"])
    assert second == "%0" and first != second
