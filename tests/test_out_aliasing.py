"""``out=`` arrays that share memory with an input or with each other.

The result must be what NumPy gives with its ufuncs' ``out=``: as if every
input were read before any output is written.  References are computed with
NumPy on copies, never with the code under test.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import stripeml
from stripeml import ShapeError
from stripeml.runtime.host import separate_outputs

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]

TRANSPOSE = "function (I[M, N]) -> (O) { O[n, m : N, M] = =(I[m, n]); }"
AFFINE = "function (I[N]) -> (O) { O = I * 2 + 1; }"
TWO = "function (A[N]) -> (P, Q) { P = A + 1; Q = A * 3; }"
MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [4, 64, 200])
def test_transpose_into_its_input(target: str, n: int) -> None:
    x = np.arange(n * n, dtype=np.float32).reshape(n, n)
    want = x.T.copy()
    f = stripeml.compile(TRANSPOSE, target=target)
    got = f(x, out=x)
    assert got is x
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("target", TARGETS)
def test_elementwise_into_its_input(target: str) -> None:
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    want = x * 2 + 1
    got = stripeml.compile(AFFINE, target=target)(x, out=x)
    assert got is x
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shift", ["forward", "backward"])
def test_overlapping_views(target: str, shift: str) -> None:
    """``f(a[1:], out=a[:-1])`` and ``f(a[:-1], out=a[1:])``: each result element
    comes from the input as it was before the call."""
    base = np.arange(257, dtype=np.float32)
    a = base.copy()
    src, dst = (slice(1, None), slice(None, -1))
    if shift == "backward":
        src, dst = dst, src
    want = base.copy()
    want[dst] = base[src] * 2 + 1
    f = stripeml.compile(AFFINE, target=target)
    got = f(a[src], out=a[dst])
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(got, want[dst])


@pytest.mark.parametrize("target", TARGETS)
def test_matmul_into_an_operand(target: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((48, 48)).astype(np.float32)
    b = rng.standard_normal((48, 48)).astype(np.float32)
    want = a @ b
    f = stripeml.compile(MATMUL, target=target)
    assert f(a, b, out=b) is b
    np.testing.assert_allclose(b, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_scatter_with_fill_into_its_input(target: str) -> None:
    """A contraction that reaches every other element (the others are 0) reads
    the input as it was, although its fill writes the output first."""
    src = "function (I[N]) -> (O) { O[2 * i : N] = =(I[i]); }"
    x = np.arange(1, 11, dtype=np.float32)
    want = np.zeros_like(x)
    want[0::2] = x[:5]
    got = stripeml.compile(src, target=target)(x, out=x)
    assert got is x
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("target", TARGETS)
def test_two_outputs_in_one_array(target: str) -> None:
    f = stripeml.compile(TWO, target=target)
    a = np.ones(8, np.float32)
    same = np.zeros(8, np.float32)
    with pytest.raises(ShapeError, match="out= arrays for 'P' and 'Q' share memory"):
        f(a, out=(same, same))
    whole = np.zeros(16, np.float32)
    with pytest.raises(ShapeError, match="'P' and 'Q' share memory"):
        f(np.ones(9, np.float32), out=(whole[:9], whole[7:]))
    p, q = np.zeros(8, np.float32), np.zeros(8, np.float32)
    assert f(a, out=(p, q)) == (p, q)  # separate arrays are fine
    np.testing.assert_array_equal(p, a + 1)
    np.testing.assert_array_equal(q, a * 3)


def test_only_overlapping_outputs_go_through_a_copy() -> None:
    """Views of one buffer that do not overlap are written in place; an output
    that overlaps an input is replaced by a copy for the run."""
    base = np.arange(20, dtype=np.float32)
    disjoint = {"O": base[10:]}
    given, aliased = separate_outputs({"I": base[:10]}, disjoint)
    assert given["O"] is disjoint["O"] and not aliased
    given, aliased = separate_outputs({"I": base[:10]}, {"O": base[5:15]})
    assert aliased["O"].base is base and not np.shares_memory(given["O"], base)
    np.testing.assert_array_equal(given["O"], base[5:15])  # starts as the caller's values
