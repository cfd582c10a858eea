"""The in-memory caches of compiled signatures (runtime/memo.py): bounded in bytes,
least recently used out first, the newest always kept; results stay right."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.runtime.memo import (
    DEFAULT_MEMORY_LIMIT,
    MEMORY_LIMIT_ENV,
    SignatureCache,
    memory_limit,
)

SOURCE = "function (A[N], B[N]) -> (C) { C = A * B + A; }"


def test_least_recently_used_out_first() -> None:
    cache: SignatureCache[bytes] = SignatureCache(len, limit=10)
    cache.put("a", b"xxxx")
    cache.put("b", b"yyyy")
    assert cache.get("a") == b"xxxx"  # a is now the newest
    cache.put("c", b"zzzz")  # 12 bytes: b, the oldest, goes
    assert "b" not in cache and "a" in cache and "c" in cache
    assert cache.nbytes == 8
    cache.put("huge", b"w" * 100)  # alone over the limit: kept, the others go
    assert len(cache) == 1 and cache.get("huge") is not None


def test_sizes_are_measured_when_evicting() -> None:
    grow = {"a": 0}
    cache: SignatureCache[str] = SignatureCache(lambda k: grow.get(k, 1), limit=5)
    cache.put("a", "a")
    grow["a"] = 10  # a's program compiled after it was stored
    cache.put("b", "b")
    assert "a" not in cache and "b" in cache


def test_the_limit_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    assert memory_limit() == DEFAULT_MEMORY_LIMIT
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "3M")
    assert memory_limit() == 3 << 20
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "lots")
    with pytest.warns(RuntimeWarning, match="not a size"):
        assert memory_limit() == DEFAULT_MEMORY_LIMIT


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_a_function_keeps_signatures_within_the_limit(monkeypatch, target) -> None:
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "100K")  # room for two 40 KB signatures, not three
    f = stripeml.compile(SOURCE, target=target)
    sizes = (10_000, 10_001, 10_002)
    for n in sizes:
        a = np.arange(n, dtype=np.float32)
        np.testing.assert_allclose(f(a, a), a * a + a, rtol=1e-6)
    assert len(f._cache) == 2
    a = np.arange(
        sizes[0], dtype=np.float32
    )  # evicted: compiled again, same answer (FMA: allclose)
    np.testing.assert_allclose(f(a, a), a * a + a, rtol=1e-6)
