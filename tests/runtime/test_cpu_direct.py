"""Calls by address (``runtime/cpu_direct.py``, ``stripeml.api.direct``): results
against NumPy, written where the caller said, with bound constants and a
reshape run on the host, and none where the program has not run yet."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.api.direct import direct_call


def _ptr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def test_direct_call_writes_the_callers_memory() -> None:
    f = stripeml.compile(
        "function (A[N, M], B[M]) -> (C, S) { C = A * B + 1; S[i : N] = +(A[i, j]); }",
        target="cpu",
    )
    rng = np.random.default_rng(0)
    a = rng.standard_normal((6, 40)).astype(np.float32)
    b = rng.standard_normal(40).astype(np.float32)
    f(a, b)  # the ordinary call first
    call = direct_call(f, [a, b])
    assert call is not None
    assert [(shape, dtype) for shape, dtype, _ in call.outputs] == [
        ((6, 40), np.dtype(np.float32)),
        ((6,), np.dtype(np.float32)),
    ]
    for _ in range(3):  # new inputs and results at each call
        a = rng.standard_normal((6, 40)).astype(np.float32)
        b = rng.standard_normal(40).astype(np.float32)
        c = np.full((6, 40), np.nan, np.float32)
        s = np.zeros(6, np.float32)  # (a sum: zeroed by the caller when the plan says so)
        call([_ptr(a), _ptr(b)], [_ptr(c), _ptr(s)])
        np.testing.assert_allclose(c, a * b + 1, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(s, a.sum(axis=1), rtol=1e-5)


def test_no_direct_call_before_the_first_run() -> None:
    f = stripeml.compile("function (A[N]) -> (C) { C = A + 1; }", target="cpu")
    a = np.arange(4, dtype=np.float32)
    assert direct_call(f, [a]) is None
    f(a)
    assert direct_call(f, [a]) is not None


def test_constants_and_a_host_reshape() -> None:
    """A bound constant is read from the function's own array; a reshape the
    program runs on the host (neither shape refines the other) reads and writes
    the callers' memory."""
    w = np.arange(24, dtype=np.float32).reshape(4, 6)
    f = stripeml.compile(
        "function (A[4, 6], W[4, 6]) -> (R) { T = A * W; R = reshape(T, 6, 4); }",
        target="cpu",
        constants={"W": w},
    )
    a = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    f(a)
    assert "special reshape" in f.lower(a).stages[-1][1]  # (run on the host)
    call = direct_call(f, [a])
    assert call is not None
    r = np.full((6, 4), np.nan, np.float32)
    a2 = a[::-1].copy()
    call([_ptr(a2)], [_ptr(r)])
    np.testing.assert_allclose(r, (a2 * w).reshape(6, 4), rtol=1e-6)
