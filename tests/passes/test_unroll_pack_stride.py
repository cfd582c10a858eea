"""``unroll``'s packing by row stride (``pack_min_stride``), checked against
NumPy on the interpreter and the CPU (1 and 2 threads, every split taken)."""

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
CONV = """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[kx, ky, ci, co]);
}"""


def _conv3x3(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    """NHWC 3x3 convolution, padding 1 (``k``: KX, KY, CI, CO), in float64 NumPy."""
    p = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    x, y = i.shape[1], i.shape[2]
    return sum(
        np.einsum("nxyc,cd->nxyd", p[:, a : a + x, b : b + y], k[a, b].astype(np.float64))
        for a in range(3)
        for b in range(3)
    )


def _lowered(src: str, arrays: list[np.ndarray], passes: list) -> tuple:
    f = stripeml.compile(src, target="interp")
    program = f.lower(*arrays).program
    inputs = dict(zip(f.params, arrays))
    return run_pipeline(program, passes).program, inputs, f.outputs[0]


def _check_cpu(program, inputs, name: str, want: np.ndarray, vector_width: int) -> None:
    np.testing.assert_allclose(run(program, inputs)[name], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, vector_width=vector_width, min_chunk_work=1))
            .compile(program)
            .run(inputs)[name]
        )
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _tiled(program) -> Block:
    (kernel,) = [b for b in program.root.stmts if isinstance(b, Block) and "tiled" in b.tags]
    return kernel


def _packed(program) -> bool:
    return any("cache_in" in b.tags for b in walk_blocks(program.root))


@pytest.mark.parametrize(
    ("n", "stride_bytes", "packed"),
    [(128, 512, False), (256, 1024, False), (512, 2048, True), (768, 3072, True)],
)
def test_panels_pack_by_row_stride(n: int, stride_bytes: int, packed: bool) -> None:
    """``pack_min_stride`` as the cpu target sets it (2 KiB): a ``B`` whose rows
    are closer is read in place, one whose rows are 2 KiB or more apart is packed
    per panel."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, n)).astype(np.float32)
    assert b.strides[0] == stride_bytes
    passes = [
        Unroll(vector_width=16, vectors=2, rows=4, pack_max_bytes=1 << 25, pack_min_stride=2048)
    ]
    program, inputs, name = _lowered(MATMUL, [a, b], passes)
    assert _packed(program) is packed
    _check_cpu(program, inputs, name, a.astype(np.float64) @ b, 16)


def test_pass_default_packs_every_panel() -> None:
    """The pass's own default (``pack_min_stride=0``) keeps the earlier
    behaviour: rows 512 B apart are packed."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((32, 48)).astype(np.float32)
    b = rng.standard_normal((48, 128)).astype(np.float32)
    program, inputs, name = _lowered(MATMUL, [a, b], [Unroll(vector_width=16)])
    assert _packed(program)
    assert [i.name for i in _tiled(program).idxs] == ["n_o"]
    _check_cpu(program, inputs, name, a.astype(np.float64) @ b, 16)


@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_target_bench_shapes(threads: int) -> None:
    """``bench/bench_cpu.py``'s matmul 256 and 3 x 3 convolution (56 x 56 x 64) on
    the cpu target: neither packs its panels (rows 1 KiB and 256 B apart), and
    the results match NumPy; matmul 1024 (rows 4 KiB apart) still packs."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target="cpu", threads=threads).lower(a, b)
    assert "cache_in" not in exe.ir
    np.testing.assert_allclose(exe(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)

    i = rng.standard_normal((1, 56, 56, 64)).astype(np.float32)
    k = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    exe = stripeml.compile(CONV, target="cpu", threads=threads).lower(i, k)
    assert "cache_in" not in exe.ir
    np.testing.assert_allclose(exe(i, k), _conv3x3(i, k), rtol=1e-4, atol=1e-3)

    big = rng.standard_normal((64, 1024)).astype(np.float32)
    w = rng.standard_normal((1024, 1024)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target="cpu", threads=threads).lower(big, w)
    assert "cache_in" in exe.ir
    np.testing.assert_allclose(exe(big, w), big.astype(np.float64) @ w, rtol=1e-4, atol=1e-2)
