"""``unroll``'s rest of a ragged vector index takes all its narrow vectors in one
tile: 28 columns with 16-lane vectors are a 16-lane main kernel and a rest of
12 points tiled as 3 vectors of 4 lanes (each row value broadcast once for the
12), not 3 panels of one 4-lane vector.  Results checked against NumPy; the
tile shape only with 16-lane vectors (AVX-512), where these rests appear.
(Mixed tiles off here: with them, these ranges are one tile of whole vectors
and a narrower one, ``test_unroll.py``.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.targets.target import PassSpec

DENSE = """function (X[M, K], W[K, N], B[N]) -> (Y) {
    A[m, n : M, N] = +(X[m, k] * W[k, n]);
    Y = relu(A + B);
}"""


def _split_target():
    """The CPU target, its ``unroll`` splitting every ragged vector index."""
    target = stripeml.targets.resolve("cpu")
    pipeline = tuple(
        PassSpec("unroll", (*p.options, ("mixed_vectors", 0))) if p.name == "unroll" else p
        for p in target.pipeline
    )
    return dataclasses.replace(target, pipeline=pipeline)


def _rest_tiles(exe) -> list[Block]:
    return [
        t
        for k in exe.program.root.stmts
        if isinstance(k, Block) and k.name.endswith("_lanes")
        for t in walk_blocks(k)
        if "register_tile" in t.tags
    ]


@pytest.mark.parametrize("m,n,rest", [(56, 28, 12), (42, 60, 12), (35, 24, 8), (28, 20, 4)])
def test_rest_tile_takes_all_its_vectors(m: int, n: int, rest: int) -> None:
    rng = np.random.default_rng(m * 100 + n)
    x = rng.standard_normal((m, 40)).astype(np.float32)
    w = rng.standard_normal((40, n)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    exe = stripeml.compile(DENSE, target=_split_target()).lower(x, w, b)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(exe(x, w, b), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    if stripeml.targets.resolve("cpu").vector_width != 16:
        pytest.skip("ragged rests of 16-lane vectors only")
    tiles = _rest_tiles(exe)
    assert tiles, "a ragged vector index: a main kernel and a narrower rest"
    for t in tiles:
        assert t.idxs[0].range == rest, t.name  # the vector index comes first
