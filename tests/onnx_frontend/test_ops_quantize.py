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


def test_a_statically_quantised_cnn_matches_onnxruntime():
    """A small CNN quantised by onnxruntime's own tool (QDQ format: QuantizeLinear
    and DequantizeLinear around every Conv and MatMul), run against onnxruntime
    with its graph optimisations off (which computes the QDQ graph as written).
    Activations are rounded to uint8 between layers, so an accumulation order that
    differs in the last float bit can move one value by a quantisation step: the
    check allows one output step on a few elements, not more."""
    ort = pytest.importorskip("onnxruntime")
    quantization = pytest.importorskip("onnxruntime.quantization")
    import os
    import tempfile

    w1 = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (RNG.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    fc = (RNG.standard_normal((8, 10)) * 0.3).astype(np.float32)
    nodes = [
        h.make_node("Conv", ["X", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
        h.make_node("Relu", ["c1"], ["r1"]),
        h.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        h.make_node("Relu", ["c2"], ["r2"]),
        h.make_node("GlobalAveragePool", ["r2"], ["p"]),
        h.make_node("Flatten", ["p"], ["f"]),
        h.make_node("MatMul", ["f", "FC"], ["Y"]),
    ]
    inits = [
        nh.from_array(w1, "W1"),
        nh.from_array(RNG.standard_normal(8).astype(np.float32) * 0.1, "B1"),
        nh.from_array(w2, "W2"),
        nh.from_array(fc, "FC"),
    ]
    g = h.make_graph(
        nodes,
        "cnn",
        [h.make_tensor_value_info("X", T.FLOAT, [1, 3, 16, 16])],
        [h.make_tensor_value_info("Y", T.FLOAT, [1, 10])],
        inits,
    )
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    calib = [{"X": RNG.random((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantization.quantize_static(
            src,
            dst,
            Reader(),
            quant_format=quantization.QuantFormat.QDQ,
            activation_type=quantization.QuantType.QUInt8,
            weight_type=quantization.QuantType.QInt8,
        )
        q = onnx.load(dst)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = ort.InferenceSession(dst, opts, providers=["CPUExecutionProvider"])
        fn = stripeml.onnx.compile(dst, target="cpu")
    ops = {n.op_type for n in q.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    # the output's quantisation step: the scale of the last QuantizeLinear
    last_q = [n for n in q.graph.node if n.op_type == "QuantizeLinear"][-1]
    step = float(nh.to_array(next(t for t in q.graph.initializer if t.name == last_q.input[1])))
    for k in range(3):
        x = RNG.random((1, 3, 16, 16)).astype(np.float32)
        got, want = fn(X=x), session.run(None, {"X": x})[0]
        off = np.abs(got - want)
        assert off.max() <= step * 1.01, (k, off.max(), step)
        assert (off > 1e-5).sum() <= 2, (k, off)
