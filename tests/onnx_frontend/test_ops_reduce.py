"""Reductions, softmax and normalisations: the cases the ONNX node tests cover
thinly (old opsets, runtime scale inputs, ties, empty inputs, integer types,
float16 on the interpreter) against NumPy, on both targets."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import stripeml.onnx  # noqa: E402
from stripeml import StripeError  # noqa: E402
from stripeml.onnx.builder import OnnxError  # noqa: E402

TARGETS = ["interp", "cpu"]
RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, opset, inits=None):
    """A model over graph ``inputs`` (name -> array, for the dtype and shape),
    initializers ``inits`` (name -> array) and output names."""
    if not isinstance(nodes, list):
        nodes = [nodes]
    vis = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs.items()
    ]
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "g", vis, outs, initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(target, node, inputs, opset, inits=None, outputs=None):
    outputs = outputs or list(node.output)
    fn = stripeml.onnx.compile(_model(node, inputs, outputs, opset, inits), target=target)
    res = fn(**inputs)
    return res if isinstance(res, tuple) else (res,)


# -- reductions --------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_reduce_axes_attribute_old_opset(target):
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[0, -2], keepdims=0)
    (y,) = _run(target, node, {"x": x}, 11)
    assert y.shape == (3, 5)
    np.testing.assert_allclose(y, x.sum(axis=(0, 2)), rtol=1e-5, atol=1e-5)
    node = helper.make_node("ReduceMax", ["x"], ["y"], axes=[1, 3])
    (y,) = _run(target, node, {"x": x}, 13)
    assert y.shape == (2, 1, 4, 1)
    np.testing.assert_array_equal(y, x.max(axis=(1, 3), keepdims=True))


@pytest.mark.parametrize("target", TARGETS)
def test_reduce_axes_input_and_noop(target):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    node = helper.make_node("ReduceProd", ["x", "axes"], ["y"], keepdims=0)
    (y,) = _run(target, node, {"x": x}, 18, {"axes": np.array([1], np.int64)})
    np.testing.assert_allclose(y, x.prod(axis=1), rtol=1e-5)
    # axes as a graph input: specialised on its value
    (y,) = _run(target, node, {"x": x, "axes": np.array([0], np.int64)}, 18)
    np.testing.assert_allclose(y, x.prod(axis=0), rtol=1e-5)
    # no axes: everything, to a scalar
    node = helper.make_node("ReduceMin", ["x"], ["y"], keepdims=0)
    (y,) = _run(target, node, {"x": x}, 18)
    assert y.shape == ()
    assert y == x.min()
    # no axes with noop_with_empty_axes: the elementwise part only
    node = helper.make_node("ReduceSumSquare", ["x"], ["y"], noop_with_empty_axes=1)
    (y,) = _run(target, node, {"x": x}, 18)
    np.testing.assert_allclose(y, x * x, rtol=1e-6)
    node = helper.make_node("ReduceMean", ["x"], ["y"], noop_with_empty_axes=1)
    (y,) = _run(target, node, {"x": x}, 18)
    np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("target", TARGETS)
def test_reduce_integer_types(target):
    x = RNG.integers(-20, 20, size=(4, 5)).astype(np.int32)
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)
    (y,) = _run(target, node, {"x": x}, 13)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.trunc(x.mean(axis=1)).astype(np.int32))
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"])
    (y,) = _run(target, node, {"x": x}, 13, {"axes": np.array([0], np.int64)})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, x.sum(axis=0, keepdims=True))
    node = helper.make_node("ReduceL1", ["x"], ["y"], axes=[0])
    (y,) = _run(target, node, {"x": x}, 13)
    np.testing.assert_array_equal(y, np.abs(x).sum(axis=0, keepdims=True))
    u = RNG.integers(0, 255, size=(3, 4)).astype(np.uint8)
    node = helper.make_node("ReduceMax", ["x"], ["y"], axes=[0])
    (y,) = _run(target, node, {"x": u}, 13)
    np.testing.assert_array_equal(y, u.max(axis=0, keepdims=True))


@pytest.mark.parametrize("target", TARGETS)
def test_reduce_log_sum_exp_is_stable(target):
    x = (RNG.standard_normal((2, 3, 4)) * 50 + 500).astype(np.float32)
    node = helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"], keepdims=0)
    (y,) = _run(target, node, {"x": x}, 18, {"axes": np.array([2, 0], np.int64)})
    x64 = x.astype(np.float64)
    m = x64.max(axis=(0, 2), keepdims=True)
    want = (np.log(np.exp(x64 - m).sum(axis=(0, 2), keepdims=True)) + m).reshape(3)
    assert y.shape == (3,)
    np.testing.assert_allclose(y, want, rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_reduce_empty_input(target):
    x = np.zeros((2, 0, 3), np.float32)
    cases = {
        "ReduceMax": -np.inf,
        "ReduceMin": np.inf,
        "ReduceProd": 1.0,
        "ReduceSum": 0.0,
        "ReduceLogSum": -np.inf,
    }
    for op, value in cases.items():
        node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)
        # Opset 11: every Reduce op still takes `axes` as an attribute (ReduceSum-13
        # takes an input, and onnx's checker refuses the attribute there).
        (y,) = _run(target, node, {"x": x}, 11)
        np.testing.assert_array_equal(y, np.full((2, 3), value, np.float32))


# -- ArgMax / ArgMin -----------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("last", [0, 1])
def test_arg_ties(target, last):
    x = RNG.integers(0, 3, size=(4, 5, 3)).astype(np.int64)
    for op, f in (("ArgMax", np.argmax), ("ArgMin", np.argmin)):
        node = helper.make_node(op, ["x"], ["y"], axis=-2, keepdims=0, select_last_index=last)
        (y,) = _run(target, node, {"x": x}, 13)
        if last:
            want = x.shape[1] - 1 - f(np.flip(x, axis=1), axis=1)
        else:
            want = f(x, axis=1)
        assert y.dtype == np.int64 and y.shape == (4, 3)
        np.testing.assert_array_equal(y, want)


# -- softmax family ------------------------------------------------------------------


def _np_softmax(x, axes):
    m = x.max(axis=axes, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axes, keepdims=True)


@pytest.mark.parametrize("target", TARGETS)
def test_softmax_opsets(target):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32) * 10
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    (y,) = _run(target, node, {"x": x}, 11)  # coerced to 2-D: axes 1 and 2
    np.testing.assert_allclose(y, _np_softmax(x, (1, 2)), rtol=1e-5, atol=1e-7)
    (y,) = _run(target, node, {"x": x}, 13)  # one axis
    np.testing.assert_allclose(y, _np_softmax(x, (1,)), rtol=1e-5, atol=1e-7)
    node = helper.make_node("LogSoftmax", ["x"], ["y"])
    (y,) = _run(target, node, {"x": x * 100}, 11)  # default axis 1, large values
    xs = (x * 100).astype(np.float64)
    m = xs.max(axis=(1, 2), keepdims=True)
    want = xs - m - np.log(np.exp(xs - m).sum(axis=(1, 2), keepdims=True))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("target", TARGETS)
def test_hardmax_first_maximum(target):
    x = np.array([[[1, 3], [3, 0]], [[2, 2], [0, 2]]], np.float32)
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=1)
    (y,) = _run(target, node, {"x": x}, 11)  # over the flattened (2, 2) block
    want = np.array([[[0, 1], [0, 0]], [[1, 0], [0, 0]]], np.float32)
    np.testing.assert_array_equal(y, want)
    (y,) = _run(target, node, {"x": x}, 13)  # along axis 1 only
    want = np.array([[[0, 1], [1, 0]], [[1, 1], [0, 0]]], np.float32)
    np.testing.assert_array_equal(y, want)


def test_softmax_float16_on_interp():
    x = RNG.standard_normal((3, 5)).astype(np.float16)
    node = helper.make_node("Softmax", ["x"], ["y"])
    (y,) = _run("interp", node, {"x": x}, 13)
    assert y.dtype == np.float16
    want = _np_softmax(x.astype(np.float32), (1,))
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-3, atol=1e-3)


# -- CumSum ----------------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumsum(target, exclusive, reverse):
    x = RNG.integers(-9, 9, size=(3, 6)).astype(np.int64)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    (y,) = _run(target, node, {"x": x}, 14, {"axis": np.array(-1, np.int32)})
    v = np.flip(x, 1) if reverse else x
    c = np.cumsum(v, axis=1)
    if exclusive:
        c = c - v
    want = np.flip(c, 1) if reverse else c
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod(target, exclusive, reverse):
    x = RNG.integers(-3, 4, size=(3, 5)).astype(np.int64)
    node = helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    (y,) = _run(target, node, {"x": x}, 26, {"axis": np.array(1, np.int64)})
    v = np.flip(x, 1) if reverse else x
    c = np.cumprod(v, axis=1)
    if exclusive:
        c = np.concatenate([np.ones_like(c[:, :1]), c[:, :-1]], axis=1)
    want = np.flip(c, 1) if reverse else c
    np.testing.assert_array_equal(y, want)


# -- normalisations ------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_layer_normalization_outputs(target):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    scale = RNG.standard_normal((3, 4)).astype(np.float32)
    node = helper.make_node(
        "LayerNormalization", ["x", "s"], ["y", "mean", "inv"], axis=1, epsilon=1e-3
    )
    y, mean, inv = _run(target, node, {"x": x, "s": scale}, 17)
    x64 = x.astype(np.float64)
    mu = x64.mean(axis=(1, 2), keepdims=True)
    var = x64.var(axis=(1, 2), keepdims=True)
    assert mean.shape == inv.shape == (2, 1, 1)
    np.testing.assert_allclose(mean, mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv, 1 / np.sqrt(var + 1e-3), rtol=1e-5)
    np.testing.assert_allclose(y, (x64 - mu) / np.sqrt(var + 1e-3) * scale, rtol=1e-4, atol=1e-5)


def _np_group_norm(x, groups, scale, bias, eps):
    n, c = x.shape[:2]
    xr = x.astype(np.float64).reshape(n, groups, -1)
    xn = (xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + eps)
    tail = (1,) * (x.ndim - 2)
    return xn.reshape(x.shape) * scale.reshape(-1, *tail) + bias.reshape(-1, *tail)


@pytest.mark.parametrize("target", TARGETS)
def test_group_normalization_runtime_scale(target):
    x = RNG.standard_normal((2, 6, 3, 2)).astype(np.float32)
    # opset 21: per channel, scale and bias as graph inputs
    s = RNG.standard_normal(6).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3)
    (y,) = _run(target, node, {"x": x, "s": s, "b": b}, 21)
    np.testing.assert_allclose(y, _np_group_norm(x, 3, s, b, 1e-5), rtol=1e-4, atol=1e-5)
    # opset 18: per group, repeated over each group's channels
    s2 = RNG.standard_normal(2).astype(np.float32)
    b2 = RNG.standard_normal(2).astype(np.float32)
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    (y,) = _run(target, node, {"x": x, "s": s2}, 18, {"b": b2})
    want = _np_group_norm(x, 2, np.repeat(s2, 3), np.repeat(b2, 3), 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_instance_and_rms_normalization(target):
    x = RNG.standard_normal((2, 3, 5)).astype(np.float32)
    s = RNG.standard_normal(3).astype(np.float32)
    b = RNG.standard_normal(3).astype(np.float32)
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-2)
    (y,) = _run(target, node, {"x": x, "s": s, "b": b}, 6)
    x64 = x.astype(np.float64)
    mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    want = (x64 - mu) / np.sqrt(var + 1e-2) * s[:, None] + b[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    w = RNG.standard_normal(5).astype(np.float32)
    node = helper.make_node("RMSNormalization", ["x", "w"], ["y"], axis=-1)
    (y,) = _run(target, node, {"x": x, "w": w}, 23)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_lrn_even_size(target):
    x = RNG.standard_normal((2, 5, 3, 3)).astype(np.float32)
    size, alpha, beta, bias = 4, 0.01, 0.6, 1.5
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    (y,) = _run(target, node, {"x": x}, 13)
    lo, hi = math.floor((size - 1) / 2), math.ceil((size - 1) / 2)
    sq = np.zeros_like(x, dtype=np.float64)
    for c in range(x.shape[1]):
        sq[:, c] = (x[:, max(0, c - lo) : c + hi + 1].astype(np.float64) ** 2).sum(axis=1)
    want = x / (bias + alpha / size * sq) ** beta
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_lp_and_mean_variance_normalization(target):
    x = np.array([[1.0, -2.0, 3.0], [0.0, 0.0, 0.0]], np.float32)
    node = helper.make_node("LpNormalization", ["x"], ["y"], axis=1, p=1)
    (y,) = _run(target, node, {"x": x}, 13)
    np.testing.assert_allclose(y, [[1 / 6, -2 / 6, 3 / 6], [0, 0, 0]], rtol=1e-6)
    z = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2])
    (y,) = _run(target, node, {"x": z}, 13)
    z64 = z.astype(np.float64)
    mu = z64.mean(axis=(0, 2), keepdims=True)
    want = (z64 - mu) / (np.sqrt(z64.var(axis=(0, 2), keepdims=True)) + 1e-9)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


# -- errors ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "inputs", "opset", "message"),
    [
        (
            helper.make_node("LpNormalization", ["x"], ["y"], p=3),
            {"x": np.ones((2, 2), np.float32)},
            13,
            "p = 3 is not supported",
        ),
        (
            helper.make_node("LayerNormalization", ["x", "x"], ["y"], stash_type=7),
            {"x": np.ones((2, 2), np.float32)},
            17,
            "stash_type 7",
        ),
        (
            helper.make_node("GroupNormalization", ["x", "s", "s"], ["y"], num_groups=4),
            {"x": np.ones((1, 6, 2), np.float32), "s": np.ones(6, np.float32)},
            21,
            "num_groups 4 must divide the 6 channels",
        ),
        (
            helper.make_node("Softmax", ["x"], ["y"]),
            {"x": np.ones((2, 2), np.int32)},
            13,
            "floats only",
        ),
        (
            helper.make_node("ReduceSum", ["x"], ["y"], axes=[1, -1]),
            {"x": np.ones((2, 2), np.float32)},
            11,
            "repeat an axis",
        ),
        (
            helper.make_node("ArgMax", ["x"], ["y"], axis=2),
            {"x": np.ones((2, 2), np.float32)},
            13,
            "axis 2 is out of range for rank 2",
        ),
    ],
)
def test_errors(node, inputs, opset, message):
    with pytest.raises(OnnxError, match=message) as info:
        _run("interp", node, inputs, opset)
    assert isinstance(info.value, StripeError)


def test_cumsum_axis_must_be_static():
    x = np.ones((2, 3), np.float32)
    shape = helper.make_node("Shape", ["x"], ["s"])
    node = helper.make_node("CumSum", ["x", "s"], ["y"])
    # a 2-element axis tensor is not a scalar
    fn = stripeml.onnx.compile(_model([shape, node], {"x": x}, ["y"], 14), target="interp")
    with pytest.raises(OnnxError, match="scalar axis"):
        fn(x)
