"""The adjoint of ``gather`` (NumPy's take) is a scatter-add of the cotangent
into zeros: repeated and negative indices accumulate, any axis, any index rank;
checked against torch.autograd on interp and cpu."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("target", ["interp", "cpu"])
@pytest.mark.parametrize(
    "axis,ishape",
    [(0, (4,)), (1, (2, 3)), (-1, (5,)), (1, ())],
    ids=["ax0", "ax1_2d", "last", "scalar"],
)
def test_gather_gradient_against_torch(target, axis, ishape):
    dims = ", ".join(f"D{k}" for k in range(len(ishape)))
    idx_decl = f"I[{dims}]" if ishape else "I[]"
    src = (
        f"function (X[A, B, C], {idx_decl}) -> (O) {{ G = gather(X, I, {axis}); O = tanh(G) * G; }}"
    )
    f = stripeml.compile(src, target=target)
    g = stripeml.grad(f, wrt=("X",))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 4))
    size = x.shape[axis]
    i = rng.integers(-size, size, ishape).astype(np.int64)  # repeats and negatives
    out = f(x, i)
    do = rng.standard_normal(out.shape)
    dx = g(x, i, do)
    tx = torch.tensor(x, requires_grad=True)
    ti = torch.tensor(np.where(i < 0, i + size, i))
    tg = (
        torch.index_select(tx, axis % 3, ti.reshape(-1)).reshape(out.shape)
        if ishape
        else tx.select(axis % 3, int(ti))
    )
    (torch.tanh(tg) * tg).backward(torch.tensor(do))
    np.testing.assert_allclose(dx, tx.grad.numpy(), rtol=1e-10, atol=1e-12)
