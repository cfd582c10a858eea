"""The garbage collector is off while stripeml compiles and as it was afterwards
(``stripeml.gc_pause``): on a compile's miss, in the ONNX importer, after an
error, across threads, and left alone with ``STRIPEML_GC=on``.  Results are
checked against NumPy, so pausing changes nothing computed."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import stripeml
from stripeml import api, gc_pause

SOURCE = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
RNG = np.random.default_rng(3)


@pytest.fixture(autouse=True)
def _collector_back() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def _spy(monkeypatch: pytest.MonkeyPatch, cls: type, method: str) -> list[bool]:
    """Whether the collector was on at each call of ``cls.method``."""
    seen: list[bool] = []
    real = getattr(cls, method)

    def spying(self, *args):
        seen.append(gc.isenabled())
        return real(self, *args)

    monkeypatch.setattr(cls, method, spying)
    return seen


def _spy_optimise(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    return _spy(monkeypatch, api.Function, "_optimise")


def _inputs(m: int = 3) -> tuple[np.ndarray, np.ndarray]:
    return (
        RNG.standard_normal((m, 4)).astype(np.float32),
        RNG.standard_normal((4, 5)).astype(np.float32),
    )


def test_off_while_compiling_and_on_again(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_optimise(monkeypatch)
    gc.enable()
    f = stripeml.compile(SOURCE, target="interp")
    a, b = _inputs()
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-6)
    assert seen == [False]  # one compile, with the collector off
    assert gc.isenabled()
    f(a, b)  # a signature already compiled: nothing paused, nothing compiled
    assert seen == [False]


def test_a_process_that_turned_it_off_keeps_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_optimise(monkeypatch)
    gc.disable()
    f = stripeml.compile(SOURCE, target="interp")
    a, b = _inputs(2)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-6)
    assert seen == [False]
    assert not gc.isenabled()


def test_on_again_after_a_failed_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(self, sig):
        assert not gc.isenabled()
        raise stripeml.StripeError("no")

    monkeypatch.setattr(api.Function, "_optimise", failing)
    gc.enable()
    f = stripeml.compile(SOURCE, target="interp")
    with pytest.raises(stripeml.StripeError):
        f(*_inputs())
    assert gc.isenabled()


def test_left_alone_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _spy_optimise(monkeypatch)
    monkeypatch.setenv("STRIPEML_GC", "on")
    gc.enable()
    f = stripeml.compile(SOURCE, target="interp")
    f(*_inputs(4))
    assert seen == [True]


def test_on_only_when_the_last_of_two_threads_ends() -> None:
    gc.enable()
    inside, leave = threading.Event(), threading.Event()
    states: list[bool] = []

    def other() -> None:
        with gc_pause.paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    with gc_pause.paused():
        assert not gc.isenabled()
    states.append(gc.isenabled())  # the other thread still compiles
    leave.set()
    t.join(10)
    states.append(gc.isenabled())
    assert states == [False, True]


def test_the_onnx_importer_builds_with_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from stripeml.onnx import importer

    seen = _spy(monkeypatch, importer.OnnxFunction, "_build")
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert onnx.checker.check_model(model) is None
    gc.enable()
    f = stripeml.onnx.compile(model, target="interp")
    v = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(f(v), np.maximum(v, 0))
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.parametrize("gc_env", ["", "on"])
def test_whether_a_compile_runs_is_known_to_other_threads(monkeypatch, gc_env) -> None:
    """``wait_no_compile`` returns at once when no compile runs, and waits while one
    runs in another thread, with ``STRIPEML_GC=on`` too (it is not about the
    collector)."""
    monkeypatch.setenv("STRIPEML_GC", gc_env)
    assert gc_pause.wait_no_compile(0)
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_pause.paused():
            with gc_pause.paused():  # nested: still one compile
                inside.set()
                leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    assert not gc_pause.wait_no_compile(0.05)
    leave.set()
    assert gc_pause.wait_no_compile(10)
    t.join(10)


class _CountedEvent(threading.Event):
    """``gc_pause``'s "no compile runs" event, counting the times it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def _compiles_ended(monkeypatch: pytest.MonkeyPatch) -> _CountedEvent:
    event = _CountedEvent()
    event.set()
    event.sets = 0
    monkeypatch.setattr(gc_pause, "_none_running", event)
    return event


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_a_new_signature_is_one_compile_to_its_first_call(monkeypatch, target) -> None:
    """A call that compiles (the Tile source's lowering and passes, the backend's
    compile, the program's first call) ends one compile, not one per step: no
    gap between them for a collection or for background work (the huge-page
    collapse, the cache writes).  A call of a compiled signature ends none."""
    seen = _spy_optimise(monkeypatch)
    ended = _compiles_ended(monkeypatch)
    gc.enable()
    f = stripeml.compile(SOURCE, target=target)
    a, b = _inputs(6)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-6)
    assert seen == [False] and ended.sets == 1 and gc.isenabled()
    a2, _ = _inputs(6)
    np.testing.assert_allclose(f(a2, b), a2 @ b, rtol=1e-5, atol=1e-6)  # compiled: no compile
    c, _ = _inputs(9)
    np.testing.assert_allclose(f(c, b), c @ b, rtol=1e-5, atol=1e-6)  # a new signature
    assert seen == [False, False] and ended.sets == 2


def test_an_onnx_models_new_shape_is_one_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ONNX function's import, the compile and the first call of a new input
    shape end one compile (the importer holds it across the three)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 3])
    nodes = [helper.make_node("Relu", ["X"], ["R"]), helper.make_node("Exp", ["R"], ["Y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    f = stripeml.onnx.compile(model, target="cpu")
    ended = _compiles_ended(monkeypatch)
    gc.enable()
    for n, sets in ((2, 1), (2, 1), (5, 2)):
        v = RNG.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(f(v), np.exp(np.maximum(v, 0)), rtol=1e-6)
        assert ended.sets == sets
    assert gc.isenabled()
