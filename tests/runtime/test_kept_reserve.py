"""Pages mapped for a cold compile's constant layouts while its passes run
(``runtime.kept_reserve``): the reserve gives zeroed, aligned, disjoint bytes;
a program's first call takes its kept layouts from it, and computes what NumPy
does; a second input shape (whose layouts are shared) reserves nothing; a
reserve that no compile claims lets its pages go."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import stripeml
from stripeml import gc_pause
from stripeml.runtime import kept_reserve, shared_constants

TWO = (
    "function (A[M, K], W1[K, N], W2[N, P]) -> (C) {"
    " T[m, n : M, N] = +(A[m, k] * W1[k, n]); C[m, p : M, P] = +(T[m, n] * W2[n, p]); }"
)


@pytest.fixture(autouse=True)
def _nothing_shared(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Each test starts as a fresh process would: no layouts to share, and an
    empty disk cache (a program found there is not compiled: nothing reserved)."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shared_constants, "REGISTRY", type(shared_constants.REGISTRY)())
    monkeypatch.setattr(shared_constants, "_DEFERRED", type(shared_constants._DEFERRED)())


def test_the_reserve_gives_zeroed_aligned_disjoint_bytes() -> None:
    with gc_pause.paused():
        r = kept_reserve.Reserve(3 << 20)
        a = r.take(1000 * 4, np.dtype(np.float32))
        b = r.take(4096, np.dtype(np.int8))
        c = r.take(2 << 20, np.dtype(np.float64))
        assert r.take(1 << 20, np.dtype(np.float32)) is None  # 3 MiB are given out
        r.close()
    assert a is not None and b is not None and c is not None
    assert (a.dtype, a.size, b.size, c.size) == (np.float32, 1000, 4096, (2 << 20) // 8)
    for x in (a, b, c):
        assert x.ctypes.data % 64 == 0 and not x.any()
    for x, y in ((a, b), (b, c), (a, c)):
        assert not np.shares_memory(x, y)
    a[:] = 1.5
    b[:] = 7
    c[:] = -2.0
    assert (a == 1.5).all() and (b == 7).all() and (c == -2.0).all()


def test_a_reserve_no_compile_claims_lets_its_pages_go() -> None:
    with gc_pause.paused():
        kept_reserve.start(8 << 20)
        r = kept_reserve._local.reserve
    # the compile ended (failed, say) before the backend claimed it
    r._thread.join(10)
    assert not r._thread.is_alive() and r._array is None
    assert r.take(64, np.dtype(np.uint8)) is None  # nothing to give: own pages, as before
    assert kept_reserve.claim() is r and kept_reserve.claim() is None


def _two_layer_case(seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((256, 512)).astype(np.float32)
    w2 = rng.standard_normal((512, 384)).astype(np.float32)
    a = rng.standard_normal((6, 256)).astype(np.float32)
    f = stripeml.compile(TWO, target="cpu", constants={"W1": w1, "W2": w2}, threads=2)
    return f, a, w1, w2


def test_the_first_call_takes_its_layouts_from_the_reserve(monkeypatch) -> None:
    monkeypatch.setattr(kept_reserve, "MIN_BYTES", 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    taken: list[np.ndarray] = []
    real = kept_reserve.Reserve.take

    def spying(self, nbytes, dtype):
        got = real(self, nbytes, dtype)
        if got is not None:
            taken.append(got)
        return got

    monkeypatch.setattr(kept_reserve.Reserve, "take", spying)
    f, a, w1, w2 = _two_layer_case(4)
    np.testing.assert_allclose(f(a), (a @ w1) @ w2, rtol=1e-4, atol=1e-3)
    kept = list(f.lower(a)._compiled._kept_storage.values())
    assert len(kept) >= 2, "both weights are kept as panels"
    assert len(taken) == len(kept)
    for k in kept:
        assert any(np.shares_memory(k, t) for t in taken)
    a2 = np.random.default_rng(5).standard_normal((6, 256)).astype(np.float32)
    np.testing.assert_allclose(f(a2), (a2 @ w1) @ w2, rtol=1e-4, atol=1e-3)


def test_a_second_shape_reserves_nothing(monkeypatch) -> None:
    monkeypatch.setattr(kept_reserve, "MIN_BYTES", 1)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    sizes: list[int] = []
    real = kept_reserve.start
    monkeypatch.setattr(kept_reserve, "start", lambda n: (sizes.append(n), real(n)))
    f, a, w1, w2 = _two_layer_case(6)
    np.testing.assert_allclose(f(a), (a @ w1) @ w2, rtol=1e-4, atol=1e-3)
    assert sizes == [(w1.nbytes + w2.nbytes) * 3 // 2]
    b = np.random.default_rng(7).standard_normal((9, 256)).astype(np.float32)
    np.testing.assert_allclose(f(b), (b @ w1) @ w2, rtol=1e-4, atol=1e-3)
    assert len(sizes) == 1, "the second shape shares the first one's layouts"
    assert threading.active_count() < 50
