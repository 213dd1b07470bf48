"""Verification runs the original and the optimized graph merged (`interp.shared_graph`): what
they share is computed once. These tests pin down that this changes nothing but the time: a wrong
rewrite hidden in a graph that otherwise shares everything is still caught, shared values are
only ever one expression, and the numbers are those of running each graph alone.
"""
from __future__ import annotations


import numpy as np
import pytest

from traced import traced_peak
from eqsat_nb import check_outputs
from eqsat_nb.check_outputs import compare, estimate_verification, verify_graphs
from eqsat_nb.cost.analytic import AnalyticCostModel
from eqsat_nb.ir import interp
from eqsat_nb.ir.ops import OPS
from eqsat_nb.ir.builder import GraphBuilder
from eqsat_nb.ir.parse import load
from eqsat_nb.optimize import Options, optimize
from eqsat_nb.resources import data_dir
from eqsat_nb.rules.parse import load_rules

EXAMPLES = data_dir("ir_examples")


def net(conv2_act: str | None = None, conv2_weight: str = "w2", conv2_pad=None,
        swap_concat: bool = False, swap_matmul: bool = False, pool: str = "poolmax",
        scale: float = 0.5, softmax_axis: int = -1, dropout: bool = False, transpose=None):
    """A small CNN with a matmul head. The defaults are the original; each argument changes one
    node deep inside it (everything upstream of that node stays shared):
    conv2_act fuses an activation into the second conv (its relu is then dropped), conv2_weight
    reads another weight, conv2_pad pads explicitly, swap_* swap operands, pool / scale /
    softmax_axis change an op or an attribute, dropout inserts an identity, transpose reorders
    the head's input."""
    b = GraphBuilder("net")
    x = b.input((1, 4, 8, 8), name="x")
    c1 = b.op("conv2d", x, b.weight((8, 4, 3, 3), name="w1"), act="relu")
    if dropout:
        c1 = b.op("dropout", c1)
    pad = {"pad": conv2_pad} if conv2_pad is not None else {}
    w2 = b.weight((8, 8, 3, 3), name=conv2_weight)
    if conv2_act is None:
        c2 = b.op("relu", b.op("conv2d", c1, w2, **pad))
    else:
        c2 = b.op("conv2d", c1, w2, act=conv2_act, **pad)
    cat = b.op("concat", *((c2, c1) if swap_concat else (c1, c2)), axis=1)
    p = b.op(pool, cat, kernel=(2, 2), stride=(2, 2))
    f = b.op("reshape", p, shape=(16, 16))
    if transpose is not None:
        f = b.op("transpose", f, perm=transpose)
    m = b.weight((16, 16), name="m")
    y = b.op("matmul", *((m, f) if swap_matmul else (f, m)))
    s = b.op("scale", y, value=scale)
    return b.build(b.op("softmax", s, axis=softmax_axis), y)


ORIGINAL = net()

CORRECT = {
    "fused relu": net(conv2_act="relu"),                # shares everything once lowered
    "explicit pad": net(conv2_pad=(1, 1, 1, 1)),        # another expression, the same function
    "dropout": net(dropout=True),
}

WRONG = {
    "fused sigmoid": net(conv2_act="sigmoid"),
    "another weight": net(conv2_weight="w2b"),
    "swapped concat": net(swap_concat=True),
    "swapped matmul": net(swap_matmul=True),
    "avg for max": net(pool="poolavg"),
    "scale attribute": net(scale=0.25),
    "softmax axis": net(softmax_axis=0),
    "transposed": net(transpose=(1, 0)),
}


def _alone(graph, seed=0):
    """The old path: the graph run on its own."""
    return interp.run(graph, seed=seed)


@pytest.mark.parametrize("name", list(WRONG))
def test_a_wrong_rewrite_in_a_shared_graph_is_caught(name):
    wrong = WRONG[name]
    merged = interp.shared_graph([ORIGINAL, wrong])
    alone = [len(interp.shared_graph([g]).nodes) for g in (ORIGINAL, wrong)]   # lowered
    assert len(merged.nodes) < sum(alone)
    check = verify_graphs(ORIGINAL, wrong, seeds=(0, 1))
    assert not check.ok and "MISMATCH" in check.summary()
    # the old path (each graph alone) agrees that it is wrong, on the same output
    old = compare(_alone(ORIGINAL), _alone(wrong), ORIGINAL.outputs)
    assert [o.ok for o in old] == [o.ok for o in compare(*_split(merged, 0), ORIGINAL.outputs)]


@pytest.mark.parametrize("name", list(CORRECT))
def test_a_correct_rewrite_passes_with_the_old_paths_numbers(name):
    good = CORRECT[name]
    check = verify_graphs(ORIGINAL, good, seeds=(0, 1, 2))
    assert check.ok and check.seeds == (0, 1, 2)
    for seed in (0, 1, 2):
        ref, got = _split(interp.shared_graph([ORIGINAL, good]), seed)
        for new, old in ((ref, _alone(ORIGINAL, seed)), (got, _alone(good, seed))):
            assert all(c.worst_excess < 1e-3 for c in compare(old, new, ORIGINAL.outputs))


def _split(merged, seed):
    outs = interp.run(merged, seed=seed)
    return outs[:len(outs) // 2], outs[len(outs) // 2:]


def test_fused_activation_and_dropout_share_every_value():
    for name in ("fused relu", "dropout"):
        merged = interp.shared_graph([ORIGINAL, CORRECT[name]])
        assert merged.nodes == interp.shared_graph([ORIGINAL]).nodes, name
        assert merged.outputs[:2] == merged.outputs[2:]
    # each weight is drawn once: a weight node per name and shape
    names = [n.attr["name"] for n in interp.shared_graph([ORIGINAL, WRONG["another weight"]]
                                                         ).weights()]
    assert sorted(names) == ["m", "w1", "w2", "w2b"]


def _one_node(value=1.0, weight_shape=(3, 3), input_type=(3, 3)):
    b = GraphBuilder("g")
    x = b.input(input_type, name="x")
    w = b.weight(weight_shape, name="w")
    y = b.op("ewadd", x, b.op("reshape", w, shape=input_type)) if weight_shape != input_type \
        else b.op("ewadd", x, w)
    return b.build(b.op("scale", y, value=value))


def test_keys_tell_apart_what_compares_equal_in_python():
    """0.0 == -0.0 in Python: as attribute values they stay two expressions (keys compare
    attributes by repr), as do a weight name with two shapes."""
    for a, b in ((_one_node(0.0), _one_node(-0.0)),
                 (_one_node(weight_shape=(3, 3)), _one_node(weight_shape=(9,)))):
        merged = interp.shared_graph([a, b])
        assert merged.outputs[0] != merged.outputs[1]
        assert sum(n.op == "scale" for n in merged.nodes) == 2
    assert len(interp.shared_graph([_one_node(2.0), _one_node(2.0)]).nodes) == 3


def test_inputs_declared_differently_are_refused():
    with pytest.raises(ValueError, match="declare input %x"):
        interp.shared_graph([_one_node(input_type=(3, 3)), _one_node(input_type=(9,),
                                                                     weight_shape=(3, 3))])


def test_merged_order_frees_shared_values_early():
    """A node only the optimized graph has comes right after its last operand, and a weight only
    it reads just before its first reader: nothing is kept alive for the second graph longer
    than needed."""
    wrong = WRONG["another weight"]
    merged = interp.shared_graph([ORIGINAL, wrong])
    pos = {r: i for i, n in enumerate(merged.nodes) for r in n.results}
    producer = {r: n for n in merged.nodes for r in n.results}
    w2b = next(n for n in merged.nodes if n.op == "weight" and n.attr["name"] == "w2b")
    readers = [i for i, n in enumerate(merged.nodes) if w2b.results[0] in n.inputs]
    assert pos[w2b.results[0]] == min(readers) - 1
    conv = merged.nodes[min(readers)]           # conv2d(c1, w2b) right after w2b, c1 much earlier
    assert conv.op == "conv2d" and pos[conv.inputs[0]] < pos[w2b.results[0]]
    # and the merged graph runs in order: every operand is defined before it is read
    seen = {name for name, _ in merged.inputs}
    for n in merged.nodes:
        assert all(v in seen for v in n.inputs) and producer[n.results[0]] is n
        seen.update(n.results)


@pytest.fixture(scope="module")
def optimized_pairs():
    """(name, original, optimized) for benchmark models the a100 profile rewrites (fast ones)."""
    rules = load_rules()
    pairs = []
    for name in ("nasrnn", "squeezenet", "inceptionv3"):
        graph = load(EXAMPLES / f"{name}.tir")
        result = optimize(graph, AnalyticCostModel("a100"), rules, Options())
        assert result.improved, name
        pairs.append((name, graph, result.optimized))
    return pairs


def test_optimized_models_verify_with_the_old_paths_numbers(optimized_pairs):
    for name, graph, opt in optimized_pairs:
        merged = interp.shared_graph([graph, opt])
        alone = [len(interp.shared_graph([g]).nodes) for g in (graph, opt)]   # lowered
        assert len(merged.nodes) < sum(alone), name
        outs = interp.run(merged, seed=3)
        n = len(graph.outputs)
        old_ref, old_got = interp.run(graph, seed=3), interp.run(opt, seed=3)
        for new, old in ((outs[:n], old_ref), (outs[n:], old_got)):
            assert all(c.worst_excess < 1e-3 for c in compare(old, new, graph.outputs)), name
        check = verify_graphs(graph, opt, seeds=(3,))
        old = compare(old_ref, old_got, graph.outputs)
        assert check.ok and all(o.ok for o in old), name
        assert check.max_relative_err == pytest.approx(max(o.relative_err for o in old),
                                                       abs=1e-6), name


def test_estimate_covers_the_merged_runs_peak(optimized_pairs):
    for name, graph, opt in optimized_pairs:
        est = estimate_verification(graph, opt)
        assert est.peak_bytes <= estimate_verification(graph, None).peak_bytes * 2, name
        assert traced_peak(lambda: verify_graphs(graph, opt)) <= est.peak_bytes, name


def test_a_transposed_output_is_compared_in_chunks_without_a_copy(monkeypatch):
    """A 2-D transpose is a view (F-ordered): the comparison reads it a chunk at a time."""
    b = GraphBuilder("t")
    w = b.weight((300, 70), name="w")
    g = b.build(b.op("transpose", w, perm=(1, 0)))
    out = interp.run(g)[0]
    assert not out.flags.c_contiguous and out.shape == (70, 300)
    got = out + np.float32(1e-3) * (np.arange(out.size, dtype=np.float32).reshape(out.shape) == 5)
    monkeypatch.setattr(check_outputs, "COMPARE_CHUNK", 1000)
    chunked = compare([out], [got], ["y"])[0]
    monkeypatch.setattr(check_outputs, "COMPARE_CHUNK", 1 << 20)
    whole = compare([np.ascontiguousarray(out)], [np.ascontiguousarray(got)], ["y"])[0]
    assert chunked == whole and not chunked.ok


@pytest.mark.parametrize("act", interp._ACT_OPS)
@pytest.mark.parametrize("op", interp._FUSED_ACT)
def test_a_fused_activation_is_its_op_after_the_bare_op_to_the_bit(op, act):
    """What lets `shared_graph` share fused and unfused forms: the interpreter computes
    op{act} exactly as the activation's op applied to op{act = none}."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 3, 6, 6) if op != "matmul" else (6, 6), dtype=np.float32)
    args = [x] + ([rng.standard_normal((4, 3, 3, 3), dtype=np.float32)] if op == "conv2d" else
                  [rng.standard_normal((6, 6), dtype=np.float32)] if op == "matmul" else [])
    attrs = {"conv2d": {"stride": (1, 1), "pad": "same"},
             "matmul": {}}.get(op, {"kernel": (2, 2), "stride": (1, 1), "pad": "same"})
    fused = OPS[op].eval({**attrs, "act": act}, *args)
    bare = OPS[op].eval({**attrs, "act": "none"}, *args)
    np.testing.assert_array_equal(fused, OPS[act].eval({}, bare))


def test_blas_runs_on_one_thread_while_verifying(monkeypatch):
    """On a machine with two CPUs or fewer (this one, CI's) BLAS runs on one thread meanwhile."""
    from threadpoolctl import threadpool_info
    monkeypatch.setattr(check_outputs, "usable_cpus", lambda: 2)
    for var in check_outputs.BLAS_THREAD_ENV:
        monkeypatch.delenv(var, raising=False)

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    seen: list[list[int]] = []
    real_run = check_outputs.run

    def recording_run(*args, **kwargs):
        seen.append(blas_threads())
        return real_run(*args, **kwargs)

    before = blas_threads()
    monkeypatch.setattr(check_outputs, "run", recording_run)
    assert verify_graphs(ORIGINAL, CORRECT["fused relu"], seeds=(0, 1)).ok
    assert len(seen) == 2 and all(t == [1] * len(before) for t in seen)
    assert blas_threads() == before


def test_blas_keeps_its_threads_with_more_cpus_or_a_user_setting(monkeypatch):
    """More than two CPUs, or a BLAS thread count the user set: verification leaves BLAS alone."""
    import contextlib
    monkeypatch.setattr(check_outputs, "usable_cpus", lambda: 16)
    assert isinstance(check_outputs.one_blas_thread(), contextlib.nullcontext)
    monkeypatch.setattr(check_outputs, "usable_cpus", lambda: 2)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    assert isinstance(check_outputs.one_blas_thread(), contextlib.nullcontext)


# ------------------------------------------------------------ values computed twice, run once
def _head(twin: str | None = None, act: str = "relu"):
    """x @ wa, an activation, @ wb, softmax. `twin` computes x @ wa another way whose value is
    the same to the bit: "reshape" (reshaped there and back), "split" (the left half of x @ wa
    joined with a second weight; NumPy's matmul gives each column the same sum either way)."""
    b = GraphBuilder("head")
    x = b.input((8, 16), name="x")
    wa = b.weight((16, 16), name="wa")
    h = b.op("matmul", x, wa)
    if twin == "reshape":
        h = b.op("reshape", b.op("reshape", h, shape=(128,)), shape=(8, 16))
    elif twin == "split":
        both = b.op("matmul", x, b.op("concat", wa, b.weight((16, 16), name="wc"), axis=1))
        h = b.op("split", both, axis=1, sizes=(16, 16))[0]
    y = b.op("matmul", b.op(act, h), b.weight((16, 16), name="wb"))
    return b.build(b.op("softmax", y, axis=-1))


def _counted_run(monkeypatch, graph, equal_values):
    seen: dict[str, int] = {}
    real = interp.eval_node

    def counting(node, args):
        seen[node.op] = seen.get(node.op, 0) + 1
        return real(node, args)
    monkeypatch.setattr(interp, "eval_node", counting)
    outs = interp.run(graph, seed=1, equal_values=equal_values)
    monkeypatch.setattr(interp, "eval_node", real)
    return outs, seen


def test_a_value_computed_twice_is_followed_once(monkeypatch):
    """The optimized graph reaches x @ wa by another expression: once its value is found equal
    to the bit, what follows it (relu, the second matmul, softmax) runs once, and the outputs are
    those of each graph run alone."""
    opt = _head("reshape")
    merged = interp.shared_graph([_head(), opt])
    outs, ran = _counted_run(monkeypatch, merged, check_outputs.EQUAL_VALUES_BYTES)
    assert ran == {"matmul": 2, "reshape": 2, "relu": 1, "softmax": 1}
    plain, ran_plain = _counted_run(monkeypatch, merged, 0)
    assert ran_plain == {"matmul": 3, "reshape": 2, "relu": 2, "softmax": 2}
    for got, alone in zip(outs, interp.run(_head(), seed=1) + interp.run(opt, seed=1)):
        np.testing.assert_array_equal(got, alone)
    for got, want in zip(outs, plain):
        np.testing.assert_array_equal(got, want)


def test_a_merged_matmuls_split_is_its_matmul_when_the_bits_agree(monkeypatch):
    """The case the reuse is for (ViT's merged Q/K/V). Whether BLAS gives a column the same sum
    in a wider matmul is up to BLAS: if it does, relu onwards runs once; either way the check
    passes and the outputs are each graph's own."""
    merged = interp.shared_graph([_head(), _head("split")])
    outs, ran = _counted_run(monkeypatch, merged, check_outputs.EQUAL_VALUES_BYTES)
    rng = np.random.default_rng(0)
    x, wa, wc = (rng.standard_normal(s, dtype=np.float32) for s in ((8, 16), (16, 16), (16, 16)))
    same_bits = np.array_equal((x @ np.concatenate([wa, wc], 1))[:, :16], x @ wa)
    assert ran["relu"] == (1 if same_bits else 2) and ran["matmul"] == (3 if same_bits else 4)
    np.testing.assert_array_equal(outs[0], interp.run(_head(), seed=1)[0])
    np.testing.assert_array_equal(outs[1], interp.run(_head("split"), seed=1)[0])
    assert verify_graphs(_head(), _head("split")).ok


def test_a_wrong_op_after_an_equal_value_is_caught():
    """Reuse needs the same op and attributes after the equal value: a sigmoid for the relu
    still runs, and fails."""
    check = verify_graphs(_head(), _head("reshape", act="sigmoid"), seeds=(0, 1))
    assert not check.ok and "MISMATCH" in check.summary()


def test_equal_means_the_same_dtype_shape_and_bits():
    """-0.0 == 0.0 and NaN != NaN in NumPy's comparison; values are one only with the same bits
    (a fingerprint finds candidates, every element is compared)."""
    eq = interp._bitwise_equal
    z = np.zeros((4, 4), np.float32)
    assert eq(z, z.copy()) and not eq(z, -z) and not eq(z, z.view(np.int32))
    assert not eq(z, z.reshape(16)) and not eq(z, z.astype(np.float64))
    nan = np.full(3, np.nan, np.float32)
    assert eq(nan, nan.copy())
    assert eq(z.T, np.zeros((4, 4), np.float32))          # a view compares by its elements
    # equal fingerprints, one element apart that the fingerprint does not sample
    a = np.arange(1000, dtype=np.float32)
    b = a.copy()
    b[1] += 1
    k = interp.EqualValues.FINGERPRINT_ELEMENTS
    assert interp._fingerprint(a, k) == interp._fingerprint(b, k) and not eq(a, b)
    from eqsat_nb.ir.graph import Node, TensorType
    ty = (TensorType((1000,), "f32"),)
    values = {"%a": a, "%b": b}
    ev = interp.EqualValues(1 << 20)
    ev.evaluate(Node("relu", ("%x",), (), ("%a",), ty), values, lambda: [a])
    ev.evaluate(Node("relu", ("%y",), (), ("%b",), ty), values, lambda: [b])
    assert ev.canon["%a"] == "%a" and ev.canon["%b"] == "%b"


def test_values_kept_for_reuse_stay_within_their_budget():
    ev = interp.EqualValues(10_000)
    for i in range(20):
        ev.keep(f"%v{i}", np.zeros(500, np.float32))            # 2 000 bytes each
        assert ev.kept_bytes <= 10_000
    assert list(ev.kept) == [f"%v{i}" for i in range(15, 20)]   # the newest
    ev.keep("%big", np.zeros(5000, np.float32))                  # larger than the budget
    assert "%big" not in ev.kept
