"""``stripeml.compile(..., constants=...)``: parameters bound when compiling."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import stripeml
from stripeml.errors import ShapeError, StripeError

# B is used transposed: the transpose reads only the constant, so the CPU runs it once.
SRC = """function (A[M, K], B[N, K]) -> (C) {
  T[k, n : K, N] = =(B[n, k]);
  C[m, n : M, N] = +(A[m, k] * T[k, n]);
}"""

rng = np.random.default_rng(3)


@pytest.mark.parametrize("target", ["interp", "cpu"])
def test_constants_are_bound_and_calls_pass_the_rest(target: str) -> None:
    b = rng.standard_normal((16, 32)).astype(np.float32)
    f = stripeml.compile(SRC, target=target, constants={"B": b})
    assert f.params == ("A",) and set(f.constants) == {"B"}
    for _ in range(3):  # later calls reuse what was computed from B
        a = rng.standard_normal((8, 32)).astype(np.float32)
        np.testing.assert_allclose(f(a), a @ b.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(f(A=a), a @ b.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match="takes 1 input"):
        f(a, b)
    exe = f.lower(a)
    assert [r.into for r in exe.program.root.refs if r.const] == ["B"]
    assert exe.signature == (((8, 32), "float32"),)


def test_constants_are_copied() -> None:
    b = rng.standard_normal((16, 32)).astype(np.float32)
    want = b.copy()
    f = stripeml.compile(SRC, target="cpu", constants={"B": b})
    a = rng.standard_normal((8, 32)).astype(np.float32)
    f(a)
    b[...] = 0  # the caller's array changes; the function's constant does not
    np.testing.assert_allclose(f(a), a @ want.T, rtol=1e-5, atol=1e-5)
    assert not f.constants["B"].flags.writeable


def test_constant_kernels_run_once_on_cpu() -> None:
    """After the first call, the transpose of the constant is no longer run."""
    b = rng.standard_normal((16, 32)).astype(np.float32)
    f = stripeml.compile(SRC, target="cpu", constants={"B": b})
    a = rng.standard_normal((8, 32)).astype(np.float32)
    exe = f.lower(a)
    first = {name for name, _, _ in exe.profile(a)}
    later = {name for name, _, _ in exe.profile(a, repeat=2)}
    transpose = next(b.name for b in exe.program.root.sub_blocks if "T[k, n" in b.comment)
    assert transpose in first and transpose not in later and later
    np.testing.assert_allclose(exe(a), a @ b.T, rtol=1e-5, atol=1e-5)


def test_concurrent_first_calls_agree() -> None:
    b = rng.standard_normal((64, 128)).astype(np.float32)
    f = stripeml.compile(SRC, target="cpu", constants={"B": b})
    inputs = [rng.standard_normal((32, 128)).astype(np.float32) for _ in range(4)]
    results: list[np.ndarray | None] = [None] * 4

    def call(k: int) -> None:
        results[k] = f(inputs[k])

    threads = [threading.Thread(target=call, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, got in zip(inputs, results):
        np.testing.assert_allclose(got, a @ b.T, rtol=1e-4, atol=1e-4)


def test_bad_constants() -> None:
    with pytest.raises(StripeError, match="'Z' name no parameter"):
        stripeml.compile(SRC, constants={"Z": np.ones(3)})
    with pytest.raises(StripeError, match="constant 'B' has unsupported dtype"):
        stripeml.compile(SRC, constants={"B": np.array(["x"])})


def test_an_immutable_array_is_bound_without_a_copy() -> None:
    b = rng.standard_normal((16, 32)).astype(np.float32)
    b.setflags(write=False)  # and it views nothing: nobody can change it
    assert stripeml.compile(SRC, target="interp", constants={"B": b}).constants["B"] is b
    owner = rng.standard_normal((16, 32)).astype(np.float32)
    view = owner[:]
    view.setflags(write=False)  # read-only, but its owner can still be written
    bound = stripeml.compile(SRC, target="interp", constants={"B": view}).constants["B"]
    assert bound is not view and not np.shares_memory(bound, owner)
