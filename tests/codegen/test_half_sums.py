"""float16 products summed on the CPU accumulate in float32 and round once, as
NumPy's float16 ``matmul`` and the interpreter do.  A matmul whose reduction
cannot run in vector lanes once summed in memory instead, rounding to float16
at every step: 512 terms of 0.39 came to 193.2 instead of 199.6."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml

MATMUL = "function (A[M, K], W[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * W[k, n]); }"


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_a_long_half_sum_rounds_once(target: str) -> None:
    a = np.full((4, 512), 0.39, np.float16)
    w = np.ones((512, 4), np.float16)
    got = stripeml.compile(MATMUL, target=target)(a, w)
    np.testing.assert_array_equal(got, a @ w)  # 199.6 everywhere


@pytest.mark.parametrize("shape", [(4, 512, 4), (37, 300, 53), (8, 1000, 16)])
def test_half_matmul_is_within_float16_rounding(shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float16)
    w = rng.standard_normal((k, n)).astype(np.float16)
    want = a.astype(np.float64) @ w.astype(np.float64)
    got = stripeml.compile(MATMUL, target="cpu")(a, w).astype(np.float64)
    # one float16 rounding of each sum: half a unit in the last place, 2**-11
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 2 * 2.0**-11 * scale
