"""An ``out=`` array passed again is written in place without a second lookup of
its pointer (``CpuCompiled._out_seen``); results against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.runtime import host

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


@pytest.mark.parametrize("threads", [1, 2])
def test_same_out_array_again_skips_the_pointer_lookup(monkeypatch, threads: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 64)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target="cpu", threads=threads).lower(a, b)
    out = np.empty((64, 64), np.float32)
    exe(a, b, out=out)  # the first calls look everything up
    exe(a, b, out=out)
    looked: list[np.ndarray] = []
    real = host.RootBuffer.pointer

    def counting(self: host.RootBuffer, storage: np.ndarray) -> int:
        looked.append(storage)
        return real(self, storage)

    monkeypatch.setattr(host.RootBuffer, "pointer", counting)
    for seed in range(3):  # new inputs each call, the same output array
        a2 = np.random.default_rng(seed).standard_normal((64, 48)).astype(np.float32)
        got = exe(a2, b, out=out)
        assert got is out
        np.testing.assert_allclose(out, a2.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    # the inputs' pointers may be looked up (a2 is new at each call), not the output's
    assert looked
    assert not any(np.shares_memory(s, out) for s in looked)


def test_another_out_array_then_the_first_again() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 16)).astype(np.float32)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target="cpu").lower(a, b)
    want = a.astype(np.float64) @ b
    first, second = np.zeros((32, 32), np.float32), np.zeros((32, 32), np.float32)
    exe(a, b, out=first)
    exe(a, b, out=first)
    second_got = exe(2 * a, b, out=second)
    assert second_got is second
    np.testing.assert_allclose(second, 2 * want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(first, want, rtol=1e-4, atol=1e-4)  # untouched since
    first[...] = 0
    exe(3 * a, b, out=first)
    np.testing.assert_allclose(first, 3 * want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second, 2 * want, rtol=1e-4, atol=1e-4)
    # no out=: a fresh result, the held arrays left alone
    fresh = exe(a, b)
    assert fresh is not first and fresh is not second
    np.testing.assert_allclose(fresh, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(first, 3 * want, rtol=1e-4, atol=1e-4)


def test_an_out_array_passed_once_is_not_kept_alive() -> None:
    import gc
    import weakref

    a = np.ones((16, 16), np.float32)
    exe = stripeml.compile(MATMUL, target="cpu").lower(a, a)
    out = np.empty((16, 16), np.float32)
    exe(a, a, out=out)
    ref = weakref.ref(out)
    del out
    gc.collect()
    assert ref() is None
    np.testing.assert_allclose(exe(a, a), a @ a)


def test_out_array_made_read_only_is_refused() -> None:
    a = np.ones((16, 16), np.float32)
    exe = stripeml.compile(MATMUL, target="cpu").lower(a, a)
    out = np.empty((16, 16), np.float32)
    exe(a, a, out=out)
    out.flags.writeable = False
    with pytest.raises(stripeml.errors.ShapeError):
        exe(a, a, out=out)
