"""A register tile's ``epilogue`` (bias, activation) is emitted straight-line, one
vector per point, in the bodies compiled at O1, so LLVM keeps the tile in registers
up to the output store (``codegen.llvm_tile.emit_unrolled``); O3 bodies keep the
loop (LLVM unrolls it there).  The results must be NumPy's whatever the tile shape:
plain rows, 6-row tiles, a 2-D tile of pixels, a ragged split's rest, a
math-library epilogue, a constant (laid out) or an input (packed) weight."""

from __future__ import annotations

import re
from math import erf

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import body_opt_level
from stripeml.ir.nodes import Block, walk_blocks

DENSE = """function (X[M, K], W[K, N], B[N]) -> (Y) {
    A[m, n : M, N] = +(X[m, k] * W[k, n]);
    Y = relu(A + B);
}"""
GELU = """function (X[M, K], W[K, N], B[N]) -> (Y) {
    A[m, n : M, N] = +(X[m, k] * W[k, n]);
    C = A + B;
    Y = C * 0.5 * (1.0 + erf(C * 0.7071067811865476));
}"""
CONV = """function (I[N, H, W, CI], K[KH, KW, CI, CO], B[CO]) -> (O) {
    C[n, y, x, co : N, H, W, CO] = +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]);
    O = relu(C + B);
}"""

_erf = np.vectorize(erf)


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _epilogues(exe) -> list[Block]:
    return [b for b in walk_blocks(exe.program.root) if "epilogue" in b.tags]


def _looped(code: str, blk: Block) -> list[str]:
    """The epilogue's indices that got a loop in the generated LLVM IR."""
    return [i.name for i in blk.idxs if re.search(rf'"{re.escape(i.name)}\.head\.\d+"', code)]


def _kernel_of(exe, blk: Block) -> Block:
    return next(
        k
        for k in exe.program.root.stmts
        if isinstance(k, Block) and any(b is blk for b in walk_blocks(k))
    )


@pytest.mark.parametrize("const", [False, True])
@pytest.mark.parametrize(
    "m,k,n", [(64, 96, 80), (48, 64, 128), (13, 40, 64), (8, 32, 48), (96, 256, 192)]
)
def test_dense_relu_epilogue_matches_numpy(m: int, k: int, n: int, const: bool) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    x, w, b = _rand(rng, m, k), _rand(rng, k, n), _rand(rng, n)
    if const:
        got = stripeml.compile(DENSE, target="cpu", constants={"W": w})(x, b)
    else:
        got = stripeml.compile(DENSE, target="cpu")(x, w, b)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_epilogue_is_straight_line_code_at_o1() -> None:
    rng = np.random.default_rng(3)
    x, w, b = _rand(rng, 96, 256), _rand(rng, 256, 192), _rand(rng, 192)
    # a constant weight: laid out once, so the kernel is register tiles only (O1)
    exe = stripeml.compile(DENSE, target="cpu", constants={"W": w}).lower(x, b)
    eps = _epilogues(exe)
    assert eps, "the pipeline fuses the bias and relu into the GEMM's tiles"
    for blk in eps:
        assert body_opt_level(_kernel_of(exe, blk)) == 1
        assert _looped(exe.code, blk) == [], blk.name


def test_o3_bodies_keep_the_epilogue_loop() -> None:
    rng = np.random.default_rng(4)
    x, w, b = _rand(rng, 64, 96), _rand(rng, 96, 512), _rand(rng, 512)
    # an input weight: packed per panel in the kernel (its rows 2 KiB apart: the
    # cpu target packs no closer ones), which makes it an O3 body
    exe = stripeml.compile(DENSE, target="cpu").lower(x, w, b)
    eps = _epilogues(exe)
    assert eps
    for blk in eps:
        assert body_opt_level(_kernel_of(exe, blk)) == 3
        assert _looped(exe.code, blk) == [i.name for i in blk.idxs], blk.name


def test_gelu_epilogue_matches_numpy() -> None:
    rng = np.random.default_rng(5)
    x, w, b = _rand(rng, 32, 64), _rand(rng, 64, 96), _rand(rng, 96)
    exe = stripeml.compile(GELU, target="cpu").lower(x, w, b)
    assert _epilogues(exe)
    got = stripeml.compile(GELU, target="cpu")(x, w, b)
    c = x.astype(np.float64) @ w + b
    want = c * 0.5 * (1.0 + _erf(c * 0.7071067811865476))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("h,w", [(14, 14), (7, 7), (12, 12)])
def test_conv_bias_relu_epilogue_matches_numpy(h: int, w: int) -> None:
    rng = np.random.default_rng(h)
    i, k, b = _rand(rng, 1, h, w, 32), _rand(rng, 3, 3, 32, 64), _rand(rng, 64)
    got = stripeml.compile(CONV, target="cpu")(i, k, b)
    p = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(1, 2))
    want = np.maximum(np.tensordot(win, k, axes=([4, 5, 3], [0, 1, 2])) + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_nan_flows_through_the_relu() -> None:
    rng = np.random.default_rng(9)
    x, w, b = _rand(rng, 16, 32), _rand(rng, 32, 64), _rand(rng, 64)
    x[3, 5] = np.nan
    got = stripeml.compile(DENSE, target="cpu")(x, w, b)
    want = np.maximum(x @ w + b, 0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-4 * np.abs(want[ok]).max())
