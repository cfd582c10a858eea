"""``unroll``'s ``panel_rows``: a product whose vector index is one panel of a wider
dimension (attention's keys, laid out by ``nest`` in panels of 2 vectors) takes
taller register tiles with the accumulators a wider tile would have used; a
product that is narrow because its data is keeps its rows."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from attention import ATTENTION_NHD
from attention import attention_reference as _attention
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.passes.dce import Dce
from stripeml.passes.epilogue import Epilogue
from stripeml.passes.fuse import Fuse
from stripeml.passes.manager import run_pipeline
from stripeml.passes.nest import Nest
from stripeml.passes.thread import Thread
from stripeml.passes.unroll import Unroll
from stripeml.passes.vectorize import Vectorize
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run


def _attention_program(h: int, m: int, n: int, d: int, panel_rows: bool):
    rng = np.random.default_rng(7)
    q = rng.standard_normal((h, m, d)).astype(np.float32)
    k = rng.standard_normal((n, h, d)).astype(np.float32)
    v = rng.standard_normal((n, h, d)).astype(np.float32)
    program = stripeml.compile(ATTENTION_NHD, target="interp").lower(q, k, v).program
    passes = [
        Fuse(),
        Dce(),
        # AVX-512's shape: panels of 2 vectors of 16 lanes, 32 vector registers
        Nest(cache_bytes=65536, fraction=0.5, min_points=2, min_rows=1, vector_width=16),
        Unroll(vector_width=16, registers=32, panel_rows=panel_rows),
        Epilogue(),
        Vectorize(width=16),
        Thread(threads=2),
    ]
    result = run_pipeline(program, passes).program
    return result, {"Q": q, "K": k, "V": v}, _attention(q, k, v, nhd=True)


def _tiles(program) -> list[tuple[int, int]]:
    """(rows, lanes) of every register tile inside the nest, by the product's order."""
    (nest,) = [s for s in program.root.stmts if isinstance(s, Block) and "nest" in s.tags]
    found = []
    for blk in walk_blocks(nest):
        if "register_tile" in blk.tags:
            ranges = {i.name: i.range for i in blk.idxs}
            found.append((ranges["m_r"], blk.idxs[-1].range))  # the vector index is last
    return found


@pytest.mark.parametrize("threads", [1, 2])
def test_the_scores_take_8_rows_of_a_32_key_panel(threads: int) -> None:
    """Q @ K^T over panels of 32 keys: 8 x 2 vectors (16 accumulators), not 4 x 2;
    P @ V, whose 16 values are its whole vector index, keeps its tile."""
    program, inputs, want = _attention_program(2, 64, 128, 16, panel_rows=True)
    plain, _, _ = _attention_program(2, 64, 128, 16, panel_rows=False)
    tall, flat = _tiles(program), _tiles(plain)
    assert tall[0] == (8, 32) and flat[0] == (4, 32)  # the scores
    assert tall[1:] == flat[1:]  # the product with V: not a panel of a wider index
    np.testing.assert_allclose(run(program, inputs)["O"], want, rtol=1e-4, atol=1e-5)
    options = CpuOptions(threads=threads, vector_width=16, vector_registers=32, min_chunk_work=1)
    got = CpuBackend(options).compile(program).run(inputs)["O"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


def test_a_product_narrow_by_its_data_keeps_its_rows() -> None:
    """32 output columns are the data's width, not a panel of more: the tile stays
    4 rows of 2 vectors (a 1x1 convolution of 16 or 32 channels ran 1.05x the
    time with 14-row tiles in MobileNetV2 and EfficientNet-B0)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 40)).astype(np.float32)
    b = rng.standard_normal((40, 32)).astype(np.float32)
    program = stripeml.compile(MATMUL, target="interp").lower(a, b).program
    result = run_pipeline(program, [Unroll(vector_width=16, registers=32)]).program
    (tile,) = [x for x in walk_blocks(result.root) if "register_tile" in x.tags]
    ranges = {i.name: i.range for i in tile.idxs}
    assert ranges["m_r"] == 4
    np.testing.assert_allclose(run(result, {"A": a, "B": b})["C"], a @ b, rtol=1e-4, atol=1e-4)
