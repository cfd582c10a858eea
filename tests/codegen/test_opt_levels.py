"""Each kernel body gets the LLVM pipeline it needs (``codegen.llvm.body_opt_level``):
O1 for glue (copies, fills) and for kernels the code generator tiled and put in
vector lanes itself, O3 for the rest (element-wise math, scalar reductions, an
epilogue calling the math library).  Whatever the level, the results must be
NumPy's: every program here is compiled on two threads (the LLVM helper
processes compile part of it) and checked against NumPy."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

import stripeml
from stripeml import api
from stripeml.codegen.llvm import body_opt_level, generate, generator_tiled
from stripeml.ir.nodes import Block
from stripeml.runtime.cpu import CpuBackend, CpuOptions

# Two matmuls with a bias: one ends in relu, one in erf (the math library).
DENSE = """function (X[M, K], W[K, N], B[N]) -> (Y, G, E, T) {
    A[m, n : M, N] = +(X[m, k] * W[k, n]);
    Y = relu(A + B);
    C[m, n : M, N] = +(X[m, k] * W[k, n]);
    G = erf(C + B);
    E = exp(X);
    T[k, m : K, M] = =(X[m, k]);
}"""
# A padded convolution: the halo pass adds fills and a copy around it.
CONV = """function (I[N, H, W, CI], K[KH, KW, CI, CO]) -> (O) {
    O[n, y, x, co : N, H, W, CO] = +(I[n, y + ky - 1, x + kx - 1, ci] * K[ky, kx, ci, co]);
}"""


def _direct() -> object:
    """The ``cpu`` target without ``winograd``: these tests are about a direct
    convolution's bodies (its weights are an input, which ``winograd`` also
    rewrites on images of 16 blocks and more)."""
    target = api.target_for("cpu", 2)
    return dataclasses.replace(
        target, pipeline=tuple(p for p in target.pipeline if p.name != "winograd")
    )


def _kernels(program) -> dict[str, Block]:
    return {s.name: s for s in program.root.stmts if isinstance(s, Block)}


def _dense_arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    shapes = ((64, 96), (96, 80), (80,))
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_levels_follow_what_the_generator_did_itself() -> None:
    arrays = _dense_arrays()
    kernels = _kernels(stripeml.compile(DENSE, target="cpu").lower(*arrays).program)
    relu_mm = next(k for n, k in kernels.items() if n.endswith("_A"))
    erf_mm = next(k for n, k in kernels.items() if n.endswith("_C"))
    exp_k = next(k for n, k in kernels.items() if n.endswith("_E"))
    # both matmuls are register tiles with a vector epilogue
    assert "tiled" in relu_mm.tags and "tiled" in erf_mm.tags
    assert body_opt_level(relu_mm) == 1 and generator_tiled(relu_mm)
    assert body_opt_level(erf_mm) == 3 and not generator_tiled(erf_mm)  # erf: the math library
    assert body_opt_level(exp_k) == 3  # element-wise math stays at O3
    conv = _kernels(
        stripeml.compile(CONV, target=_direct()).lower(*_conv_arrays()).program
    ).values()
    levels = {tag: {body_opt_level(k) for k in conv if tag in k.tags} for tag in ("fill", "copy")}
    assert levels == {"fill": {1}, "copy": {1}}
    tiled = [k for k in conv if "contraction" in k.tags]
    assert tiled and all(body_opt_level(k) == 1 for k in tiled)


def test_generated_bodies_carry_their_level() -> None:
    arrays = _dense_arrays()
    program = stripeml.compile(DENSE, target="cpu").lower(*arrays).program
    module = generate(program, vector_width=8)
    # one body per kernel here (none repeats): each carries its kernel's level
    want = sorted(body_opt_level(k) for k in _kernels(program).values())
    assert sorted(b.opt for b in module.bodies) == want and set(want) == {1, 3}


def _conv_arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [
        rng.standard_normal((1, 16, 16, 64)).astype(np.float32),
        rng.standard_normal((3, 3, 64, 32)).astype(np.float32),
    ]


@pytest.mark.parametrize("workers", ["0", "1"])
def test_mixed_levels_match_numpy(tmp_path, monkeypatch, workers: str) -> None:
    monkeypatch.setenv("STRIPEML_COMPILE_WORKERS", workers)
    x, w, b = _dense_arrays()
    program = stripeml.compile(DENSE, target="cpu").lower(x, w, b).program
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path / workers)).compile(program)
    out = compiled.run({"X": x, "W": w, "B": b})
    mm = x.astype(np.float64) @ w.astype(np.float64) + b
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(out["Y"], np.maximum(mm, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["G"], erf(mm), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["E"], np.exp(x.astype(np.float64)), rtol=1e-5)
    np.testing.assert_array_equal(out["T"], x.T)

    i, k = _conv_arrays()
    program = stripeml.compile(CONV, target=_direct()).lower(i, k).program
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path / workers)).compile(program)
    got = compiled.run({"I": i, "K": k})["O"]
    padded = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((1, 16, 16, 32))
    for ky in range(3):
        for kx in range(3):
            want += padded[:, ky : ky + 16, kx : kx + 16, :] @ k[ky, kx].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_one_trip_indices_get_no_loop_and_results_match_numpy(tmp_path) -> None:
    """A batch of one: the kernel's ``n`` (range 1) is bound to 0, not looped over,
    and the results are still NumPy's."""
    i, k = _conv_arrays()
    program = stripeml.compile(CONV, target=_direct()).lower(i, k).program
    conv = next(b for b in _kernels(program).values() if "contraction" in b.tags)
    assert any(x.range == 1 for x in conv.idxs)  # n
    module = generate(program, vector_width=8)
    texts = [b.llvm_ir or "" for b in module.bodies]
    ones = {x.name for x in conv.idxs if x.range == 1 and not x.affine}
    loops = [re.compile(rf"(?<![\w.]){re.escape(n)}\.head\.") for n in ones]
    assert ones and not any(loop.search(t) for loop in loops for t in texts)
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(program)
    got = compiled.run({"I": i, "K": k})["O"]
    padded = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(
        padded[:, ky : ky + 16, kx : kx + 16, :] @ k[ky, kx].astype(np.float64)
        for ky in range(3)
        for kx in range(3)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bodies_at_both_levels_compile_alike_serially_and_in_parallel(monkeypatch) -> None:
    """Each body's object is the same bytes whether this process or a helper made it."""
    from stripeml.runtime import jit, llvm_pool

    program = stripeml.compile(DENSE, target="cpu").lower(*_dense_arrays()).program
    bodies = [(b.llvm_ir or "", b.opt) for b in generate(program, vector_width=8).bodies]
    assert {opt for _, opt in bodies} == {1, 3}
    serial = [jit.compile_ir(text, opt=opt) for text, opt in bodies]
    monkeypatch.setenv(llvm_pool.WORKERS_VARIABLE, "2")
    try:
        parallel = llvm_pool.compile_modules(bodies * 2)  # enough modules for the helpers
    finally:
        llvm_pool._close_all()
    assert parallel == serial * 2


@pytest.mark.parametrize("channels, level", [(3, 3), (16, 1)])
def test_short_reductions_of_large_tiles(tmp_path, channels: int, level: int) -> None:
    """Few input channels (a network's first convolution, MobileNetV2's narrow
    layers): the tile's innermost reduction is short.  Where the code
    generator unrolls it four steps at a time itself (16) the body is O1 as
    for a long one; where it cannot (3) LLVM's unrolling pays, so O3.
    Results are NumPy's."""
    rng = np.random.default_rng(5)
    i = rng.standard_normal((1, 16, 16, channels)).astype(np.float32)
    k = rng.standard_normal((3, 3, channels, 64)).astype(np.float32)
    program = stripeml.compile(CONV, target=_direct()).lower(i, k).program
    tiled = [b for b in _kernels(program).values() if "tiled" in b.tags]
    assert tiled and all(body_opt_level(b) == level for b in tiled)
    assert all(generator_tiled(b) == (level == 1) for b in tiled)
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(program)
    got = compiled.run({"I": i, "K": k})["O"]
    padded = np.pad(i.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(
        padded[:, ky : ky + 16, kx : kx + 16, :] @ k[ky, kx].astype(np.float64)
        for ky in range(3)
        for kx in range(3)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_small_tiles_stay_at_o3(tmp_path) -> None:
    """A matrix-vector product (one row): its tile holds fewer than
    ``O1_TILE_VECTORS`` vectors, where LLVM's unrolling pays, so O3; results
    are NumPy's."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 512)).astype(np.float32)
    w = rng.standard_normal((512, 32)).astype(np.float32)
    source = "function (X[M, K], W[K, N]) -> (Y) { Y[m, n : M, N] = +(X[m, k] * W[k, n]); }"
    program = stripeml.compile(source, target="cpu").lower(x, w).program
    tiled = [b for b in _kernels(program).values() if "tiled" in b.tags]
    assert tiled and all(body_opt_level(b) == 3 and not generator_tiled(b) for b in tiled)
    compiled = CpuBackend(CpuOptions(threads=2, cache_dir=tmp_path)).compile(program)
    got = compiled.run({"X": x, "W": w})["Y"]
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-4, atol=1e-4)
