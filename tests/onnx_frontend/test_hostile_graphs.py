"""Broken and hostile model *contents*: each problem is an ``OnnxError`` raised
when the model is read (``stripeml.onnx.compile``), naming the node,
initializer or input, never a raw exception or a silent acceptance."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
import stripeml.onnx.backend as stripe_backend  # noqa: E402
from stripeml.onnx import OnnxError  # noqa: E402

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
RELU = helper.make_node("Relu", ["x"], ["y"], name="relu")


def model(nodes=(RELU,), inputs=(X,), outputs=(Y,), inits=(), opset=17, domains=()):
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports)


def refused(m, pattern: str) -> None:
    with pytest.raises(OnnxError, match=pattern):
        stripeml.onnx.compile(m, target="interp")
    assert not stripe_backend.is_compatible(m)


def tensor(name: str, dims, **fields) -> TensorProto:
    t = TensorProto(name=name, data_type=fields.pop("data_type", TensorProto.FLOAT), dims=dims)
    for key, value in fields.items():
        if key == "raw_data":
            t.raw_data = value
        else:
            getattr(t, key).extend(value)
    return t


def add_of(w: TensorProto):
    return model([helper.make_node("Add", ["x", w.name], ["y"], name="add")], inits=[w])


# -- the model and its graph -----------------------------------------------------------


def test_a_graph_needs_nodes_and_outputs():
    refused(model(nodes=(), outputs=(X,)), "graph 'g' has no nodes")
    refused(model(outputs=()), "graph 'g' has no outputs")


def test_an_ir_version_newer_than_onnx_knows_is_refused():
    m = model()
    m.ir_version = onnx.IR_VERSION + 1
    refused(m, f"IR version {onnx.IR_VERSION + 1} is newer than the installed onnx")


# -- opsets ----------------------------------------------------------------------------

RANGE = f"ai.onnx opsets 7 to {onnx.defs.onnx_opset_version()}"


def test_an_opset_newer_than_onnx_knows_names_the_supported_range():
    refused(model(opset=99), rf"ai.onnx opset 99 is newer .*\(the importer supports {RANGE}\)")


def test_an_opset_older_than_the_op_library_is_converted_or_names_the_supported_range():
    """Add-1 aligned its operands with ``broadcast``/``axis``, not like NumPy, and
    Relu-1 had ``consumed_inputs``: onnx's version converter rewrites both.  Where
    it cannot (it has no adapter for Pad-1), the refusal names the range and why."""
    add = helper.make_node("Add", ["x", "x"], ["y"], name="add")
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(stripeml.onnx.compile(model([add], opset=1), "interp")(x), x + x)
    np.testing.assert_array_equal(
        stripeml.onnx.compile(model(opset=1), "interp")(x), np.maximum(x, 0)
    )
    pad = helper.make_node("Pad", ["y"], ["z"], paddings=[0, 1, 0, 1])
    out = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5])
    refused(
        model([add, pad], outputs=[out], opset=1),
        rf"node 'add' \(Add\): ai.onnx opset 1 selects Add-1.*{RANGE}.*"
        r"version_converter could not convert it to opset 7",
    )


def test_an_old_opset_is_fine_where_the_operator_did_not_change_or_is_implemented():
    b = helper.make_tensor_value_info("b", TensorProto.BOOL, [2, 3])
    nb = helper.make_tensor_value_info("nb", TensorProto.BOOL, [2, 3])
    f = stripeml.onnx.compile(
        model([helper.make_node("Not", ["b"], ["nb"])], [b], [nb], opset=1), target="interp"
    )
    a = np.array([[True, False, True], [False, False, True]])
    np.testing.assert_array_equal(f(a), ~a)
    pad = helper.make_node("Pad", ["x"], ["y"], paddings=[0, 1, 0, 1])  # Pad-1's attribute
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = stripeml.onnx.compile(model([pad], outputs=[out], opset=1), target="interp")(x)
    np.testing.assert_array_equal(got, np.pad(x, ((0, 0), (1, 1))))


def test_an_operator_the_opset_does_not_have_is_refused():
    refused(model([helper.make_node("HardSwish", ["x"], ["y"])], opset=13), "does not exist")
    refused(model([helper.make_node("_ConvBN", ["x"], ["y"])]), "_ConvBN does not exist")


def test_opset_imports_must_be_known_and_unique():
    refused(model(domains=["com.example.unknown"]), "domain 'com.example.unknown'")
    refused(model(domains=[""]), "lists domain 'ai.onnx' twice")
    m = model()
    del m.opset_import[:]
    refused(m, f"no opset_import for the ai.onnx domain .*{RANGE}")
    # A domain onnx knows that no node uses is fine (the node suite's expanded models).
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    f = stripeml.onnx.compile(model(domains=["ai.onnx.preview"]), target="interp")
    np.testing.assert_array_equal(f(x), np.maximum(x, 0))


def test_a_node_of_a_domain_without_an_import_is_refused():
    node = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.example")
    refused(model([node]), "domain 'com.example' has no opset_import")


def test_attributes_of_the_wrong_type_are_refused_by_the_schema():
    cast = helper.make_node("Cast", ["x"], ["y"], name="c", to="FLOAT")
    refused(model([cast]), r"node 'c' \(Cast\): Mismatched attribute type")
    alpha = helper.make_node("LeakyRelu", ["x"], ["y"], name="l", alpha="big")
    refused(model([alpha]), r"node 'l' \(LeakyRelu\): Mismatched attribute type")
    extra = helper.make_node("Relu", ["x", "x"], ["y"], name="r")
    refused(model([extra]), r"node 'r' \(Relu\): .*input size 2")


# -- initializers ----------------------------------------------------------------------


def test_an_initializer_with_too_few_values_is_refused():
    w = tensor("w", [1000, 1000], float_data=[1.0, 2.0])
    refused(add_of(w), r"initializer 'w': holds 2 values, but shape \(1000, 1000\) needs 1000000")


def test_an_initializer_with_the_wrong_number_of_bytes_is_refused():
    w = tensor("w", [2, 3], raw_data=b"\0" * 7)
    refused(add_of(w), r"initializer 'w': holds 7 bytes, but shape \(2, 3\) needs 24")
    w = tensor("w", [2, 3], raw_data=b"\0" * 48)
    refused(add_of(w), r"initializer 'w': holds 48 bytes")


def test_an_initializer_with_a_negative_dimension_is_refused():
    refused(add_of(tensor("w", [-2, -3], float_data=[1.0] * 6)), "dimension 0 of shape")


def test_initializer_names_are_unique():
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    m = add_of(w)
    m.graph.initializer.append(w)
    refused(m, "initializer 'w' is declared twice")


def test_a_constant_attribute_with_the_wrong_size_names_the_node():
    value = tensor("v", [4], float_data=[1.0])
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=value),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    refused(model(nodes), r"node 'const' \(Constant\) attribute 'value': holds 1 values")


# -- graph inputs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "dims, message",
    [
        ([-5, 3], "dimension 0 is -5"),
        ([3, 2**41], f"dimension 1 is {2**41}, more than {2**40}"),
        ([2**21, 2**21], f"declares {2**42} elements"),
    ],
)
def test_negative_or_absurd_input_dimensions_are_refused(dims, message):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    refused(model(inputs=[x]), rf"graph input 'x': {message}|graph input 'x' {message}")


def test_a_graph_input_needs_a_type():
    untyped = onnx.ValueInfoProto(name="x")
    refused(model(inputs=[untyped]), "graph input 'x' has no type")
    undefined = helper.make_tensor_value_info("x", TensorProto.UNDEFINED, [2, 3])
    refused(model(inputs=[undefined]), "graph input 'x' has no element type")
    refused(model(inputs=[X, X]), "graph input 'x' is declared twice")


# -- nodes: single assignment, order ---------------------------------------------------


def test_a_tensor_produced_twice_is_refused():
    nodes = [RELU, helper.make_node("Neg", ["x"], ["y"], name="neg")]
    refused(model(nodes), r"node 'neg' \(Neg\): output 'y' is also produced by node 'relu'")
    refused(
        model([helper.make_node("Relu", ["y"], ["x"], name="r")], inputs=[X, Y], outputs=[X]),
        "output 'x' is a graph input or initializer",
    )


def test_a_node_reading_a_tensor_nobody_produces_is_refused_at_import():
    nodes = [helper.make_node("Relu", ["nothing"], ["y"], name="r")]
    refused(model(nodes), r"node 'r' \(Relu\) reads 'nothing', which no node")


def test_nodes_out_of_topological_order_are_refused():
    nodes = [
        helper.make_node("Neg", ["t"], ["y"], name="second"),
        helper.make_node("Relu", ["x"], ["t"], name="first"),
    ]
    refused(model(nodes), r"node 'second' \(Neg\) reads 't' before node 'first'")


def test_a_graph_output_nobody_produces_is_refused_at_import():
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])
    refused(model(outputs=[Y, z]), "graph output 'z' is not produced")


# -- shapes operators make -------------------------------------------------------------


def test_an_absurd_shape_from_an_operator_names_the_node():
    reps = numpy_helper.from_array(np.array([10**7, 10**7], np.int64), "reps")
    tile = helper.make_node("Tile", ["x", "reps"], ["y"], name="tile")
    refused_at_call = stripeml.onnx.compile(model([tile], inits=[reps]), target="interp")
    with pytest.raises(OnnxError, match=r"node 'tile' \(Tile\): shape .* more than"):
        refused_at_call(np.ones((2, 3), np.float32))


def test_a_folded_constant_too_large_names_the_node():
    shape = numpy_helper.from_array(np.array([10**7, 10**7], np.int64), "shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["big"], name="fill"),
        helper.make_node("Add", ["x", "big"], ["y"], name="add"),
    ]
    f = stripeml.onnx.compile(model(nodes, inits=[shape]), target="interp")
    with pytest.raises(OnnxError, match=r"node 'fill' \(ConstantOfShape\): shape .* more than"):
        f(np.ones((2, 3), np.float32))


# -- attribute and constant values the schema allows but the operator cannot take -----


def _const_model(node, inits, outputs=("y",)):
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    graph = helper.make_graph([node], "g", [], outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("limit", [np.nan, np.inf])
def test_a_range_to_nan_or_infinity_names_the_node(limit):
    inits = [
        numpy_helper.from_array(np.array(v, np.float32), k)
        for k, v in (("a", 0.0), ("b", limit), ("d", 1.0))
    ]
    node = helper.make_node("Range", ["a", "b", "d"], ["y"], name="r")
    f = stripeml.onnx.compile(_const_model(node, inits), target="interp")
    with pytest.raises(
        OnnxError, match=r"node 'r' \(Range\): start, limit and delta must be finite"
    ):
        f()


def test_a_constant_of_negative_shape_names_the_node():
    shape = numpy_helper.from_array(np.array([-2, 3], np.int64), "s")
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="c")
    f = stripeml.onnx.compile(_const_model(node, [shape]), target="interp")
    with pytest.raises(OnnxError, match=r"node 'c' \(ConstantOfShape\): shape \(-2, 3\) has a neg"):
        f()


def test_eyelike_of_an_unknown_element_type_names_the_node():
    node = helper.make_node("EyeLike", ["x"], ["y"], name="e", dtype=999)
    m = model([node], outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    f = stripeml.onnx.compile(m, target="interp")
    with pytest.raises(OnnxError, match=r"node 'e' \(EyeLike\): dtype 999 is not an ONNX"):
        f(np.ones((2, 3), np.float32))


def test_lppool_with_p_zero_names_the_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])
    node = helper.make_node("LpPool", ["x"], ["y"], name="lp", kernel_shape=[2, 2], p=0)
    f = stripeml.onnx.compile(model([node], inputs=[x]), target="interp")
    with pytest.raises(OnnxError, match=r"node 'lp' \(LpPool\): p must be positive"):
        f(np.ones((1, 1, 4, 4), np.float32))


@pytest.mark.parametrize(
    "error, message",
    [
        (ValueError("a value the writer did not expect"), r"cannot be imported \(ValueError"),
        (MemoryError("Unable to allocate 8 TiB"), "its result does not fit in memory"),
    ],
)
def test_an_op_writer_failing_on_a_value_names_the_node(monkeypatch, error, message):
    """Whatever an op writer did not anticipate is an OnnxError naming the node."""
    from dataclasses import replace

    from stripeml.onnx.registry import OPS

    def broken(b, n):
        raise error

    monkeypatch.setitem(OPS, "Relu", replace(OPS["Relu"], fn=broken))
    f = stripeml.onnx.compile(model(), target="interp")
    with pytest.raises(OnnxError, match=rf"node 'relu' \(Relu\): {message}"):
        f(np.ones((2, 3), np.float32))
