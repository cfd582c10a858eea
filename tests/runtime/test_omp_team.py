"""Kernels split over an OpenMP team (``runtime/omp_team.py``): every chunk of a
batch runs once, in order, the team's other threads take chunks, the runtime
uses the team only inside ``team()``, and a compiled program computes the same
there.  Skipped where no OpenMP runtime (libgomp) can be loaded."""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time

import numpy as np
import pytest

from stripeml.runtime import jit, native_pool
from stripeml.runtime.native_pool import Batch
from stripeml.runtime.omp_team import TeamPool, openmp_entry_points, team, team_pool

try:
    from test_native_pool import _ADD_IR, _bounds
except ImportError:  # tests/ imported as a package
    from tests.runtime.test_native_pool import _ADD_IR, _bounds


def _entry() -> tuple[int, int] | None:
    found = openmp_entry_points()
    if found is not None:
        return found
    name = ctypes.util.find_library("gomp")
    if name is None:
        return None
    try:
        return openmp_entry_points(ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL))
    except OSError:
        return None


@pytest.fixture(scope="module")
def entry() -> tuple[int, int]:
    found = _entry()
    if found is None:
        pytest.skip("no OpenMP runtime (libgomp) to load")
    return found


@pytest.fixture(scope="module")
def add_index() -> int:
    code = jit.load_object(jit.compile_ir(_ADD_IR))
    add_index.code = code  # type: ignore[attr-defined]  # keep the engine alive
    return code.address("add_index")


@pytest.mark.parametrize("threads", [2, 3])
def test_a_batch_on_the_team_runs_every_chunk_once_in_order(entry, add_index, threads):
    p = team_pool(*entry, threads)
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
    # one kernel alone (run, run_raw)
    data[:] = 0
    assert p.run(add_index, data.ctypes.data, _bounds(4096, 64))
    np.testing.assert_array_equal(data[:4096], np.arange(1, 4097))
    assert data[4096] == 64


def test_a_batch_on_the_team_gathers_each_kernels_arguments(entry, add_index):
    """:func:`test_native_pool.test_a_batch_gathers_each_kernels_arguments` on
    the team: the gathers reach ``stripeml_pool_batch`` through its data block."""
    from .cpu_samples import GATHER_IR, gather_batch_case

    code = jit.load_object(jit.compile_ir(GATHER_IR))
    batch, table, _keep, check = gather_batch_case(code.address("scaled_add"), add_index)
    p = team_pool(*entry, 2)
    for _ in range(20):
        assert p.run_batch(batch, table.ctypes.data)
    check(20)


def test_the_team_takes_chunks(entry, add_index):
    """The team's other threads run chunks (thread 0 does not do everything): over
    jobs of 64 chunks for up to 10 s (a busy machine may not schedule them)."""
    p = team_pool(*entry, 2)
    data = np.zeros(4097, np.int64)
    before = p.worker_chunks
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        assert p.run(add_index, data.ctypes.data, _bounds(4096, 64))
        if p.worker_chunks > before:
            break
    assert p.worker_chunks > before


def test_a_busy_team_pool_declines_and_concurrent_callers_stay_correct(entry, add_index):
    p = team_pool(*entry, 2)
    data = np.zeros(4097, np.int64)
    with p._busy:
        assert not p.run(add_index, data.ctypes.data, _bounds(100, 2))
    assert not data.any()
    bufs = [np.zeros(4097, np.int64) for _ in range(3)]
    ran = [0, 0, 0]

    def caller(k: int) -> None:
        for _ in range(100):
            if p.run(add_index, bufs[k].ctypes.data, _bounds(4096, 8)):
                ran[k] += 1
            else:  # declined: nothing ran, the runtime would run the kernel whole
                pass

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(3):
        np.testing.assert_array_equal(bufs[k][:4096], np.arange(1, 4097) * ran[k])
        assert bufs[k][4096] == 8 * ran[k]


def test_the_runtime_uses_the_team_only_inside_team(entry):
    import stripeml

    assert not isinstance(native_pool.pool(1), TeamPool)
    with team(*entry):
        assert isinstance(native_pool.pool(1), TeamPool)
        assert native_pool.pool(1).workers == 1
    assert not isinstance(native_pool.pool(1), TeamPool)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    f = stripeml.compile(
        "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }",
        "cpu",
        threads=2,
    )
    want = f(a, b)
    p = team_pool(*entry, 2)
    before = p.worker_chunks
    with team(*entry):
        for _ in range(20):
            np.testing.assert_allclose(f(a, b), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(want, a @ b, rtol=1e-4, atol=1e-3)
    assert p.worker_chunks >= before
