"""Attention's row maximum inside a ``nest``: the fused kernel that writes the
scaled scores over the scores (``in_place``) and accumulates their row maximum
keeps that maximum in vector lanes (``codegen/llvm_kernel.py``'s
``_scope_beside_assignments``, ``codegen/llvm_minmax.py``'s ``vector_minmax``),
with NaN and infinities as NumPy's ``maximum`` gives them."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from attention import ATTENTION_NHD
from attention import attention_reference as _attention
from stripeml.codegen.llvm import generate
from stripeml.ir.nodes import Block
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

NEST = dict(cache_bytes=16384, fraction=0.125, min_points=2, min_rows=1, vector_width=8)


def _program(q, k, v):
    program = stripeml.compile(ATTENTION_NHD, target="interp").lower(q, k, v).program
    passes = [
        Fuse(),
        Dce(),
        Nest(in_place=True, **NEST),
        Unroll(vector_width=8),
        Epilogue(),
        Vectorize(width=8),
        Thread(threads=2),
    ]
    return run_pipeline(program, passes).program


def _inputs(seed: int = 5):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 32, 8)).astype(np.float32)
    k = rng.standard_normal((64, 2, 8)).astype(np.float32)
    v = rng.standard_normal((64, 2, 8)).astype(np.float32)
    return q, k, v


def test_nest_row_max_in_vector_lanes() -> None:
    """The nest's body takes the row maximum of 8 lanes at a time (before, the
    maximum accumulated in memory, in scalar ``llvm.maximum.f32``, after a pass
    that wrote -inf)."""
    program = _program(*_inputs())
    (nest,) = [s for s in program.root.stmts if isinstance(s, Block) and "nest" in s.tags]
    module = generate(program, vector_width=8, fma=True)
    texts = [b.llvm_ir for b in module.bodies if b.llvm_ir and "exp" in b.llvm_ir]
    assert len(texts) == 1, nest.name
    assert "llvm.x86.avx.max.ps.256" in texts[0] or "llvm.maximum.v8f32" in texts[0]


@pytest.mark.parametrize("case", ["plain", "nan_query", "inf_key", "masked"])
def test_nest_softmax_with_nan_and_inf(case: str) -> None:
    q, k, v = _inputs(7)
    if case == "nan_query":
        q[1, 3, 2] = np.nan  # a row of NaN scores: its maximum and output are NaN
    elif case == "inf_key":
        k[5, 0, 0] = np.inf  # +-inf scores: inf - inf is NaN where the maximum is inf
    elif case == "masked":
        q[0, 4] = -1e38  # a row of -inf scores in float32: maximum -inf, output NaN
        k[:, 0, :] = np.abs(k[:, 0, :]) + 0.5
    program = _program(q, k, v)
    inputs = {"Q": q, "K": k, "V": v}
    interp = run(program, inputs)["O"]
    with np.errstate(invalid="ignore", over="ignore"):
        want = _attention(q, k, v, nhd=True)
    if case == "masked":  # float64 does not overflow: the interpreter is the reference
        assert np.isnan(interp[0, 4]).all() and not np.isnan(interp[0, :4]).any()
        want = interp
    assert np.array_equal(np.isnan(interp), np.isnan(want))
    for threads in (1, 2):
        options = CpuOptions(threads=threads, vector_width=8, min_chunk_work=1)
        got = CpuBackend(options).compile(program).run(inputs)["O"]
        np.testing.assert_allclose(got, interp, rtol=1e-4, atol=1e-5)  # NaN where NaN
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
