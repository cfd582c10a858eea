"""Attention as the importer writes it (keys and values ``[N, H, D]``) and its
NumPy reference, for the GPU targets' ``nest`` tests."""

from __future__ import annotations

import numpy as np

ATTENTION = """function (Q[H, M, D], K[N, H, D], V[N, H, E]) -> (O) {
    S[h, m, n : H, M, N] = +(Q[h, m, d] * K[n, h, d]);
    T = S * 0.125;
    Mx[h, m, 0 : H, M, 1] = >(T[h, m, n]);
    X = exp(T - Mx);
    L[h, m, 0 : H, M, 1] = +(X[h, m, n]);
    P = X / L;
    O[h, m, e : H, M, E] = +(P[h, m, n] * V[n, h, e]);
}"""


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    s = np.einsum("hmd,nhd->hmn", q.astype(np.float64), k) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hmn,nhe->hme", p, v)
