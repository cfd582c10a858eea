"""A ``Conv`` whose weights are computed at run time (a graph input, as a training
graph's parameters are) runs channels-last like one with constant weights, through
one transposing copy of the weights, and gives the reference's numbers."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import stripeml.onnx  # noqa: E402

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(
    "group, ci, co, k, stride, pads, bias",
    [
        (1, 5, 7, 3, 1, [1, 1, 1, 1], True),
        (1, 8, 16, 3, 2, [1, 0, 1, 2], False),
        (6, 6, 6, 3, 1, [1, 1, 1, 1], True),  # depthwise
        (1, 3, 4, 1, 1, [0, 0, 0, 0], True),
    ],
)
def test_conv_with_runtime_weights_is_channels_last(group, ci, co, k, stride, pads, bias):
    x = RNG.standard_normal((2, ci, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((co, ci // group, k, k)).astype(np.float32)
    b = RNG.standard_normal(co).astype(np.float32)
    ins = [
        h.make_tensor_value_info("X", T.FLOAT, x.shape),
        h.make_tensor_value_info("W", T.FLOAT, w.shape),
    ]
    names = ["X", "W"]
    feeds = {"X": x, "W": w}
    if bias:
        ins.append(h.make_tensor_value_info("B", T.FLOAT, b.shape))
        names.append("B")
        feeds["B"] = b
    nodes = [
        h.make_node(
            "Conv", names, ["Y"], group=group, strides=[stride] * 2, pads=pads, kernel_shape=[k, k]
        ),
        h.make_node("Relu", ["Y"], ["Z"]),
    ]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info("Z", T.FLOAT, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    fn = stripeml.onnx.compile(model)
    got = fn(**feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    source = fn.source(**feeds)
    # the weights are transposed in the program to (KH, KW, CI, CO) / (KH, KW, C)
    assert "ky, kx, ci, co :" in source or "ky, kx, c :" in source
