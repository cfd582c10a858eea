"""``target="opencl"`` beyond the program suite: the tiled mapping (work-groups,
local memory, barriers, register accumulators) on contractions big enough to
tile, float64, and the error when the extra is missing."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

import stripeml
from attention import ATTENTION_NHD as ATTENTION
from attention import attention_reference
from stripeml.errors import StripeError

pytest.importorskip("pyopencl", reason="the opencl extra is not installed")

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
CONV = """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[kx, ky, ci, co]);
}"""
MAXMM = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = >(A[m, k] + B[k, n]); }"
BATCHED = "function (X[B, M, K], Y[B, K, N]) -> (Z) { Z[b, m, n : B, M, N] = +(X[b, m, k] * Y[b, k, n]); }"

rng = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


def _conv_ref(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    p = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros(i.shape[:3] + (k.shape[3],), np.float64)
    for kx in range(k.shape[0]):
        for ky in range(k.shape[1]):
            win = p[:, kx : kx + i.shape[1], ky : ky + i.shape[2], :]
            out += np.einsum("nxyc,cd->nxyd", win, k[kx, ky])
    return out.astype(np.float32)


CASES = [
    ("matmul", MATMUL, lambda: (_f32(96, 80), _f32(80, 112)), lambda a, b: a @ b),
    (
        "matmul_int32",
        MATMUL,
        lambda: (
            rng.integers(-9, 9, (64, 48)).astype(np.int32),
            rng.integers(-9, 9, (48, 64)).astype(np.int32),
        ),
        lambda a, b: a @ b,
    ),
    (
        "max_plus",
        MAXMM,
        lambda: (_f32(64, 40), _f32(40, 72)),
        lambda a, b: (a[:, :, None] + b[None, :, :]).max(axis=1),
    ),
    ("batched", BATCHED, lambda: (_f32(3, 40, 64), _f32(3, 64, 48)), lambda x, y: x @ y),
    ("conv_pad", CONV, lambda: (_f32(2, 12, 12, 8), _f32(3, 3, 8, 16)), _conv_ref),
]


@pytest.mark.parametrize("target", ["opencl", "opencl_pocl"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_tiled_kernels_match_numpy(case, target: str) -> None:
    name, source, make, reference = case
    args = make()
    f = stripeml.compile(source, target=target)
    exe = f.lower(*args)
    mappings = [s.kernel.mapping for s in exe._compiled.module.steps if s.kernel is not None]
    if name != "conv_pad":  # padded borders leave whole-buffer views: not always tiled
        assert "tiled" in mappings, exe.ir
        assert "barrier(" in exe.code and "__local" in exe.code
    got = f(*args)
    want = reference(*args)
    if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(f(*args), got)  # device buffers reused across calls


@pytest.mark.opencl_device
def test_shared_memory_offsets_come_from_place() -> None:
    a, b = _f32(96, 80), _f32(80, 112)
    exe = stripeml.compile(MATMUL, target="opencl").lower(a, b)
    assert "@SHARED:" in exe.ir  # placed
    assert "__local uchar smem" in exe.code
    tiled = [
        s.kernel for s in exe._compiled.module.steps if s.kernel and s.kernel.mapping == "tiled"
    ]
    assert tiled and 0 < tiled[0].shared_bytes <= 32 * 1024
    assert tiled[0].group_size <= 256


@pytest.mark.opencl_device
def test_float64_and_out_arrays() -> None:
    a = rng.uniform(-1, 1, (33, 20))
    b = rng.uniform(-1, 1, (20, 17))
    f = stripeml.compile(MATMUL, target="opencl")
    out = np.full((33, 17), 5.0)
    got = f(a, b, out=out)
    assert got is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)
    assert "cl_khr_fp64" in f.lower(a, b).code


def test_missing_pyopencl_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "pyopencl" or name.startswith("pyopencl."):
            raise ImportError("No module named 'pyopencl'")
        return real(name, *args, **kwargs)

    from stripeml.runtime import opencl

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(StripeError, match=r"stripeml\[opencl\]"):
        opencl._cl()


@pytest.mark.opencl_device
def test_constants_are_uploaded_with_every_call() -> None:
    """Bound constants reach the device (the GPU backends run every statement,
    constant or not, at each call)."""
    src = """function (A[M, K], B[N, K]) -> (C) {
      T[k, n : K, N] = =(B[n, k]);
      C[m, n : M, N] = +(A[m, k] * T[k, n]);
    }"""
    rng = np.random.default_rng(9)
    b = rng.standard_normal((16, 32)).astype(np.float32)
    f = stripeml.compile(src, target="opencl_pocl", constants={"B": b})
    for _ in range(2):
        a = rng.standard_normal((8, 32)).astype(np.float32)
        np.testing.assert_allclose(f(a), a @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["opencl_pocl", "opencl"])
@pytest.mark.parametrize("shape", [(4, 128, 128, 32), (3, 60, 96, 16)], ids=str)
def test_attention_runs_as_one_work_group_per_row_block(target: str, shape) -> None:
    """``nest`` on a GPU target: the chain from the scores to the product with V
    is one kernel, a work-group per block of (head, query) rows, with the
    block's scores in local memory; no intermediate is a global buffer."""
    h, m, n, d = shape
    q, k, v = _f32(h, m, d), _f32(n, h, d), _f32(n, h, d)
    exe = stripeml.compile(ATTENTION, target=target).lower(q, k, v)
    assert "nest" in [name for name, _ in exe.stages]
    program = exe.program
    (nest,) = [s for s in program.root.stmts if "nest" in getattr(s, "tags", ())]
    local = {r.into for r in nest.refs if r.dir == "none"}
    assert {"S", "X", "P"} <= local
    assert {r.location for r in nest.refs if r.dir == "none"} == {"SHARED"}
    assert not local & {r.into for r in program.root.refs}
    steps = [s.kernel for s in exe._compiled.module.steps if s.kernel is not None]
    (kernel,) = [k for k in steps if k.block_name == nest.name]
    assert kernel.mapping == "tiled" and 0 < kernel.shared_bytes <= 32 * 1024
    np.testing.assert_allclose(
        exe(q, k, v), attention_reference(q, k, v, nhd=True), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("target", ["opencl_pocl", "opencl"])
@pytest.mark.parametrize("n", [1, 2, 3, 16])
@pytest.mark.parametrize("fn", ["exp", "sigmoid", "tanh"])
def test_remainder_by_zero_is_nan_through_transcendentals(target: str, n: int, fn: str) -> None:
    """``A % 0.0`` is NaN (NumPy's remainder), and so is ``exp`` of it.  PoCL folded
    ``fmod(a, 0.0)`` to a constant NaN and ``exp`` of that constant to finite
    garbage (6.2e17 for one or two work-items), which a zero-divisor branch that
    computes its NaN at run time avoids (fuzzer seed 9500000246)."""
    a = _f32(n)
    src = f"function (A[N]) -> (T) {{ T = {fn}(A % 0.0); }}"
    with np.errstate(invalid="ignore"):
        want = getattr(np, {"sigmoid": "exp"}.get(fn, fn))(np.remainder(a, np.float32(0)))
    assert np.isnan(want).all()
    got = stripeml.compile(src, target=target)(a)
    assert np.isnan(got).all(), got
