"""Every stripeml Function takes objects with ``__dlpack__`` (CPU torch tensors)
as inputs without copying them (``stripeml.api.as_array``)."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.api import as_array

torch = pytest.importorskip("torch")

SOURCE = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


def test_a_torch_tensor_is_viewed_not_copied():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    arr = as_array(t)
    assert arr.ctypes.data == t.data_ptr() and arr.shape == (3, 4) and arr.dtype == np.float32
    t[0, 0] = 42.0  # the same memory
    assert arr[0, 0] == 42.0


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_functions_take_torch_tensors(target):
    f = stripeml.compile(SOURCE, target=target)
    a = torch.randn(5, 7, generator=torch.Generator().manual_seed(1))
    b = torch.randn(7, 3, generator=torch.Generator().manual_seed(2))
    np.testing.assert_allclose(f(a, b), (a @ b).numpy(), rtol=1e-5, atol=1e-6)
    # a transposed (non-contiguous) view is converted too, with its strides
    np.testing.assert_allclose(f(b.t().t(), b.t()), (b @ b.t()).numpy(), rtol=1e-5, atol=1e-6)


def test_onnx_functions_take_torch_tensors():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import stripeml.onnx

    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert onnx.checker.check_model(model) is None
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0])
    np.testing.assert_array_equal(stripeml.onnx.compile(model, "cpu")(x), [0, 2, 0, 4])
