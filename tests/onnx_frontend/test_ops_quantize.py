"""QuantizeLinear and DequantizeLinear (ops/quantize.py) against onnx's reference
evaluator and NumPy: per tensor, per axis, blocked, with scales known when
compiling and computed at run time."""

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

RNG = np.random.default_rng(3)
ELEM = {np.uint8: T.UINT8, np.int8: T.INT8, np.uint16: T.UINT16, np.int16: T.INT16}


def _run_both(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = stripeml.onnx.compile(model, target="cpu")(**feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    return got, want


def _quantize_model(x_shape, scale, zp, opset=21, runtime_scale=False, **attrs):
    inputs = [h.make_tensor_value_info("X", T.FLOAT, x_shape)]
    inits = []
    if runtime_scale:
        inputs.append(h.make_tensor_value_info("S", T.FLOAT, scale.shape))
    else:
        inits.append(nh.from_array(scale, "S"))
    names = ["X", "S"]
    if zp is not None:
        inits.append(nh.from_array(zp, "Z"))
        names.append("Z")
    node = h.make_node("QuantizeLinear", names, ["Y"], **attrs)
    g = h.make_graph([node], "q", inputs, [h.make_tensor_value_info("Y", T.UNDEFINED, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor_rounds_half_to_even_and_saturates(dtype):
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = np.array([-1e6, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49, 1e6], np.float32)
    zp = np.array(3 if lo == 0 else -2, dtype)
    got, want = _run_both(_quantize_model(x.shape, np.array(0.5, np.float32), zp), {"X": x})
    np.testing.assert_array_equal(got, want)
    ref = np.clip(np.rint(x / np.float32(0.5)) + int(zp), lo, hi).astype(dtype)
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("runtime_scale", [False, True])
def test_quantize_per_axis_and_blocked(runtime_scale):
    x = (RNG.standard_normal((2, 6, 5)) * 40).astype(np.float32)
    scale = (RNG.random(6) + 0.1).astype(np.float32)
    zp = RNG.integers(-5, 5, 6).astype(np.int8)
    model = _quantize_model(x.shape, scale, zp, axis=1, runtime_scale=runtime_scale)
    feeds = {"X": x, **({"S": scale} if runtime_scale else {})}
    got, want = _run_both(model, feeds)
    np.testing.assert_array_equal(got, want)
    # blocks of 2 along the last axis (5 = 2 + 2 + 1: a short last block)
    scale = (RNG.random((2, 6, 3)) + 0.1).astype(np.float32)
    zp = RNG.integers(0, 20, (2, 6, 3)).astype(np.uint8)
    model = _quantize_model(x.shape, scale, zp, axis=-1, block_size=2, runtime_scale=runtime_scale)
    feeds = {"X": x, **({"S": scale} if runtime_scale else {})}
    got, want = _run_both(model, feeds)
    np.testing.assert_array_equal(got, want)


def test_dequantize_per_axis_against_numpy():
    x = RNG.integers(0, 256, (3, 4)).astype(np.uint8)
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    zp = np.array([128, 0, 7], np.uint8)
    node = h.make_node("DequantizeLinear", ["X", "S", "Z"], ["Y"], axis=0)
    g = h.make_graph(
        [node],
        "dq",
        [h.make_tensor_value_info("X", T.UINT8, x.shape)],
        [h.make_tensor_value_info("Y", T.FLOAT, None)],
        [nh.from_array(scale, "S"), nh.from_array(zp, "Z")],
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 19)])
    got, want = _run_both(model, {"X": x})
    np.testing.assert_array_equal(got, want)
    ref = (x.astype(np.float32) - zp[:, None].astype(np.float32)) * scale[:, None]
    np.testing.assert_array_equal(got, ref)


def test_a_mismatched_scale_is_a_clear_error():
    model = _quantize_model((2, 6), np.ones(5, np.float32), None, axis=1)
    with pytest.raises(stripeml.StripeError, match="one value per element of axis 1"):
        stripeml.onnx.compile(model, target="cpu")(X=np.ones((2, 6), np.float32))
