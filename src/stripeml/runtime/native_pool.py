"""A native thread pool for the CPU runtime: chunks of a kernel handed over in
a few microseconds instead of the 0.1-0.2 ms of a Python pool.

The pool is a few lines of LLVM IR compiled once per process (no C compiler
needed) and a block of shared 64-bit words.  Worker threads are Python
threads that call ``stripeml_pool_worker`` through ctypes, which releases the
GIL, and then live in native code: they spin on the shared words (yielding
the CPU now and then), run chunks, and when idle for a while sleep on a futex
until the next job (or nap in growing ``usleep``s where there are no futexes).  The calling thread runs
``stripeml_pool_run(state, fn, ptrs, bounds, n)``: it publishes a job of ``n``
chunks (``fn(ptrs, bounds[i], bounds[i + 1])``), claims chunks itself like a
worker, and returns when every chunk has finished.

Claiming is one compare-and-swap on the word ``job = gen << 32 | end << 16 |
next`` (published with ``end = n``, ``next = 0``): the caller claims the
chunk ``next`` by moving ``next`` up past it, a worker the chunk ``end - 1``
by moving ``end`` down, while ``next < end`` and ``gen`` is the job's.  So a
chunk never runs twice, a late or sleeping worker never holds the caller up
(the caller takes the chunks nobody claimed), and a job's fields (``fn``,
``ptrs``, ``bounds``) are only read by a thread holding one of its chunks,
i.e. before the caller can publish the next job.  Claimed from both ends,
the caller's chunks are a first stretch of each kernel and a lone worker's
the rest, so consecutive kernels split alike leave each thread on the data
it wrote the kernel before (docs/cpu-backend.md, "native thread pool").

One job at a time per pool: :meth:`NativePool.run` returns ``False`` without
running anything when another thread is using the pool (the runtime then runs
the kernel in one piece).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Callable

import numpy as np

from ..errors import InternalError
from . import jit
from .native_pool_ir import (  # (the constants are this module's public names too)
    _QUIT,
    _STATE_WORDS,
    _WORKER_CHUNKS,
    MAX_CHUNKS,
    _futex_syscall,
    _ir,
)
from .native_pool_ir import (
    MAX_NAP_US as MAX_NAP_US,
)
from .native_pool_ir import (
    SPIN_LIMIT as SPIN_LIMIT,
)
from .native_pool_ir import (
    YIELD_EVERY as YIELD_EVERY,
)
from .omp_team import TeamPool
from .omp_team import current as current_team

_WORKER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_BATCH = ctypes.CFUNCTYPE(
    None,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int64,
)
_RUN = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)


#: The pool's loaded code by ``naps``: never evicted nor freed, since worker
#: threads live in it (an evicting cache once freed code that idle workers of an
#: older pool still ran, and they crashed when they woke).
_LOADED: dict[bool, jit.LoadedObject] = {}
_LOADED_LOCK = threading.Lock()


def _code(naps: bool = False) -> jit.LoadedObject:
    """The pool's machine code, compiled once per process (never freed: workers run
    it), its object kept in the kernel cache like a program's (24 ms saved at the
    start of every process that finds it there)."""
    naps = bool(naps)
    found = _LOADED.get(naps)
    if found is not None:
        return found
    with _LOADED_LOCK:
        found = _LOADED.get(naps)
        if found is not None:
            return found
        found = _LOADED[naps] = runtime_object("native pool", _ir(naps))
        return found


def runtime_object(label: str, text: str) -> jit.LoadedObject:
    """The runtime's own LLVM IR ``text`` (the pool's, ``idle_advise``'s) loaded,
    its object kept in the kernel cache's ``runtime/`` folder under ``label``
    and the text, so a process that finds it there only loads it."""
    from ..codegen.cpu_abi import CpuModule
    from .kernel_cache import Entry, KernelCache, cache_key

    cache = KernelCache(folder="runtime")  # the runtime's own code, beside cpu/ and bodies/
    key = cache_key(f"{label}\0{text}", jit.target_description())
    entry = cache.get(key)
    if entry is None:
        entry = Entry(jit.compile_ir(text, count=False), CpuModule(text, (), ()))
        cache.put(key, entry)
    return jit.load_object(entry.object_code, count=False)


def code_to_compile() -> tuple[str, str] | None:
    """The LLVM IR of the pool's code (``(text, its cache key)``) when this process
    has not loaded it and the kernel cache lacks it: a cold compile hands it to
    the LLVM helpers beside its kernels (:class:`.cpu.CpuBackend`) and stores the
    object with :func:`store_code`, so the first run only loads it (ResNet-50's
    first run 25-40 ms sooner)."""
    from .kernel_cache import KernelCache, cache_key

    naps = _futex_syscall() is None  # what the first NativePool asks _code for
    if _MINE or _LOADED or sys.platform == "win32":
        return None
    cache = KernelCache(folder="runtime")
    if not cache.root.usable():
        return None  # nowhere to keep it: the first run compiles it, as before
    text = _ir(naps)
    key = cache_key(f"native pool\0{text}", jit.target_description())
    try:
        if cache.entries.path(key).exists():
            return None
    except OSError:
        return None
    return text, key


def store_code(text: str, key: str, object_code: bytes) -> None:
    """Store the pool's code that :func:`code_to_compile` asked for (the helpers
    made ``object_code`` from ``text`` at the same level :func:`_code` would)."""
    from ..codegen.cpu_abi import CpuModule
    from .kernel_cache import Entry, KernelCache

    KernelCache(folder="runtime").put(key, Entry(object_code, CpuModule(text, (), ())))


class Batch:
    """Consecutive kernels for :meth:`NativePool.run_batch`: per kernel its
    address, extent, split points (an address) with their chunk count (0:
    one call over the whole extent) and, optionally, its gather (an address
    of ``[m, slot, add, ...]``, 0 for none: the kernel is given the buffer
    table itself; see :data:`stripeml.codegen.cpu_abi`).  ``room``: the
    largest ``m``.  The arrays stay alive with the batch."""

    def __init__(
        self, kernels: list[tuple[int, ...]], plan: list | None = None, room: int = 1
    ) -> None:
        self.plan = plan or []  # the caller's own steps, to run them another way
        table = np.array([(*k, 0)[:5] for k in kernels], np.int64).reshape(-1, 5)
        self._columns = [np.ascontiguousarray(table[:, k]) for k in range(5)]
        self.steps = len(kernels)
        self.room = max(1, room)
        self.fns, self.extents, self.bounds, self.chunks, self.gathers = (
            int(c.ctypes.data) for c in self._columns
        )

    def args(self, ptrs: int, times: int = 0) -> tuple[int, ...]:
        """``stripeml_pool_batch``'s arguments after the pool's state: the batch's
        columns with the buffer table ``ptrs`` and the stamps' address ``times``."""
        return (
            self.steps, self.fns, ptrs, self.extents, self.bounds, self.chunks,
            self.gathers, self.room, times,
        )  # fmt: skip


class NativePool:
    """``workers`` native worker threads plus the calling thread.

    ``naps``: idle workers poll in growing naps (20 us to 1 ms) instead of
    sleeping on a futex until the next job (what hosts without futexes do).
    """

    def __init__(self, workers: int, naps: bool = False) -> None:
        code = _code(naps or _futex_syscall() is None)
        self._code = code  # alive as long as the pool: its threads run in it
        self.workers = workers
        self._state = np.zeros(_STATE_WORDS, np.int64)
        self._addr = self._state.ctypes.data
        self._run = _RUN(code.address("stripeml_pool_run"))
        self._batch = _BATCH(code.address("stripeml_pool_batch"))
        self._wake = _WORKER(code.address("stripeml_pool_wake"))
        worker = _WORKER(code.address("stripeml_pool_worker"))
        self._busy = threading.Lock()
        # Each worker on a CPU of its own (when there are more CPUs than workers):
        # a worker woken by a futex is otherwise often placed on the caller's CPU,
        # and the two share it until the scheduler moves one (measured: SqueezeNet
        # with 2 threads, called every 50 ms, median 17.7 ms unpinned, 11.3 pinned,
        # 10.3 back to back either way).  The calling thread is left alone, so it
        # may run on a worker's CPU: each batch first moves such a worker to a
        # free CPU (:meth:`apart`).  The first CPU is rotated by process id so
        # that processes spread out.
        cpus = _cpus()
        self._pin = os.environ.get("STRIPEML_PIN_THREADS", "1") != "0" and workers < len(cpus)
        self._cpus = cpus
        start = os.getpid()
        # each worker's CPU (when pinned) and thread id
        self._cpu_of: list[int | None] = [None] * workers
        self._tids: list[int | None] = [None] * workers
        self.moves = 0  # workers moved off the calling thread's CPU so far
        self._threads = [
            threading.Thread(
                target=worker, args=(self._addr,), name=f"stripeml-cpu-{k}", daemon=True
            )
            for k in range(workers)
        ]
        # Pinned here, not by the worker itself: a worker that pinned itself could
        # be left unpinned (or pinned but not yet recorded) for as long as the
        # calling thread kept its CPU, and :meth:`apart` would not see it.
        for k, t in enumerate(self._threads):
            t.start()  # returns once the thread has its native id
            self._tids[k] = t.native_id
            if self._pin and t.native_id is not None:
                cpu = cpus[(start + k + 1) % len(cpus)]
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(t.native_id, {cpu})
                    self._cpu_of[k] = cpu

    def run(self, fn: int, ptrs: int, bounds: np.ndarray) -> bool:
        """Run ``fn(ptrs, bounds[i], bounds[i + 1])`` for every chunk ``i`` on the pool
        and this thread; ``False`` (nothing run) when another call holds the pool."""
        n = len(bounds) - 1
        if not 0 < n <= MAX_CHUNKS:
            raise ValueError(f"a job has 1 to {MAX_CHUNKS} chunks, got {n}")
        return self.run_raw(fn, ptrs, bounds.ctypes.data, n)

    def run_batch(self, batch: Batch, ptrs: int, times: int = 0) -> bool:
        """Run ``batch``'s kernels in order, each split or whole as it says, in one
        native call; ``False`` (nothing run) when another call holds the pool.
        ``times``: 0, or the address of ``batch.steps + 1`` int64 stamps of the
        monotonic clock in nanoseconds, written before the first kernel and after
        each."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            self.apart()
            self._batch(self._addr, *batch.args(ptrs, times))
        finally:
            self._busy.release()
        return True

    def run_raw(self, fn: int, ptrs: int, bounds: int, n: int) -> bool:
        """:meth:`run` with ``bounds`` the address of ``n + 1`` int64 split points
        (``1 <= n <= MAX_CHUNKS``, unchecked: the CPU runtime's precomputed plans)."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            self._run(self._addr, fn, ptrs, bounds, n)
        finally:
            self._busy.release()
        return True

    def apart(self) -> None:
        """Move a pinned worker off the calling thread's CPU, to one no worker has.

        A worker pinned to the CPU the caller runs on can only run when the
        caller sleeps: it waits on that CPU's run queue for the whole batch,
        and the caller runs every chunk itself (the LSTM of ``bench/models.py``,
        in blocks of 10 calls after a 50 ms pause: 0.25-0.28 ms a call, its
        one-thread time, with the worker running 10-60 us of each block and
        waiting 1-3 ms; 0.16 ms on two CPUs).  Which CPU the caller gets is the
        scheduler's choice, and it keeps it, so one process ran that way for
        minutes.  One ``sched_getcpu`` a batch (the runtime's profiled runs,
        which run kernel by kernel, ask once a run); a move is one
        ``sched_setaffinity``."""
        if not self._pin:
            return
        here = _getcpu()
        if here < 0 or here not in self._cpu_of:
            return
        k = self._cpu_of.index(here)
        tid = self._tids[k]
        free = next((c for c in self._cpus if c != here and c not in self._cpu_of), None)
        if tid is None or free is None:
            return
        try:
            os.sched_setaffinity(tid, {free})
        except OSError:
            return
        self._cpu_of[k] = free
        self.moves += 1

    @property
    def worker_chunks(self) -> int:
        """Chunks the workers (not the callers) have run so far."""
        return int(self._state[_WORKER_CHUNKS])

    def close(self) -> None:
        """Stop the workers (they leave within one nap) and wait for them."""
        self._state[_QUIT] = 1
        self._wake(self._addr)
        for t in self._threads:
            t.join()


def _sched_getcpu() -> Callable[[], int]:
    """The C library's ``sched_getcpu`` (the CPU the calling thread runs on, -1 if
    unknown), or a function that always says -1 where there is none."""
    try:
        fn = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError, TypeError):
        return lambda: -1
    fn.restype = ctypes.c_int
    fn.argtypes = []
    return fn


_getcpu = _sched_getcpu()


def _cpus() -> list[int]:
    """The CPUs this process may run on (empty where the OS does not say)."""
    getter = getattr(os, "sched_getaffinity", None)
    return sorted(getter(0)) if getter is not None else []


_POOLS: dict[tuple[int, int], NativePool] = {}
_POOLS_LOCK = threading.Lock()


_UNAVAILABLE: list[str] = []  # why no pool could be made in this process, if so

#: The pools of this process by worker count (emptied in a forked child, whose
#: parent's worker threads do not exist there).
_MINE: dict[int, NativePool] = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_MINE.clear)


def pool(workers: int, team: bool = True) -> NativePool | TeamPool | None:
    """This process's pool of ``workers`` native workers (created on first use);
    ``None`` where none can be made (no POSIX ``usleep``/``sched_yield`` to link
    against, as on Windows): the runtime then runs every kernel on the calling
    thread, and :func:`unavailable` says why.  Inside :func:`.omp_team.team`,
    the OpenMP team's pool (:class:`.omp_team.TeamPool`), unless ``team`` is
    false.  With no workers it starts no thread: its batches run on the caller."""
    found_team = current_team(workers) if team else None
    if found_team is not None:
        return found_team
    found = _MINE.get(workers)  # this process's, without a lock: every run asks
    if found is not None:
        return found
    if sys.platform == "win32":
        if not _UNAVAILABLE:
            _UNAVAILABLE.append("the native thread pool needs a POSIX C library")
        return None
    key = (os.getpid(), workers)  # a forked child starts its own threads
    with _POOLS_LOCK:
        found = _POOLS.get(key)
        if found is None and not _UNAVAILABLE:
            try:
                found = _POOLS[key] = NativePool(workers)
            except (RuntimeError, OSError, InternalError) as exc:
                _UNAVAILABLE.append(f"the native thread pool could not start: {exc}")
        if found is not None:
            _MINE[workers] = found
        return found


def running() -> bool:
    """Whether a batch runs on one of this process's pools now (a call's kernels:
    background work that would take a CPU from them waits, ``kept_pages``)."""
    return any(p._busy.locked() for p in list(_MINE.values()))


def unavailable() -> str | None:
    """Why kernels run on one thread in this process (no pool), or ``None``."""
    return _UNAVAILABLE[0] if _UNAVAILABLE else None


@atexit.register
def _close_all() -> None:
    # Workers must leave the pool's code before the interpreter tears modules down.
    with _POOLS_LOCK:
        mine = [p for (pid, _), p in _POOLS.items() if pid == os.getpid()]
    for p in mine:
        p.close()
