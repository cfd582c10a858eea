"""Adjoints written over solved indices: ``dA[x + kx - 1]`` becomes ``dA[x_]``
with ``x = x_ - kx + 1`` substituted elsewhere (a plain contraction, not a
scatter), for both signs of the index; values against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_conv_input_gradient_is_a_plain_contraction(target: str) -> None:
    f = stripeml.compile(
        """function (I[N, X, CI], K[KX, CI, CO]) -> (O) {
    O[n, x, co : N, X, CO] = +(I[n, x + kx - KX / 2, ci] * K[kx, ci, co]);
}""",
        target=target,
    )
    g = stripeml.grad(f, wrt="I")
    assert "C_I[n, x_, ci : N, X, CI] = +(DO[n, x_ - kx + KX / 2, co] * K[kx, ci, co]);" in g.source
    i = RNG.standard_normal((2, 7, 3)).astype(np.float32)
    k = RNG.standard_normal((3, 3, 4)).astype(np.float32)
    do = RNG.standard_normal((2, 7, 4)).astype(np.float32)
    want = np.zeros_like(i)
    for kx in range(3):
        for x in range(7):
            src = x + kx - 1
            if 0 <= src < 7:
                want[:, src, :] += do[:, x, :] @ k[kx].T
    np.testing.assert_allclose(g(i, k, do), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_negative_coefficient_and_full_convolution(target: str) -> None:
    flip = stripeml.compile(
        "function (A[N]) -> (O) {\n    O[i : N] = +(A[N - 1 - i]);\n}", target=target
    )
    g = stripeml.grad(flip)
    assert "C_A[i_ : N] = +(DO[N - 1 - i_]);" in g.source
    do = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(g(np.zeros(5, np.float32), do), do[::-1])

    full = stripeml.compile(
        "function (A[N], B[M]) -> (C) {\n    C[i : N + M - 1] = +(A[i - k] * B[k]);\n}",
        target=target,
    )
    g = stripeml.grad(full)
    a, b = RNG.standard_normal(4), RNG.standard_normal(3)
    dc = RNG.standard_normal(6)
    da, db = g(a, b, dc)
    np.testing.assert_allclose(da, np.correlate(dc, b, "valid"), rtol=1e-6)
    np.testing.assert_allclose(db, np.correlate(dc, a, "valid"), rtol=1e-6)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_chained_solutions_compose(target: str) -> None:
    """``C[i + r, r + 1]``: ``i = i_ - r`` is solved first, then ``r = r_ - 1``,
    which must reach the first solution too (found by the random contractions
    of test_random_contractions.py: a stale ``r`` summed over every ``r``)."""
    f = stripeml.compile(
        "function (C[S, T]) -> (O) {\n    O[i : 3] = +(C[i + r, r + 1]);\n}", target=target
    )
    g = stripeml.grad(f)
    assert "r_" in g.source and "i_ - r]" not in g.source
    c = RNG.standard_normal((4, 3))
    do = RNG.standard_normal(3)
    want = np.zeros_like(c)
    for i in range(3):
        for r in range(-5, 5):  # every tuple with the accesses in bounds (r = -1 too)
            if 0 <= i + r < 4 and 0 <= r + 1 < 3:
                want[i + r, r + 1] += do[i]
    np.testing.assert_allclose(g(c, do), want, rtol=1e-12)
