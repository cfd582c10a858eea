"""``dot4`` in the CPU backend: the VNNI instruction where the target says the CPU
has it (``int8_dot``), widened byte products otherwise; both give NumPy's sums."""

from __future__ import annotations

import re

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import generate
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.targets import load_target

GEMM = """function (X[M, K], W[K, N]) -> (C) {
    C[m, n : M, N] = +(dot4(X[m, k], W[k, n]));
}"""
RNG = np.random.default_rng(5)


def _tiled_program(x, w):
    """The program as the cpu target's pipeline leaves it (register tiles)."""
    return stripeml.compile(GEMM, target="cpu").lower(x, w).program


def _want(x, w):
    xb = x.view(np.uint8).reshape(*x.shape, 4).astype(np.int64)
    wb = w.view(np.int8).reshape(*w.shape, 4).astype(np.int64)
    return np.einsum("mkt,knt->mn", xb, wb)


@pytest.mark.parametrize("width", [4, 8, 16])
def test_vnni_instruction_only_where_the_target_allows_it(width):
    x = RNG.integers(-(2**31), 2**31, (8, 6)).astype(np.int32)
    w = RNG.integers(-(2**31), 2**31, (6, 32)).astype(np.int32)
    p = _tiled_program(x, w)
    with_dot = generate(p, vector_width=width, int8_dot=True).all_ir()
    without = generate(p, vector_width=width, int8_dot=False).all_ir()
    assert f"llvm.x86.avx512.vpdpbusd.{32 * width}" in with_dot
    assert "vpdpbusd" not in without
    # the register accumulator is the instruction's first operand (no separate add)
    calls = re.findall(
        r'call <\d+ x i32> @"llvm\.x86\.avx512\.vpdpbusd\.\d+"\(<\d+ x i32> (\S+)', with_dot
    )
    assert any(first.startswith("%") for first in calls), calls[:4]


@pytest.mark.parametrize("int8_dot", [False, True])
@pytest.mark.parametrize("shape", [(5, 3, 7), (33, 20, 48), (16, 64, 64)])
def test_both_forms_match_numpy(int8_dot, shape):
    if int8_dot and not load_target("cpu").int8_dot:
        pytest.skip("this CPU has no integer dot-product instruction (VNNI)")
    m, k, n = shape
    x = RNG.integers(-(2**31), 2**31, (m, k)).astype(np.int32)
    w = RNG.integers(-(2**31), 2**31, (k, n)).astype(np.int32)
    target = load_target("cpu")
    p = _tiled_program(x, w)
    options = CpuOptions(vector_width=target.vector_width, int8_dot=int8_dot)
    got = CpuBackend(options).compile(p).run({"X": x, "W": w})["C"]
    np.testing.assert_array_equal(got, _want(x, w))
