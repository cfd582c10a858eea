"""Float ``max``/``min`` in vector lanes (``llvm_minmax.vector_minmax``) and a scope
that accumulates in a register beside assignments (``llvm_kernel``'s
``_scope_beside_assignments``: attention's masked scores and their row maximum).

Every result is checked against NumPy's ``maximum``/``minimum`` (the interpreter's
semantics: NaN propagates; which of two zeros of different signs comes out is
not promised, so zeros compare equal here).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from codegen_helpers import program, run

from stripeml.codegen.llvm import generate

ROWMAX = "function (X[N, K]) -> (S) { S[n : N] = >(X[n, k]); }"
ROWMIN = "function (X[N, K]) -> (S) { S[n : N] = <(X[n, k]); }"
EW_MAX = "function (A, B) -> (Y, Z) { Y = max(A, B); Z = min(A, B); }"
# One fused kernel: the assignment Y and the row maximum S (two stores), as
# attention's scaled and masked scores; then exp(Y - S) as softmax's numerator.
SCORES = """function (X[N, K], M[N, K]) -> (S, E) {
    Y = X * 0.125 + M;
    S[n, 0 : N, 1] = >(Y[n, k]);
    E = exp(Y - S);
}"""

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.5]


def same(got, want) -> bool:
    """Equal, NaN where NumPy has NaN (zeros of either sign equal)."""
    return np.array_equal(np.asarray(got).ravel(), np.asarray(want).ravel(), equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [4, 8, 16])
def test_elementwise_max_min_special_values(dtype, width):
    pairs = list(itertools.product(SPECIAL, SPECIAL))
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    out = run(EW_MAX, a, b, vector_width=width)
    assert same(out["Y"], np.maximum(a, b))
    assert same(out["Z"], np.minimum(a, b))


def _rows(k: int, dtype, seed: int) -> np.ndarray:
    """Rows of random numbers with NaN, inf and -inf placed where a vector
    reduction's lanes, chunks and tail differ."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((24, k)).astype(dtype)
    for r in range(24):
        kind = r % 8
        if kind == 1:
            x[r, rng.integers(k)] = np.nan
        elif kind == 2:
            x[r] = -np.inf
        elif kind == 3:
            x[r, rng.integers(k)] = np.inf
        elif kind == 4:
            x[r] = -np.inf
            x[r, rng.integers(k)] = np.nan
        elif kind == 5:
            x[r, 0] = np.nan
        elif kind == 6:
            x[r, k - 1] = np.nan
        elif kind == 7:
            x[r] = np.nan
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [4, 8, 16])
@pytest.mark.parametrize("k", [1, 5, 16, 33, 512])
def test_row_max_min_with_nan_and_inf(dtype, width, k):
    x = _rows(k, dtype, k + width)
    assert same(run(ROWMAX, x, vector_width=width)["S"], x.max(1))
    assert same(run(ROWMIN, x, vector_width=width)["S"], x.min(1))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("width", [8, 16])
def test_scores_and_row_max_match_numpy(threads, width):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 512)).astype(np.float32)
    m = rng.standard_normal((64, 512)).astype(np.float32)
    x[3, 7] = np.nan
    m[5] = -np.inf  # a fully masked row: its maximum is -inf, exp(-inf - -inf) NaN
    m[6, 100] = np.inf
    x[8, 511] = np.nan
    m[9] = -np.inf
    m[9, 3] = np.nan
    out = run(SCORES, x, m, vector_width=width, threads=threads)
    y = x * np.float32(0.125) + m
    s = y.max(1, keepdims=True)
    assert same(out["S"], s)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp((y - s).astype(np.float64))
    np.testing.assert_allclose(out["E"], e, rtol=2e-6, atol=0)


def _body_texts(src: str, *arrays, width: int = 16) -> list[str]:
    module = generate(program(src, *arrays), vector_width=width, fma=True)
    return [b.llvm_ir for b in module.bodies if b.llvm_ir]


def test_x86_max_instruction_where_the_host_has_it():
    import llvmlite.binding as llvm

    if not llvm.get_host_cpu_features().get("avx512f", False):
        pytest.skip("no AVX-512F on this host")
    x = np.zeros((4, 64), np.float32)
    (text,) = _body_texts(ROWMAX, x)
    assert "llvm.x86.avx512.max.ps.512" in text
    assert "llvm.vector.reduce.fmaximum" not in text
