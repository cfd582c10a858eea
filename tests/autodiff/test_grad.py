"""stripeml.grad against finite differences (interp, float64) and torch (cpu)."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.autodiff import grad

from .programs import CASES, Case


def _loss(f: stripeml.api.Function, inputs: dict[str, np.ndarray], cots: list[np.ndarray]) -> float:
    outs = f(**inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return float(sum(np.sum(o * c) for o, c in zip(outs, cots)))


def _cotangents(f: stripeml.api.Function, inputs: dict[str, np.ndarray], rng) -> list[np.ndarray]:
    outs = f(**inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [rng.standard_normal(o.shape) for o in outs]


def _grads(g, f, inputs, cots) -> tuple[np.ndarray, ...]:  # noqa: ANN001
    res = g(*[inputs[p] for p in f.params], *cots)
    return res if isinstance(res, tuple) else (res,)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_finite_differences(case: Case) -> None:
    rng = np.random.default_rng(7)
    f = stripeml.compile(case.source, target="interp")
    inputs = case.inputs(rng)
    cots = _cotangents(f, inputs, rng)
    g = grad(f, case.wrt)
    got = _grads(g, f, inputs, cots)
    eps = 1e-6
    for w, dw in zip(case.wrt, got):
        assert dw.shape == inputs[w].shape and dw.dtype == inputs[w].dtype
        want = np.zeros_like(inputs[w])
        for k in np.ndindex(inputs[w].shape):
            plus = {**inputs, w: inputs[w].copy()}
            minus = {**inputs, w: inputs[w].copy()}
            plus[w][k] += eps
            minus[w][k] -= eps
            want[k] = (_loss(f, plus, cots) - _loss(f, minus, cots)) / (2 * eps)
        np.testing.assert_allclose(dw, want, rtol=1e-5, atol=1e-6, err_msg=f"d/d{w}")


@pytest.mark.parametrize("case", [c for c in CASES if c.torch is not None], ids=lambda c: c.name)
def test_against_torch(case: Case) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    f = stripeml.compile(case.source, target="cpu")
    inputs = case.inputs(rng)
    cots = _cotangents(f, inputs, rng)
    got = _grads(grad(f, case.wrt), f, inputs, cots)
    ts = {k: torch.tensor(v, requires_grad=k in case.wrt) for k, v in inputs.items()}
    outs = case.torch(*[ts[p] for p in f.params])
    outs = outs if isinstance(outs, tuple) else (outs,)
    loss = sum((o * torch.tensor(c)).sum() for o, c in zip(outs, cots))
    want = torch.autograd.grad(loss, [ts[w] for w in case.wrt])
    for w, dw, tw in zip(case.wrt, got, want):
        np.testing.assert_allclose(dw, tw.numpy(), rtol=1e-7, atol=1e-9, err_msg=f"d/d{w}")


def test_source_is_tile_and_shape_polymorphic() -> None:
    f = stripeml.compile(CASES[0].source, target="interp")
    g = grad(f, ("A", "B"))
    assert g.source.startswith("function (A[M, K], B[K, N], DC[M, N]) -> (DA, DB)")
    again = stripeml.compile(g.source, target="interp")
    rng = np.random.default_rng(0)
    for m, k, n in ((2, 3, 4), (5, 1, 2)):
        a, b, dc = (
            rng.standard_normal((m, k)),
            rng.standard_normal((k, n)),
            rng.standard_normal((m, n)),
        )
        da, db = g(a, b, dc)
        np.testing.assert_allclose(da, dc @ b.T)
        np.testing.assert_allclose(db, a.T @ dc)
        np.testing.assert_allclose(again(a, b, dc)[0], da)


def test_float32_gradients_keep_dtype() -> None:
    f = stripeml.compile("function (X[N], Y[N]) -> (O) { O = X * Y; }", target="cpu")
    x = np.arange(1, 4, dtype=np.float32)
    dx = grad(f, "X")(x, x, np.ones(3, np.float64))
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, x)
