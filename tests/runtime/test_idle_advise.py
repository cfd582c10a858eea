"""``madvise`` on a native thread of the scheduler's idle class
(``runtime.idle_advise``), which the huge-page collapse of a program's kept
layouts uses so that calls made back to back lose no CPU to it.  Contents
are checked against the NumPy arrays they were copied from."""

from __future__ import annotations

import os
import platform
import sys
import threading

import numpy as np
import pytest

from stripeml.runtime import host, idle_advise, kept_pages

from .helpers import smaps_field, vm_flags

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

HUGE = 2 << 20


def _anon_huge_kb(address: int) -> int:
    """AnonHugePages of the mapping holding ``address`` (``/proc/self/smaps``)."""
    return int(smaps_field(address, "AnonHugePages")[0])


def _pages(megabytes: int, seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A kept array (4 KiB pages, populated) holding random values, a copy of
    them, and its first whole huge page's address."""
    arr = kept_pages.kept_array((megabytes << 20) // 4, np.float32)
    want = np.random.default_rng(seed).standard_normal(arr.size).astype(np.float32)
    arr[:] = want
    return arr, want, -(-arr.ctypes.data // HUGE) * HUGE


def _advise():
    advise = idle_advise.idle_madvise()
    if advise is None and platform.machine() in ("x86_64", "aarch64"):
        pytest.fail(f"no idle-thread madvise on {platform.machine()}: {idle_advise._FAILED}")
    if advise is None:
        pytest.skip(f"no idle-thread madvise on {platform.machine()}")
    return advise


def test_madvise_runs_on_a_thread_of_the_idle_class() -> None:
    advise = _advise()
    arr, want, start = _pages(8, 1)
    before = os.sched_getscheduler(0)
    done = advise(start, HUGE, host._MADV_HUGEPAGE)
    assert done is not None, "a thread was made"
    assert done.result == 0
    assert done.policy == idle_advise.SCHED_IDLE == os.SCHED_IDLE
    assert done.thread > 0 and done.thread != threading.get_native_id()
    assert os.sched_getscheduler(0) == before  # the caller's class is its own
    assert "hg" in vm_flags(start)  # the advice took effect, on this process's memory
    np.testing.assert_array_equal(arr, want)


def test_a_collapse_on_the_idle_thread_gives_a_huge_page() -> None:
    advise = _advise()
    madvise = host._madvise()
    assert madvise is not None
    for seed in range(3):
        arr, want, start = _pages(8, 2 + seed)
        # One huge page's range, its own mapping now (the advice splits it off), read
        # before and after: a mapping merged with a neighbour's would count the
        # neighbour's pages too.  The advice also lets khugepaged collapse it in the
        # background; a range it already took proves nothing here: another one.
        madvise(start, HUGE, host._MADV_HUGEPAGE)
        before = _anon_huge_kb(start)
        if before == 0:
            break
    else:
        pytest.skip("khugepaged collapsed every range first (a busy machine)")
    done = advise(start, HUGE, host._MADV_COLLAPSE)
    assert done is not None
    if done.result != 0:
        pytest.skip("MADV_COLLAPSE refused (Linux 6.1+ with huge pages; or memory busy now)")
    after = _anon_huge_kb(start)
    assert after - before >= HUGE >> 10, (before, after)
    np.testing.assert_array_equal(arr, want)  # the same values, now on a huge page


def test_the_collapse_hands_each_piece_to_the_idle_thread(monkeypatch) -> None:
    """``promote_huge`` advises the whole range on its own thread and collapses
    each huge page on the idle one; where no idle thread can be made (``None``
    from the call), it collapses that piece itself."""
    direct: list[tuple[int, int, int]] = []
    idle: list[tuple[int, int, int]] = []
    refuse = {"first": True}

    def idle_call(a: int, n: int, advice: int):
        idle.append((a, n, advice))
        if refuse["first"]:  # the first thread cannot be made: done directly
            refuse["first"] = False
            return None
        return object()

    monkeypatch.setattr(
        kept_pages, "_madvise", lambda: lambda a, n, advice: direct.append((a, n, advice)) or 0
    )
    monkeypatch.setattr(kept_pages, "idle_madvise", lambda: idle_call)
    arr = kept_pages.kept_array((12 << 20) // 4, np.float32)
    start = -(-arr.ctypes.data // HUGE) * HUGE
    end = (arr.ctypes.data + arr.nbytes) // HUGE * HUGE
    thread = kept_pages.promote_huge([arr])
    assert thread is not None
    thread.join(10)
    assert not thread.is_alive()
    pieces = [(a, n, host._MADV_COLLAPSE) for a in range(start, end, HUGE) for n in [HUGE]]
    assert idle == pieces
    assert direct == [(start, end - start, host._MADV_HUGEPAGE), pieces[0]]
