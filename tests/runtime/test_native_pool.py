"""The CPU runtime's native thread pool: every chunk runs exactly once, jobs
never mix, a busy pool declines, and workers stop on close."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from stripeml.runtime import jit
from stripeml.runtime.native_pool import MAX_CHUNKS, NativePool, pool

# fn(p, lo, hi): p[i] += i + 1 for i in [lo, hi), then p[-1] += 1 (atomically) per call.
_ADD_IR = """
define void @add_index(i8* %p, i64 %lo, i64 %hi) {
entry:
  %a = bitcast i8* %p to i64*
  %empty = icmp uge i64 %lo, %hi
  br i1 %empty, label %e, label %l
l:
  %i = phi i64 [%lo, %entry], [%i1, %l]
  %q = getelementptr i64, i64* %a, i64 %i
  %v = load i64, i64* %q
  %i1 = add i64 %i, 1
  %v1 = add i64 %v, %i1
  store i64 %v1, i64* %q
  %c = icmp ult i64 %i1, %hi
  br i1 %c, label %l, label %e
e:
  %cp = getelementptr i64, i64* %a, i64 4096
  %old = atomicrmw add i64* %cp, i64 1 seq_cst
  ret void
}
"""


@pytest.fixture(scope="module")
def add_index() -> int:
    code = jit.load_object(jit.compile_ir(_ADD_IR))
    add_index.code = code  # type: ignore[attr-defined]  # keep the engine alive
    return code.address("add_index")


def _bounds(n: int, chunks: int) -> np.ndarray:
    return np.array([n * i // chunks for i in range(chunks + 1)], np.int64)


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("chunks", [1, 2, 7, 64])
def test_every_chunk_runs_once(add_index, workers, chunks):
    p = pool(workers)
    data = np.zeros(4097, np.int64)
    bounds = _bounds(4096, chunks)
    jobs = 200
    for _ in range(jobs):
        assert p.run(add_index, data.ctypes.data, bounds)
    np.testing.assert_array_equal(data[:4096], np.arange(1, 4097) * jobs)
    assert data[4096] == jobs * chunks  # one call per chunk, none repeated


def test_jobs_see_their_own_arguments(add_index):
    """Back-to-back jobs over different buffers and bounds never mix."""
    p = pool(1)
    bufs = [np.zeros(4097, np.int64) for _ in range(3)]
    for rep in range(300):
        k = rep % 3
        assert p.run(add_index, bufs[k].ctypes.data, _bounds(1000 * (k + 1), 2 + k))
    for k, buf in enumerate(bufs):
        n = 1000 * (k + 1)
        np.testing.assert_array_equal(buf[:n], np.arange(1, n + 1) * 100)
        assert not buf[n:4096].any()
        assert buf[4096] == 100 * (2 + k)


def test_after_idle_the_caller_still_finishes(add_index):
    """A worker asleep (idle for a while) never holds a job up: it wakes or the
    caller takes its chunks."""
    p = pool(1)
    data = np.zeros(4097, np.int64)
    time.sleep(0.05)
    assert p.run(add_index, data.ctypes.data, _bounds(4096, 2))
    np.testing.assert_array_equal(data[:4096], np.arange(1, 4097))


def test_a_busy_pool_declines_and_concurrent_callers_stay_correct(add_index):
    p = pool(1)
    data = [np.zeros(4097, np.int64) for _ in range(4)]
    declined = [0] * 4

    def caller(k: int) -> None:
        for _ in range(200):
            if not p.run(add_index, data[k].ctypes.data, _bounds(4096, 4)):
                declined[k] += 1
                # What the runtime does then: the whole range on this thread.
                jit.KERNEL_TYPE(add_index)(data[k].ctypes.data, 0, 4096)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(4):
        np.testing.assert_array_equal(data[k][:4096], np.arange(1, 4097) * 200)
        assert data[k][4096] == 4 * (200 - declined[k]) + declined[k]


def test_bad_chunk_counts_are_refused(add_index):
    p = pool(1)
    data = np.zeros(4097, np.int64)
    with pytest.raises(ValueError, match="chunks"):
        p.run(add_index, data.ctypes.data, np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="chunks"):
        p.run(add_index, data.ctypes.data, np.zeros(MAX_CHUNKS + 2, np.int64))


@pytest.mark.parametrize("naps", [False, True])
def test_close_stops_the_workers(add_index, naps):
    p = NativePool(2, naps=naps)
    data = np.zeros(4097, np.int64)
    assert p.run(add_index, data.ctypes.data, _bounds(4096, 3))
    time.sleep(0.02)  # let the workers go to sleep: close must wake them
    assert p.run(add_index, data.ctypes.data, _bounds(4096, 5))
    time.sleep(0.02)
    p.close()
    assert not any(t.is_alive() for t in p._threads)
    np.testing.assert_array_equal(data[:4096], np.arange(1, 4097) * 2)


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning needs two or more CPUs and sched_getaffinity",
)
@pytest.mark.parametrize("pin", ["1", "0"])
def test_workers_are_pinned_unless_disabled(add_index, monkeypatch, pin):
    monkeypatch.setenv("STRIPEML_PIN_THREADS", pin)
    allowed = os.sched_getaffinity(0)
    p = NativePool(1)
    try:
        data = np.zeros(4097, np.int64)
        assert p.run(add_index, data.ctypes.data, _bounds(4096, 2))  # the worker is running
        (t,) = p._threads
        mine = os.sched_getaffinity(t.native_id)
        if pin == "1":
            assert len(mine) == 1 and mine <= allowed
        else:
            assert mine == allowed
    finally:
        p.close()


def test_workers_take_chunks(add_index):
    """The workers really run chunks (the caller does not do everything): over jobs
    of 64 chunks for up to 10 s (a busy machine may not schedule the worker for a
    while), a worker that is alive claims some."""
    p = pool(1)
    data = np.zeros(4097, np.int64)
    before = p.worker_chunks
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert p.run(add_index, data.ctypes.data, _bounds(4096, 64))
        if p.worker_chunks > before:
            break
    assert p.worker_chunks > before


# fn(p, lo, hi): p[i] = the running thread's pthread_t for i in [lo, hi), after
# about 20 us of work (time for a spinning worker to claim the next chunks).
_WHO_IR = """
declare i64 @pthread_self()
define void @who(i8* %p, i64 %lo, i64 %hi) {
entry:
  br label %spin
spin:
  %k = phi i64 [0, %entry], [%k1, %spin]
  %x = phi double [1.0, %entry], [%x1, %spin]
  %x1 = fmul double %x, 1.0000001
  %k1 = add i64 %k, 1
  %more = icmp ult i64 %k1, 60000
  br i1 %more, label %spin, label %mark
mark:
  %a = bitcast i8* %p to i64*
  %keep = getelementptr i64, i64* %a, i64 63
  %xb = bitcast double %x1 to i64
  store i64 %xb, i64* %keep
  %t = call i64 @pthread_self()
  %empty = icmp uge i64 %lo, %hi
  br i1 %empty, label %e, label %l
l:
  %i = phi i64 [%lo, %mark], [%i1, %l]
  %q = getelementptr i64, i64* %a, i64 %i
  store i64 %t, i64* %q
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %hi
  br i1 %c, label %l, label %e
e:
  ret void
}
"""


def test_the_caller_takes_chunks_from_the_front_and_workers_from_the_back():
    """In every job the calling thread runs a first stretch of the chunks and the
    worker the rest, from the last one back: consecutive kernels split alike
    leave each thread on the part of the data it wrote in the kernel before
    (ShuffleNet with two threads: 2.9-3.1 ms a run with chunks claimed in order,
    2.2-2.3 ms this way).  Over jobs of 8 chunks for up to 10 s, until the worker
    took part at least once (a busy machine may not schedule it for a while)."""
    code = jit.load_object(jit.compile_ir(_WHO_IR))
    fn = code.address("who")
    p = pool(1)
    me = threading.get_ident()  # pthread_self() of this thread, on POSIX
    data = np.zeros(64, np.uint64)
    bounds = _bounds(8, 8)
    deadline, jobs, shared = time.monotonic() + 10, 0, 0
    while time.monotonic() < deadline and (jobs < 20 or not shared):
        data[:8] = 0
        assert p.run(fn, data.ctypes.data, bounds)
        ran = [int(t) for t in data[:8]]
        assert all(ran), ran  # every chunk ran
        mine = [t == me for t in ran]
        front = mine.index(False) if False in mine else 8
        assert all(mine[:front]) and not any(mine[front:]), ran
        assert len(set(ran[front:])) <= 1  # one worker: one thread
        jobs, shared = jobs + 1, shared + (front < 8)
    assert shared


_CODE_CHILD = r"""
import gc, sys, time
import numpy as np
from stripeml.runtime import jit, native_pool
sys.path.insert(0, sys.argv[1])
from test_native_pool import _ADD_IR, _bounds

code = jit.load_object(jit.compile_ir(_ADD_IR))
fn = code.address("add_index")
p = native_pool.NativePool(1)
data = np.zeros(4097, np.int64)
assert p.run(fn, data.ctypes.data, _bounds(4096, 4))
# every other way of asking for the pool's code (the OpenMP team asks with no
# argument, hosts without futexes with naps=True)
others = [native_pool._code(), native_pool._code(True), native_pool._code(naps=True)]
assert native_pool._code(False) is native_pool._code() is p._code
del others
gc.collect()
for _ in range(20):
    time.sleep(0.005)  # the worker spins, naps or sleeps, and wakes for the next job
    assert p.run(fn, data.ctypes.data, _bounds(4096, 4))
p.close()
assert (data[:4096] == np.arange(1, 4097) * 21).all()
print("ok")
"""


def test_the_pools_code_outlives_its_workers():
    """Asking for the pool's code in every way (with and without naps, with no
    argument) never frees the code that an existing pool's idle workers run in:
    they keep waking into it for later jobs (in a child process, since freed code
    kills the process)."""
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, "-c", _CODE_CHILD, here], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]


def test_without_a_pool_kernels_run_on_the_calling_thread(monkeypatch):
    """Where no pool can be made (Windows), split kernels run whole, correctly."""
    import stripeml
    from stripeml.runtime import native_pool

    monkeypatch.setattr(native_pool, "_UNAVAILABLE", [])
    monkeypatch.setattr(native_pool, "_MINE", {})  # no pool made here before
    monkeypatch.setattr(native_pool.sys, "platform", "win32")
    assert native_pool.pool(1) is None
    assert "POSIX" in native_pool.unavailable()
    a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    f = stripeml.compile(
        "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }", "cpu"
    )
    np.testing.assert_allclose(f(a, a), a @ a, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_a_batch_runs_its_kernels_in_order_split_or_whole(add_index, workers):
    """One native call runs a kernel split in 5 chunks, one called whole over 3000
    points, and another split in 2: each point once per kernel that covers it,
    one call per chunk."""
    from stripeml.runtime.native_pool import Batch

    p = pool(workers)
    data = np.zeros(4097, np.int64)
    five, two = _bounds(4096, 5), _bounds(1000, 2)
    batch = Batch(
        [
            (add_index, 4096, five.ctypes.data, 5),
            (add_index, 3000, 0, 0),
            (add_index, 1000, two.ctypes.data, 2),
        ]
    )
    for _ in range(50):
        assert p.run_batch(batch, data.ctypes.data)
    counts = np.ones(4096, np.int64) + (np.arange(4096) < 3000) + (np.arange(4096) < 1000)
    np.testing.assert_array_equal(data[:4096], np.arange(1, 4097) * counts * 50)
    assert data[4096] == 50 * (5 + 1 + 2)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_a_batch_gathers_each_kernels_arguments(add_index, workers):
    """Steps with a gather get an argument array of their own, made from the
    buffer table (a pointer plus a byte offset, or a constant), split or whole;
    a step without one gets the table itself: the arrays against NumPy."""
    from .cpu_samples import GATHER_IR, gather_batch_case

    code = jit.load_object(jit.compile_ir(GATHER_IR))
    batch, table, _keep, check = gather_batch_case(code.address("scaled_add"), add_index)
    p = pool(workers)
    for _ in range(20):
        assert p.run_batch(batch, table.ctypes.data)
    check(20)


@pytest.mark.parametrize("workers", [0, 1])
def test_a_timed_batch_stamps_the_clock_around_each_kernel(add_index, workers):
    """With a times array, the batch writes the monotonic clock (ns) before its
    first kernel and after each: stamps in order, within the call as Python's
    ``time.monotonic_ns`` (the same clock) sees it; the kernels still run."""
    from stripeml.runtime.native_pool import Batch

    p = pool(workers)
    data = np.zeros(4097, np.int64)
    five = _bounds(4096, 5)
    batch = Batch([(add_index, 4096, five.ctypes.data, 5), (add_index, 3000, 0, 0)])
    stamps = np.zeros(3, np.int64)
    before = time.monotonic_ns()
    assert p.run_batch(batch, data.ctypes.data, stamps.ctypes.data)
    after = time.monotonic_ns()
    assert before <= stamps[0] <= stamps[1] <= stamps[2] <= after
    counts = np.ones(4096, np.int64) + (np.arange(4096) < 3000)
    np.testing.assert_array_equal(data[:4096], np.arange(1, 4097) * counts)
    stamps[:] = 0
    assert p.run_batch(batch, data.ctypes.data)  # untimed: nothing written
    assert not stamps.any()


def test_a_busy_pool_declines_a_batch(add_index):
    from stripeml.runtime.native_pool import Batch

    p = pool(1)
    data = np.zeros(4097, np.int64)
    batch = Batch([(add_index, 100, 0, 0)])
    with p._busy:  # another call holds the pool
        assert not p.run_batch(batch, data.ctypes.data)
    assert not data.any()
    assert p.run_batch(batch, data.ctypes.data)
    assert data[4096] == 1


def test_one_thread_runs_its_kernels_in_one_native_call(monkeypatch):
    """A program compiled for one thread runs its run of kernels as one native
    batch on a pool of no workers (not one call through ctypes per kernel), with
    NumPy's results."""
    import stripeml
    from stripeml import api
    from stripeml.runtime.native_pool import NativePool

    try:
        from programs import CASES, softmax_rows
    except ImportError:  # tests/ imported as a package
        from tests.programs import CASES, softmax_rows

    src = next(c.source for c in CASES if c.name == "softmax")
    x = np.random.default_rng(3).standard_normal((64, 40)).astype(np.float32)
    exe = stripeml.compile(src, target=api.target_for("cpu", 1)).lower(x)
    batches: list[int] = []
    real = NativePool.run_batch

    def counted(self, batch, ptrs):
        batches.append(self.workers)
        return real(self, batch, ptrs)

    monkeypatch.setattr(NativePool, "run_batch", counted)
    np.testing.assert_allclose(exe(x), softmax_rows(x), rtol=1e-5, atol=1e-6)
    assert batches and set(batches) == {0}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_worker_is_pinned_and_known_before_any_run(add_index, monkeypatch):
    """The pool pins each worker and records its CPU and thread id before the
    constructor returns.  Workers used to do it from their own thread, and one
    sharing the caller's CPU could stay unrecorded through a whole run, so that
    no batch moved it (the test below failed on CI once, by timing; this checks
    the guarantee the fix gives, which that race cannot break).  With the caller
    on the worker's CPU from the start, the first batch moves the worker."""
    from stripeml.runtime.native_pool import Batch

    monkeypatch.setenv("STRIPEML_PIN_THREADS", "1")
    here = os.sched_getaffinity(0)
    p = NativePool(1)
    try:
        (t,) = p._threads
        (cpu,) = p._cpu_of
        assert p._tids == [t.native_id] and cpu in here
        assert os.sched_getaffinity(t.native_id) == {cpu}
        os.sched_setaffinity(0, {cpu})  # the caller joins the worker's CPU at once
        try:
            data = np.zeros(4097, np.int64)
            two = _bounds(4096, 2)
            batch = Batch([(add_index, 4096, two.ctypes.data, 2)])
            assert p.run_batch(batch, data.ctypes.data)
        finally:
            os.sched_setaffinity(0, here)
        assert p.moves == 1 and os.sched_getaffinity(t.native_id) != {cpu}
        np.testing.assert_array_equal(data[:4096], np.arange(1, 4097))
    finally:
        p.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_worker_on_the_callers_cpu_is_moved_to_a_free_one(add_index, monkeypatch):
    """A pinned worker can run only on its CPU; when the calling thread runs there
    too, the worker waits for the caller to sleep and the caller runs every chunk.
    A batch first moves such a worker to a CPU no worker has (the caller held on
    the worker's CPU here, as the scheduler may leave it), and its results stay
    exact."""
    from stripeml.runtime.native_pool import Batch

    monkeypatch.setenv("STRIPEML_PIN_THREADS", "1")
    allowed = os.sched_getaffinity(0)
    p = NativePool(1)
    try:
        data = np.zeros(4097, np.int64)
        assert p.run(add_index, data.ctypes.data, _bounds(4096, 2))  # the worker is pinned now
        (t,) = p._threads
        (theirs,) = os.sched_getaffinity(t.native_id)
        os.sched_setaffinity(0, {theirs})  # the caller on the worker's CPU
        try:
            two = _bounds(4096, 2)
            batch = Batch([(add_index, 4096, two.ctypes.data, 2)])
            for _ in range(20):
                assert p.run_batch(batch, data.ctypes.data)
        finally:
            os.sched_setaffinity(0, allowed)
        moved = os.sched_getaffinity(t.native_id)
        assert len(moved) == 1 and moved != {theirs} and moved <= allowed
        assert p.moves == 1  # once: then the caller and the worker are apart
        np.testing.assert_array_equal(data[:4096], np.arange(1, 4097) * 21)
    finally:
        p.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_profiled_run_also_moves_the_worker_off_the_callers_cpu(monkeypatch):
    """``Executable.profile`` runs the program's batches timed (the batch stamps the
    clock after each kernel): the run asks once where the caller runs, and the
    per-kernel times are the two threads'.  The results are NumPy's."""
    import stripeml
    from stripeml.runtime import native_pool

    monkeypatch.setenv("STRIPEML_PIN_THREADS", "1")
    monkeypatch.setattr(native_pool, "_MINE", {})  # a pool of this test's own
    monkeypatch.setattr(native_pool, "_POOLS", {})
    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    f = stripeml.compile(src, target="cpu", threads=2)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-3)  # makes the pool
    p = native_pool.pool(1)
    assert isinstance(p, NativePool)
    (t,) = p._threads
    (theirs,) = os.sched_getaffinity(t.native_id)
    allowed = os.sched_getaffinity(0)
    exe = f.lower(a, b)
    before = p.moves
    os.sched_setaffinity(0, {theirs})
    try:
        rows = exe.profile(a, b)
    finally:
        os.sched_setaffinity(0, allowed)
    assert rows and p.moves == before + 1
    assert os.sched_getaffinity(t.native_id) != {theirs}
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-4, atol=1e-3)
    p.close()


def test_a_profile_times_each_kernel_inside_its_batch(monkeypatch):
    """A profiled run gives every batch a times array (no kernel is run alone
    from Python): a row per kernel step, each time at least 0 and together at
    most the call's wall time; the results are NumPy's."""
    import stripeml
    from stripeml.runtime import native_pool

    calls: list[int] = []
    run_batch = native_pool.NativePool.run_batch

    def spy(self, batch, ptrs, times=0):
        calls.append(times)
        return run_batch(self, batch, ptrs, times)

    monkeypatch.setattr(native_pool.NativePool, "run_batch", spy)
    src = "function (A[M, K], B[K, N]) -> (C) { T[m, n : M, N] = +(A[m, k] * B[k, n]); C = relu(T) * 2; }"
    rng = np.random.default_rng(1)
    a = rng.standard_normal((96, 64)).astype(np.float32)
    b = rng.standard_normal((64, 80)).astype(np.float32)
    f = stripeml.compile(src, target="cpu", threads=2)
    exe = f.lower(a, b)
    kernels = {s.kernel.block_name for s in exe._compiled.module.steps if s.kernel is not None}
    calls.clear()
    start = time.perf_counter()
    rows = exe.profile(a, b)
    wall = time.perf_counter() - start
    assert calls and all(t != 0 for t in calls)
    assert {r[0] for r in rows} == kernels
    assert all(r[2] >= 0 for r in rows) and sum(r[2] for r in rows) <= wall
    np.testing.assert_allclose(f(a, b), np.maximum(a @ b, 0) * 2, rtol=1e-4, atol=1e-4)
