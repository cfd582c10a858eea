"""Quantised convolutions and matrix products as integer dot products (onnx/qconv.py).

A QDQ ``Conv`` (``DequantizeLinear`` of uint8/int8 activations and of constant
weights) and ``MatMulInteger`` with constant weights become ``dot4`` contractions
over bytes viewed as int32 words.  Each case is checked against onnx's reference
evaluator (which convolves the dequantised floats) or NumPy's int64 arithmetic,
and asserts which form the program took (``dot4`` in the Stripe IR or not), so a
silent fallback to floats, or a wrong integer form, fails."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml  # noqa: E402
import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(11)
ELEM = {np.dtype(np.uint8): T.UINT8, np.dtype(np.int8): T.INT8}


def _qdq_conv_model(x_shape, wq, sw, zw, sx, zx, bias=None, w_axis=0, relu=False, **conv):
    """X (float) -> QuantizeLinear(sx, zx) -> DequantizeLinear -> Conv(DQ(wq)) [-> Relu]."""
    inits = [
        nh.from_array(np.array(sx, np.float32), "sx"),
        nh.from_array(np.array(zx, np.asarray(zx).dtype), "zx"),
        nh.from_array(wq, "wq"),
        nh.from_array(np.asarray(sw, np.float32), "sw"),
    ]
    w_inputs = ["wq", "sw"]
    if zw is not None:
        inits.append(nh.from_array(np.asarray(zw), "zw"))
        w_inputs.append("zw")
    nodes = [
        h.make_node("QuantizeLinear", ["X", "sx", "zx"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
        h.make_node("DequantizeLinear", w_inputs, ["wd"], axis=w_axis),
    ]
    conv_in = ["xd", "wd"]
    if bias is not None:
        inits.append(nh.from_array(bias.astype(np.float32), "B"))
        conv_in.append("B")
    nodes.append(h.make_node("Conv", conv_in, ["Y" if not relu else "C"], **conv))
    if relu:
        nodes.append(h.make_node("Relu", ["C"], ["Y"]))
    g = h.make_graph(
        nodes,
        "qconv",
        [h.make_tensor_value_info("X", T.FLOAT, x_shape)],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


def _check(model, feeds, integer: bool, rtol=2e-6):
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(**feeds)
    assert got.shape == want.shape
    # the integer sum is exact where the reference sums floats: equal up to the
    # float rounding of a few hundred terms
    scale = float(np.abs(want).max()) or 1.0
    assert float(np.abs(got - want).max()) <= rtol * scale * 50
    ir = fn.lower(**feeds).ir
    assert ("dot4(" in ir) == integer, "the integer form was (not) taken as expected"
    return got, want


def _weights(co, ci, k, dtype=np.int8):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    return RNG.integers(lo, hi + 1, (co, ci, k, k)).astype(dtype)


@pytest.mark.parametrize(
    "ci, co, k, stride, pads, zx",
    [
        (16, 32, 3, 1, [1, 1, 1, 1], 7),  # padding with a non-zero zero point
        (8, 16, 3, 2, [1, 1, 1, 1], 0),  # stride 2
        (32, 8, 1, 1, [0, 0, 0, 0], 128),  # pointwise
        (4, 20, 5, 1, [2, 1, 0, 2], 33),  # uneven padding, odd output channels
        (3, 16, 7, 2, [3, 3, 3, 3], 120),  # an image's 3 channels: padded to a word
        (6, 8, 1, 1, [0, 0, 0, 0], 9),  # channels padded, no spatial padding
    ],
)
def test_qdq_conv_is_integer_and_matches_the_reference(ci, co, k, stride, pads, zx):
    x = (RNG.standard_normal((1, ci, 9, 11)) * 2).astype(np.float32)
    wq = _weights(co, ci, k)
    sw = (RNG.random(co) * 0.02 + 0.001).astype(np.float32)  # per output channel
    bias = RNG.standard_normal(co).astype(np.float32)
    model = _qdq_conv_model(
        x.shape, wq, sw, np.zeros(co, np.int8), 0.03, np.uint8(zx), bias,
        kernel_shape=[k, k], strides=[stride, stride], pads=pads,
    )  # fmt: skip
    _check(model, {"X": x}, integer=True)


def test_signed_activations_and_unsigned_weights():
    """int8 activations are shifted to uint8 and uint8 weights (zero point 128) to
    int8: the same numbers."""
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    wq = _weights(12, 8, 3, np.uint8)
    model = _qdq_conv_model(
        x.shape, wq, np.float32(0.01), np.uint8(128), 0.02, np.int8(-5),
        kernel_shape=[3, 3], pads=[1, 1, 1, 1], relu=True,
    )  # fmt: skip
    _check(model, {"X": x}, integer=True)


@pytest.mark.parametrize(
    "why, ci, group, zw",
    [
        ("a grouped convolution", 8, 2, 0),
        ("asymmetric weights", 8, 1, 3),
    ],
)
def test_other_convolutions_keep_the_float_form(why, ci, group, zw):
    x = RNG.standard_normal((1, ci, 7, 7)).astype(np.float32)
    wq = _weights(8, ci // group, 3)
    model = _qdq_conv_model(
        x.shape, wq, np.float32(0.02), np.int8(zw), 0.05, np.uint8(10),
        kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=group,
    )  # fmt: skip
    _check(model, {"X": x}, integer=False)


def _matmul_integer_model(a_shape, a_dtype, w, za_runtime, zb=None):
    inputs = [h.make_tensor_value_info("A", ELEM[np.dtype(a_dtype)], a_shape)]
    names = ["A", "W"]
    inits = [nh.from_array(w, "W")]
    if za_runtime:
        inputs.append(h.make_tensor_value_info("ZA", ELEM[np.dtype(a_dtype)], []))
    else:
        inits.append(nh.from_array(np.array(3, a_dtype), "ZA"))
    names.append("ZA")
    if zb is not None:
        inits.append(nh.from_array(np.array(zb, w.dtype), "ZB"))
        names.append("ZB")
    g = h.make_graph(
        [h.make_node("MatMulInteger", names, ["Y"])],
        "mmi",
        inputs,
        [h.make_tensor_value_info("Y", T.INT32, None)],
        inits,
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 21)])


@pytest.mark.parametrize("a_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("za_runtime", [False, True])
def test_matmul_integer_with_constant_weights_is_exact(a_dtype, za_runtime):
    info = np.iinfo(a_dtype)
    a = RNG.integers(info.min, info.max + 1, (2, 5, 24)).astype(a_dtype)
    w = RNG.integers(-128, 128, (24, 13)).astype(np.int8)
    za = np.array(-7 if a_dtype == np.int8 else 200, a_dtype)
    feeds = {"A": a}
    if za_runtime:
        feeds["ZA"] = za
    else:
        za = np.array(3, a_dtype)
    model = _matmul_integer_model(a.shape, a_dtype, w, za_runtime)
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(**feeds)
    want = (a.astype(np.int64) - int(za)) @ w.astype(np.int64)
    np.testing.assert_array_equal(got, want)
    assert "dot4(" in fn.lower(**feeds).ir


def test_matmul_integer_uint8_weights_with_zero_point_128():
    a = RNG.integers(0, 256, (6, 8)).astype(np.uint8)
    w = RNG.integers(0, 256, (8, 5)).astype(np.uint8)
    model = _matmul_integer_model(a.shape, np.uint8, w, False, zb=128)
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(A=a)
    want = (a.astype(np.int64) - 3) @ (w.astype(np.int64) - 128)
    np.testing.assert_array_equal(got, want)
    assert "dot4(" in fn.lower(A=a).ir


def test_matmul_integer_whose_depth_is_not_a_multiple_of_four_is_still_exact():
    a = RNG.integers(0, 256, (3, 7)).astype(np.uint8)
    w = RNG.integers(-128, 128, (7, 4)).astype(np.int8)
    model = _matmul_integer_model(a.shape, np.uint8, w, False)
    fn = stripeml.onnx.compile(model, target="cpu")
    np.testing.assert_array_equal(fn(A=a), (a.astype(np.int64) - 3) @ w.astype(np.int64))
    assert "dot4(" not in fn.lower(A=a).ir


@pytest.mark.parametrize("int8_dot", [True, False])
def test_dot4_codegen_with_and_without_the_dot_product_instruction(int8_dot, tmp_path):
    """The CPU backend's two forms of dot4 (the VNNI instruction where the target
    says the CPU has it, widened byte products otherwise) give NumPy's numbers."""
    from pathlib import Path

    from stripeml.targets import load_target

    if int8_dot and not load_target("cpu").int8_dot:
        pytest.skip("this CPU has no integer dot-product instruction (VNNI)")
    cpu_toml = Path(stripeml.targets.__file__).parent / "cpu.toml"
    src = cpu_toml.read_text(encoding="utf-8")
    assert 'int8_dot = "auto"' in src
    path = tmp_path / "cpu_dot.toml"
    path.write_text(
        src.replace('int8_dot = "auto"', f"int8_dot = {str(int8_dot).lower()}"), "utf-8"
    )
    f = stripeml.compile(
        """function (X[M, K], W[K4, N]) -> (C) {
            X4 = view_int(X, 32);
            C[m, n : M, N] = +(dot4(X4[m, k], W[k, n]));
        }""",
        target=str(path),
    )
    assert f.target.int8_dot is int8_dot
    x = RNG.integers(0, 256, (9, 36)).astype(np.uint8)
    w = RNG.integers(-(2**31), 2**31, (9, 48)).astype(np.int32)
    want = np.einsum(
        "mkt,knt->mn",
        x.reshape(9, 9, 4).astype(np.int64),
        w.view(np.int8).reshape(9, 48, 4).astype(np.int64),
    )
    np.testing.assert_array_equal(f(x, w), want)


@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
def test_qlinear_conv_is_integer_and_exact(x_dtype):
    """QLinearConv (the QOperator format) on channels-last bytes: the same integers
    as onnx's reference, requantisation included."""
    info = np.iinfo(x_dtype)
    x = RNG.integers(info.min, info.max + 1, (1, 16, 10, 9)).astype(x_dtype)
    w = RNG.integers(-128, 128, (24, 16, 3, 3)).astype(np.int8)
    inits = [
        nh.from_array(np.array(0.02, np.float32), "sx"),
        nh.from_array(np.array(5, x_dtype), "zx"),
        nh.from_array(w, "w"),
        nh.from_array((RNG.random(24) * 0.01 + 0.001).astype(np.float32), "sw"),
        nh.from_array(np.zeros(24, np.int8), "zw"),
        nh.from_array(np.array(0.5, np.float32), "sy"),
        nh.from_array(np.array(3, x_dtype), "zy"),
        nh.from_array(RNG.integers(-5000, 5000, 24).astype(np.int32), "B"),
    ]
    node = h.make_node(
        "QLinearConv", ["X", "sx", "zx", "w", "sw", "zw", "sy", "zy", "B"], ["Y"],
        pads=[1, 0, 1, 2], strides=[1, 2], kernel_shape=[3, 3],
    )  # fmt: skip
    g = h.make_graph(
        [node],
        "qlc",
        [h.make_tensor_value_info("X", ELEM[np.dtype(x_dtype)], x.shape)],
        [h.make_tensor_value_info("Y", ELEM[np.dtype(x_dtype)], None)],
        inits,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 21)])
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    fn = stripeml.onnx.compile(model, target="cpu")
    got = fn(X=x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert "dot4(" in fn.lower(X=x).ir


def test_matmul_integer_with_a_zero_point_computed_at_run_time_is_one_kernel():
    """``DynamicQuantizeLinear``'s zero point is a scalar computed at run time:
    its term is written before the dot4 contraction, which then takes the
    subtraction as its epilogue (no int32 sums stored and read back)."""
    a = RNG.integers(0, 256, (16, 32)).astype(np.uint8)
    w = RNG.integers(-128, 128, (32, 64)).astype(np.int8)
    model = _matmul_integer_model(a.shape, np.uint8, w, True)
    fn = stripeml.onnx.compile(model, target="cpu")
    za = np.array(77, np.uint8)
    np.testing.assert_array_equal(fn(A=a, ZA=za), (a.astype(np.int64) - 77) @ w.astype(np.int64))
    kernels = [t for t in fn.lower(A=a, ZA=za).ir.splitlines() if "dot4(" in t and "//" in t]
    assert kernels and all(" - " in t.split("//", 1)[1] for t in kernels), kernels
