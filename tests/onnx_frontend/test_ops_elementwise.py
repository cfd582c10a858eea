"""Elementwise and activation ops: cases the ONNX node tests cover thinly
(integer Div/Mod semantics, mixed-type Pow, Clip with omitted bounds, Cast
truncation, special values), on both targets, against NumPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml.onnx import OnnxError  # noqa: E402

TARGETS = ["interp", "cpu"]


def model(op, inputs, out_dtype, opset=21, **attrs):
    """A one-node model; ``inputs`` are (name, array) or (name, None) for an
    omitted optional input."""
    vis = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for name, a in inputs
        if a is not None
    ]
    node = helper.make_node(
        op, [name if a is not None else "" for name, a in inputs], ["y"], **attrs
    )
    out = helper.make_tensor_value_info(
        "y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), None
    )
    graph = helper.make_graph([node], "g", vis, [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(target, op, inputs, out_dtype, **attrs):
    f = stripeml.onnx.compile(model(op, inputs, out_dtype, **attrs), target=target)
    return f(*[a for _, a in inputs if a is not None])


def check(got, want, rtol=1e-6, atol=0.0):
    got = np.asarray(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)


INTS = [np.int8, np.int16, np.int32, np.int64]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", INTS)
def test_int_div_truncates_and_mod(target, dtype):
    a = np.array([-7, 7, -7, 7, -6, 0, 5, -1], dtype)
    b = np.array([2, -2, -2, 2, 3, 3, -7, 5], dtype)
    trunc = (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(dtype)
    check(run(target, "Div", [("a", a), ("b", b)], dtype), trunc)
    check(run(target, "Mod", [("a", a), ("b", b)], dtype), np.mod(a, b))
    check(run(target, "Mod", [("a", a), ("b", b)], dtype, fmod=1), np.fmod(a, b))


@pytest.mark.parametrize("target", TARGETS)
def test_float_fmod_exact(target):
    a = np.array([-4.3, 7.2, 1e-20, -1e-20, 5.0, -0.0, 3.0, np.inf], np.float64)
    b = np.array([2.1, -3.4, 1.0, 1.0, np.inf, 2.0, -np.inf, 2.0], np.float64)
    with np.errstate(invalid="ignore"):
        want = np.fmod(a, b)
    got = run(target, "Mod", [("a", a), ("b", b)], np.float64, fmod=1)
    np.testing.assert_array_equal(got, want)  # exact, signed zeros included
    assert np.signbit(got[5])


@pytest.mark.parametrize("target", TARGETS)
def test_pow_mixed_types(target):
    x = np.array([1.5, 2.0, -3.0], np.float32)
    e = np.array([2, 3, 2], np.int64)
    check(run(target, "Pow", [("x", x), ("e", e)], np.float32), np.power(x, e).astype(np.float32))
    xi = np.array([2, 3, 4], np.int32)
    ef = np.array([0.5, 2.0, 1.5], np.float32)
    check(run(target, "Pow", [("x", xi), ("e", ef)], np.int32), np.power(xi, ef).astype(np.int32))


def pow_model(x, e):
    """``Pow(x, E)`` with the exponent an initializer (known when compiling)."""
    node = helper.make_node("Pow", ["x", "E"], ["y"])
    vi = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)
    init = onnx.numpy_helper.from_array(e, "E")
    graph = helper.make_graph([node], "g", [vi], [out], initializer=[init])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-15, 3e12, -7e9, 1.0, -1.0]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 4.0, 2.5, -1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_constant_exponent(target, exponent, dtype):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(53) * 4, SPECIALS]).astype(dtype)
    if exponent == 2.5:
        x = np.abs(x)
    e = np.array(exponent, dtype)
    f = stripeml.onnx.compile(pow_model(x, e), target=target)
    with np.errstate(all="ignore"):
        want = np.power(x, e)
    check(f(x), want, rtol=4 * np.finfo(dtype).eps)
    # Small integer exponents are products; others keep the general pow.
    assert ("pow(" in f.source(x)) == (exponent not in (1.0, 2.0, 3.0, 4.0))


@pytest.mark.parametrize("target", TARGETS)
def test_pow_constant_exponent_broadcast_and_mixed(target):
    x = np.array([1.5, -2.0, 3.0], np.float32)
    e = np.full((2, 3), 3, np.int64)  # the exponent broadcasts the base
    f = stripeml.onnx.compile(pow_model(x, e), target=target)
    check(f(x), np.power(x, e).astype(np.float32))
    per = np.array([2.0, 3.0, 2.0], np.float32)  # not one value: the general pow
    f = stripeml.onnx.compile(pow_model(x, per), target=target)
    check(f(x), np.power(x, per))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int64, np.float32, np.float64])
def test_clip_optional_bounds(target, dtype):
    signed = np.dtype(dtype).kind != "u"
    x = np.array([[-5 if signed else 1, 0, 3], [7, 100, -100 if signed else 200]], dtype)
    lo, hi = np.array(-2 if signed else 2, dtype), np.array(50, dtype)
    check(run(target, "Clip", [("x", x), ("lo", lo), ("hi", hi)], dtype), np.clip(x, lo, hi))
    check(run(target, "Clip", [("x", x), ("lo", None), ("hi", hi)], dtype), np.minimum(x, hi))
    check(run(target, "Clip", [("x", x), ("lo", lo)], dtype), np.maximum(x, lo))


@pytest.mark.parametrize("target", TARGETS)
def test_clip_old_opset_attributes(target):
    x = np.array([-3.0, 0.25, 9.0], np.float32)
    got = run(target, "Clip", [("x", x)], np.float32, opset=6, min=-1.0, max=1.0)
    check(got, np.clip(x, -1, 1).astype(np.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_round_half_to_even_and_sign(target):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6], np.float32)
    check(run(target, "Round", [("x", x)], np.float32), np.round(x))
    s = np.array([-3.0, 0.0, 2.0, np.nan], np.float64)
    check(run(target, "Sign", [("x", s)], np.float64), np.sign(s))
    si = np.array([-3, 0, 9], np.int16)
    check(run(target, "Sign", [("x", si)], np.int16), np.sign(si))


@pytest.mark.parametrize("target", TARGETS)
def test_cast_truncates_and_bool(target):
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, np.nan], np.float32)
    check(
        run(target, "Cast", [("x", x[:5])], np.int32, to=TensorProto.INT32), x[:5].astype(np.int32)
    )
    check(run(target, "Cast", [("x", x)], np.bool_, to=TensorProto.BOOL), x.astype(bool))
    i = np.array([300, -1, 7], np.int32)
    check(run(target, "Cast", [("x", i)], np.uint8, to=TensorProto.UINT8), i.astype(np.uint8))
    check(
        run(target, "CastLike", [("x", i), ("like", np.zeros(1, np.float64))], np.float64),
        i.astype(np.float64),
    )


@pytest.mark.parametrize("target", TARGETS)
def test_isinf_isnan(target):
    x = np.array([1.0, np.inf, -np.inf, np.nan, -0.0], np.float32)
    check(run(target, "IsNaN", [("x", x)], np.bool_), np.isnan(x))
    check(run(target, "IsInf", [("x", x)], np.bool_), np.isinf(x))
    check(run(target, "IsInf", [("x", x)], np.bool_, detect_negative=0), np.isposinf(x))
    check(run(target, "IsInf", [("x", x)], np.bool_, detect_positive=0), np.isneginf(x))


@pytest.mark.parametrize("target", TARGETS)
def test_inverse_trig_and_hyperbolic(target):
    x = np.concatenate([np.linspace(-0.999, 0.999, 41), [-1.0, 1.0, 0.0, 1e-9]]).astype(np.float64)
    for op, fn in (
        ("Asin", np.arcsin),
        ("Acos", np.arccos),
        ("Atan", np.arctan),
        ("Atanh", np.arctanh),
    ):
        with np.errstate(divide="ignore"):
            want = fn(x)
        check(run(target, op, [("x", x)], np.float64), want, rtol=1e-10, atol=1e-15)
    big = np.array([-1e300, -50.0, -1e-8, 0.0, 3.0, 1e10, 1e300, np.inf], np.float64)
    check(run(target, "Atan", [("x", big)], np.float64), np.arctan(big), rtol=1e-10)
    check(run(target, "Asinh", [("x", big)], np.float64), np.arcsinh(big), rtol=1e-10)
    ch = np.array([1.0, 1.5, 10.0, 1e200], np.float64)
    check(run(target, "Acosh", [("x", ch)], np.float64), np.arccosh(ch), rtol=1e-10)
    f = np.array([-3.0, -1e-5, 0.0, 2e-4, 5.0], np.float32)
    check(run(target, "Sinh", [("x", f)], np.float32), np.sinh(f), rtol=1e-6)
    check(
        run(target, "Asin", [("x", np.array([0.5, 2.0], np.float32))], np.float32),
        np.array([math.asin(0.5), np.nan], np.float32),
    )


@pytest.mark.parametrize("target", TARGETS)
def test_variadic_broadcast(target):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.array([4, -1, 2], np.int32)
    c = np.array([[1], [9]], np.int32)
    ins = [("a", a), ("b", b), ("c", c)]
    check(run(target, "Max", ins, np.int32), np.maximum(np.maximum(a, b), c))
    check(run(target, "Min", ins, np.int32), np.minimum(np.minimum(a, b), c))
    check(run(target, "Sum", ins, np.int32), a + b + c)
    f = [(k, v.astype(np.float32)) for k, v in ins]
    check(run(target, "Mean", f, np.float32), ((a + b + c) / 3).astype(np.float32))


@pytest.mark.parametrize("target", TARGETS)
def test_int_weak_literals_keep_dtype(target):
    # Shrink and PRelu on integers must not drift to float64.
    x = np.array([-5, -1, 0, 1, 5], np.int32)
    got = run(target, "Shrink", [("x", x)], np.int32, lambd=1.5, bias=1.0)
    check(got, np.where(x < -1.5, x + 1, np.where(x > 1.5, x - 1, 0)).astype(np.int32))
    s = np.array([3], np.int32)
    check(run(target, "PRelu", [("x", x), ("s", s)], np.int32), np.where(x < 0, 3 * x, x))


def test_unsupported_errors():
    with pytest.raises(OnnxError, match="approximate"):
        run("interp", "Gelu", [("x", np.ones(2, np.float32))], np.float32, approximate="fast")
    with pytest.raises(OnnxError, match="strings"):
        run("interp", "Cast", [("x", np.ones(2, np.float32))], np.float32, to=TensorProto.STRING)
    with pytest.raises(OnnxError, match="float tensor"):
        run("interp", "Exp", [("x", np.ones(2, np.int32))], np.int32)


@pytest.mark.parametrize("target", TARGETS)
def test_prelu_opset6_channel_slope_and_clip_shape1_bounds(target):
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    s = np.array([0.1, 0.2, 0.3], np.float32)
    got = run(target, "PRelu", [("x", x), ("s", s)], np.float32, opset=6)
    check(got, np.where(x < 0, s.reshape(3, 1) * x, x))
    lo, hi = np.array([-1.0], np.float32), np.array([2.0], np.float32)
    got = run(target, "Clip", [("x", x[0, 0]), ("lo", lo), ("hi", hi)], np.float32)
    check(got, np.clip(x[0, 0], -1, 2))


@pytest.mark.parametrize("target", TARGETS)
def test_logic_where_bool(target):
    a = np.array([[True, False, True]])
    b = np.array([[True], [False]])
    check(run(target, "Xor", [("a", a), ("b", b)], np.bool_), a ^ b)
    check(run(target, "Equal", [("a", a), ("b", b)], np.bool_), a == b)
    x = np.array([1, 2, 3], np.uint16)
    y = np.array([7], np.uint16)
    # The second value is not named "y": the node's output is (single assignment).
    check(run(target, "Where", [("c", a), ("x", x), ("z", y)], np.uint16), np.where(a, x, y))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint32, np.int64])
def test_bitshift_broadcasts_and_shifts_out_from_the_width(target, dtype):
    """BitShift-28 (signed types too): an amount that is negative or at least the
    width gives 0, or -1 for a right shift of a negative value."""
    info, w = np.iinfo(dtype), 8 * np.dtype(dtype).itemsize
    x = np.array([[info.min], [info.max], [5]], dtype)
    amounts = [0, 1, w - 1, w, w + 7] + ([-1] if info.min < 0 else [])
    y = np.array(amounts, dtype)
    for direction, fn in (("LEFT", np.left_shift), ("RIGHT", np.right_shift)):
        got = run(target, "BitShift", [("x", x), ("s", y)], dtype, opset=28, direction=direction)
        check(got, fn(x, y))


@pytest.mark.parametrize("target", TARGETS)
def test_bitwise_ops_and_bitcast(target):
    a = np.array([[-128, -1, 0, 127]], np.int8)
    b = np.array([[0x55], [-16]], np.int8)
    for op, fn in (("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                   ("BitwiseXor", np.bitwise_xor)):  # fmt: skip
        check(run(target, op, [("a", a), ("b", b)], np.int8), fn(a, b))
    check(run(target, "BitwiseNot", [("a", a)], np.int8), ~a)
    x = np.array([1.0, -0.0, np.inf, np.nan], np.float32)
    got = run(target, "BitCast", [("x", x)], np.uint32, opset=26, to=TensorProto.UINT32)
    check(got, x.view(np.uint32))


def test_bitwise_errors():
    f32, i8 = np.ones(2, np.float32), np.ones(2, np.int8)
    with pytest.raises(OnnxError, match="must be an integer tensor, got float32"):
        run("interp", "BitwiseAnd", [("a", f32), ("b", f32)], np.float32)
    with pytest.raises(OnnxError, match="direction must be 'LEFT' or 'RIGHT'"):
        run("interp", "BitShift", [("a", i8), ("b", i8)], np.int8, opset=28, direction="UP")
    with pytest.raises(OnnxError, match="bit casts to bool are not supported"):
        run("interp", "BitCast", [("x", i8)], np.bool_, opset=26, to=TensorProto.BOOL)
    with pytest.raises(OnnxError, match="'to' must have the input's width"):
        run("interp", "BitCast", [("x", f32)], np.int64, opset=26, to=TensorProto.INT64)
