"""``unroll`` with the target's vector registers: larger register tiles, fewer rows
before a ragged split, and the code generator keeping them in registers."""

from __future__ import annotations

import re

import numpy as np
import pytest

import stripeml
from stripeml.codegen.llvm import generate
from stripeml.ir.nodes import Block, walk_blocks
from stripeml.passes.manager import run_pipeline
from stripeml.passes.unroll import Unroll
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"


def test_32_registers_take_6_by_4_tiles_and_16_take_4_by_3() -> None:
    grown = Unroll(vector_width=16, registers=32).shaped()
    assert (grown.rows, grown.vectors, grown.max_vectors, grown.registers) == (6, 4, 24, 0)
    filled = Unroll(vector_width=8, registers=16).shaped()
    assert (filled.rows, filled.vectors, filled.max_vectors) == (4, 3, 12)
    plain = Unroll()
    assert plain.shaped() is plain


def _tiled(m: int, n: int, k: int, **options):
    rng = np.random.default_rng(m * n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    program = stripeml.compile(MATMUL, target="interp").lower(a, b).program
    result = run_pipeline(program, [Unroll(**options)]).program
    return result, {"A": a, "B": b}, a @ b


def _tile_shape(kernel: Block) -> tuple[int, int]:
    """(rows, lanes) of the kernel's register tile."""
    (tile,) = [b for b in walk_blocks(kernel) if "register_tile" in b.tags]
    ranges = {i.name: i.range for i in tile.idxs}
    lanes = [r for n, r in ranges.items() if n.startswith("n_") and n.endswith("_r")]
    return ranges["m_r"], lanes[0]


def _check(program, inputs, want, registers: int) -> None:
    np.testing.assert_allclose(run(program, inputs)["C"], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        options = CpuOptions(threads=threads, vector_width=16, vector_registers=registers)
        got = CpuBackend(options).compile(program).run(inputs)["C"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_4_by_3_tile_is_correct_on_the_cpu() -> None:
    program, inputs, want = _tiled(16, 96, 40, vector_width=8, registers=16)
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    assert len(kernels) == 1 and _tile_shape(kernels[0]) == (4, 24)
    np.testing.assert_allclose(run(program, inputs)["C"], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        options = CpuOptions(threads=threads, vector_width=8, vector_registers=16)
        got = CpuBackend(options).compile(program).run(inputs)["C"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_6_by_4_tile_is_correct_on_the_cpu() -> None:
    program, inputs, want = _tiled(24, 128, 40, vector_width=16, registers=32)
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    assert len(kernels) == 1 and _tile_shape(kernels[0]) == (6, 64)
    _check(program, inputs, want, registers=32)


@pytest.mark.parametrize(("m", "rows", "lanes"), [(128, 4, 96), (20, 5, 64)])
def test_rows_that_6_does_not_divide_take_fewer_rows_not_a_rest(m, rows, lanes) -> None:
    """128 tokens: 4 x 6 vectors in one kernel, not 21 tiles of 6 rows and a 2-row
    remainder that reads all of B again."""
    program, inputs, want = _tiled(m, 192, 24, vector_width=16, registers=32)
    kernels = [s for s in program.root.stmts if isinstance(s, Block)]
    assert [k.name for k in kernels] == ["k0_C"]  # no "_rest"
    assert _tile_shape(kernels[0]) == (rows, lanes)
    _check(program, inputs, want, registers=32)


def test_rows_with_no_divisor_of_4_or_more_still_split() -> None:
    program, inputs, want = _tiled(13, 64, 8, vector_width=16, registers=32)
    names = [s.name for s in program.root.stmts if isinstance(s, Block)]
    assert names == ["k0_C", "k0_C_rest"]
    _check(program, inputs, want, registers=32)


def _tile_slots(program, registers: int) -> int:
    module = generate(program, vector_width=16, vector_registers=registers)
    text = "".join(b.llvm_ir or "" for b in module.bodies)
    return len(re.findall(r'%"?tile[.\d"]* = alloca <16 x float>', text))


def test_the_code_generator_keeps_24_accumulators_only_with_32_registers() -> None:
    """With 16 registers a 24-vector tile would spill: it is emitted as plain loops."""
    program, _, _ = _tiled(24, 128, 40, vector_width=16, registers=32)
    assert _tile_slots(program, 32) == 24
    assert _tile_slots(program, 16) == 0
