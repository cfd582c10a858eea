"""The ``nest`` pass analyses no chain whose intermediates, whole, fit the
cache's share: such a chain cannot nest (its row blocks would count at most
those bytes), so its rows are never unified nor its blocks tried.  The result
is the pass's as before: attention that fits is left alone, attention that
does not is one nest, and it computes what NumPy does."""

from __future__ import annotations

import numpy as np

import stripeml
from attention import ATTENTION
from attention import attention_reference as _attention
from stripeml.ir.nodes import Block
from stripeml.passes.dce import Dce
from stripeml.passes.fuse import Fuse
from stripeml.passes.manager import run_pipeline
from stripeml.passes.nest import Nest
from stripeml.runtime.interp import run


def _fused(h: int, m: int, n: int, d: int):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((h, m, d), (h, n, d), (h, n, d)))
    program = stripeml.compile(ATTENTION, target="interp").lower(q, k, v).program
    return run_pipeline(program, [Fuse(), Dce()]).program, {"Q": q, "K": k, "V": v}


def test_chains_that_fit_are_not_analysed(unified: list[int]) -> None:
    fused, _ = _fused(2, 16, 16, 8)  # scores 2 x 16 x 16 x 4 bytes: 2 KiB
    assert Nest(cache_bytes=1 << 20).run(fused) is fused
    assert unified == []


def test_chains_that_do_not_fit_still_nest(unified: list[int]) -> None:
    fused, inputs = _fused(2, 32, 32, 8)  # scores 8 KiB, over 16 KiB x 0.125
    opt = Nest(cache_bytes=16384, fraction=0.125, min_points=2, min_rows=1, vector_width=8)
    result = opt.run(fused)
    nests = [s for s in result.root.stmts if isinstance(s, Block) and "nest" in s.tags]
    assert len(nests) == 1 and unified
    want = _attention(inputs["Q"], inputs["K"], inputs["V"], False)
    np.testing.assert_allclose(run(result, inputs)["O"], want, rtol=1e-4, atol=1e-5)
