"""The EDSL's ``E.dot4`` (the elementwise function on tensors, the contraction
combination on accesses) and ``E.view`` (Tile's ``view_int/uint/float``),
against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from stripeml import edsl as E
from stripeml.errors import EdslError, TileTypeError


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    ua = np.ascontiguousarray(a, "<i4").view(np.uint8).reshape(*a.shape, 4).astype(np.int64)
    sb = np.ascontiguousarray(b, "<i4").view(np.int8).reshape(*b.shape, 4).astype(np.int64)
    return (ua * sb).sum(-1)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_dot4_combination_and_view(target: str) -> None:
    @E.function(target=target)
    def qgemm(X, W4):
        M, K, K4, N = E.dims(4)
        m, n, k = E.indexes(3)
        X.bind_dims(M, K)
        W4.bind_dims(K4, N)
        X4 = E.view(X, "int32")
        C = E.output(M, N)
        C[m, n] += E.dot4(X4[m, k], W4[k, n])
        return C

    assert "X4 = view_int(X, 32);" in qgemm.source
    assert "+(dot4(X4[m, k], W4[k, n]))" in qgemm.source
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, size=(4, 12), dtype=np.uint8)
    w = rng.integers(-128, 128, size=(3, 6, 4), dtype=np.int8)
    got = qgemm(x, w.view(np.int32)[..., 0])
    want = x.astype(np.int64) @ w.transpose(0, 2, 1).reshape(12, 6).astype(np.int64)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_dot4_function_and_views(target: str) -> None:
    @E.function(target=target)
    def f(A, B, F):
        return E.dot4(A, B) + 1, E.view(F, np.uint8), E.view(E.view(F, "u16"), "f32")

    assert "dot4(A, B) + 1" in f.source and "view_uint(F, 8)" in f.source
    rng = np.random.default_rng(6)
    a = rng.integers(-(2**31), 2**31, size=(3, 4)).astype(np.int32)
    b = rng.integers(-(2**31), 2**31, size=4).astype(np.int32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    d, u, back = f(a, b, x)
    np.testing.assert_array_equal(d, _ref(a, b) + 1)
    np.testing.assert_array_equal(u, x.view(np.uint8))
    np.testing.assert_array_equal(back, x)


def test_dot4_misuse() -> None:
    def mixed(A, B):
        (i,) = E.indexes(1)
        (N,) = E.dims(1)
        A.bind_dims(N)
        C = E.output(N)
        C[i] += E.dot4(A[i], B)
        return C

    with pytest.raises(EdslError, match="E.dot4 takes two accesses .* not one of each"):
        E.function(mixed, target="interp")

    def typed(A, B):
        (i,) = E.indexes(1)
        (N,) = E.dims(1)
        A.bind_dims(N)
        C = E.output(N, dtype="f32")
        C[i] += E.dot4(A[i], B[i])
        return C

    with pytest.raises(EdslError, match="dtype= with E.dot4"):
        E.function(typed, target="interp")

    with pytest.raises(EdslError, match="no byte view gives a bool"):
        E.function(lambda X: E.view(X, "bool"), target="interp")

    f = E.function(lambda A, B: E.dot4(A, B), target="interp")
    with pytest.raises(TileTypeError, match="'A' is f32"):
        f(np.zeros(2, np.float32), np.zeros(2, np.int32))
