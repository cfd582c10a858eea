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

Claiming is one compare-and-swap on the word ``job = gen << 32 | n << 16 |
next``: a chunk belongs to whoever moves ``next`` past it while ``gen`` is
the job's, so a chunk never runs twice, a late or sleeping worker never holds
the caller up (the caller takes the chunks nobody claimed), and a job's fields
(``fn``, ``ptrs``, ``bounds``) are only read by a thread holding one of its
chunks, i.e. before the caller can publish the next job.

One job at a time per pool: :meth:`NativePool.run` returns ``False`` without
running anything when another thread is using the pool (the runtime then runs
the kernel in one piece).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import platform
import sys
import threading
from functools import lru_cache

import numpy as np

from ..errors import InternalError
from . import jit

#: Idle spins (each a ``pause``) before a worker sleeps: a few tenths of a
#: millisecond, longer than the gaps between the kernels of one run.
SPIN_LIMIT = 1 << 13
#: Spinning threads (an idle worker, the caller waiting for the last chunks)
#: call ``sched_yield`` every this many spins: where the scheduler put two of
#: them on one CPU, the other gets it at once instead of at the end of a time
#: slice (a 3x3 conv 14x14x256 -> 256 with 2 threads on a 2-core VM:
#: median 2.9-4.1 ms before, 2.0-2.5 ms with it; the fastest runs 1.9 ms both).
YIELD_EVERY = 64
#: Naps of an idle worker grow from 20 us to this many microseconds.
MAX_NAP_US = 1000
#: Most chunks of one job (``next`` and ``n`` are 16-bit fields of the job word).
MAX_CHUNKS = (1 << 16) - 1

# Word offsets in the state block (the job word and the done counter on
# separate cache lines).
_JOB, _QUIT, _FN, _PTRS, _BOUNDS, _SLEEPERS, _DONE, _WAKE, _WORKER_CHUNKS = (
    0,
    1,
    2,
    3,
    4,
    5,
    8,
    9,
    10,
)
_STATE_WORDS = 16


def _futex_syscall() -> int | None:
    """The futex system call's number on this host, ``None`` off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    return {"x86_64": 202, "aarch64": 98}.get(platform.machine())


def _ir(naps: bool = False) -> str:
    """The pool's LLVM IR; ``naps``: idle workers nap (usleep) even where futexes exist."""
    triple = jit.host().triple
    if triple.startswith(("x86_64", "i686", "i386")):
        relax = "call void @llvm.x86.sse2.pause()"
        decl = "declare void @llvm.x86.sse2.pause()"
    else:
        relax, decl = "", ""
    futex = None if naps else _futex_syscall()
    if futex is not None:
        # Sleep until the caller publishes a job: FUTEX_WAIT_PRIVATE on the wake
        # word while it still holds the value read before the last look at the
        # job word (50 ms at most, in case of a bug elsewhere).
        sleep = f"""
  %fv = load atomic i64, i64* %fwp seq_cst, align 8
  %s0 = atomicrmw add i64* %sp, i64 1 seq_cst
  %w = load atomic i64, i64* %jp seq_cst, align 8
  %has = call i1 @pending(i64 %w)
  br i1 %has, label %unsleep, label %futex
futex:
  %ts = alloca [2 x i64], align 8
  %ts0 = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 0
  store i64 0, i64* %ts0, align 8
  %ts1 = getelementptr [2 x i64], [2 x i64]* %ts, i64 0, i64 1
  store i64 50000000, i64* %ts1, align 8
  %fw32 = bitcast i64* %fwp to i32*
  %fv32 = and i64 %fv, 4294967295
  %r = call i64 (i64, ...) @syscall(i64 {futex}, i32* %fw32, i64 128, i64 %fv32, i64* %ts0)
  br label %unsleep
unsleep:
  %s1 = atomicrmw sub i64* %sp, i64 1 seq_cst
  br label %napped"""
        wake = f"""
  %f0 = atomicrmw add i64* %fwp, i64 1 seq_cst
  %sl = load atomic i64, i64* %sp seq_cst, align 8
  %any = icmp ne i64 %sl, 0
  br i1 %any, label %wake, label %woken
wake:
  %fw32 = bitcast i64* %fwp to i32*
  %r = call i64 (i64, ...) @syscall(i64 {futex}, i32* %fw32, i64 129, i64 2147483647)
  br label %woken
woken:"""
    else:
        sleep = """
  %nap32 = trunc i64 %nap to i32
  %u = call i32 @usleep(i32 %nap32)
  br label %napped"""
        wake = ""
    words = f"""
  %jp = getelementptr i64, i64* %st, i64 {_JOB}
  %sp = getelementptr i64, i64* %st, i64 {_SLEEPERS}
  %fwp = getelementptr i64, i64* %st, i64 {_WAKE}"""
    return f"""
{decl}
declare i32 @usleep(i32)
declare i32 @sched_yield()
declare i64 @syscall(i64, ...)

; Whether job word %w has an unclaimed chunk (next < n).
define private i1 @pending(i64 %w) alwaysinline {{
entry:
  %next = and i64 %w, 65535
  %n0 = lshr i64 %w, 16
  %n = and i64 %n0, 65535
  %has = icmp ult i64 %next, %n
  ret i1 %has
}}

define private i1 @claim_and_run(i64* %st, i64 %mine) {{
entry:
  %jp = getelementptr i64, i64* %st, i64 {_JOB}
  br label %again
again:
  %w = load atomic i64, i64* %jp acquire, align 8
  %has = call i1 @pending(i64 %w)
  br i1 %has, label %try, label %none
try:
  %w1 = add i64 %w, 1
  %r = cmpxchg i64* %jp, i64 %w, i64 %w1 acq_rel acquire
  %ok = extractvalue {{ i64, i1 }} %r, 1
  br i1 %ok, label %run, label %again
run:
  %fp = getelementptr i64, i64* %st, i64 {_FN}
  %fi = load i64, i64* %fp, align 8
  %fn = inttoptr i64 %fi to void (i8*, i64, i64)*
  %pp = getelementptr i64, i64* %st, i64 {_PTRS}
  %pi = load i64, i64* %pp, align 8
  %ptrs = inttoptr i64 %pi to i8*
  %bp = getelementptr i64, i64* %st, i64 {_BOUNDS}
  %bi = load i64, i64* %bp, align 8
  %bounds = inttoptr i64 %bi to i64*
  %next = and i64 %w, 65535
  %lop = getelementptr i64, i64* %bounds, i64 %next
  %lo = load i64, i64* %lop, align 8
  %next1 = add i64 %next, 1
  %hip = getelementptr i64, i64* %bounds, i64 %next1
  %hi = load i64, i64* %hip, align 8
  call void %fn(i8* %ptrs, i64 %lo, i64 %hi)
  %dp = getelementptr i64, i64* %st, i64 {_DONE}
  %old = atomicrmw add i64* %dp, i64 1 release
  %cp = getelementptr i64, i64* %st, i64 {_WORKER_CHUNKS}
  %oldc = atomicrmw add i64* %cp, i64 %mine monotonic
  ret i1 true
none:
  ret i1 false
}}

define void @stripeml_pool_worker(i64* %st) {{
entry:{words}
  br label %loop
loop:
  %spins = phi i64 [ 0, %entry ], [ 0, %loop ], [ %spins1, %spin ], [ %spins1, %yield ], [ %spins1, %napped ]
  %nap = phi i64 [ 20, %entry ], [ 20, %loop ], [ %nap, %spin ], [ %nap, %yield ], [ %nap2, %napped ]
  %did = call i1 @claim_and_run(i64* %st, i64 1)
  br i1 %did, label %loop, label %idle
idle:
  %qp = getelementptr i64, i64* %st, i64 {_QUIT}
  %q = load atomic i64, i64* %qp acquire, align 8
  %stop = icmp ne i64 %q, 0
  br i1 %stop, label %done, label %wait
wait:
  %spins1 = add i64 %spins, 1
  %long = icmp ugt i64 %spins1, {SPIN_LIMIT}
  br i1 %long, label %sleep, label %spin
spin:
  {relax}
  %low = and i64 %spins1, {YIELD_EVERY - 1}
  %turn = icmp eq i64 %low, 0
  br i1 %turn, label %yield, label %loop
yield:
  %y = call i32 @sched_yield()
  br label %loop
sleep:{sleep}
napped:
  %nap1 = shl i64 %nap, 1
  %big = icmp ugt i64 %nap1, {MAX_NAP_US}
  %nap2 = select i1 %big, i64 {MAX_NAP_US}, i64 %nap1
  br label %loop
done:
  ret void
}}

define void @stripeml_pool_wake(i64* %st) {{
entry:{words}{wake}
  ret void
}}

define void @stripeml_pool_run(i64* %st, i64 %fn, i64 %ptrs, i64 %bounds, i64 %n) {{
entry:{words}
  %fp = getelementptr i64, i64* %st, i64 {_FN}
  store i64 %fn, i64* %fp, align 8
  %pp = getelementptr i64, i64* %st, i64 {_PTRS}
  store i64 %ptrs, i64* %pp, align 8
  %bp = getelementptr i64, i64* %st, i64 {_BOUNDS}
  store i64 %bounds, i64* %bp, align 8
  %dp = getelementptr i64, i64* %st, i64 {_DONE}
  %done0 = load atomic i64, i64* %dp acquire, align 8
  %target = add i64 %done0, %n
  %w = load atomic i64, i64* %jp acquire, align 8
  %gen = lshr i64 %w, 32
  %gen1 = add i64 %gen, 1
  %g = shl i64 %gen1, 32
  %nn = shl i64 %n, 16
  %job = or i64 %g, %nn
  store atomic i64 %job, i64* %jp seq_cst, align 8
  call void @stripeml_pool_wake(i64* %st)
  br label %work
work:
  %did = call i1 @claim_and_run(i64* %st, i64 0)
  br i1 %did, label %work, label %wait
wait:
  %spins = phi i64 [ 0, %work ], [ %spins1, %relax ], [ 0, %yield ]
  %d = load atomic i64, i64* %dp acquire, align 8
  %fin = icmp eq i64 %d, %target
  br i1 %fin, label %out, label %relax
relax:
  {relax}
  %spins1 = add i64 %spins, 1
  %long = icmp ugt i64 %spins1, {YIELD_EVERY}
  br i1 %long, label %yield, label %wait
yield:
  %y = call i32 @sched_yield()
  br label %wait
out:
  ret void
}}

; A run of kernels in order: kernel i is fns[i], split into chunks[i] chunks
; at bounds[i] (an address of split points) on the pool, or with chunks[i] = 0
; called once over [0, extents[i]) on this thread.
define void @stripeml_pool_batch(i64* %st, i64 %steps, i64 %fns, i64 %ptrs, i64 %extents, i64 %bounds, i64 %chunks) {{
entry:
  %fa = inttoptr i64 %fns to i64*
  %ea = inttoptr i64 %extents to i64*
  %ba = inttoptr i64 %bounds to i64*
  %ca = inttoptr i64 %chunks to i64*
  %pv = inttoptr i64 %ptrs to i8*
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %next ]
  %more = icmp ult i64 %i, %steps
  br i1 %more, label %body, label %done
body:
  %fip = getelementptr i64, i64* %fa, i64 %i
  %fi = load i64, i64* %fip, align 8
  %cip = getelementptr i64, i64* %ca, i64 %i
  %n = load i64, i64* %cip, align 8
  %serial = icmp eq i64 %n, 0
  br i1 %serial, label %one, label %split
one:
  %eip = getelementptr i64, i64* %ea, i64 %i
  %e = load i64, i64* %eip, align 8
  %fn = inttoptr i64 %fi to void (i8*, i64, i64)*
  call void %fn(i8* %pv, i64 0, i64 %e)
  br label %next
split:
  %bip = getelementptr i64, i64* %ba, i64 %i
  %b = load i64, i64* %bip, align 8
  call void @stripeml_pool_run(i64* %st, i64 %fi, i64 %ptrs, i64 %b, i64 %n)
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %loop
done:
  ret void
}}
"""


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
)
_RUN = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)


@lru_cache(maxsize=2)
def _code(naps: bool = False) -> jit.LoadedObject:
    """The pool's machine code, compiled once per process (never freed: workers run
    it), its object kept in the kernel cache like a program's (24 ms saved at the
    start of every process that finds it there)."""
    from ..codegen.cpu_abi import CpuModule
    from .kernel_cache import Entry, KernelCache, cache_key

    text = _ir(naps)
    cache = KernelCache(folder="runtime")  # the runtime's own code, beside cpu/ and bodies/
    key = cache_key(f"native pool\0{text}", jit.target_description())
    entry = cache.get(key)
    if entry is None:
        entry = Entry(jit.compile_ir(text, count=False), CpuModule(text, (), ()))
        cache.put(key, entry)
    return jit.load_object(entry.object_code, count=False)


class Batch:
    """Consecutive kernels for :meth:`NativePool.run_batch`: per kernel its
    address, extent, and split points (an address) with their chunk count (0:
    one call over the whole extent).  The arrays stay alive with the batch."""

    def __init__(self, kernels: list[tuple[int, int, int, int]], plan: list | None = None) -> None:
        self.plan = plan or []  # the caller's own steps, to run them another way
        table = np.array(kernels, np.int64).reshape(-1, 4)
        self._columns = [np.ascontiguousarray(table[:, k]) for k in range(4)]
        self.steps = len(kernels)
        self.fns, self.extents, self.bounds, self.chunks = (
            int(c.ctypes.data) for c in self._columns
        )


class NativePool:
    """``workers`` native worker threads plus the calling thread.

    ``naps``: idle workers poll in growing naps (20 us to 1 ms) instead of
    sleeping on a futex until the next job (what hosts without futexes do).
    """

    def __init__(self, workers: int, naps: bool = False) -> None:
        code = _code(naps or _futex_syscall() is None)
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
        # 10.3 back to back either way).  The calling thread is left alone; the
        # first CPU is rotated by process id so that processes spread out.
        cpus = _cpus()
        pin = os.environ.get("STRIPEML_PIN_THREADS", "1") != "0" and workers < len(cpus)
        start = os.getpid()

        def body(k: int) -> None:
            if pin:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(0, {cpus[(start + k + 1) % len(cpus)]})
            worker(self._addr)

        self._threads = [
            threading.Thread(target=body, args=(k,), name=f"stripeml-cpu-{k}", daemon=True)
            for k in range(workers)
        ]
        for t in self._threads:
            t.start()

    def run(self, fn: int, ptrs: int, bounds: np.ndarray) -> bool:
        """Run ``fn(ptrs, bounds[i], bounds[i + 1])`` for every chunk ``i`` on the pool
        and this thread; ``False`` (nothing run) when another call holds the pool."""
        n = len(bounds) - 1
        if not 0 < n <= MAX_CHUNKS:
            raise ValueError(f"a job has 1 to {MAX_CHUNKS} chunks, got {n}")
        return self.run_raw(fn, ptrs, bounds.ctypes.data, n)

    def run_batch(self, batch: Batch, ptrs: int) -> bool:
        """Run ``batch``'s kernels in order, each split or whole as it says, in one
        native call; ``False`` (nothing run) when another call holds the pool."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            self._batch(
                self._addr, batch.steps, batch.fns, ptrs, batch.extents, batch.bounds, batch.chunks
            )
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


def pool(workers: int) -> NativePool | None:
    """This process's pool of ``workers`` native workers (created on first use);
    ``None`` where none can be made (no POSIX ``usleep``/``sched_yield`` to link
    against, as on Windows): the runtime then runs every kernel on the calling
    thread, and :func:`unavailable` says why."""
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
