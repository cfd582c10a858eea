"""A float sum of negative zeros is -0.0 on every backend.

IEEE addition gives -0.0 only for (-0.0) + (-0.0), so an exact sum is -0.0
when every term is.  The backends start a float sum from -0.0 (``-0.0 + x ==
x`` for every x, so a one-term sum is its term, bit for bit), which is
NumPy's ``np.add.reduce(..., initial=-0.0)``; ``np.sum`` starts from +0.0 and
gives +0.0 (docs/tile-language.md says so).  The interpreter, the oracle,
started from +0.0 while the compiled backends started from -0.0, until the
fuzzer found them disagreeing.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import stripeml

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", TARGETS)
def test_sum_of_negative_zeros_keeps_the_sign(target: str, dtype) -> None:
    a = np.full((3, 5), -0.0, dtype)
    a[1, 2] = 0.0  # one positive zero: that row sums to +0.0
    a[2] = -1.0
    a[2, 0] = 1.0
    f = stripeml.compile("function (A[N, M]) -> (O) { O[i : N] = +(A[i, j]); }", target=target)
    got = f(a)
    want = np.add.reduce(a, axis=1, initial=-0.0)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got).tolist() == np.signbit(want).tolist() == [True, False, True]


@pytest.mark.parametrize("target", TARGETS)
def test_full_sum_of_negative_zeros(target: str) -> None:
    a = np.full(40, -0.0, np.float32)
    got = stripeml.compile("function (A[N]) -> (O) { O[] = +(A[i]); }", target=target)(a)
    want = np.add.reduce(a, initial=-0.0)
    assert got == 0 and np.signbit(got) and np.signbit(want)
