"""Attention as a chain of Tile statements (scores, maximum, exp and sum,
division, product with V) and its NumPy reference, for the ``nest`` tests on
the CPU and the GPU targets."""

from __future__ import annotations

import numpy as np

ATTENTION = """function (Q[H, M, D], K[H, N, D], V[H, N, E]) -> (O) {
    S[h, m, n : H, M, N] = +(Q[h, m, d] * K[h, n, d]);
    T = S * 0.125;
    Mx[h, m, 0 : H, M, 1] = >(T[h, m, n]);
    X = exp(T - Mx);
    L[h, m, 0 : H, M, 1] = +(X[h, m, n]);
    P = X / L;
    O[h, m, e : H, M, E] = +(P[h, m, n] * V[h, n, e]);
}"""

# The importer's layout: keys and values [N, H, D], read across the heads' dimension.
ATTENTION_NHD = (
    ATTENTION.replace("K[H, N, D], V[H, N, E]", "K[N, H, D], V[N, H, E]")
    .replace("K[h, n, d]", "K[n, h, d]")
    .replace("V[h, n, e]", "V[n, h, e]")
)


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, nhd: bool = False):
    """softmax(Q K^T / 8) V in float64; ``nhd``: keys and values are [N, H, D]."""
    if nhd:
        k, v = k.transpose(1, 0, 2), v.transpose(1, 0, 2)
    s = np.einsum("hmd,hnd->hmn", q.astype(np.float64), k) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hmn,hne->hme", p, v)
