"""``runtime.handoff``: a counter passed back and forth between the native pool's
two threads (``bench/quiet.py`` times it).  Nothing here asserts a speed: the
tests check that the hand-overs happen, strictly alternating, and that a chunk
left alone gives up instead of spinning for ever."""

from __future__ import annotations

import ctypes

import pytest

from stripeml.runtime import handoff, jit, native_pool


def test_the_counter_goes_back_and_forth_steps_times_each():
    h = handoff.Handoff()
    got = None
    for _ in range(5):  # the worker may be asleep the first time: it then gives up
        got = h.nanoseconds()
        if got is not None:
            break
    if got is None and native_pool.pool(1, team=False) is None:
        pytest.skip("no native pool here")
    assert got is not None and got > 0
    assert h.steps == (handoff.STEPS, handoff.STEPS)
    # Each chunk waits for its parity before it adds one: both made all their
    # steps only if they alternated, and the counter ends at twice that.
    assert int(h._counter[0]) == 2 * handoff.STEPS


def test_a_chunk_alone_gives_up():
    h = handoff.Handoff()
    h._counter[:] = 0
    h._outs[:] = 0
    kernel = jit.KERNEL_TYPE(h._addr)
    kernel(h._ptrs, 0, 1)  # chunk 0 without chunk 1: one step, then a wait nobody ends
    assert int(h._outs[0]) == -1
    assert int(h._counter[0]) == 1


def test_no_pool_no_measurement(monkeypatch):
    h = handoff.Handoff()
    monkeypatch.setattr(h, "_pool", None)
    assert h.nanoseconds() is None
    assert ctypes.sizeof(h._ptrs) == 2 * ctypes.sizeof(ctypes.c_void_p)
