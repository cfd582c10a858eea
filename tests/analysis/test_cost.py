"""The cost model: bytes, FLOPs and fits, against hand counts and enumeration."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stripeml.analysis.cost import CostModel, scalar_ops
from stripeml.analysis.footprint import footprints
from stripeml.ir import Block

from .brute import kernels
from .test_dependence import FUSED, MATMUL


def test_matmul_by_hand() -> None:
    model = CostModel(MATMUL, line_bytes=4)  # one f32 per line: bytes are elements * 4
    assert model.output_indices == ("m", "n") and model.reduction_indices == ("k",)
    c = model.evaluate({"m": 4, "n": 2, "k": 8})
    assert c.footprint_bytes == 4 * (4 * 8 + 8 * 2 + 4 * 2)
    assert c.bytes_per_tile == c.footprint_bytes  # k whole: C is written once
    assert c.tile_count == 2 * 4 and c.parallel_tiles == 8
    assert c.flops_per_tile == 4 * 2 * 8 and c.total_flops == 8 * 8 * 8
    assert c.total_bytes == 8 * c.bytes_per_tile
    split = model.evaluate({"m": 4, "n": 2, "k": 4})
    assert split.bytes_per_tile == 4 * (4 * 4 + 4 * 2 + 2 * 4 * 2)  # C read back and written
    assert split.compute_per_byte < c.compute_per_byte
    assert c.fits(c.footprint_bytes) and not c.fits(c.footprint_bytes - 1)


def test_lines_round_the_unit_stride_run() -> None:
    model = CostModel(MATMUL, line_bytes=64)
    # A row run of 2 f32 still moves a whole line; a column of 4 rows moves 4 lines.
    c = model.evaluate({"m": 4, "n": 2, "k": 2})
    assert c.footprint_bytes == 64 * (4 * 1 + 2 * 1 + 4 * 1)
    assert model.evaluate({"m": 1, "n": 16, "k": 1}).footprint_bytes == 64 * (1 + 1 + 1)


def test_ragged_tiles_cost_a_whole_tile() -> None:
    model = CostModel(MATMUL, line_bytes=4)
    assert model.evaluate({"m": 3}).tile_count == 3
    assert model.evaluate({"m": 3}).total_bytes > model.evaluate({"m": 4}).total_bytes


def test_scalar_ops_count_nested_boxes() -> None:
    assert scalar_ops(MATMUL) == 1
    assert scalar_ops(FUSED) == 0 and CostModel(FUSED).ops == 1


@settings(max_examples=80, deadline=None)
@given(block=kernels(constraints=False), data=st.data())
def test_footprint_bytes_are_the_footprints(block: Block, data) -> None:
    tiles = {i.name: data.draw(st.integers(1, i.range)) for i in block.idxs}
    cost = CostModel(block, line_bytes=1).evaluate(tiles)  # lines of one byte: no rounding
    exact = footprints(block, tiles)
    assert cost.footprint_bytes == sum(4 * fp.elements for fp in exact.values())
