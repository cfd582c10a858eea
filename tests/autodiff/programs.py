"""Programs the gradient tests differentiate, with inputs and torch references.

Each entry: Tile source, a function making float64 inputs (name -> array),
the parameters to differentiate, and (optionally) the same computation in
torch (taking torch tensors in parameter order, returning a tensor or tuple).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str
    source: str
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    wrt: tuple[str, ...]
    torch: Callable[..., Any] | None = None
    kinks: bool = field(default=False)  # non-smooth: keep finite differences small


def _n(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape)


def _pos(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def _inputs(**makers: Callable[[np.random.Generator], np.ndarray]):
    return lambda rng: {k: m(rng) for k, m in makers.items()}


def _conv(i, k):  # noqa: ANN001 - torch tensors
    import torch

    x = i.permute(0, 3, 1, 2)
    w = k.permute(3, 2, 0, 1)
    return torch.nn.functional.conv2d(x, w, padding=1).permute(0, 2, 3, 1)


def _maxpool(i):  # noqa: ANN001
    import torch

    return torch.nn.functional.max_pool2d(i[None, None], 2)[0, 0]


def _layernorm(x):  # noqa: ANN001
    mu = x.mean(1, keepdim=True)
    var = ((x - mu) ** 2).mean(1, keepdim=True)
    return (x - mu) / (var + 1e-5).sqrt()


def _chain(x, y):  # noqa: ANN001
    import torch

    return (
        torch.exp(x) * torch.log(y)
        + torch.sqrt(y)
        - torch.tanh(x) / torch.sigmoid(x)
        + torch.sin(x) * torch.cos(y)
        + torch.abs(x)
        + torch.pow(y, x)
        + torch.maximum(x, y)
        - torch.minimum(x, y)
        + torch.relu(x)
        + torch.where(x > 0, x * y, -y)
        - (-x)
        + torch.tan(x * 0.1)
        + torch.erf(x)
        + x % 0.7
        + y**2
    )


CASES: list[Case] = [
    Case(
        "matmul",
        "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }",
        _inputs(A=_n(2, 3), B=_n(3, 4)),
        ("A", "B"),
        lambda a, b: a @ b,
    ),
    Case(
        "matmul_bias_relu",
        """function (A[M, K], B[K, N], Bias[N]) -> (C) {
            P[m, n : M, N] = +(A[m, k] * B[k, n]);
            C = relu(P + Bias);
        }""",
        _inputs(A=_n(3, 3), B=_n(3, 4), Bias=_n(4)),
        ("A", "B", "Bias"),
        lambda a, b, c: (a @ b + c).relu(),
        kinks=True,
    ),
    Case(
        "conv2d_same_padding",
        """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
            O[n, x, y, co : N, X, Y, CO] =
                +(I[n, x + kx - KX / 2, y + ky - KY / 2, ci] * K[kx, ky, ci, co]);
        }""",
        _inputs(I=_n(1, 4, 3, 2), K=_n(3, 3, 2, 2)),
        ("I", "K"),
        _conv,
    ),
    Case(
        "max_pool",
        "function (I[X, Y]) -> (O) { O[x, y : X / 2, Y / 2] = >(I[2 * x + i, 2 * y + j]), i < 2, j < 2; }",
        _inputs(I=_n(4, 6)),
        ("I",),
        _maxpool,
        kinks=True,
    ),
    Case(
        "softmax",
        """function (X[N, K]) -> (Y) {
            M[n, 0 : N, 1] = >(X[n, k]);
            E = exp(X - M);
            S[n, 0 : N, 1] = +(E[n, k]);
            Y = E / S;
        }""",
        _inputs(X=_n(3, 4)),
        ("X",),
        lambda x: x.softmax(1),
    ),
    Case(
        "layer_norm",
        """function (X[N, K]) -> (Y) {
            S[n, 0 : N, 1] = +(X[n, k]);
            Mu = S / K;
            D = X - Mu;
            V[n, 0 : N, 1] = +(D[n, k] * D[n, k]);
            Y = D / sqrt(V / K + 0.00001);
        }""",
        _inputs(X=_n(3, 5)),
        ("X",),
        _layernorm,
    ),
    Case(
        "cumsum",
        "function (I[N]) -> (O) { O[i : N] = +(I[k]), i - k < N; }",
        _inputs(I=_n(6)),
        ("I",),
        lambda i: i.cumsum(0),
    ),
    Case(
        "transpose",
        "function (I[M, N]) -> (O) { O[n, m : N, M] = =(I[m, n]); }",
        _inputs(I=_n(2, 3)),
        ("I",),
        lambda i: i.T,
    ),
    Case(
        "concat_default",
        """function (A[N], B[M]) -> (O) {
            Z[i : N + M] = =(A[i]);
            O[N + j : N + M] = =(B[j]), default Z;
        }""",
        _inputs(A=_n(3), B=_n(2)),
        ("A", "B"),
        lambda a, b: __import__("torch").cat([a, b]),
    ),
    Case(
        "elementwise_chain",
        """function (X[N], Y[N]) -> (O) {
            O = exp(X) * log(Y) + sqrt(Y) - tanh(X) / sigmoid(X) + sin(X) * cos(Y)
                + abs(X) + pow(Y, X) + max(X, Y) - min(X, Y) + relu(X)
                + (X > 0 ? X * Y : -Y) - -X + tan(X * 0.1) + erf(X) + X % 0.7
                + pow(Y, 2);
        }""",
        _inputs(X=_n(7), Y=_pos(7)),
        ("X", "Y"),
        _chain,
        kinks=True,
    ),
    Case(
        "broadcast",
        """function (X[N, K], B[K], C[N, 1], S[]) -> (O) {
            O = X * B + C * S - B;
        }""",
        _inputs(X=_n(3, 4), B=_n(4), C=_n(3, 1), S=_n()),
        ("X", "B", "C", "S"),
        lambda x, b, c, s: x * b + c * s - b,
    ),
    Case(
        "broadcast_unknown_sizes",  # M is 1 or N: known only when shapes bind
        "function (X[N, K], Y[M, K]) -> (O) { O = X * Y; }",
        _inputs(X=_n(3, 2), Y=_n(1, 2)),
        ("X", "Y"),
        lambda x, y: x * y,
    ),
    Case(
        "broadcast_unknown_sizes_equal",
        "function (X[N, K], Y[M, K]) -> (O) { O = X * Y; }",
        _inputs(X=_n(3, 2), Y=_n(3, 2)),
        ("X", "Y"),
        lambda x, y: x * y,
    ),
    Case(
        "product",
        "function (X[N, K]) -> (P) { P[n : N] = *(X[n, k]); }",
        _inputs(X=_n(3, 4)),
        ("X",),
        lambda x: x.prod(1),
    ),
    Case(
        "min_reduce",
        "function (X[N, K]) -> (P) { P[n : N] = <(X[n, k]); }",
        _inputs(X=_n(3, 4)),
        ("X",),
        lambda x: x.min(1).values,
        kinks=True,
    ),
    Case(
        "add_combination",
        "function (A[N], B[M]) -> (O) { O[i, j : N, M] = +(A[i] + B[j]); }",
        _inputs(A=_n(3), B=_n(4)),
        ("A", "B"),
        lambda a, b: a[:, None] + b[None, :],
    ),
    Case(
        "reshape_two_outputs",
        """function (X[N, M]) -> (R, Q) {
            R = reshape(X, N * M);
            Q = R * R;
        }""",
        _inputs(X=_n(2, 3)),
        ("X",),
        lambda x: (x.reshape(-1), x.reshape(-1) ** 2),
    ),
    Case(
        "float_cast",
        "function (X[N]) -> (O) { O = as_float(X * 2, 64) + floor(X) + as_float(as_int(X * 3, 32), 64); }",
        _inputs(X=_n(5)),
        ("X",),
        None,
        kinks=True,
    ),
]
