"""E.gradients inside a traced function: against central finite differences
(interp, float64) and torch.autograd (cpu); naming, the all-ones cotangent of a
non-scalar loss, errors; and examples/train_digits.py --quick."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from stripeml import edsl as E
from stripeml.errors import EdslError

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(1)


def rand(*shape: int, dtype: str = "float64") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# --------------------------------------------------------------------------- programs
def dense_loss(X, W, B, Y):
    N, K, M = E.dims(3)
    n, k, m = E.indexes(3)
    X.bind_dims(N, K)
    W.bind_dims(K, M)
    B.bind_dims(M)
    Y.bind_dims(N, M)
    Z = E.output(N, M)
    Z[n, m] += X[n, k] * W[k, m]
    H = E.tanh(Z + B) - Y
    L = E.output()
    L[()] += H[n, m] * H[n, m]
    return L


def dense_step(X, W, B, Y):
    L = dense_loss(X, W, B, Y)
    dW, dB = E.gradients(L, [W, B])
    return W - 0.5 * dW, B - 0.5 * dB, L


def dense_torch(torch, x, w, b, y):  # type: ignore[no-untyped-def]
    return ((torch.tanh(x @ w + b) - y) ** 2).sum()


def cnn_loss(X, Y, W1, W2):
    """conv 3x3 (same) -> relu -> 2x2 max pool -> dense -> softmax cross-entropy."""
    N, H, W, C, K, PH, PW = E.dims(7)
    n, x, y, kx, ky, ci, c, i, j, k = E.indexes(10)
    X.bind_dims(N, H, W, 1)
    Y.bind_dims(N, K)
    W1.bind_dims(3, 3, 1, C)
    W2.bind_dims(PH, PW, C, K)
    conv = E.output(N, H, W, C)
    conv[n, x, y, c] += X[n, x + kx - 1, y + ky - 1, ci] * W1[kx, ky, ci, c]
    act = E.relu(conv)
    pool = E.output(N, H // 2, W // 2, C)
    pool[n, x, y, c] >= act[n, 2 * x + i, 2 * y + j, c]  # noqa: B015
    pool.add_constraint(i < 2)
    pool.add_constraint(j < 2)
    Z = E.output(N, K)
    Z[n, k] += pool[n, x, y, c] * W2[x, y, c, k]
    top = E.output(N, 1)
    top[n, 0] >= Z[n, k]  # noqa: B015
    s = Z - top
    tot = E.output(N, 1)
    tot[n, 0] += E.exp(s)[n, k]
    picked = E.output()
    picked[()] += Y[n, k] * (s - E.log(tot))[n, k]
    return -picked / N


def cnn_grads(X, Y, W1, W2):
    L = cnn_loss(X, Y, W1, W2)
    dW1, dW2 = E.gradients(L, [W1, W2])
    return dW1, dW2


def cnn_torch(torch, x, y, w1, w2):  # type: ignore[no-untyped-def]
    F = torch.nn.functional
    h = F.max_pool2d(F.relu(F.conv2d(x.permute(0, 3, 1, 2), w1.permute(3, 2, 0, 1), padding=1)), 2)
    z = torch.einsum("ncxy,xyck->nk", h, w2)
    return -(y * torch.log_softmax(z, 1)).sum() / len(x)


def cnn_inputs(dtype: str) -> list[np.ndarray]:
    x = rand(4, 8, 8, 1, dtype=dtype)
    y = np.eye(4, dtype=dtype)[[3, 1, 0, 1]]
    return [x, y, rand(3, 3, 1, 2, dtype=dtype) * 0.5, rand(4, 4, 2, 4, dtype=dtype) * 0.3]


def numeric_grad(
    f: Callable[..., np.ndarray], args: list[np.ndarray], k: int, eps: float = 1e-6
) -> np.ndarray:
    out = np.zeros_like(args[k])
    for idx in np.ndindex(args[k].shape):
        hi = [a.copy() for a in args]
        lo = [a.copy() for a in args]
        hi[k][idx] += eps
        lo[k][idx] -= eps
        out[idx] = (float(f(*hi)) - float(f(*lo))) / (2 * eps)
    return out


# --------------------------------------------------------------------------- values
def test_dense_step_against_finite_differences() -> None:
    step = E.function(dense_step, target="interp")
    loss = E.function(dense_loss, target="interp")
    args = [rand(5, 3), rand(3, 4), rand(4), rand(5, 4)]
    w2, b2, l_value = step(*args)
    assert np.isclose(l_value, loss(*args))
    dw = numeric_grad(loss, args, 1)
    db = numeric_grad(loss, args, 2)
    np.testing.assert_allclose(w2, args[1] - 0.5 * dw, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(b2, args[2] - 0.5 * db, rtol=1e-6, atol=1e-7)


def test_cnn_against_finite_differences() -> None:
    grads = E.function(cnn_grads, target="interp")
    loss = E.function(cnn_loss, target="interp")
    args = cnn_inputs("float64")
    dw1, dw2 = grads(*args)
    np.testing.assert_allclose(dw1, numeric_grad(loss, args, 2), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(dw2, numeric_grad(loss, args, 3), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "fn, torch_fn, inputs, wrt",
    [
        (dense_step, dense_torch, lambda: [rand(5, 3, dtype="float32") for _ in "x"]
         + [rand(3, 4, dtype="float32"), rand(4, dtype="float32"), rand(5, 4, dtype="float32")],
         (1, 2)),
        (cnn_grads, cnn_torch, lambda: cnn_inputs("float32"), (2, 3)),
    ],
    ids=["dense_step", "cnn"],
)  # fmt: skip
def test_against_torch(fn, torch_fn, inputs, wrt) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    f = E.function(fn, target="cpu")
    args = inputs()
    got = f(*args)
    ts = [torch.tensor(a, requires_grad=i in wrt) for i, a in enumerate(args)]
    loss = torch_fn(torch, *ts)
    want = torch.autograd.grad(loss, [ts[i] for i in wrt])
    if fn is dense_step:  # the updated weights
        want = [ts[i].detach() - 0.5 * g for i, g in zip(wrt, want)]
        assert np.isclose(got[2], loss.item(), rtol=1e-5)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)


def test_nonscalar_loss_has_an_all_ones_cotangent() -> None:
    def f(A, B):
        N, M = E.dims(2)
        A.bind_dims(N, M)
        B.bind_dims(M)
        P = A * B  # not a scalar: the gradient of sum(P)
        dA, dB = E.gradients(P, [A, B])
        return dA, dB

    g = E.function(f, target="interp")
    a, b = rand(3, 4), rand(4)
    da, db = g(a, b)
    np.testing.assert_allclose(da, np.broadcast_to(b, (3, 4)))
    np.testing.assert_allclose(db, a.sum(0))


def test_names_and_source() -> None:
    f = E.trace(dense_step)
    assert "DW = " in f.source and "DB = " in f.source
    assert "T1 = W - 0.5 * DW;" in f.source
    # forward statements are not repeated
    assert f.source.count("Z[n, m : N, M] = +(X[n, k] * W[k, m]);") == 1


def test_unconnected_input_gets_zeros_and_inputs_without_dims() -> None:
    def f(A, B, C):
        n, m = E.indexes(2)
        S = E.output(2)
        S[n] += A[n, m] * B[m]  # A, B: never bound, rank from the contraction
        return E.gradients(S, [A, C])[0] + 0, E.gradients(S, [C])[0]

    C = rand(3)
    g = E.function(f, target="interp")
    a, b = rand(2, 5), rand(5)
    da, dc = g(a, b, C)
    np.testing.assert_allclose(da, np.broadcast_to(b, (2, 5)))
    np.testing.assert_array_equal(dc, np.zeros(3))


def test_second_call_differentiates_the_first() -> None:
    def f(X):
        N = E.dims(1)[0]
        X.bind_dims(N)
        L = E.output()
        i = E.indexes(1)[0]
        L[()] += (X * X * X)[i]
        (d1,) = E.gradients(L, [X])  # 3 x^2
        (d2,) = E.gradients(d1, [X])  # 6 x
        return d1, d2

    x = rand(4)
    d1, d2 = E.function(f, target="interp")(x)
    np.testing.assert_allclose(d1, 3 * x * x)
    np.testing.assert_allclose(d2, 6 * x)


# --------------------------------------------------------------------------- errors
def test_errors_name_the_line() -> None:
    def not_an_input(A):
        B = E.exp(A)
        L = E.output()
        L[()] += B[E.indexes(1)[0]]
        return E.gradients(L, [B])  # MARK-not-input

    with pytest.raises(EdslError, match="with respect to inputs") as e:
        E.trace(not_an_input)
    assert e.value.python_line == not_an_input.__code__.co_firstlineno + 4

    def loss_is_input(A):
        return E.gradients(A, [A])

    with pytest.raises(EdslError, match="is an input"):
        E.trace(loss_is_input)

    def twice(A):
        return E.gradients(E.exp(A), [A, A])

    with pytest.raises(EdslError, match="twice"):
        E.trace(twice)

    def no_shape(A):
        return E.gradients(E.exp(A), [A])  # A never bound: its shape is unknown

    with pytest.raises(EdslError, match="E.gradients: the shape of 'T1' is not known"):
        E.trace(no_shape)

    with pytest.raises(EdslError, match="outside a function traced"):
        E.gradients(None, [])  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the example
def test_train_digits_quick() -> None:
    pytest.importorskip("sklearn")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_digits.py"), "--quick", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "epoch  3/3" in run.stdout
    accuracy = float(run.stdout.rsplit("held-out accuracy ", 1)[1].strip().rstrip("%"))
    assert accuracy > 90
