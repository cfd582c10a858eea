"""stripeml.grad of an ONNX model (an OnnxFunction, specialised per signature),
against torch.autograd and central finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.autodiff import AutodiffError, ModelGradFunction

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(5)
W0 = RNG.standard_normal((4, 3))
B0 = RNG.standard_normal(3)


def _mlp(weights_as_inputs: bool, two_outputs: bool = False, dtype=TensorProto.DOUBLE):
    """Y = ReduceSum(Relu(Gemm(X, W, B, alpha=0.5, beta=2, transB=1))) (and R, the Relu)."""
    nodes = [
        helper.make_node("Gemm", ["X", "W", "B"], ["H"], alpha=0.5, beta=2.0, transB=1),
        helper.make_node("Relu", ["H"], ["R"]),
        helper.make_node("ReduceSum", ["R"], ["Y"], keepdims=0),
    ]
    inputs = [helper.make_tensor_value_info("X", dtype, ["N", 4])]
    inits = []
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    if weights_as_inputs:
        inputs += [
            helper.make_tensor_value_info("W", dtype, [3, 4]),
            helper.make_tensor_value_info("B", dtype, [3]),
        ]
    else:
        inits = [
            numpy_helper.from_array(W0.T.astype(np_dtype), "W"),
            numpy_helper.from_array(B0.astype(np_dtype), "B"),
        ]
    outputs = [helper.make_tensor_value_info("Y", dtype, [])]
    if two_outputs:
        outputs.append(helper.make_tensor_value_info("R", dtype, ["N", 3]))
    graph = helper.make_graph(nodes, "mlp", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _torch_grads(x, w, b, cots, wrt, two_outputs=False):  # noqa: ANN001
    torch = pytest.importorskip("torch")
    ts = {"X": torch.tensor(x), "W": torch.tensor(w), "B": torch.tensor(b)}
    for k in wrt:
        ts[k].requires_grad_(True)
    r = torch.relu(0.5 * ts["X"] @ ts["W"].T + 2.0 * ts["B"])
    outs = [r.sum()] + ([r] if two_outputs else [])
    loss = sum((o * torch.tensor(c)).sum() for o, c in zip(outs, cots))
    return [t.numpy() for t in torch.autograd.grad(loss, [ts[k] for k in wrt])]


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_weights_as_graph_inputs_against_torch(target: str) -> None:
    f = stripeml.onnx.compile(_mlp(weights_as_inputs=True), target=target)
    g = stripeml.grad(f, wrt=("X", "W", "B"))
    assert isinstance(g, ModelGradFunction)
    w, b = W0.T.copy(), B0.copy()
    for n in (2, 5):  # two signatures, two gradient programs
        x = RNG.standard_normal((n, 4))
        dy = np.array(1.7)
        dx, dw, db = g(x, w, b, dy)
        want = _torch_grads(x, w, b, [dy], ("X", "W", "B"))
        for got, ref in zip((dx, dw, db), want):
            assert got.dtype == np.float64 and got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    src = g.source(x, w, b)
    assert src.startswith("function (") and "relu" not in src  # relu's adjoint is a select
    assert g.specialise(x, w, b) is g.specialise(x, w, b)  # cached per program


def test_initializers_are_constants_finite_differences() -> None:
    f = stripeml.onnx.compile(_mlp(weights_as_inputs=False, two_outputs=True), target="interp")
    g = stripeml.grad(f, wrt="X")
    x = RNG.standard_normal((3, 4))
    cots = [np.array(0.3), RNG.standard_normal((3, 3))]
    dx = g(x, *cots)

    def loss(xx: np.ndarray) -> float:
        return float(sum(np.sum(o * c) for o, c in zip(f(xx), cots)))

    eps, want = 1e-6, np.zeros_like(x)
    for k in np.ndindex(x.shape):
        p, m = x.copy(), x.copy()
        p[k] += eps
        m[k] -= eps
        want[k] = (loss(p) - loss(m)) / (2 * eps)
    np.testing.assert_allclose(dx, want, rtol=1e-6, atol=1e-8)
    ref = _torch_grads(x, W0.T, B0, cots, ("X",), two_outputs=True)[0]
    np.testing.assert_allclose(dx, ref, rtol=1e-10, atol=1e-12)


def test_float32_model() -> None:
    f = stripeml.onnx.compile(_mlp(True, dtype=TensorProto.FLOAT), target="cpu")
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    w, b = W0.T.astype(np.float32), B0.astype(np.float32)
    dw = stripeml.grad(f, "W")(x, w, b, np.float32(1.0))
    assert dw.dtype == np.float32
    ref = _torch_grads(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                       [1.0], ("W",))[0]  # fmt: skip
    np.testing.assert_allclose(dw, ref, rtol=1e-5, atol=1e-6)


def test_errors() -> None:
    f = stripeml.onnx.compile(_mlp(weights_as_inputs=False), target="interp")
    with pytest.raises(AutodiffError, match="not a graph input"):
        stripeml.grad(f, wrt="W")  # an initializer
    with pytest.raises(AutodiffError, match="empty"):
        stripeml.grad(f, wrt=())
    g = stripeml.grad(f)  # every graph input: X
    assert g.wrt == ("X",)
    with pytest.raises(stripeml.StripeError, match="cotangent"):
        g(np.zeros((2, 4)))
    with pytest.raises(stripeml.ShapeError):
        g(np.zeros((2, 4), np.float32), np.array(1.0))  # the model's dtype is float64
