"""stopping.run_until: onnxruntime runs of a user's graph end at their deadline."""
from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from eqsat_nb.errors import RunStopped
from eqsat_nb.onnx_io.measure import guard
from eqsat_nb.search.limits import work_clock
from eqsat_nb.stopping import current_deadline, run_until, time_limit


def endless() -> onnx.ModelProto:
    """y = x + (1 added 2^40 times by a Loop): legal, and days of work in onnxruntime."""
    body = h.make_graph(
        [h.make_node("Identity", ["c_in"], ["c_out"]),
         h.make_node("Add", ["v_in", "one"], ["v_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []),
         h.make_tensor_value_info("c_in", T.BOOL, []),
         h.make_tensor_value_info("v_in", T.FLOAT, [1])],
        [h.make_tensor_value_info("c_out", T.BOOL, []),
         h.make_tensor_value_info("v_out", T.FLOAT, [1])],
        [nh.from_array(np.array([1.0], np.float32), "one")])
    g = h.make_graph(
        [h.make_node("Loop", ["trips", "", "v0"], ["/loop"], name="/Loop", body=body),
         h.make_node("Add", ["x", "/loop"], ["y"], name="/Add")], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [3])],
        [h.make_tensor_value_info("y", T.FLOAT, [3])],
        [nh.from_array(np.array(2**40, np.int64), "trips"),
         nh.from_array(np.array([0.0], np.float32), "v0")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def add_one() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("Add", ["x", "one"], ["y"], name="/Add")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3])],
                     [nh.from_array(np.ones(3, np.float32), "one")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def session(m: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


X = {"x": np.arange(3, dtype=np.float32)}


def test_endless_run_stops_at_its_deadline_naming_the_node():
    t = time.perf_counter()
    with pytest.raises(RunStopped) as e:
        run_until(session(endless()), None, X, deadline=work_clock() + 0.5, what="the test run")
    assert time.perf_counter() - t < 2.0
    assert e.value.node == ("/Loop", "Loop") and e.value.started
    assert str(e.value).startswith("the test run was stopped at the time limit after 0.")
    assert str(e.value).endswith(" s (in node '/Loop' (Loop))")


def test_the_enclosing_time_limit_stops_runs_that_pass_no_deadline():
    t = time.perf_counter()
    with time_limit(work_clock() + 0.5), pytest.raises(RunStopped):
        run_until(session(endless()), None, X)
    assert time.perf_counter() - t < 2.0
    assert current_deadline() is None          # the limit ends with its block


def test_nested_limits_keep_the_earlier_deadline():
    with time_limit(100.0):
        with time_limit(200.0):
            assert current_deadline() == 100.0
            assert current_deadline(50.0) == 50.0
        with time_limit(None):
            assert current_deadline() == 100.0
    assert current_deadline(7.0) == 7.0


def test_a_run_within_its_deadline_gives_onnxruntime_s_outputs():
    (y,) = run_until(session(add_one()), ["y"], X, deadline=work_clock() + 60)
    np.testing.assert_array_equal(y, X["x"] + 1)
    (y,) = run_until(session(add_one()), None, X)          # no deadline at all
    np.testing.assert_array_equal(y, X["x"] + 1)


def test_a_failing_run_raises_onnxruntime_s_own_error():
    with pytest.raises(Exception) as e:
        run_until(session(add_one()), None, {"x": np.zeros(4, np.float32)},
                  deadline=work_clock() + 60)
    assert not isinstance(e.value, RunStopped)
    assert "Got invalid dimensions" in str(e.value)


def test_nothing_starts_once_the_deadline_has_passed():
    with pytest.raises(RunStopped) as e:
        run_until(session(add_one()), None, X, deadline=work_clock() - 1, what="the late run")
    assert not e.value.started
    assert str(e.value) == "the late run was not started: the time limit had been reached"


def test_the_timing_guard_stops_at_the_time_limit():
    m = endless()
    t = time.perf_counter()
    with time_limit(work_clock() + 0.5), pytest.raises(RunStopped) as e:
        guard(m, m, X, budget_s=60)
    assert time.perf_counter() - t < 2.0
    assert e.value.what == "onnxruntime's timing of the input and optimized models"
