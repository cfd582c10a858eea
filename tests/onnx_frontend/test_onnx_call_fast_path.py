"""A call with the last call's signature skips the argument checks and the
signature key (``OnnxFunction.__call__``): every other call takes the full path,
so a changed shape, dtype, rank or static value is never run on the last program."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import stripeml.onnx
from stripeml.errors import ShapeError
from stripeml.onnx.importer import OnnxFunction


def _add_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add", [x, y], [z])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reshape_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [12])
    s = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    g = helper.make_graph([node], "reshape", [x, s], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _count_full_paths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    full = OnnxFunction._arrays

    def counted(self, args, kwargs):
        calls[0] += 1
        return full(self, args, kwargs)

    monkeypatch.setattr(OnnxFunction, "_arrays", counted)
    return calls


def test_the_same_signature_skips_the_checks_and_shapes_change_correctly(monkeypatch):
    f = stripeml.onnx.compile(_add_model(), target="cpu")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 2, 3), dtype=np.float32)
    c, d = rng.standard_normal((2, 5, 3), dtype=np.float32)
    full = _count_full_paths(monkeypatch)
    np.testing.assert_allclose(f(a, b), a + b, rtol=1e-6)
    np.testing.assert_allclose(f(b, a), a + b, rtol=1e-6)  # same signature: fast
    assert full[0] == 1
    np.testing.assert_allclose(f(c, d), c + d, rtol=1e-6)  # another shape: full path
    assert full[0] == 2
    np.testing.assert_allclose(f(a, b), a + b, rtol=1e-6)
    np.testing.assert_allclose(f(x=c, y=d), c + d, rtol=1e-6)  # by name: full path
    np.testing.assert_allclose(f(memoryview(a), b), a + b, rtol=1e-6)  # not an array: full
    assert full[0] == 5


def test_a_call_that_breaks_the_last_signature_is_still_checked():
    f = stripeml.onnx.compile(_add_model(), target="cpu")
    a = np.ones((2, 3), np.float32)
    f(a, a)
    with pytest.raises(ShapeError, match="must be float32"):
        f(a.astype(np.float64), a)
    with pytest.raises(ShapeError, match="rank 2"):
        f(a.reshape(6), a)
    with pytest.raises(ShapeError, match="takes 2 input"):
        f(a, a, a)
    with pytest.raises(ShapeError, match="missing input"):
        f(a)
    np.testing.assert_array_equal(f(a, a), a + a)


def test_static_inputs_are_keyed_by_value_on_every_call():
    f = stripeml.onnx.compile(_reshape_model(), target="cpu")
    x = np.arange(12, dtype=np.float32)
    for shape in ([3, 4], [2, 6], [3, 4], [6, 2]):
        got = f(x, np.array(shape, np.int64))
        np.testing.assert_array_equal(got, x.reshape(shape))
