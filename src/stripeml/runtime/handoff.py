"""How long a cache line takes to go from one of the pool's threads to another:
:class:`Handoff`, for ``bench/quiet.py``.

A job of two chunks on the native pool (:mod:`.native_pool`), one per thread,
passes a counter back and forth :data:`STEPS` times: the chunk of parity ``p``
waits (spinning on an atomic acquire load) until the counter's parity is
``p``, then adds one (an atomic release store).  Each chunk makes
:data:`STEPS` such steps, each one transfer of the counter's cache line to the
other core, so the job's time over ``2 * STEPS`` is the one-way hand-over
latency.

On the 2-vCPU benchmark VM it tells the host's placement of the vCPUs apart:
about 40 ns when they share an L3 cache, 160-185 ns when they do not.  In
the second state a model whose kernels are small (ShuffleNet) runs 2.5-3x
slower, while the FMA peak, the pool's hand-over of a job and one thread's
copies measure as usual (docs/performance.md, "A probe for quiet rounds").

A chunk that waits too long (the other thread never came: the caller ran both
chunks itself) gives up after :data:`SPIN_LIMIT` spins, and the measurement
is ``None``; so it is where no native pool can be made."""

from __future__ import annotations

import ctypes
import time

import numpy as np

from . import jit, native_pool

__all__ = ["Handoff", "STEPS", "SPIN_LIMIT"]

#: Steps per chunk (2 * STEPS hand-overs: about 2-7 ms in all).
STEPS = 20_000
#: Spins a chunk waits for the other before it gives up (tens of milliseconds).
SPIN_LIMIT = 50_000_000

_IR = f"""
define void @handoff(i8** %ptrs, i64 %start, i64 %end) {{
entry:
  %p0 = load i8*, i8** %ptrs
  %counter = bitcast i8* %p0 to i64*
  %q1 = getelementptr i8*, i8** %ptrs, i64 1
  %p1 = load i8*, i8** %q1
  %outs = bitcast i8* %p1 to i64*
  %out = getelementptr i64, i64* %outs, i64 %start
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %mine]
  %more = icmp slt i64 %i, {STEPS}
  br i1 %more, label %wait, label %finish
wait:
  %spins = phi i64 [0, %loop], [%spins1, %other]
  %v = load atomic i64, i64* %counter acquire, align 8
  %parity = and i64 %v, 1
  %turn = icmp eq i64 %parity, %start
  br i1 %turn, label %mine, label %other
other:
  %spins1 = add i64 %spins, 1
  %late = icmp ugt i64 %spins1, {SPIN_LIMIT}
  br i1 %late, label %abort, label %wait
mine:
  %v1 = add i64 %v, 1
  store atomic i64 %v1, i64* %counter release, align 8
  %i1 = add i64 %i, 1
  br label %loop
abort:
  store i64 -1, i64* %out
  ret void
finish:
  store i64 %i, i64* %out
  ret void
}}
"""


class Handoff:
    """The hand-over job compiled once, run on a pool of two threads (the caller
    and one worker)."""

    def __init__(self) -> None:
        self._code = jit.load_object(jit.compile_ir(_IR, count=False), count=False)
        self._addr = self._code.address("handoff")
        self._pool = native_pool.pool(1, team=False)  # None: no native pool here
        # The counter alone on its cache line (64 bytes), the chunks' results apart.
        self._lines = np.zeros(32, np.int64)
        first = (-self._lines.ctypes.data % 64) // 8
        self._counter = self._lines[first + 8 : first + 16]
        self._outs = np.zeros(16, np.int64)
        self._ptrs = (ctypes.c_void_p * 2)(self._counter.ctypes.data, self._outs.ctypes.data)
        self._bounds = np.array([0, 1, 2], dtype=np.int64)
        self.steps = (0, 0)  # the hand-overs each chunk made in the last run

    def nanoseconds(self) -> float | None:
        """One run's seconds over its ``2 * STEPS`` hand-overs, in ns; ``None`` when
        the two chunks did not run at once (one gave up waiting for the other)."""
        self._counter[:] = 0
        self._outs[:] = 0
        start = time.perf_counter()
        ran = self._pool is not None and bool(
            self._pool.run(self._addr, ctypes.addressof(self._ptrs), self._bounds)
        )
        seconds = time.perf_counter() - start
        self.steps = (int(self._outs[0]), int(self._outs[1]))
        if not ran or self.steps != (STEPS, STEPS):
            return None
        return seconds / (2 * STEPS) * 1e9
