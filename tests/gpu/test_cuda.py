"""``target="cuda"``: every program of the suite compiles to PTX with NVRTC (no
GPU needed); with a GPU, the suite runs and matches NumPy."""

from __future__ import annotations

import builtins

import numpy as np
import pytest

import stripeml
from attention import ATTENTION_NHD as ATTENTION
from attention import attention_reference
from stripeml.errors import StripeError

pytest.importorskip("cuda.bindings.nvrtc", reason="the cuda extra is not installed")

from programs import CASES, Case  # noqa: E402
from stripeml.runtime.cuda import gpu_available  # noqa: E402

HAVE_GPU, WHY = gpu_available()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suite_compiles_to_ptx(case: Case) -> None:
    inputs = case.make_inputs()
    exe = stripeml.compile(case.source, target="cuda").lower(**inputs)
    assert "__global__" in exe.code
    ptx = exe._compiled.ptx
    kernels = [s.kernel for s in exe._compiled.module.steps if s.kernel is not None]
    assert ptx.count(".entry") == len(kernels)
    for k in kernels:
        assert f".entry {k.symbol}(" in ptx


def test_cuda_dialect_differs_only_in_spelling() -> None:
    src = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
    a = np.ones((96, 80), np.float32)
    b = np.ones((80, 112), np.float32)
    cuda = stripeml.compile(src, target="cuda").lower(a, b).code
    assert "__syncthreads();" in cuda and "__shared__" in cuda and "blockIdx.x" in cuda
    e = stripeml.compile("function (X) -> (Y) { Y = exp(X); }", target="cuda").lower(a).code
    assert "expf(" in e


def test_run_needs_a_gpu() -> None:
    f = stripeml.compile("function (X) -> (Y) { Y = X + 1; }", target="cuda")
    x = np.arange(5, dtype=np.float32)
    if not HAVE_GPU:
        print(f"no CUDA GPU here: {WHY}")
        with pytest.raises(StripeError, match="no usable CUDA GPU"):
            f(x)
    else:
        np.testing.assert_array_equal(f(x), x + 1)
        np.testing.assert_array_equal(f(x), x + 1)  # device buffers reused


@pytest.mark.skipif(not HAVE_GPU, reason=f"no CUDA GPU: {WHY}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_suite_runs_on_the_gpu(case: Case) -> None:
    inputs = case.make_inputs()
    expected = case.reference({k: v.copy() for k, v in inputs.items()})
    got = stripeml.compile(case.source, target="cuda")(**inputs)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        if np.issubdtype(e.dtype, np.floating):
            np.testing.assert_allclose(g, e, rtol=case.rtol, atol=case.atol)
        else:
            np.testing.assert_array_equal(g, e)


def test_missing_nvrtc_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.startswith("cuda"):
            raise ImportError("No module named 'cuda'")
        return real(name, *args, **kwargs)

    from stripeml.runtime import cuda

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(StripeError, match=r"stripeml\[cuda\]"):
        cuda._nvrtc()


def test_attention_nests_into_shared_memory() -> None:
    """``nest`` on the CUDA target: one kernel per block of (head, query) rows,
    the block's scores in ``__shared__`` memory within the block's 48 KiB; it
    compiles to PTX here, and with a GPU it matches NumPy."""
    rng = np.random.default_rng(3)
    shapes = [(12, 128, 64), (128, 12, 64), (128, 12, 64)]
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    exe = stripeml.compile(ATTENTION, target="cuda").lower(q, k, v)
    (nest,) = [s for s in exe.program.root.stmts if "nest" in getattr(s, "tags", ())]
    assert {r.location for r in nest.refs if r.dir == "none"} == {"SHARED"}
    (kernel,) = [
        s.kernel
        for s in exe._compiled.module.steps
        if s.kernel is not None and s.kernel.block_name == nest.name
    ]
    assert kernel.mapping == "tiled" and 0 < kernel.shared_bytes <= 48 * 1024
    assert f".entry {kernel.symbol}(" in exe._compiled.ptx
    if HAVE_GPU:
        np.testing.assert_allclose(
            exe(q, k, v), attention_reference(q, k, v, nhd=True), rtol=1e-4, atol=1e-5
        )
