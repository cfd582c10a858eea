"""``vectorize``: the SIMD index goes last and the block is tagged; results do not change."""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.ir import parse
from stripeml.passes.vectorize import Vectorize
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run

TRANSPOSED = """block main [] #program (
    in A f32(16, 3):(3, 1)
    out B f32(3, 16):(16, 1)
) {
  block k [j:16, i:3] #eltwise #kernel (
      in A[j, i] f32(1, 1):(3, 1)
      out B[i, j]:assign f32(1, 1):(16, 1)
  ) {
    $a = load(A)
    B = store($a)
  }
}
"""


def test_unit_stride_output_index_goes_last():
    """B[i, j] is unit-stride in j and A is read with stride 3 in j: not vectorisable."""
    p = parse(TRANSPOSED)
    assert Vectorize(width=8).run(p) is p  # A[j, i] has stride 3 along j


def test_eltwise_gets_tagged_and_keeps_results():
    src = "function (A[M, N], B[N]) -> (C) { C = A * B + 1; }"
    a = np.random.default_rng(0).standard_normal((5, 19)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(19).astype(np.float32)
    p = stripeml.compile(src, target="interp").lower(a, b).program
    q = Vectorize(width=8).run(p)
    (k,) = q.root.stmts
    assert "vector" in k.tags and k.idxs[-1].name == "i1"
    assert Vectorize(width=8).run(q) is q  # idempotent
    want = a * b + 1
    np.testing.assert_allclose(run(q, {"A": a, "B": b})["C"], want, rtol=1e-6)
    got = CpuBackend(CpuOptions(threads=2, vector_width=8)).compile(q).run({"A": a, "B": b})["C"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert "<8 x float>" in CpuBackend(CpuOptions(vector_width=8)).compile(q).code


def test_short_ranges_are_not_vectorised():
    p = (
        stripeml.compile("function (A) -> (B) { B = A * 2; }", target="interp")
        .lower(np.zeros(5, np.float32))
        .program
    )
    assert Vectorize(width=8).run(p) is p
