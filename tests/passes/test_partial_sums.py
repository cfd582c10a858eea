"""``partial_sums`` through the CPU pipeline: reductions over pixels whose only
race-free index is the vector index run as per-thread partial results, and
agree with NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block
from stripeml.passes.partial_sums import PartialSums

SQUEEZE = """function (A[1, 56, 40, 48], B[48]) -> (C, R) {
    T = A + B;
    C = T * sigmoid(T);
    R[n, 0, 0, c : 1, 1, 1, 48] = +(C[n, y, x, c]);
}"""

# (A reduction alone is register-tiled by ``unroll``; fused with an elementwise
# write of every pixel it stays a leaf kernel, as in the models.)
MAX_POOL = """function (A[1, 64, 64, 24]) -> (C, M) {
    C = A * A;
    M[n, 0, 0, c : 1, 1, 1, 24] = >(C[n, y, x, c]);
}"""
INT_SUM = """function (A[1, 64, 80, 16]) -> (C, S) {
    C = A + 3;
    S[n, 0, 0, c : 1, 1, 1, 16] = +(C[n, y, x, c]);
}"""


def _kernels(exe) -> list[Block]:
    return [s for s in exe.program.root.stmts if isinstance(s, Block)]


@pytest.mark.parametrize("threads", [1, 2])
def test_squeeze_excite_sum(threads: int) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 56, 40, 48)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    exe = stripeml.compile(SQUEEZE, target=stripeml.targets.resolve("cpu", threads=threads))
    exe = exe.lower(a, b)
    t = a.astype(np.float64) + b
    want_c = t / (1 + np.exp(-t))
    c, r = exe(a, b)
    np.testing.assert_allclose(c, want_c, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(r, want_c.sum(axis=(1, 2), keepdims=True), rtol=2e-5, atol=1e-3)
    names = [k.name for k in _kernels(exe)]
    if threads == 1:
        assert not any(n.endswith("_parts") for n in names)
        return
    # The main kernel is split by its pixel rows' parts, not by its channels.
    assert names[-1].endswith("_parts") and "R_part" in exe.ir
    main = _kernels(exe)[0]
    assert "thread" in main.tags and main.idxs[0].name.endswith("_t")


def test_max_over_pixels_is_exact() -> None:
    a = np.random.default_rng(1).standard_normal((1, 64, 64, 24)).astype(np.float32)
    exe = stripeml.compile(MAX_POOL, target=stripeml.targets.resolve("cpu", threads=2))
    exe = exe.lower(a)
    assert "M_part" in exe.ir
    c, m = exe(a)
    np.testing.assert_array_equal(m, (a * a).max(axis=(1, 2), keepdims=True))


def test_integer_sum_is_exact() -> None:
    a = np.random.default_rng(2).integers(-1000, 1000, (1, 64, 80, 16)).astype(np.int32)
    exe = stripeml.compile(INT_SUM, target=stripeml.targets.resolve("cpu", threads=2)).lower(a)
    assert "S_part" in exe.ir
    c, total = exe(a)
    np.testing.assert_array_equal(total, (a + 3).sum(axis=(1, 2), keepdims=True, dtype=np.int32))


def test_small_kernels_are_left_alone() -> None:
    a = np.ones((1, 8, 8, 16), np.float32)
    src = "function (A[1, 8, 8, 16]) -> (C, S) { C = A * 2.0; S[n, 0, 0, c : 1, 1, 1, 16] = +(C[n, y, x, c]); }"
    exe = stripeml.compile(src, target=stripeml.targets.resolve("cpu", threads=2)).lower(a)
    assert "_part" not in exe.ir
    np.testing.assert_allclose(exe(a)[1], 2 * a.sum(axis=(1, 2), keepdims=True))


def test_options_are_checked() -> None:
    with pytest.raises(Exception, match="threads"):
        PartialSums(threads=0)
    with pytest.raises(Exception, match="min_points"):
        PartialSums(min_points=-1)
