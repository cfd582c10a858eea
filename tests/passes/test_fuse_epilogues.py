"""``fuse.keep_epilogues``: a bias and activation after a convolution stay for
``epilogue`` (run on the convolution's register tiles) instead of being fused
into the pooled sum over pixels that follows (squeeze-excite), and the
results still agree with NumPy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block
from stripeml.passes.fuse import Fuse
from stripeml.targets.target import PassSpec

# A depthwise 3x3 convolution, its bias and SiLU, then the pooled sum of the
# activations (EfficientNet's squeeze-excite input) and the activations themselves.
SE = """function (I[1, 28, 28, 32], K[3, 3, 32], B[32]) -> (A, S) {
    D[n, y, x, c : 1, 28, 28, 32] = +(I[n, y + ky - 1, x + kx - 1, c] * K[ky, kx, c]);
    T = D + B;
    A = T * sigmoid(T);
    S[n, 0, 0, c : 1, 1, 1, 32] = +(A[n, y, x, c]);
}"""


def _reference(i: np.ndarray, k: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    d = sum(p[:, ky : ky + 28, kx : kx + 28, :] * k[ky, kx] for ky in range(3) for kx in range(3))
    t = d + b
    a = t / (1 + np.exp(-t))
    return a, a.sum(axis=(1, 2), keepdims=True)


def _target(keep: bool):
    target = stripeml.targets.resolve("cpu", threads=2)
    pipeline = tuple(
        PassSpec("fuse", tuple({**dict(p.options), "keep_epilogues": keep}.items()))
        if p.name == "fuse"
        else p
        for p in target.pipeline
    )
    return dataclasses.replace(target, pipeline=pipeline)


@pytest.mark.parametrize("keep", [True, False])
def test_activation_runs_on_the_convolution_or_in_the_pool(keep: bool) -> None:
    rng = np.random.default_rng(7)
    i = rng.standard_normal((1, 28, 28, 32)).astype(np.float32)
    k = rng.standard_normal((3, 3, 32)).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    exe = stripeml.compile(SE, target=_target(keep)).lower(i, k, b)
    a, s = exe(i, k, b)
    want_a, want_s = _reference(i, k, b)
    np.testing.assert_allclose(a, want_a, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(s, want_s, rtol=2e-5, atol=2e-3)
    kernels = [s for s in exe.program.root.stmts if isinstance(s, Block)]
    conv = next(k for k in kernels if "D[n, y, x, c" in k.comment)
    pool = next(k for k in kernels if "S[n, 0, 0, c" in k.comment)
    # Kept: the convolution's kernel computes the SiLU (its epilogue) and the pool
    # reads the activations; fused: the pool computes them from the raw result.
    assert ("sigmoid" in conv.comment) == keep
    assert ("sigmoid" in pool.comment) == (not keep)


def test_row_reductions_still_take_the_activation_in() -> None:
    """A row reduction over the unit-stride dimension (a layer norm's mean) after
    a product keeps fusing the bias in: ``nest`` builds its chains from it."""
    src = """function (X[64, 96], W[96, 128], B[128]) -> (Y, M) {
        P[m, n : 64, 128] = +(X[m, k] * W[k, n]);
        Y = P + B;
        M[m, 0 : 64, 1] = +(Y[m, n]);
    }"""
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    w = np.random.default_rng(2).standard_normal((96, 128)).astype(np.float32)
    b = np.random.default_rng(3).standard_normal(128).astype(np.float32)
    program = stripeml.compile(src, target="interp").lower(x, w, b).program
    fused = Fuse().run(program)
    assert fused != program  # the bias went into the row sum ...
    assert fused == Fuse(keep_epilogues=False).run(program)  # ... as it did before
    y, m = stripeml.compile(src, target=_target(True))(x, w, b)
    want = x.astype(np.float64) @ w + b
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m, want.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-3)
