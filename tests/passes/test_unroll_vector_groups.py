"""``unroll``'s vector groups: whole vectors that the tile's vectors do not divide
(1000 output channels are 125 vectors of 8 lanes) are tiled in groups of the
tile's vectors and one narrower tile, not all in one-vector tiles."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.passes.manager import run_pipeline
from stripeml.passes.unroll import Unroll
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


def _tiled(m: int, n: int, k: int, **options):
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    program = stripeml.compile(MATMUL, target="interp").lower(a, b).program
    return run_pipeline(program, [Unroll(**options)]).program, {"A": a, "B": b}, a @ b


def _lanes(program) -> list[tuple[int, int]]:
    """(rows, lanes) of each kernel's register tile, in program order (rows 1
    when the tile has none)."""
    shapes = []
    for kernel in program.root.stmts:
        if not isinstance(kernel, Block):
            continue
        for tile in walk_blocks(kernel):
            if "register_tile" in tile.tags:
                ranges = {i.name: i.range for i in tile.idxs}
                lanes = [r for n, r in ranges.items() if n.startswith("n") and n.endswith("_r")]
                shapes.append((ranges.get("m_r", 1), lanes[0]))
    return shapes


def _check(program, inputs, want) -> None:
    np.testing.assert_allclose(run(program, inputs)["C"], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        got = CpuBackend(CpuOptions(threads=threads, vector_width=8)).compile(program).run(inputs)
        np.testing.assert_allclose(got["C"], want, rtol=1e-4, atol=1e-4)


def test_125_vectors_take_4_by_2_tiles_and_one_4_by_1() -> None:
    program, inputs, want = _tiled(16, 1000, 24, vector_width=8)
    assert _lanes(program) == [(4, 16), (4, 8)]
    _check(program, inputs, want)


def test_off_every_tile_is_one_vector() -> None:
    program, inputs, want = _tiled(16, 1000, 24, vector_width=8, vector_groups=0)
    assert _lanes(program) == [(4, 8)]
    _check(program, inputs, want)


@pytest.mark.parametrize("n", [24, 56])  # 3 and 7 vectors: fewer than 4 groups
def test_few_groups_stay_one_kernel(n: int) -> None:
    program, inputs, want = _tiled(8, n, 16, vector_width=8)
    assert len(_lanes(program)) == 1
    _check(program, inputs, want)


def test_a_rest_of_several_vectors_with_wider_tiles() -> None:
    # 4 vectors per tile (rows 2): 43 vectors are 10 groups and a tile of 3 ...
    program, inputs, want = _tiled(8, 344, 16, vector_width=8, rows=2, vectors=4)
    assert _lanes(program) == [(2, 32), (2, 24)]
    # ... and 45 keep 3-vector tiles, more than half the width wanted.
    program2, inputs2, want2 = _tiled(8, 360, 16, vector_width=8, rows=2, vectors=4)
    assert _lanes(program2) == [(2, 24)]
    _check(program, inputs, want)
    _check(program2, inputs2, want2)


def test_option_is_checked() -> None:
    with pytest.raises(Exception, match="vector_groups"):
        Unroll(vector_groups=-1)
