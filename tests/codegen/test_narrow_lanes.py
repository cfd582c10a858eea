"""``unroll``'s narrower-lane rests (the last 8 of 24 channels with 16-lane vectors:
``*_lanes`` kernels) in the CPU code generator.

* Their ``epilogue`` (bias, activation) is emitted straight-line in vectors of the
  rest's lanes (``codegen.llvm_tile.emit_unrolled``), at O3 too: as a loop, LLVM's
  vectoriser ran it across the tile's rows with gathers and scatters (ShuffleNet's
  stem, 3 -> 24 channels, stride 2: its rest took longer than the 16-channel main
  kernel).
* A rest tile of several narrow vectors (12 points: 3 vectors of 4 lanes, as
  ``unroll.max_rows=0`` makes) is a register tile (``llvm_plan.narrow_lanes``),
  not a scalar loop nest.

* With mixed tiles (``unroll.mixed_vectors``, on in the CPU target) a ragged
  vector index of a few vectors is one tile instead: whole vectors and one
  narrower vector per row (``llvm_plan.lane_chunks``: 24 channels as 16 + 8
  lanes, 28 as 16 + 12), so these tests of the split turn mixed tiles off, and
  the last two tests check the mixed tiles.

The results are checked against NumPy whatever the host's vector width; the
structure only where the target's vectors are 16 lanes (AVX-512), the only width
where these rests appear."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.targets.target import PassSpec

STEM = """function (I[N, H, W, CI], K[KH, KW, CI, CO], B[CO]) -> (O) {
    C[n, y, x, co : N, H / 2, W / 2, CO] = +(I[n, 2 * y + ky - 1, 2 * x + kx - 1, ci] * K[ky, kx, ci, co]);
    O = relu(C + B);
}"""
DENSE = """function (X[M, K], W[K, N], B[N]) -> (Y) {
    A[m, n : M, N] = +(X[m, k] * W[k, n]);
    Y = relu(A + B);
}"""


def _width() -> int:
    return stripeml.targets.resolve("cpu").vector_width


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _target(**unroll: object):
    target = stripeml.targets.resolve("cpu", threads=1)
    pipeline = tuple(
        PassSpec("unroll", tuple({**dict(p.options), **unroll}.items()))
        if p.name == "unroll"
        else p
        for p in target.pipeline
    )
    return dataclasses.replace(target, pipeline=pipeline)


def _looped(code: str, blk: Block) -> list[str]:
    """``blk``'s indices that got a loop in the generated LLVM IR."""
    return [i.name for i in blk.idxs if re.search(rf'"{re.escape(i.name)}\.head\.\d+"', code)]


def _body(exe, kernel: str) -> str:
    """The LLVM IR of the body that kernel ``kernel``'s step calls."""
    code = exe.code
    steps = exe._compiled.module.steps
    symbol = next(
        (s.kernel.symbol for s in steps if s.kernel and s.kernel.block_name == kernel), None
    )
    assert symbol is not None, kernel
    start = code.index(f'define void @"{symbol}"')
    end = code.find("\ndefine ", start + 1)
    return code[start : end if end > 0 else len(code)]


def _lanes_kernels(exe) -> list[Block]:
    return [k for k in exe.program.root.stmts if isinstance(k, Block) and k.name.endswith("_lanes")]


def _stem_reference(i: np.ndarray, k: np.ndarray, b: np.ndarray) -> np.ndarray:
    p = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = i.shape[1] // 2, i.shape[2] // 2
    c = sum(
        np.tensordot(p[:, ky : ky + 2 * h : 2, kx : kx + 2 * w : 2, :], k[ky, kx], axes=1)
        for ky in range(3)
        for kx in range(3)
    )
    return np.maximum(c + b, 0)


@pytest.mark.parametrize("hw,co", [(28, 24), (14, 24), (16, 40), (28, 12)])
def test_stem_lanes_rest_matches_numpy(hw: int, co: int) -> None:
    rng = np.random.default_rng(hw * 100 + co)
    i, k, b = _rand(rng, 1, hw, hw, 3), _rand(rng, 3, 3, 3, co), _rand(rng, co)
    f = stripeml.compile(STEM, target="cpu", constants={"K": k, "B": b})
    got = f(i)
    want = _stem_reference(i, k, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_lanes_epilogue_is_straight_line_vectors() -> None:
    rng = np.random.default_rng(1)
    i, k, b = _rand(rng, 1, 28, 28, 3), _rand(rng, 3, 3, 3, 24), _rand(rng, 24)
    target = _target(mixed_vectors=0)
    exe = stripeml.compile(STEM, target=target, constants={"K": k, "B": b}).lower(i)
    np.testing.assert_allclose(exe(i), _stem_reference(i, k, b), rtol=1e-4, atol=1e-4 * 30)
    lanes = _lanes_kernels(exe)
    if _width() != 16:
        pytest.skip("the 8-channel rest appears with 16-lane vectors only")
    assert lanes, "24 channels of 16-lane vectors: a main kernel and an 8-lane rest"
    eps = [b for k in lanes for b in walk_blocks(k) if "epilogue" in b.tags]
    assert eps
    for blk in eps:
        assert blk.idxs[-1].range == 8
        # no loop over its rows or its lanes: one 8-lane vector per row
        body = _body(exe, next(k.name for k in lanes if blk in walk_blocks(k)))
        assert _looped(body, blk) == [], blk.name
        assert "<8 x float>" in body


@pytest.mark.parametrize("m,n", [(56, 28), (40, 44), (28, 60)])
def test_rest_of_several_narrow_vectors_is_a_register_tile(m: int, n: int) -> None:
    rng = np.random.default_rng(m + n)
    x, w, b = _rand(rng, m, 48), _rand(rng, 48, n), _rand(rng, n)
    target = _target(max_rows=0, mixed_vectors=0)
    exe = stripeml.compile(DENSE, target=target).lower(x, w, b)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    got = exe(x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    if _width() != 16:
        pytest.skip("the narrow rest appears with 16-lane vectors only")
    tiles = [
        t
        for k in _lanes_kernels(exe)
        for t in walk_blocks(k)
        if "register_tile" in t.tags and t.idxs[0].range % 16 and t.idxs[0].range > 8
    ]
    if n % 16 == 12:
        assert tiles, "a rest of 12 points tiled as 3 vectors of 4 lanes"
    for t in tiles:
        lanes = t.idxs[0]
        # a register tile: its vector index runs in lanes, no loop over it
        kernel = next(k.name for k in _lanes_kernels(exe) if t in walk_blocks(k))
        body = _body(exe, kernel)
        assert lanes.name not in _looped(body, t), t.name
        assert "<4 x float>" in body


# ---- mixed tiles: whole vectors and a narrower one in one register tile ----------------

GROUPED = """function (I[N, H, W, C], K[CI, G, CO], B[M]) -> (O) {
    A[n, y, x, 28 * g + co : N, H, W, 112] = +(I[n, y, x, 6 * g + ci] * K[ci, g, co]);
    O = relu(A + B);
}"""


def _kernels(exe) -> list[Block]:
    return [k for k in exe.program.root.stmts if isinstance(k, Block)]


def test_stem_of_24_channels_is_one_mixed_tile() -> None:
    """24 output channels of 16-lane vectors: one kernel whose register tile holds
    each row's 24 channels as a 16-lane and an 8-lane vector (the input value
    broadcast once for both), its epilogue straight-line in the same vectors."""
    rng = np.random.default_rng(3)
    i, k, b = _rand(rng, 1, 28, 28, 3), _rand(rng, 3, 3, 3, 24), _rand(rng, 24)
    exe = stripeml.compile(STEM, target=_target(), constants={"K": k, "B": b}).lower(i)
    want = _stem_reference(i, k, b)
    np.testing.assert_allclose(exe(i), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    if _width() != 16:
        pytest.skip("24 channels are ragged in 16-lane vectors only")
    assert _lanes_kernels(exe) == []
    (conv,) = [k for k in _kernels(exe) if "contraction" in k.tags]
    (tile,) = [t for t in walk_blocks(conv) if "register_tile" in t.tags]
    assert 24 in [i.range for i in tile.idxs]
    body = _body(exe, conv.name)
    assert "<16 x float>" in body and "<8 x float>" in body
    (ep,) = [t for t in walk_blocks(conv) if "epilogue" in t.tags]
    assert _looped(body, ep) == [], ep.name


@pytest.mark.parametrize("threads", [1, 2])
def test_grouped_convolution_of_28_channels_a_group(threads: int) -> None:
    """ShuffleNet's grouped 1 x 1 convolutions: 4 groups of 28 output channels,
    each group's 28 in one tile of a 16-lane and a 12-lane vector (no second
    kernel for the last 12), against NumPy."""
    rng = np.random.default_rng(28 + threads)
    i, k, b = _rand(rng, 1, 14, 14, 24), _rand(rng, 6, 4, 28), _rand(rng, 112)
    target = stripeml.targets.resolve("cpu", threads=threads)
    exe = stripeml.compile(GROUPED, target=target, constants={"K": k, "B": b}).lower(i)
    x = i.astype(np.float64).reshape(1, 14, 14, 4, 6)
    want = np.maximum(np.einsum("nyxgc,cgo->nyxgo", x, k).reshape(1, 14, 14, 112) + b, 0)
    np.testing.assert_allclose(exe(i), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    if _width() != 16:
        pytest.skip("28 channels are ragged in 16-lane vectors only")
    assert _lanes_kernels(exe) == []
    (conv,) = [k for k in _kernels(exe) if "contraction" in k.tags]
    assert "<12 x float>" in _body(exe, conv.name)
