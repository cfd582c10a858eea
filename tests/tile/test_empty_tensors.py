"""Zero-size tensors: every statement over an empty input gives what NumPy
gives (an empty result of the right shape; a reduction over nothing gives the
contraction's fill value, 0), on every backend."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import pytest

import stripeml
from stripeml.errors import ExecutionError, ShapeError

_NO_OPENCL = importlib.util.find_spec("pyopencl") is None
TARGETS = [
    "interp",
    "cpu",
    pytest.param("opencl_pocl", marks=pytest.mark.skipif(_NO_OPENCL, reason="no pyopencl")),
]

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
SOFTMAX = """function (X[N, K]) -> (Y) {
    M[n, 0 : N, 1] = >(X[n, k]);
    E = exp(X - M);
    S[n, 0 : N, 1] = +(E[n, k]);
    Y = E / S;
}"""


def f32(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1


def i64(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.int64)


Reference = Callable[..., np.ndarray | tuple[np.ndarray, ...]]
CASES: list[tuple[str, str, list[np.ndarray], Reference]] = [
    ("eltwise", "function (A[N]) -> (O) { O = exp(A) + 1; }", [f32(0)], lambda a: np.exp(a) + 1),
    ("broadcast", "function (A, B) -> (O) { O = A * B; }", [f32(0, 3), f32(3)], np.multiply),
    ("broadcast_size1", "function (A, B) -> (O) { O = A - B; }", [f32(2, 0), f32(1)], np.subtract),
    ("matmul_no_rows", MATMUL, [f32(0, 3), f32(3, 4)], np.matmul),
    ("matmul_no_terms", MATMUL, [f32(2, 0), f32(0, 4)], np.matmul),
    (
        "size_expr_zero",
        "function (I[N]) -> (O) { O[i : N - 3] = =(I[i]); }",
        [f32(3)],
        lambda x: x[:0],
    ),
    (
        "transpose",
        "function (I[M, N]) -> (O) { O[n, m : N, M] = =(I[m, n]); }",
        [f32(0, 5)],
        np.transpose,
    ),
    (
        "reshape",
        "function (X[N, M]) -> (O) { O = reshape(X, M, N); }",
        [f32(0, 3)],
        lambda x: x.reshape(3, 0),
    ),
    (
        "reshape_to_zero",
        "function (X[N, M]) -> (O) { O = reshape(X, N * M, 0); }",
        [f32(0, 3)],
        lambda x: x.reshape(0, 0),
    ),
    (
        "gather_no_indices",
        "function (X[N, M], I[K]) -> (O) { O = gather(X, I, 0); }",
        [f32(3, 2), i64(0)],
        lambda x, i: np.take(x, i, 0),
    ),
    (
        "gather_empty_rows",
        "function (X[N, M], I[K]) -> (O) { O = gather(X, I, 0); }",
        [f32(3, 0), i64(2)],
        lambda x, i: np.take(x, i, 0),
    ),
    (
        "default_empty",
        "function (A[N], D[N]) -> (O) { O[i : N] = +(A[i]), default D; }",
        [f32(0), f32(0)],
        np.add,
    ),
    (
        "chain",
        "function (A[N], B[N]) -> (O, S) { T = A * B; O = T + 1; S[] = +(T[i]); }",
        [f32(0), f32(0)],
        lambda a, b: (a * b + 1, np.float32(0)),
    ),
    ("softmax_no_rows", SOFTMAX, [f32(0, 4)], lambda x: x),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_empty_inputs_give_numpys_result(case, target: str) -> None:
    _, source, args, reference = case
    want = reference(*args)
    wants = want if isinstance(want, tuple) else (want,)
    got = stripeml.compile(source, target=target)(*args)
    gots = got if isinstance(got, tuple) else (got,)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        w = np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("target", TARGETS)
def test_empty_out_array(target: str) -> None:
    f = stripeml.compile("function (A[N]) -> (O) { O = A * 2; }", target=target)
    out = np.zeros(0, np.float32)
    assert f(f32(0), out=out) is out


@pytest.mark.parametrize("target", TARGETS)
def test_gather_from_an_empty_axis_fails_when_it_runs(target: str) -> None:
    """NumPy refuses a non-empty take from an empty axis; so does ``gather``."""
    src = "function (X[N, M], I[K]) -> (O) { O = gather(X, I, 0); }"
    with pytest.raises(IndexError):
        np.take(f32(0, 2), i64(2), 0)
    with pytest.raises(ExecutionError, match="out of range"):
        stripeml.compile(src, target=target)(f32(0, 2), i64(2))


def test_negative_sizes_stay_errors() -> None:
    f = stripeml.compile("function (I[N]) -> (O) { O[i : N - 4] = =(I[i]); }", target="interp")
    with pytest.raises(ShapeError, match=r"evaluates to -1; sizes must be positive \(or 0"):
        f(f32(3))
