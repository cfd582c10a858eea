"""Roofline accounting: FLOPs and DRAM bytes per kernel against hand-computed formulas."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.analysis.roofline import (
    Work,
    attainable_gflops,
    bound_kind,
    flops,
    intrinsic_flops,
    peak_fraction,
    points,
    program_work,
)
from stripeml.ir import parse
from stripeml.targets import load_target
from stripeml.targets.host import HostFacts

from .test_dependence import MATMUL

MATMUL_SRC = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
# "same" padding: the taps that fall outside I are skipped (constraints).
CONV_SAME = """function (I[N, H, W, CI], K[3, 3, CI, CO]) -> (O) {
    O[n, y, x, co : N, H, W, CO] = +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]);
}"""
CONV_VALID = """function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
    O[n, y, x, co : N, H - KH + 1, W - KW + 1, CO] = +(I[n, y + ky, x + kx, ci] * K[ky, kx, ci, co]);
}"""
ELTWISE = "function (A, B) -> (C) { C = relu(A * B + A); }"

F32 = 4


def _cpu() -> stripeml.targets.Target:
    """The cpu target with its ceilings given (nothing is measured)."""
    return load_target("cpu", host=HostFacts(peak_gflops=100.0, dram_gbps=10.0))


def _work(src: str, target, *arrays: np.ndarray, constants=None) -> dict[str, Work]:
    fn = stripeml.compile(src, target=target, constants=constants)
    return program_work(fn.lower(*arrays).program)


def _total(work: dict[str, Work]) -> Work:
    total = Work(0, 0, 0)
    for w in work.values():
        total = total + w
    return total


def ones(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


@pytest.mark.parametrize("m, k, n", [(37, 50, 21), (8, 3, 5)])
def test_matmul_is_2mnk_and_reads_each_operand_once(m: int, k: int, n: int) -> None:
    for target in ("interp", _cpu()):
        parts = list(_work(MATMUL_SRC, target, ones(m, k), ones(k, n)).values())
        # One kernel, or (cpu, ragged rows or vector lanes) parts over disjoint
        # output elements, each reading at most all of A and B, together all of them.
        assert sum(w.flops for w in parts) == 2 * m * n * k  # the mul and the aggregation's add
        read = sum(w.bytes_read for w in parts)
        assert F32 * (m * k + k * n) <= read <= len(parts) * F32 * (m * k + k * n)
        assert all(w.bytes_read <= F32 * (m * k + k * n) for w in parts)
        assert sum(w.bytes_written for w in parts) == F32 * m * n
        assert all(w.bytes == w.bytes_read + w.bytes_written for w in parts)
        assert len(parts) == 1 or target != "interp"


def test_register_tiled_matmul_keeps_2mnk_and_counts_the_panels() -> None:
    m = k = 64
    n = 256  # several panels of any tile width (64 lanes: 6 x 4 tiles with AVX-512)
    b = ones(k, n)
    work = _work(MATMUL_SRC, _cpu(), ones(m, k), constants={"B": b})
    assert len(work) == 2  # B laid out in panels, then the register-tiled kernel
    panels = next(w for name, w in work.items() if name.endswith("_panels"))
    kernel = next(w for name, w in work.items() if not name.endswith("_panels"))
    assert kernel.flops == 2 * m * n * k
    assert panels.flops == 0 and panels.bytes_read == panels.bytes_written == F32 * k * n
    # the kernel reads A and the panels; its register tiles are not DRAM traffic
    assert kernel.bytes_read == F32 * (m * k + k * n) and kernel.bytes_written == F32 * m * n


def test_valid_conv_is_2_n_oh_ow_co_ci_kh_kw() -> None:
    n, h, w, ci, co, kh, kw = 2, 9, 7, 3, 4, 3, 2
    oh, ow = h - kh + 1, w - kw + 1
    for target in ("interp", _cpu()):
        work = _total(_work(CONV_VALID, target, ones(n, h, w, ci), ones(kh, kw, ci, co)))
        assert work.flops == 2 * n * oh * ow * co * ci * kh * kw
        assert work.bytes_written == F32 * n * oh * ow * co


def test_same_conv_counts_only_the_taps_inside_the_image() -> None:
    n, h, w, ci, co = 1, 8, 6, 3, 5
    # per output row the 3 taps, less one at either edge: 3 * h - 2 valid (y, ky) pairs
    taps = (3 * h - 2) * (3 * w - 2)
    (work,) = _work(CONV_SAME, "interp", ones(n, h, w, ci), ones(3, 3, ci, co)).values()
    assert work.flops == 2 * n * taps * ci * co
    assert work.bytes_read == F32 * (n * h * w * ci + 9 * ci * co)
    # the cpu pipeline pads the input with a halo: every tap is computed
    cpu = _work(CONV_SAME, _cpu(), ones(n, h, w, ci), ones(3, 3, ci, co))
    conv = next(v for k, v in cpu.items() if "halo" not in k)
    assert conv.flops == 2 * n * h * w * 9 * ci * co
    assert conv.bytes_read == F32 * (n * (h + 2) * (w + 2) * ci + 9 * ci * co)
    fills = [v for k, v in cpu.items() if "halo" in k]
    assert all(v.flops == 0 for v in fills)
    # one kernel fills the border, a block per slab (the rows whole, the columns
    # between them): disjoint boxes, each border pixel counted once; then the
    # copy into the interior
    border = 2 * (w + 2) * ci + 2 * h * ci
    assert sum(v.bytes_written for v in fills) == F32 * n * (border + h * w * ci)


def test_elementwise_is_ops_per_element_and_three_buffers() -> None:
    a, b = ones(7, 33), ones(7, 33)
    for target in ("interp", _cpu()):
        work = _total(_work(ELTWISE, target, a, b))
        assert work.flops == 3 * a.size  # mul, add, relu
        assert work.bytes_read == 2 * F32 * a.size and work.bytes_written == F32 * a.size


def test_maxpool_window_is_one_flop_per_tap() -> None:
    src = "function (I[N, H, W, C]) -> (O) { O[n, y, x, c : N, H / 2, W / 2, C] = >(I[n, 2 * y + i, 2 * x + j, c]), i < 2, j < 2; }"
    (w,) = _work(src, "interp", ones(1, 8, 6, 3)).values()
    assert w.flops == 4 * 4 * 3 * 3  # each output takes the max of 4 taps
    assert w.bytes_read == F32 * 8 * 6 * 3 and w.bytes_written == F32 * 4 * 3 * 3


def test_points_count_constraints_exactly() -> None:
    block = parse(
        """block main [] #program (out O f32(4):(1)) {
  block k [i:10, j:10, c:7] (
      i - j >= 0
      out O[0]:add f32(1):(1)
  ) {
    $x = const(1.0): f32
    O = store($x)
  }
}"""
    ).root.sub_blocks[0]
    assert points([block]) == 55 * 7  # the triangle i >= j, times c
    assert flops(block) == 55 * 7  # the aggregating store only: a constant is free


def test_intrinsic_weights() -> None:
    assert intrinsic_flops("add") == intrinsic_flops("exp") == intrinsic_flops("select") == 1
    assert intrinsic_flops("cmp_lt") == intrinsic_flops("max") == 1
    assert intrinsic_flops("ident") == intrinsic_flops("cast") == 0
    with pytest.raises(KeyError):
        intrinsic_flops("fma")
    assert flops(MATMUL) == 2 * 8 * 8 * 8


def test_roofline_bound_and_fraction() -> None:
    # ridge point 100 / 10 = 10 FLOP/byte
    assert attainable_gflops(1000, 10, 100.0, 10.0) == 100.0
    assert attainable_gflops(10, 10, 100.0, 10.0) == 10.0
    assert attainable_gflops(5, 0, 100.0, 10.0) == 100.0
    assert bound_kind(1000, 10, 100.0, 10.0) == "compute"
    assert bound_kind(10, 10, 100.0, 10.0) == "memory"
    # 1e9 FLOPs and 1e9 bytes in 1 s: 1 GFLOP/s of a 10 GFLOP/s bound = 0.1
    assert peak_fraction(10**9, 10**9, 1.0, 100.0, 10.0) == pytest.approx(0.1)
    assert peak_fraction(10**9, 10**9, 1.0, 100.0, 10.0) == pytest.approx(
        (10**9 / 1.0 / 1e9) / attainable_gflops(10**9, 10**9, 100.0, 10.0)
    )
    # compute bound: 50 GFLOP/s of 100
    assert peak_fraction(50 * 10**9, 10**6, 1.0, 100.0, 10.0) == pytest.approx(0.5)
    # a copy: judged by its bandwidth
    assert peak_fraction(0, 5 * 10**9, 1.0, 100.0, 10.0) == pytest.approx(0.5)
    assert peak_fraction(0, 0, 0.0, 100.0, 10.0) == 0.0
