"""A register tile's innermost reduction loop runs four of its iterations per trip
(codegen/llvm_tile.py, ``reduction_unroll``; ``llvm_plan.TILE_REDUCTION_UNROLL``).

Most tiles are compiled at O1, where LLVM unrolls nothing: one step of the
reduction per trip paid the loop's increment, compare and branch and its own
address arithmetic for every 14 FMAs of a 7 x 2 tile.  The copies of the body
address their operands at constant offsets from the loop's partial sums
(``KernelBuilder.shift``).  A range that four does not divide takes steps of
two, and an odd one the plain loop; results are checked against NumPy.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm_tile import reduction_unroll
from stripeml.ir.affine import Affine
from stripeml.ir.nodes import Block, Constraint

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
CONV = (
    "function (X[N, H, W, CI], K[CO, CI, KH, KW]) -> (O) {"
    " O[n, y, x, co : N, 10, 10, CO] = +(X[n, y + ky - 1, x + kx - 1, ci] * K[co, ci, ky, kx]); }"
)


def _arrays(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 10_000 + k * 100 + n)
    return (
        rng.standard_normal((m, k)).astype(np.float32),
        rng.standard_normal((k, n)).astype(np.float32),
    )


def _tiles(program) -> list[Block]:
    found: list[Block] = []

    def walk(blk: Block) -> None:
        for s in blk.stmts:
            if isinstance(s, Block):
                if "register_tile" in s.tags:
                    found.append(s)
                walk(s)

    walk(program.root)
    return found


def _steps(code: str) -> set[int]:
    """The steps of the reduction loops over ``k`` in the generated LLVM text."""
    return {int(s) for s in re.findall(r'= add nsw i64 %"k(?:\.\d+)?", (\d+)', code)}


@pytest.mark.parametrize(("k", "step"), [(96, 4), (300, 4), (98, 2), (97, 1)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_matmul_tile_steps_its_reduction_by_four_two_or_one(
    tmp_path, monkeypatch, k, step, threads
):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(37, k, 200)
    f = stripeml.compile(MATMUL, target="cpu", constants={"B": b}, threads=threads)
    exe = f.lower(a)
    assert _tiles(exe.program), "the product has no register tile"
    assert _steps(exe.code) == {step}
    np.testing.assert_allclose(f(a), a @ b, rtol=1e-4, atol=1e-3)


def test_a_convolution_tile_unrolls_its_innermost_channels(tmp_path, monkeypatch):
    """Three reduction indices (taps and channels): the innermost, the channels, is
    unrolled; the taps keep their loops."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 10, 10, 24)).astype(np.float32)
    w = (rng.standard_normal((32, 24, 3, 3)) * 0.2).astype(np.float32)
    f = stripeml.compile(CONV, target="cpu", constants={"K": w})
    exe = f.lower(x)
    tiles = _tiles(exe.program)
    assert tiles
    assert any(reduction_unroll(t, _reductions(t)) == 4 for t in tiles)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
    want = np.einsum("nyxcij,ocij->nyxo", windows, w)
    np.testing.assert_allclose(f(x), want, rtol=1e-4, atol=1e-3)


def _reductions(tile: Block) -> list[str]:
    """The tile's reduction indices in loop order: those its output does not use."""
    (out,) = [r for r in tile.refs if r.dir in ("out", "inout")]
    used = {n for a in out.access for n in a.coeffs}
    return [i.name for i in tile.idxs if i.name not in used]


def test_a_constrained_or_moved_reduction_index_keeps_its_plain_loop(tmp_path, monkeypatch):
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(16, 64, 64)
    exe = stripeml.compile(MATMUL, target="cpu", constants={"B": b}).lower(a)
    (tile,) = _tiles(exe.program)
    red = _reductions(tile)
    assert red == ["k"] and reduction_unroll(tile, red) == 4
    bounded = replace(tile, constraints=(Constraint(Affine.build({"k": -1}, 40)),))
    assert reduction_unroll(bounded, red) == 1
    moved = replace(
        tile,
        idxs=tuple(
            replace(i, affine=Affine.index("k_o", 64)) if i.name == "k" else i for i in tile.idxs
        ),
    )
    assert reduction_unroll(moved, red) == 1
    assert reduction_unroll(tile, []) == 1


def test_a_step_loads_each_operand_once_and_a_trip_each_accumulator_once(tmp_path, monkeypatch):
    """In the unrolled loop's body: one scalar load per row and step (its broadcast
    serves every vector of the row), one vector load per panel vector and step
    (it serves every row), and each accumulator loaded and stored once a trip."""
    monkeypatch.setenv("STRIPEML_CACHE_DIR", str(tmp_path))
    a, b = _arrays(28, 256, 96)
    f = stripeml.compile(MATMUL, target="cpu", constants={"B": b}, threads=1)
    exe = f.lower(a)
    (tile,) = _tiles(exe.program)
    width = stripeml.targets.resolve("cpu").vector_width
    rows = tile.idxs[0].range
    vectors = tile.idxs[-1].range // width
    red = _reductions(tile)
    assert red == ["k"] and reduction_unroll(tile, red) == 4
    (body,) = [blk for blk in re.split(r"\n(?=\S+:)", exe.code) if re.match(r'"?k\.body', blk)]
    vec = f"<{width} x float>"
    assert len(re.findall(r"= load float, ptr ", body)) == 4 * rows
    assert len(re.findall(rf"= load {re.escape(vec)}, ptr ", body)) == 4 * vectors
    slots = rf"{re.escape(vec)}\* %\"tile\.\d+\""
    assert len(re.findall(rf"= load {re.escape(vec)}, {slots}", body)) == rows * vectors
    assert len(re.findall(rf"store {re.escape(vec)} %\S+, {slots}", body)) == rows * vectors
    np.testing.assert_allclose(f(a), a @ b, rtol=1e-4, atol=1e-3)
