"""``unroll``'s ``long_rows``: a row range that neither the tile's rows nor a
divisor up to ``max_rows`` divides (BERT's 128 tokens with AVX-512's 6 x 4
tiles) takes 8-row tiles when its panels are constants laid out once, rather
than 4-row tiles of more vectors; a range 7 divides (a 56 x 56 image) keeps its
7 rows, and panels the kernel reads from an input keep the 4-row tiles that
pack them.  Results are checked against NumPy on the interpreter and the CPU.
"""

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
POINTWISE = """function (I[N, H, X, C], W[C, D]) -> (O) {
    O[n, y, x, d : N, H, X, D] = +(I[n, y, x, c] * W[c, d]);
}"""
# the tile shape ``shaped`` gives with 32 vector registers of 16 lanes (AVX-512)
WIDE = dict(vector_width=16, rows=6, vectors=4, max_vectors=24, max_rows=7)


def _tiles(program) -> list[tuple[int, int]]:
    """(rows, lanes) of each register tile: the ranges of its row index ``m_r``
    and of its vector index (``n_r``, or ``n_c_r`` within a laid-out panel)."""
    out = []
    for b in walk_blocks(program.root):
        if "register_tile" in b.tags:
            ranges = {i.name: i.range for i in b.idxs}
            out.append((ranges["m_r"], ranges.get("n_c_r", ranges.get("n_r", 0))))
    return out


def _check(program, inputs, want: np.ndarray) -> None:
    np.testing.assert_allclose(run(program, inputs)["C"], want, rtol=1e-4, atol=1e-3)
    for threads in (1, 2):
        got = CpuBackend(CpuOptions(threads=threads, fma=True, min_chunk_work=1))
        out = got.compile(program).run(inputs)["C"]
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


def _matmul(m: int, k: int, n: int, constant: bool, **options):
    rng = np.random.default_rng(m * 1000 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    if constant:
        program = stripeml.compile(MATMUL, target="interp", constants={"B": b}).lower(a).program
    else:
        program = stripeml.compile(MATMUL, target="interp").lower(a, b).program
    result = run_pipeline(program, [Unroll(**{**WIDE, **options})]).program
    return result, {"A": a, "B": b}, a @ b


@pytest.mark.parametrize("m", [128, 64, 16])
def test_constant_panels_take_eight_row_tiles(m):
    program, inputs, want = _matmul(m, 40, 96, True)
    assert _tiles(program) == [(8, 48)], _tiles(program)
    _check(program, inputs, want)


def test_without_long_rows_the_tiles_are_four_rows_of_six_vectors():
    program, inputs, want = _matmul(128, 40, 96, True, long_rows=0)
    assert _tiles(program) == [(4, 96)], _tiles(program)
    _check(program, inputs, want)


def test_an_input_panel_keeps_four_row_tiles():
    program, inputs, want = _matmul(128, 40, 96, False)
    assert _tiles(program) == [(4, 96)], _tiles(program)
    _check(program, inputs, want)


def test_a_range_seven_divides_keeps_seven_rows():
    """56 rows of a 56 x 56 image: 7 (8 ran 2-8% slower on ResNet-50's layers)."""
    rng = np.random.default_rng(3)
    i = rng.standard_normal((1, 56, 56, 8)).astype(np.float32)
    w = rng.standard_normal((8, 32)).astype(np.float32)
    program = stripeml.compile(POINTWISE, target="interp", constants={"W": w}).lower(i).program
    result = run_pipeline(program, [Unroll(**WIDE)]).program
    tiles = [b for b in walk_blocks(result.root) if "register_tile" in b.tags]
    assert len(tiles) == 1
    assert [i.range for i in tiles[0].idxs if i.name == "y_r"] == [7], tiles[0].idxs
    want = np.einsum("nyxc,cd->nyxd", i, w)
    np.testing.assert_allclose(run(result, {"I": i, "W": w})["O"], want, rtol=1e-4, atol=1e-4)
    assert all(isinstance(s, Block) for s in result.root.stmts)


@pytest.mark.parametrize(("k", "rows"), [(40, 4), (64, 4), (256, 8)])
def test_only_panels_past_half_of_l1_take_long_rows(k, rows):
    """With ``long_rows_bytes`` 48 KiB: a panel of ``k`` x 48 lanes of float32 takes
    8-row tiles only past 24 KiB (256 x 48 x 4 B = 48 KiB; 64 x 48 x 4 B = 12 KiB,
    served from L1 whatever the rows: a Winograd product's)."""
    program, inputs, want = _matmul(128, k, 96, True, long_rows_bytes=48 << 10)
    assert _tiles(program)[0][0] == rows, _tiles(program)
    _check(program, inputs, want)
