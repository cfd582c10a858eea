"""A call that repeats the last one (the very arrays, shapes, dtypes and strides,
an ``out=`` still writeable) replays it (``CpuCompiled.replay``) without the
argument checks or ``CpuCompiled.run``; every other call takes the full path, so
every error a call can raise is still raised after any number of replays."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError
from stripeml.runtime.cpu_run import CpuCompiled

MATMUL = """
function (A[M, K], B[K, N]) -> (C) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
}
"""
TWO = """
function (A[M, K], B[K, N]) -> (C, D) {
    C[m, n : M, N] = +(A[m, k] * B[k, n]);
    D = A + 1;
}
"""


@pytest.fixture
def full_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many calls took ``CpuCompiled.run`` (the full path)."""
    calls = [0]
    run = CpuCompiled.run

    def counted(self, inputs, outputs=None):
        calls[0] += 1
        return run(self, inputs, outputs)

    monkeypatch.setattr(CpuCompiled, "run", counted)
    return calls


def _arrays(n: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((n, n)).astype(np.float32),
        rng.standard_normal((n, n)).astype(np.float32),
    )


def _warm(f, *args, **kwargs):
    for _ in range(4):  # held from the second call; replayable from the third
        f(*args, **kwargs)


def test_repeated_calls_skip_the_full_path(full_runs: list[int]) -> None:
    f = stripeml.compile(MATMUL)
    a, b = _arrays()
    c = np.empty((16, 16), np.float32)
    _warm(f, a, b, out=c)
    before = full_runs[0]
    for k in range(10):
        a[0, 0] = k  # new values in the same arrays are read
        got = f(a, b, out=c)
        assert got is c
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert full_runs[0] == before  # fails without the replay: one run per call
    _warm(f, a, b)
    before = full_runs[0]
    results = [f(a, b) for _ in range(5)]
    assert full_runs[0] == before
    assert len({id(r) for r in results}) == 5  # each call its own fresh result
    for r in results:
        np.testing.assert_allclose(r, a @ b, rtol=1e-5, atol=1e-5)
        assert r.flags.c_contiguous and r.flags.writeable and r.flags.owndata is False
    results[0][...] = 7  # not shared with the later calls' results
    np.testing.assert_allclose(results[1], a @ b, rtol=1e-5, atol=1e-5)


def test_lowered_executable_replays(full_runs: list[int]) -> None:
    a, b = _arrays()
    exe = stripeml.compile(MATMUL).lower(a, b)
    _warm(exe, a, b)
    before = full_runs[0]
    np.testing.assert_allclose(exe(a, b), a @ b, rtol=1e-5, atol=1e-5)
    assert full_runs[0] == before


def _message(call) -> str:
    with pytest.raises(ShapeError) as info:
        call()
    return str(info.value)


@pytest.mark.parametrize("lowered", [False, True])
def test_errors_after_replays(lowered: bool) -> None:
    a, b = _arrays()
    c = np.empty((16, 16), np.float32)
    fresh = stripeml.compile(MATMUL)  # never replayed: the messages to expect
    f = stripeml.compile(MATMUL)
    if lowered:
        f = f.lower(a, b)
        fresh = fresh.lower(a, b)
    _warm(f, a, b, out=c)

    if lowered:  # another shape or dtype: an executable is built for one signature
        for bad in (np.ones((8, 16), np.float32), a.astype(np.float64)):
            assert _message(lambda x=bad: f(x, b, out=c)) == _message(
                lambda x=bad: fresh(x, b, out=c)
            )
    # a wrong count of arguments
    assert _message(lambda: f(a, b, a, out=c)) == _message(lambda: fresh(a, b, a, out=c))
    _warm(f, a, b, out=c)
    # a read-only out= (the very array replayed so far)
    c.flags.writeable = False
    assert _message(lambda: f(a, b, out=c)) == _message(lambda: fresh(a, b, out=c))
    c.flags.writeable = True
    _warm(f, a, b, out=c)
    # an out= of another shape, dtype, or not C-contiguous
    for bad_out in (
        np.empty((16, 8), np.float32),
        np.empty((16, 16), np.float64),
        np.empty((16, 32), np.float32)[:, ::2],
        (c, c),
    ):
        assert _message(lambda o=bad_out: f(a, b, out=o)) == _message(
            lambda o=bad_out: fresh(a, b, out=o)
        )
        _warm(f, a, b, out=c)
    # the replayed input reshaped in place: another shape, same object
    a2 = a.copy()
    _warm(f, a2, b, out=c)
    a2.shape = (256,)
    assert _message(lambda: f(a2, b, out=c)) == _message(lambda: fresh(a2, b, out=c))
    a2.shape = (16, 16)
    np.testing.assert_allclose(f(a2, b, out=c), a2 @ b, rtol=1e-5, atol=1e-5)


def test_new_shapes_and_layouts_after_replays() -> None:
    """Calls the full path accepts after replays: right results, by NumPy."""
    f = stripeml.compile(MATMUL)
    a, b = _arrays()
    c = np.empty((16, 16), np.float32)
    _warm(f, a, b, out=c)
    x, y = _arrays(8, seed=1)
    np.testing.assert_allclose(f(x, y), x @ y, rtol=1e-5, atol=1e-5)  # another shape
    _warm(f, a, b, out=c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(f(a64, b64), a64 @ b64, rtol=1e-9, atol=1e-9)  # another dtype
    _warm(f, a, b, out=c)
    wide = np.zeros((16, 32), np.float32)
    wide[:, ::2] = a
    strided = wide[:, ::2]  # not C-contiguous: copied by the full path
    np.testing.assert_allclose(f(strided, b, out=c), a @ b, rtol=1e-5, atol=1e-5)
    _warm(f, a, b, out=c)
    ta = np.ascontiguousarray(a.T).T  # same shape and dtype, other strides
    np.testing.assert_allclose(f(ta, b, out=c), a @ b, rtol=1e-5, atol=1e-5)
    _warm(f, a, b, out=c)
    # out= aliasing an input: computed into a copy, as NumPy's out= does
    want = a @ b
    aa = a.copy()
    got = f(aa, b, out=aa)
    assert got is aa
    np.testing.assert_allclose(aa, want, rtol=1e-5, atol=1e-5)
    # and again, with the alias now the held array
    aa = a.copy()
    _warm(f, aa, b)
    got = f(aa, b, out=aa)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_two_outputs_replay(full_runs: list[int]) -> None:
    f = stripeml.compile(TWO)
    a, b = _arrays()
    c, d = np.empty((16, 16), np.float32), np.empty((16, 16), np.float32)
    _warm(f, a, b, out=(c, d))
    before = full_runs[0]
    got = f(a, b, out=(c, d))
    assert got[0] is c and got[1] is d and full_runs[0] == before
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, a + 1, rtol=1e-6)
    fresh = stripeml.compile(TWO)
    assert _message(lambda: f(a, b, out=(c, c))) == _message(lambda: fresh(a, b, out=(c, c)))
    assert _message(lambda: f(a, b, out=c)) == _message(lambda: fresh(a, b, out=c))
    _warm(f, a, b)
    x, y = f(a, b)
    np.testing.assert_allclose(x, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, a + 1, rtol=1e-6)


def test_threads_with_their_own_arrays() -> None:
    """Concurrent calls, each thread repeating its own arrays: NumPy's results."""
    f = stripeml.compile(MATMUL)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            a, b = _arrays(seed=seed)
            c = np.empty((16, 16), np.float32)
            for k in range(200):
                a[1, 1] = k
                np.testing.assert_allclose(f(a, b, out=c), a @ b, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-5, atol=1e-5)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
