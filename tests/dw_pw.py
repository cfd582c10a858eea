"""A depthwise convolution (its bias and ReLU) whose output only a pointwise one
reads, the second half of a MobileNet block, and its NumPy reference: the
``nest`` tests' chain of convolutions (``tests/passes``, ``tests/tune``)."""

from __future__ import annotations

import numpy as np

# A depthwise 3x3 convolution (a valid one: its input already padded, as the
# ``halo`` pass leaves it), bias and ReLU, then a pointwise one and its bias: a
# MobileNet block's second half.  The 1x1 kernel reads its input at ``y + ky``
# with ``ky`` over one point, which is the row ``y``.
DW_PW = """function (X[N, HP, WP, C], K[KY, KX, C], B[C], W[KY1, KX1, C, CO], B2[CO]) -> (O) {
    D[n, y, x, c : N, HP - 2, WP - 2, C] = +(X[n, y + ky, x + kx, c] * K[ky, kx, c]);
    A = relu(D + B);
    P[n, y, x, co : N, HP - 2, WP - 2, CO] = +(A[n, y + ky, x + kx, c] * W[ky, kx, c, co]);
    O = P + B2;
}"""


def dw_pw_inputs(h=16, w=12, c=24, co=16, seed=3):
    rng = np.random.default_rng(seed)
    f = np.float32
    return {
        "X": rng.standard_normal((1, h + 2, w + 2, c)).astype(f),
        "K": rng.standard_normal((3, 3, c)).astype(f),
        "B": rng.standard_normal(c).astype(f),
        "W": rng.standard_normal((1, 1, c, co)).astype(f),
        "B2": rng.standard_normal(co).astype(f),
    }


def dw_pw_reference(a):
    x, h, w = a["X"].astype(np.float64), a["X"].shape[1] - 2, a["X"].shape[2] - 2
    d = sum(x[:, i : i + h, j : j + w, :] * a["K"][i, j] for i in range(3) for j in range(3))
    act = np.maximum(d + a["B"], 0)
    return np.einsum("nyxc,co->nyxo", act, a["W"][0, 0]) + a["B2"]
