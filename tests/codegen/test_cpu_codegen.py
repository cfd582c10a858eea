"""The CPU code generator: vector widths, tails, thread splits, fast-math flags, precision.

Results are checked against NumPy; the program suite (tests/test_programs.py)
and the interpreter tests (tests/runtime, via helpers.run_all) also run on cpu.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from codegen_helpers import program, run

import stripeml
from stripeml.codegen.llvm import generate
from stripeml.runtime.cpu import CpuBackend, CpuOptions

ROWSUM = "function (X[N, K]) -> (S) { S[n : N] = +(X[n, k]); }"
ROWMAX = "function (X[N, K]) -> (S) { S[n : N] = >(X[n, k]); }"
MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
CHAIN = "function (A, B, C) -> (Y) { Y = tanh(A * B + C) * 0.5 + A; }"
PADDED = """function (I[N, X, CI], K[KX, CI, CO]) -> (O) {
    O[n, x, co : N, X, CO] = +(I[n, x + kx - 1, ci] * K[kx, ci, co]);
}"""


@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 15, 16, 17, 33])
@pytest.mark.parametrize("width", [1, 4, 8, 16])
def test_vector_width_and_tails(n, width):
    rng = np.random.default_rng(n)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    y = run(CHAIN, a, b, c, vector_width=width, threads=1)["Y"]
    np.testing.assert_allclose(y, np.tanh(a * b + c) * 0.5 + a, rtol=2e-6, atol=1e-6)
    x = rng.standard_normal((3, n)).astype(np.float32)
    np.testing.assert_allclose(
        run(ROWSUM, x, vector_width=width)["S"], x.sum(1), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(run(ROWMAX, x, vector_width=width)["S"], x.max(1))


def test_vector_max_propagates_nan():
    x = np.arange(40, dtype=np.float32).reshape(2, 20)
    x[1, 13] = np.nan
    s = run(ROWMAX, x, vector_width=8)["S"]
    assert s[0] == 19 and np.isnan(s[1])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_do_not_change_results(threads):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((67, 45)).astype(np.float32)
    b = rng.standard_normal((45, 71)).astype(np.float32)
    c = run(MATMUL, a, b, threads=threads)["C"]
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_parallel_index_only_where_writes_are_disjoint():
    a = np.zeros((64, 32), np.float32)
    b = np.zeros((32, 48), np.float32)
    (step,) = generate(program(MATMUL, a, b)).steps
    assert step.kernel.splittable and step.kernel.parallel_extent == 64
    # cumsum writes O[i]: distinct i, distinct elements, so it splits over i.
    cumsum = "function (I[N]) -> (O) { O[i : N] = +(I[k]), i - k < N; }"
    (step,) = generate(program(cumsum, np.zeros(100, np.float32))).steps
    assert step.kernel.splittable
    # O[i + k]: different i write the same element: no split.
    shifted = "function (I[N]) -> (O) { O[i + k : N + 2] = +(I[i]), k < 3; }"
    steps = generate(program(shifted, np.zeros(100, np.float32))).steps
    assert not steps[-1].kernel.splittable
    x = np.arange(100, dtype=np.float32)
    want = np.convolve(x, np.ones(3, np.float32))
    np.testing.assert_allclose(run(shifted, x, threads=2)["O"], want)


def test_vector_code_and_fast_math_flags():
    x = np.zeros((4, 64), np.float32)
    text = generate(program(ROWSUM, x), vector_width=8).all_ir()
    assert "<8 x float>" in text
    # A reduction carries `reassoc` and nothing more; no other fast-math flag anywhere.
    assert re.search(r"fadd reassoc", text)
    flags = set(re.findall(r"\b(nnan|ninf|nsz|arcp|contract|afn|fast)\b", text))
    assert not flags
    eltwise = generate(program(CHAIN, *(np.zeros(64, np.float32),) * 3), vector_width=8)
    assert eltwise.bodies  # the kernels' code, before the math library's functions
    for body in eltwise.bodies:
        assert body.llvm_ir and "reassoc" not in body.llvm_ir.split("stripeml.")[0]


def test_noalias_on_distinct_buffers():
    text = generate(
        program(MATMUL, np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32))
    ).all_ir()
    body = next(line for line in text.splitlines() if 'define internal void @"sk_' in line)
    assert body.count("noalias") == 3


def test_padded_conv_bounds_without_guards():
    rng = np.random.default_rng(1)
    i = rng.standard_normal((2, 9, 3)).astype(np.float32)
    k = rng.standard_normal((3, 3, 4)).astype(np.float32)
    o = run(PADDED, i, k)["O"]
    pad = np.pad(i, ((0, 0), (1, 1), (0, 0)))
    want = sum(np.einsum("nxc,cd->nxd", pad[:, t : t + 9], k[t]) for t in range(3))
    np.testing.assert_allclose(o, want, rtol=1e-5, atol=1e-5)


def test_register_tile_addresses_are_computed_once_per_block():
    """The accesses of an unrolled register tile differ only in constant terms: no
    constant is multiplied at run time, and each address sum of the shared terms
    is emitted once per basic block (``KernelBuilder.affine``), not once per load."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((64, 96)).astype(np.float32)
    b = rng.standard_normal((96, 128)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target="cpu").lower(a, b)
    text = exe.code
    assert "register_tile" in exe.ir  # the kernel has an unrolled tile
    assert not re.search(r"= (mul|add) i64 -?\d+, -?\d+", text)  # no constant arithmetic
    for block in re.split(r"\n(?=\S+:)", text):  # per basic block: no sum computed twice
        sums = re.findall(r"= ((?:mul|add) i64 %\S+, (?:%\S+|-?\d+))", block)
        assert len(sums) == len(set(sums)), block
    got = exe(a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_float64_reduction_precision():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 100_001))
    s = run(ROWSUM, x)["S"]
    exact = np.array([math.fsum(r) for r in x])
    np.testing.assert_allclose(s, exact, rtol=1e-12, atol=1e-10)


def test_exe_code_is_llvm_ir():
    f = stripeml.compile(MATMUL, target="cpu")
    code = f.lower(np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32)).code
    assert "define void @" in code and "getelementptr" in code
    assert (
        stripeml.compile(MATMUL, target="interp")
        .lower(np.zeros((2, 3), np.float32), np.zeros((3, 4), np.float32))
        .code
        == ""
    )


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float64, np.bool_])
def test_dtypes_on_cpu(dtype):
    rng = np.random.default_rng(3)
    a = (rng.integers(0, 3, (5, 7)) if dtype != np.float64 else rng.standard_normal((5, 7))).astype(
        dtype
    )
    b = (rng.integers(0, 3, (7, 6)) if dtype != np.float64 else rng.standard_normal((7, 6))).astype(
        dtype
    )
    c = run(MATMUL, a, b)["C"]
    if dtype == np.bool_:
        want = (a.astype(int) @ b.astype(int)) > 0
    else:
        want = a @ b
    np.testing.assert_allclose(c, want, rtol=1e-12)


def test_fma_only_when_the_target_allows_it():
    a = np.zeros((8, 16), np.float32)
    p = program(MATMUL, a, a.T.copy())
    assert "contract" not in generate(p).all_ir()
    text = generate(p, fma=True).all_ir()
    assert re.search(r"fmul contract", text) and re.search(r"fadd reassoc contract", text)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((33, 70)).astype(np.float32)
    y = rng.standard_normal((70, 24)).astype(np.float32)
    got = CpuBackend(CpuOptions(fma=True)).compile(program(MATMUL, x, y)).run({"A": x, "B": y})["C"]
    np.testing.assert_allclose(got, x @ y, rtol=1e-4, atol=1e-4)


# -- constant copies run by the host -------------------------------------------------------

LAYOUT = """function (A[M, K], B[N, K]) -> (C) {
  T[k, n : K, N] = =(B[n, k]);
  C[m, n : M, N] = +(A[m, k] * T[k, n]);
}"""


def test_constant_copies_run_once_as_kernels() -> None:
    """A kernel that copies a constant (the transpose of B) is a constant step: a
    compiled kernel (its body shared and cached like any other) run once, at the
    first call; the same copy of a variable input runs at every call."""
    from stripeml.analysis.constness import constness

    rng = np.random.default_rng(4)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((12, 16)).astype(np.float32)
    bound = stripeml.compile(LAYOUT, target="cpu", constants={"B": b})
    exe = bound.lower(a)
    assert constness(exe.program).statements  # the transpose of the constant B
    assert all(s.kernel is not None for s in exe._compiled.module.steps)
    for _ in range(2):
        np.testing.assert_allclose(bound(a), a @ b.T, rtol=1e-5, atol=1e-5)
    plain = stripeml.compile(LAYOUT, target="cpu")
    assert not constness(plain.lower(a, b).program).statements
    for scale in (1.0, 2.0):  # B changes from call to call: copied each time
        np.testing.assert_allclose(plain(a, b * scale), a @ (b * scale).T, rtol=1e-5, atol=1e-5)


def test_a_constant_computation_runs_once() -> None:
    """A constant kernel that computes (exp of the transpose of B) is compiled and
    run at the first call like a constant copy."""
    from stripeml.analysis.constness import constness

    src = """function (A[M, K], B[N, K]) -> (C) {
      T[k, n : K, N] = =(B[n, k]);
      E = exp(T);
      C[m, n : M, N] = +(A[m, k] * E[k, n]);
    }"""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((8, 16)).astype(np.float32)
    b = rng.standard_normal((12, 16)).astype(np.float32)
    f = stripeml.compile(src, target="cpu", constants={"B": b})
    exe = f.lower(a)
    assert constness(exe.program).statements  # the exp of the transpose is constant
    np.testing.assert_allclose(f(a), a @ np.exp(b.T), rtol=1e-4, atol=1e-4)


def test_float_to_int_casts_stay_vector_code():
    """Float -> int32 casts are a masked ``fptosi`` (one ``vcvttps2dq`` on AVX-512),
    not ``llvm.fptosi.sat``, which LLVM scalarises on x86 vectors; NaN and
    out-of-range values still give the minimum integer, as NumPy's astype."""
    src = "function (X) -> (Y) { Y = as_int(X, 32); }"
    x = np.array([0.5, -1.7, np.nan, 3e9, -3e9, 2147483520.0, -2147483648.0, 7.9] * 4, np.float32)
    text = generate(program(src, x), vector_width=16).all_ir()
    assert "fptosi.sat" not in text and "fptosi <16 x float>" in text
    with np.errstate(invalid="ignore"):
        want = x.astype(np.int32)
    np.testing.assert_array_equal(run(src, x)["Y"], want)
