"""Calls that take the fast path (arrays of exactly the signature compiled for
last) and those that must not: results against NumPy, errors as before."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError

SRC = "function (A[N], B[N]) -> (C) { C = A * B + 1; }"


@pytest.fixture(params=["interp", "cpu"])
def f(request: pytest.FixtureRequest) -> stripeml.api.Function:
    return stripeml.compile(SRC, target=request.param)


def test_alternating_shapes_and_dtypes_each_get_their_own_program(f) -> None:
    rng = np.random.default_rng(0)
    cases = [
        (rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)),
        (rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)),
        (rng.standard_normal(8), rng.standard_normal(8)),  # float64: another program
        (np.arange(8, dtype=np.int32), np.arange(8, dtype=np.int32)),
    ]
    for _ in range(2):
        for a, b in cases:
            got = f(a, b)
            assert got.dtype == a.dtype and got.shape == a.shape
            np.testing.assert_allclose(got, a * b + 1, rtol=1e-6)


def test_array_likes_and_views_after_a_fast_call(f) -> None:
    a = np.linspace(-1, 1, 6, dtype=np.float32)
    b = np.linspace(2, 3, 6, dtype=np.float32)
    np.testing.assert_allclose(f(a, b), a * b + 1, rtol=1e-6)
    # a list is converted (not the fast path); the result is the same
    np.testing.assert_allclose(f(a, b.tolist()), a * b.astype(np.float64) + 1, rtol=1e-6)
    # a strided view of the right shape and dtype: the values read are the view's
    wide = np.linspace(0, 1, 12, dtype=np.float32)
    np.testing.assert_allclose(f(wide[::2], b), wide[::2] * b + 1, rtol=1e-6)
    # a byte-swapped array has another dtype: never read as native floats
    with pytest.raises(ShapeError, match="unsupported dtype >f4"):
        f(a.astype(">f4"), b)
    np.testing.assert_allclose(f(a, b), a * b + 1, rtol=1e-6)


def test_wrong_calls_still_fail_with_their_messages(f) -> None:
    a = np.ones(4, np.float32)
    f(a, a)  # the fast path is armed for (4,) f32 x 2
    with pytest.raises(ShapeError, match="takes 2 input"):
        f(a, a, a)
    with pytest.raises(ShapeError, match="missing input"):
        f(a)
    with pytest.raises(ShapeError):
        f(a, np.ones(5, np.float32))  # N bound twice to different sizes
    with pytest.raises(ShapeError, match="given twice"):
        f(a, A=a)


def test_an_executable_checks_its_signature(f) -> None:
    a = np.ones(4, np.float32)
    exe = f.lower(a, a)
    np.testing.assert_array_equal(exe(a, a), np.full(4, 2, np.float32))
    with pytest.raises(ShapeError, match="built for 4:float32, 4:float32"):
        exe(np.ones(5, np.float32), np.ones(5, np.float32))
    with pytest.raises(ShapeError, match="got 4:float64"):
        exe(np.ones(4), a)
