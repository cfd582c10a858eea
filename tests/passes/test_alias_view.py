"""``alias_view`` through the CPU pipeline: a fused q/k/v projection's transpose
and slices become views of the product (no copy kernels left), results against
NumPy; a copy that moves the channels stays."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.ir.nodes import Block

QKV = """function (X[16, 32], W[32, 96]) -> (O) {
    P[t, j : 16, 96] = +(X[t, k] * W[k, j]);
    Q[i, t, c : 3, 16, 32] = =(P[t, 32 * i + c]);
    A[t, c : 16, 32] = =(Q[0, t, c]);
    B[t, c : 16, 32] = =(Q[1, t, c]);
    V[t, c : 16, 32] = =(Q[2, t, c]);
    S[t, u : 16, 16] = +(A[t, c] * B[u, c]);
    O[t, c : 16, 32] = +(S[t, u] * V[u, c]);
}"""

SHUFFLE = """function (X[1, 6, 6, 16], W[4, 4, 16]) -> (O) {
    T[n, h, w, a, b : 1, 6, 6, 4, 4] = =(X[n, h, w, 4 * b + a]);
    O[n, h, w, co : 1, 6, 6, 16] = +(T[n, h, w, a, b] * W[a, b, co]);
}"""


def _copies(exe) -> list[str]:
    return [
        s.name
        for s in exe.program.root.stmts
        if isinstance(s, Block) and "agg_assign" in s.tags and "panels" not in s.name
    ]


def test_the_projection_is_read_through_views() -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w = rng.standard_normal((32, 96)).astype(np.float32)
    p = x.astype(np.float64) @ w
    a, b, v = p[:, :32], p[:, 32:64], p[:, 64:]
    want = (a @ b.T) @ v
    for threads in (1, 2):
        target = stripeml.targets.resolve("cpu", threads=threads)
        exe = stripeml.compile(QKV, target=target).lower(x, w)
        assert _copies(exe) == [], _copies(exe)
        np.testing.assert_allclose(exe(x, w), want, rtol=1e-4, atol=1e-3)
    interp = stripeml.compile(QKV, target="interp").lower(x, w)
    np.testing.assert_allclose(interp(x, w), want, rtol=1e-4, atol=1e-3)


def test_a_copy_that_moves_the_channels_stays() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 6, 6, 16)).astype(np.float32)
    w = rng.standard_normal((4, 4, 16)).astype(np.float32)
    exe = stripeml.compile(SHUFFLE, target="cpu").lower(x, w)
    # channel 4 * a + b of the shuffled tensor is channel 4 * b + a of X
    shuffled = x.reshape(1, 6, 6, 4, 4).transpose(0, 1, 2, 4, 3).reshape(1, 6, 6, 16)
    np.testing.assert_allclose(exe(x, w), shuffled @ w.reshape(16, 16), rtol=1e-4, atol=1e-4)
    assert len(_copies(exe)) == 1
