"""``nest``'s ``in_place``: an intermediate computed element by element from another
one, which nothing reads afterwards, is written over it, so attention's row block
holds one block of scores instead of three; an elementwise kernel that
``epilogue`` runs on a product's tiles keeps its own buffer."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from attention import ATTENTION_NHD
from attention import attention_reference as _attention
from dw_pw import DW_PW
from dw_pw import dw_pw_inputs as _dw_pw_inputs
from dw_pw import dw_pw_reference as _dw_pw_reference
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


def _nest(program) -> Block:
    (nest,) = [s for s in program.root.stmts if isinstance(s, Block) and "nest" in s.tags]
    return nest


def _passes(in_place: bool, **nest) -> list:
    return [
        Fuse(),
        Dce(),
        Nest(in_place=in_place, **nest),
        Unroll(vector_width=8),
        Epilogue(),
        Vectorize(width=8),
        Thread(threads=2),
    ]


def _on_the_cpu(program, inputs, want) -> None:
    np.testing.assert_allclose(run(program, inputs)["O"], want, rtol=1e-4, atol=1e-5)
    for threads in (1, 2):
        options = CpuOptions(threads=threads, vector_width=8, min_chunk_work=1)
        got = CpuBackend(options).compile(program).run(inputs)["O"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("in_place", [True, False])
def test_attention_keeps_one_block_of_scores(in_place: bool) -> None:
    """The scores, the scaled scores, their exp and the probabilities: one (rows x
    keys) allocation written over pass by pass, not four; the row maximum and sum
    stay apart."""
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 32, 8)).astype(np.float32)
    k = rng.standard_normal((64, 2, 8)).astype(np.float32)
    v = rng.standard_normal((64, 2, 8)).astype(np.float32)
    program = stripeml.compile(ATTENTION_NHD, target="interp").lower(q, k, v).program
    nest = dict(cache_bytes=16384, fraction=0.125, min_points=2, min_rows=1, vector_width=8)
    result = run_pipeline(program, _passes(in_place, **nest)).program
    blocks = [r for r in _nest(result).refs if r.dir == "none" and r.shape.sizes[-1] == 64]
    assert len(blocks) == (1 if in_place else 4)  # S, T, X and P = X / L
    _on_the_cpu(result, {"Q": q, "K": k, "V": v}, _attention(q, k, v, nhd=True))


def test_an_epilogue_keeps_its_buffer() -> None:
    """A depthwise convolution's bias and ReLU (``A = relu(D + B)``) run on the
    product's register tiles (``epilogue``): ``A`` is stored, ``D`` never is, so
    ``A`` is not written over ``D``."""
    a = _dw_pw_inputs()
    program = stripeml.compile(DW_PW, target="interp").lower(**a).program
    nest = dict(cache_bytes=16384, fraction=0.25, min_points=4, min_rows=4, threads=2)
    result = run_pipeline(program, _passes(True, **nest)).program
    (d,) = [r for r in _nest(result).refs if r.dir == "none"]
    assert d.into == "A"
    want = _dw_pw_reference(a)
    np.testing.assert_allclose(run(result, a)["O"], want, rtol=1e-4, atol=1e-4)
    got = CpuBackend(CpuOptions(threads=2, vector_width=8, min_chunk_work=1)).compile(result)
    np.testing.assert_allclose(got.run(a)["O"], want, rtol=1e-4, atol=1e-4)


def test_the_cpu_target_writes_in_place() -> None:
    """The bundled target turns it on (``targets/cpu.toml``)."""
    from stripeml import api

    (spec,) = [p for p in api.target_for("cpu", 2).pipeline if p.name == "nest"]
    assert dict(spec.options)["in_place"] is True
