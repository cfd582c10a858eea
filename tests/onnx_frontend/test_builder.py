"""The importer's values and nodes are immutable; the builder names constants without
writing into them, and keys its tables by the value object."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from stripeml.onnx.builder import Builder, Node, Value
from stripeml.onnx.layout import NHWC, physical, with_layout


def const(*shape: int, dtype=np.float32) -> Value:
    arr = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    return Value("", arr.shape, arr.dtype, arr)


def test_values_and_nodes_are_frozen():
    v = const(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.name = "C1"  # type: ignore[misc]
    n = Node("Relu", "r", (v,), {}, 21, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        n.inputs = ()  # type: ignore[misc]
    assert isinstance(n.inputs, tuple)


def test_a_constant_becomes_one_parameter_and_stays_unnamed():
    b = Builder()
    v = const(2, 3)
    assert b.tile_name(v) == ""
    name = b.ref(v)
    assert name == "C1" and b.ref(v) == "C1" and b.tile_name(v) == "C1"
    assert v.name == ""  # the value itself is unchanged
    assert len(b.params) == 1 and b.params[0] is v  # the very object the importer holds
    assert b.source(["C1"]).startswith("function (C1[2, 3]) -> (C1) {")


def test_equal_looking_values_are_different_values():
    b = Builder()
    v, w = const(3), const(3)
    assert v != w and len({v, w}) == 2  # identity, not field equality
    assert b.ref(v) != b.ref(w) and len(b.params) == 2


def test_an_input_keeps_its_name_and_identity():
    b = Builder()
    x = b.input((2, 2), np.float32)
    assert b.ref(x) == x.name == "X1" and b.params == [x] and b.params[0] is x


def test_with_layout_returns_a_new_value():
    b = Builder()
    stored = b.eltwise("X", (1, 4, 5, 3), np.float32)  # NHWC storage of a 1x3x4x5 tensor
    marked = with_layout(stored, NHWC)
    assert marked is not stored and marked.name == stored.name
    assert marked.shape == (1, 3, 4, 5) and marked.layout == NHWC
    assert marked.phys_shape == stored.shape == (1, 4, 5, 3) and stored.layout is None
    view = physical(marked)
    assert view.shape == (1, 4, 5, 3) and view.layout is None and view.name == stored.name
    c = const(2)
    assert with_layout(c, NHWC) is c  # constants carry no layout


def test_logical_transposes_once_per_value():
    b = Builder()
    marked = with_layout(b.eltwise("X", (1, 4, 5, 3), np.float32), NHWC)
    first = b.logical(marked)
    assert first.shape == (1, 3, 4, 5) and first.layout is None
    assert b.logical(marked) is first
    assert b.logical(dataclasses.replace(marked)) is not first  # a replaced value is another one


@pytest.mark.parametrize(
    "op, fn, values",
    [
        ("Sinh", np.sinh, [-2.0, -1e-9, 0.0, 0.5, 3.0]),
        ("Asinh", np.arcsinh, [-3.0, -1e-9, 0.0, 0.5, 1e9]),
        ("Acosh", np.arccosh, [1.0, 1.5, 2.0, 10.0, 1e9]),
        ("Atanh", np.arctanh, [-0.9, -1e-9, 0.0, 0.5, 0.99]),
    ],
)
def test_float64_functions_of_constants_fold(op, fn, values):
    """A float64 constant input is folded through the op (the op reads the constant's
    Tile name from the builder), and the folded result feeds the compiled program."""
    onnx = pytest.importorskip("onnx")
    from onnx import helper, numpy_helper

    import stripeml.onnx

    c = np.array(values, np.float64)
    f64 = onnx.TensorProto.DOUBLE
    graph = helper.make_graph(
        [helper.make_node(op, ["c"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", f64, [len(values)])],
        [helper.make_tensor_value_info("y", f64, [len(values)])],
        initializer=[numpy_helper.from_array(c, "c")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    f = stripeml.onnx.compile(model, target="interp")
    x = np.linspace(-1.0, 1.0, len(values))
    assert op not in f.source(x) and "sinh" not in f.source(x)  # folded at import
    np.testing.assert_allclose(f(x), fn(c) + x, rtol=1e-12, atol=1e-15)
