"""The constant layouts a program keeps (its weights' panels) are written by its
first call on 4 KiB pages mapped at once (``runtime.host.kept_array``), so that
call never waits for the kernel to compact memory into huge pages; once its
result is ready, a thread of their own advises and collapses them into huge
pages for the calls after (``runtime.host.promote_huge``).  Results against
NumPy, before and after."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import stripeml
from stripeml.runtime import cpu_run, host

from .helpers import vm_flags

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's smaps")

MATMUL = "function (A[M, K], W[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * W[k, n]); }"


def _large_kept(f, a: np.ndarray) -> list[np.ndarray]:
    compiled = f.lower(a)._compiled
    kept = [s for s in compiled._kept_storage.values() if s.nbytes >= host.LARGE_BYTES]
    assert kept, "the program keeps W's panels (8 MiB)"
    return kept


def _case(seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB of panels
    a = rng.standard_normal((8, 1024)).astype(np.float32)
    return w, a, stripeml.compile(MATMUL, target="cpu", constants={"W": w})


def test_the_first_call_writes_its_layouts_on_small_pages(monkeypatch) -> None:
    promoted: list = []
    monkeypatch.setattr(cpu_run, "promote_huge", lambda arrays: promoted.append(arrays))
    w, a, f = _case(1)
    np.testing.assert_allclose(f(a), a @ w, rtol=1e-4, atol=1e-3)
    for arr in _large_kept(f, a):
        flags = vm_flags(arr.ctypes.data + arr.nbytes // 2)
        assert "nh" in flags and "hg" not in flags, flags
    assert len(promoted) == 1, "promoted once, after the first call"
    np.testing.assert_allclose(f(2 * a), 2 * a @ w, rtol=1e-4, atol=1e-3)
    assert len(promoted) == 1


def test_the_layouts_get_huge_pages_after_the_first_call() -> None:
    w, a, f = _case(2)
    np.testing.assert_allclose(f(a), a @ w, rtol=1e-4, atol=1e-3)
    compiled = f.lower(a)._compiled
    assert compiled.promoting is not None
    compiled.promoting.join(timeout=60)
    for arr in _large_kept(f, a):
        flags = vm_flags(arr.ctypes.data + arr.nbytes // 2)
        assert "hg" in flags and "nh" not in flags, flags
    for k in range(3):  # the contents are what they were
        x = a + k
        np.testing.assert_allclose(f(x), x @ w, rtol=1e-4, atol=1e-3)


CHAIN = """function (A[M, K], W[K, N]) -> (C) {
    T[m, n : M, N] = +(A[m, k] * W[k, n]);
    S[0, n : 1, N] = +(T[m, n]);
    C = T * S;
}"""


def test_the_temporaries_arena_too(monkeypatch) -> None:
    """The arena of the temporaries (``T``, 8 MiB, read whole by ``S`` before ``C``)
    is made on small pages for the first call and given huge pages after it, like
    the layouts."""
    promoted: list = []
    monkeypatch.setattr(cpu_run, "promote_huge", lambda arrays: promoted.append(arrays))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1024, 64)).astype(np.float32)
    w = rng.standard_normal((64, 2048)).astype(np.float32)
    f = stripeml.compile(CHAIN, target="cpu")
    t = a.astype(np.float64) @ w
    want = t * t.sum(axis=0, keepdims=True)
    np.testing.assert_allclose(f(a, w), want, rtol=1e-3, atol=1e-1)
    compiled = f.lower(a, w)._compiled
    assert compiled.arena_bytes.get("DRAM", 0) >= host.LARGE_BYTES, compiled.arena_bytes
    (given,) = promoted
    arenas = [x for x in given if x.nbytes >= compiled.arena_bytes["DRAM"]]
    assert arenas, "the arena is promoted after the call"
    for arena in arenas:
        flags = vm_flags(arena.ctypes.data + arena.nbytes // 2)
        assert "nh" in flags and "hg" not in flags, flags
    np.testing.assert_allclose(f(a, w), want, rtol=1e-3, atol=1e-1)
    assert len(promoted) == 1  # the second call reuses the first's arena


def test_the_collapse_waits_while_a_compile_runs(monkeypatch) -> None:
    """The pages are collapsed one huge page at a time, covering the array's whole
    huge pages, none while a compile runs in the process (``gc_pause.paused``):
    beside a compile, the collapse made it slower (``kept_pages``)."""
    from stripeml import gc_pause
    from stripeml.runtime import kept_pages

    calls: list[tuple[int, int, int]] = []
    monkeypatch.setattr(
        kept_pages, "_madvise", lambda: lambda a, n, advice: calls.append((a, n, advice)) or 0
    )
    monkeypatch.setattr(kept_pages, "idle_madvise", lambda: None)  # every piece here
    arr = kept_pages.kept_array((40 << 20) // 4, np.float32)  # 40 MiB
    huge = 2 << 20
    start = -(-arr.ctypes.data // huge) * huge
    end = (arr.ctypes.data + arr.nbytes) // huge * huge
    with gc_pause.paused():
        thread = kept_pages.promote_huge([arr])
        assert thread is not None
        thread.join(0.3)
        assert thread.is_alive()  # waiting for the compile
        assert calls == [(start, end - start, host._MADV_HUGEPAGE)]
    thread.join(10)
    assert not thread.is_alive()
    pieces = [(a, n) for a, n, advice in calls if advice == host._MADV_COLLAPSE]
    assert len(pieces) == (end - start) // huge and all(n == huge for _, n in pieces)
    assert pieces[0][0] == start and sum(n for _, n in pieces) == end - start
    assert all(a + n == b for (a, n), (b, _) in zip(pieces, pieces[1:]))


def test_a_programs_first_call_counts_as_a_compile(monkeypatch) -> None:
    """A compiled program's first call (its constant steps, its fresh pages) is the
    compile's last step: background work such as the collapse waits for it, and
    for no later call.  The results are NumPy's."""
    from stripeml import gc_pause

    compiling: list[bool] = []
    run = cpu_run.CpuCompiled._run

    def spy(self, inputs, outputs):
        compiling.append(not gc_pause.wait_no_compile(0))
        return run(self, inputs, outputs)

    monkeypatch.setattr(cpu_run.CpuCompiled, "_run", spy)
    w, a, f = _case(4)
    for k in range(3):
        x = a + k
        np.testing.assert_allclose(f(x), x @ w, rtol=1e-4, atol=1e-3)
    assert compiling[0] is True and not any(compiling[1:]), compiling
    assert gc_pause.wait_no_compile(0)


def test_the_collapse_uses_the_gaps_between_calls(monkeypatch) -> None:
    """While a call's kernels run on the pool (its lock held), the collapse waits
    for a gap, at most ``_MAX_WAIT`` a piece: calls back to back still see it
    end, one piece per wait, and calls with gaps between them never run beside
    it.  Beside a call, it took a CPU from the call's threads (BERT-base's calls
    0.17-0.29 s instead of 0.105 s for two seconds after its compile)."""
    import time

    from stripeml.runtime import kept_pages, native_pool

    pool = native_pool.pool(1)
    if pool is None:
        pytest.skip(native_pool.unavailable() or "no native pool")
    stamps: list[tuple[float, int]] = []
    monkeypatch.setattr(
        kept_pages,
        "_madvise",
        lambda: lambda a, n, advice: stamps.append((time.monotonic(), advice)) or 0,
    )
    monkeypatch.setattr(kept_pages, "idle_madvise", lambda: None)  # every piece here
    monkeypatch.setattr(kept_pages, "_MAX_WAIT", 0.2)
    arr = kept_pages.kept_array((8 << 20) // 4, np.float32)  # 3 or 4 whole huge pages
    assert pool._busy.acquire(blocking=False)  # a call's batch runs
    try:
        began = time.monotonic()
        thread = kept_pages.promote_huge([arr])
        assert thread is not None
        thread.join(0.1)
        assert [a for _, a in stamps] == [host._MADV_HUGEPAGE]  # no piece beside the call
        thread.join(0.5)  # back to back: a piece per wait
        collapsed = [t for t, a in stamps if a == host._MADV_COLLAPSE]
        assert 1 <= len(collapsed) <= 3
        assert all(t - began >= 0.19 for t in collapsed)
    finally:
        pool._busy.release()
    thread.join(10)
    assert not thread.is_alive()
    assert kept_pages.wait_quiet(0.5)  # no call runs: a gap at once
    pieces = [a for _, a in stamps if a == host._MADV_COLLAPSE]
    assert len(pieces) in (3, 4)
    np.testing.assert_array_equal(arr, 0)  # the contents are what they were
