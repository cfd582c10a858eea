"""``nest``'s panels of re-read keys taken from part of a larger buffer.

GPT-2's attention reads its keys from the fused q/k/v projection (a third of
its columns) with the batch of 1 merged into the rows (``512 * b0 + n``).  The
keys are still laid out once in panels (only the columns read), as BERT's are,
instead of being packed again in every block of queries.  Results are checked
against NumPy on the interpreter and the CPU (1 and 2 threads).
"""

from __future__ import annotations

import numpy as np

import stripeml
from stripeml.ir import format
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

# Q [B, M, H, D]; X [B * M, 2 * H * D]: the values in the first H * D columns,
# the keys in the next H * D, rows of every batch one after the other.
FUSED_KV = """function (Q[B, M, H, D], X[BM, W]) -> (O) {
    S[b, h, m, n : B, H, M, M] = +(Q[b, m, h, d] * X[M * b + n, H * D + D * h + d]);
    T = S * 0.125;
    Mx[b, h, m, 0 : B, H, M, 1] = >(T[b, h, m, n]);
    E = exp(T - Mx);
    L[b, h, m, 0 : B, H, M, 1] = +(E[b, h, m, n]);
    P = E / L;
    O[b, m, h, e : B, M, H, D] = +(P[b, h, m, n] * X[M * b + n, D * h + e]);
}"""


def _reference(q: np.ndarray, x: np.ndarray) -> np.ndarray:
    b, m, h, d = q.shape
    kv = x.astype(np.float64).reshape(b, m, 2, h, d)
    v, k = kv[:, :, 0], kv[:, :, 1]
    s = np.einsum("bmhd,bnhd->bhmn", q.astype(np.float64), k) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bhmn,bnhe->bmhe", p, v)


def _pipeline(width: int = 8) -> list:
    return [
        Fuse(),
        Dce(),
        Nest(cache_bytes=16384, fraction=0.125, min_points=2, min_rows=1, vector_width=width),
        Unroll(vector_width=width),
        Epilogue(),
        Vectorize(width=width),
        Thread(threads=2),
    ]


def test_keys_read_from_part_of_a_fused_buffer_are_laid_out_once() -> None:
    rng = np.random.default_rng(5)
    h, m, d = 2, 64, 8
    q = rng.standard_normal((1, m, h, d)).astype(np.float32)
    x = rng.standard_normal((m, 2 * h * d)).astype(np.float32)
    program = stripeml.compile(FUSED_KV, target="interp").lower(q, x).program
    result = run_pipeline(program, _pipeline()).program
    nests = [s for s in result.root.stmts if isinstance(s, Block) and "nest" in s.tags]
    assert len(nests) == 1
    panels = [r for r in result.root.refs if r.into.startswith("X_panels")]
    # the keys' 16 columns (not the values'), the 64 rows in 4 panels of 16
    assert len(panels) == 1 and panels[0].shape.sizes == (4, h * d, 16)
    (copy,) = [s for s in result.root.stmts if isinstance(s, Block) and "copy" in s.tags]
    assert result.root.stmts.index(copy) < result.root.stmts.index(nests[0])
    assert "X_pack" not in format(result)  # nothing packs the keys per block
    want = _reference(q, x)
    np.testing.assert_allclose(run(result, {"Q": q, "X": x})["O"], want, rtol=1e-4, atol=1e-5)
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, vector_width=8, min_chunk_work=1))
            .compile(result)
            .run({"Q": q, "X": x})["O"]
        )
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
