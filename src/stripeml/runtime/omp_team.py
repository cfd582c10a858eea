"""Kernels split over another library's OpenMP team instead of the native pool's
own workers (:class:`TeamPool`), for processes where that library runs
parallel work between stripeml's programs: PyTorch (``stripeml.torch``).

A process that runs PyTorch operators and stripeml programs by turns (a
training step: stripeml's forward program, PyTorch's loss, stripeml's
backward program, PyTorch's optimizer step) has two sets of worker threads:
the native pool's (:mod:`.native_pool`) and PyTorch's OpenMP team.  libgomp's
workers spin for about 3 ms after each parallel region when
``OMP_WAIT_POLICY`` is unset, so a stripeml program that starts within 3 ms of a
PyTorch operator shares the second core with a thread doing nothing: on the
2-core VM a transformer block's backward program took 8.2 ms in a training
step against 4.7 ms run alone, and the whole step 16 ms against 11 ms with
``GOMP_SPINCOUNT=10000``.  Setting that variable has to happen before PyTorch
starts, so instead the kernels run **on that team**: :meth:`TeamPool.run_batch`
calls ``GOMP_parallel`` (the entry point every OpenMP runtime on Linux
exports, libgomp's and LLVM's libomp alike) with ``stripeml_team_body``, whose
thread 0 runs the batch exactly as the native pool's caller does
(``stripeml_pool_batch``) while the team's other threads claim its chunks like
the pool's workers, until thread 0 says the batch is finished.  The team's
threads are the ones PyTorch's operators use, so nothing spins for nothing
and no thread waits for a time slice.

:func:`team` is a context manager: within it (on the calling thread only), the
CPU runtime's :func:`.native_pool.pool` returns the installed team pool
instead of the native one.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .native_pool import Batch

# Words of a call's data block (see team_ir).
_OMP_TID, _STATE, _STEPS, _FNS, _PTRS, _EXTENTS, _BOUNDS, _CHUNKS = range(8)
_FINISHED = 8  # on a cache line of its own
_GATHERS, _ROOM, _TIMES = 16, 17, 18
_DATA_WORDS = 24

_PARALLEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint)


def team_ir(relax: str, futex: int | None) -> str:
    """``stripeml_team_body(data)``, appended to the native pool's module (it
    calls ``claim_and_run``, ``pending``, ``stripeml_pool_batch`` and
    ``stripeml_pool_wake`` there).  A helper thread waits for chunks like the
    pool's workers: it spins (yielding now and then), and after
    ``SPIN_LIMIT`` idle spins sleeps on the pool's wake word (``futex``: the
    system call's number; ``None``: naps of 20 us) until thread 0 publishes a
    job or says the batch is finished, so a batch of long unsplit kernels
    does not keep a second thread spinning beside the one running them."""
    from .native_pool_ir import _JOB, _SLEEPERS, _WAKE, futex_wait, spin_wait

    if futex is not None:
        sleep = """
  %fv = load atomic i64, i64* %fwp seq_cst, align 8
  %s0 = atomicrmw add i64* %sp, i64 1 seq_cst
  %w = load atomic i64, i64* %jp seq_cst, align 8
  %has = call i1 @pending(i64 %w)
  %f2 = load atomic i64, i64* %finp seq_cst, align 8
  %fin2 = icmp ne i64 %f2, 0
  %skip = or i1 %has, %fin2
  br i1 %skip, label %unsleep, label %futex
"""
        sleep += futex_wait(futex, "loop")
    else:
        sleep = """
  %u = call i32 @usleep(i32 20)
  br label %loop"""
    # stripeml_pool_batch's arguments after the state, each from its word of the block
    words = (
        ("steps", _STEPS), ("fns", _FNS), ("ptrs", _PTRS), ("extents", _EXTENTS),
        ("bounds", _BOUNDS), ("chunks", _CHUNKS), ("gathers", _GATHERS), ("room", _ROOM),
        ("times", _TIMES),
    )  # fmt: skip
    loads = "\n".join(
        f"  %{name}.p = getelementptr i64, i64* %d, i64 {word}\n"
        f"  %{name} = load i64, i64* %{name}.p, align 8"
        for name, word in words
    )
    args = ", ".join(f"i64 %{name}" for name, _ in words)
    return f"""
; Run by every thread of an OpenMP team (GOMP_parallel's fn): thread 0 runs the
; batch; the others claim its chunks until thread 0 stores "finished".
define void @stripeml_team_body(i8* %data) {{
entry:
  %d = bitcast i8* %data to i64*
  %tp = getelementptr i64, i64* %d, i64 {_OMP_TID}
  %ti = load i64, i64* %tp, align 8
  %tf = inttoptr i64 %ti to i32 ()*
  %tid = call i32 %tf()
  %stp = getelementptr i64, i64* %d, i64 {_STATE}
  %sti = load i64, i64* %stp, align 8
  %st = inttoptr i64 %sti to i64*
  %finp = getelementptr i64, i64* %d, i64 {_FINISHED}
  %jp = getelementptr i64, i64* %st, i64 {_JOB}
  %sp = getelementptr i64, i64* %st, i64 {_SLEEPERS}
  %fwp = getelementptr i64, i64* %st, i64 {_WAKE}
  %lead = icmp eq i32 %tid, 0
  br i1 %lead, label %run, label %loop
run:
{loads}
  call void @stripeml_pool_batch(i64* %st, {args})
  store atomic i64 1, i64* %finp seq_cst, align 8
  call void @stripeml_pool_wake(i64* %st)
  ret void
loop:
  %spins = phi i64 [ 0, %entry ], [ 0, %loop ], [ %spins1, %relax ], [ %spins1, %yield ], [ 0, %{"unsleep" if futex is not None else "sleep"} ]
  %did = call i1 @claim_and_run(i64* %st, i64 1)
  br i1 %did, label %loop, label %idle
idle:
  %f = load atomic i64, i64* %finp acquire, align 8
  %over = icmp ne i64 %f, 0
  br i1 %over, label %out, label %wait
{spin_wait(relax)}
sleep:{sleep}
out:
  ret void
}}
"""


class TeamPool:
    """The native pool's interface (``run_batch``, ``run_raw``) over an OpenMP
    team of ``threads`` threads: ``parallel`` and ``thread_num`` are the
    addresses of the runtime's ``GOMP_parallel`` and ``omp_get_thread_num``."""

    def __init__(self, parallel: int, thread_num: int, threads: int) -> None:
        from . import native_pool

        code = native_pool._code()
        self.workers = threads - 1
        self._code = code  # never freed while the pool lives (team threads run it)
        self._body = code.address("stripeml_team_body")
        self._parallel = _PARALLEL(parallel)
        self._state = np.zeros(native_pool._STATE_WORDS, np.int64)
        self._data = np.zeros(_DATA_WORDS, np.int64)
        self._data[_OMP_TID] = thread_num
        self._data[_STATE] = self._state.ctypes.data
        self._data_addr = self._data.ctypes.data
        self._busy = threading.Lock()
        self._one = np.zeros(5, np.int64)  # run_raw's one-kernel batch (no gather)

    def run_batch(self, batch: Batch, ptrs: int, times: int = 0) -> bool:
        """Run ``batch``'s kernels in order on the team; ``False`` (nothing run)
        when another call holds this pool.  ``times``: as
        :meth:`.native_pool.NativePool.run_batch`'s."""
        return self._go(*batch.args(ptrs, times))

    def run(self, fn: int, ptrs: int, bounds: np.ndarray) -> bool:
        """:meth:`.native_pool.NativePool.run` on the team."""
        return self.run_raw(fn, ptrs, bounds.ctypes.data, len(bounds) - 1)

    def run_raw(self, fn: int, ptrs: int, bounds: int, n: int) -> bool:
        """One kernel, ``fn(ptrs, b[i], b[i + 1])`` for the ``n`` chunks at
        address ``bounds``, on the team."""
        one = self._one
        one[0], one[1], one[2], one[3] = fn, 0, bounds, n
        base, size = one.ctypes.data, one.itemsize
        return self._go(
            1, base, ptrs, base + size, base + 2 * size, base + 3 * size, base + 4 * size, 1, 0
        )

    def _go(
        self,
        steps: int,
        fns: int,
        ptrs: int,
        extents: int,
        bounds: int,
        chunks: int,
        gathers: int,
        room: int,
        times: int,
    ) -> bool:
        if not self._busy.acquire(blocking=False):
            return False
        try:
            d = self._data
            d[_STEPS], d[_FNS], d[_PTRS] = steps, fns, ptrs
            d[_EXTENTS], d[_BOUNDS], d[_CHUNKS] = extents, bounds, chunks
            d[_GATHERS], d[_ROOM], d[_TIMES] = gathers, room, times
            d[_FINISHED] = 0
            self._parallel(self._body, self._data_addr, self.workers + 1, 0)
        finally:
            self._busy.release()
        return True

    @property
    def worker_chunks(self) -> int:
        """Chunks the team's other threads (not thread 0) have run so far."""
        from .native_pool_ir import _WORKER_CHUNKS

        return int(self._state[_WORKER_CHUNKS])


_LOCAL = threading.local()
_POOLS: dict[tuple[int, int, int], TeamPool] = {}
_POOLS_LOCK = threading.Lock()


def team_pool(parallel: int, thread_num: int, threads: int) -> TeamPool:
    """The process's team pool for these entry points and thread count."""
    key = (parallel, thread_num, threads)
    found = _POOLS.get(key)
    if found is None:
        with _POOLS_LOCK:
            found = _POOLS.get(key)
            if found is None:
                found = _POOLS[key] = TeamPool(parallel, thread_num, threads)
    return found


@contextlib.contextmanager
def team(parallel: int, thread_num: int) -> Iterator[None]:
    """Within this context, on this thread, split kernels run on the OpenMP team
    whose ``GOMP_parallel`` and ``omp_get_thread_num`` are at these addresses."""
    was = getattr(_LOCAL, "entry", None)
    _LOCAL.entry = (parallel, thread_num)
    try:
        yield
    finally:
        _LOCAL.entry = was


def current(workers: int) -> TeamPool | None:
    """The team pool of the enclosing :func:`team` context (for ``workers``
    workers besides the calling thread), else ``None``."""
    entry = getattr(_LOCAL, "entry", None)
    if entry is None:
        return None
    return team_pool(entry[0], entry[1], workers + 1)


def openmp_entry_points(lib: ctypes.CDLL | None = None) -> tuple[int, int] | None:
    """``GOMP_parallel`` and ``omp_get_thread_num`` of the OpenMP runtime ``lib``
    (default: the one loaded in this process, found by name in the global
    namespace, as the libraries loaded after it bind to it), else None."""
    try:
        lib = ctypes.CDLL(None) if lib is None else lib
        parallel = ctypes.cast(lib.GOMP_parallel, ctypes.c_void_p).value
        thread_num = ctypes.cast(lib.omp_get_thread_num, ctypes.c_void_p).value
    except (AttributeError, OSError):
        return None
    if not parallel or not thread_num:
        return None
    return int(parallel), int(thread_num)
