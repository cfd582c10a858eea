"""``nest``: chains of kernels that hand rows along run as one kernel over row blocks.

Results are checked against NumPy on the interpreter and on the CPU (1 and 2
threads), never against the pass itself.
"""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from attention import ATTENTION, ATTENTION_NHD
from attention import attention_reference as _attention
from dw_pw import DW_PW
from dw_pw import dw_pw_inputs as _dw_pw_inputs
from dw_pw import dw_pw_reference as _dw_pw_reference
from stripeml.ir.nodes import Block, Program
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


def _inputs(h, m, n, d, nhd=False, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((h, m, d)).astype(np.float32)
    shape = (n, h, d) if nhd else (h, n, d)
    return (
        q,
        rng.standard_normal(shape).astype(np.float32),
        rng.standard_normal(shape).astype(np.float32),
    )


def _pipeline(cache_bytes, width=8, fraction=0.125):
    return [
        Fuse(),
        Dce(),
        Nest(
            cache_bytes=cache_bytes, fraction=fraction, min_points=2, min_rows=1, vector_width=width
        ),
        Unroll(vector_width=width),
        Epilogue(),
        Vectorize(width=width),
        Thread(threads=2),
    ]


def _nests(program):
    return [s for s in program.root.stmts if isinstance(s, Block) and "nest" in s.tags]


def _check(program, inputs, want):
    np.testing.assert_allclose(run(program, inputs)["O"], want, rtol=1e-4, atol=1e-5)
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, vector_width=8, min_chunk_work=1))
            .compile(program)
            .run(inputs)["O"]
        )
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("h", "m", "n", "d", "nhd"),
    [(2, 32, 32, 8, False), (3, 24, 48, 16, True), (1, 13, 64, 8, False), (2, 64, 32, 8, True)],
)
def test_attention_becomes_one_nest(h, m, n, d, nhd):
    """The whole chain, from the scores to the product with V, is one kernel over
    blocks of (head, query) rows; its intermediates are the block's allocations."""
    q, k, v = _inputs(h, m, n, d, nhd)
    src = ATTENTION_NHD if nhd else ATTENTION
    program = stripeml.compile(src, target="interp").lower(q, k, v).program
    result = run_pipeline(program, _pipeline(cache_bytes=16384)).program
    (nest,) = _nests(result)
    assert len(nest.sub_blocks) == 5  # scores, max, exp + sum, division, product
    local = {r.into for r in nest.refs if r.dir == "none"}
    assert {"S", "X", "P"} <= local
    assert not local & {r.into for r in result.root.refs}  # no longer root buffers
    rows = {i.name: i.range for i in nest.idxs}
    assert rows.get("rows_h", 1) == h and m % rows["rows_m"] == 0  # single heads, m blocks
    _check(result, {"Q": q, "K": k, "V": v}, _attention(q, k, v, nhd))


# The importer's attention output: the heads merged back by a transpose and a
# reshape, so the division after the product writes ``Y[m, E*h + e]``.
ATTENTION_MERGED = ATTENTION_NHD.replace("-> (O)", "-> (Y)").replace(
    "O[h, m, e : H, M, E] = +(P[h, m, n] * V[n, h, e]);",
    "O[h, m, e : H, M, E] = +(P[h, m, n] * V[n, h, e]);\n"
    "    R[m, h, e : M, H, E] = =(O[h, m, e]);\n"
    "    Y = reshape(R, M, H * E);",
)


@pytest.mark.parametrize(("h", "m", "n", "d"), [(4, 64, 256, 16), (3, 48, 256, 8)])
def test_merged_heads_are_written_by_the_nest(h, m, n, d):
    """The division after the product (``divide_late``) and the heads' merge join
    the chain: each row block, one head's queries, writes its columns ``E*h ..
    E*h + E-1`` of ``Y`` itself, and no root kernel reads the product's sums
    back.  (A block of every head's queries would re-read all the heads' keys and
    values, more than the cache, once per block.)"""
    from dataclasses import replace

    from pipelines import cpu_passes

    q, k, v = _inputs(h, m, n, d, nhd=True)
    program = stripeml.compile(ATTENTION_MERGED, target="interp").lower(q, k, v).program
    passes = [
        replace(p, cache_bytes=65536, fraction=0.5, min_points=2, min_rows=4)
        if isinstance(p, Nest)
        else p
        for p in cpu_passes(vector_width=8)
    ]
    result = run_pipeline(program, passes).program
    (nest,) = _nests(result)
    assert [r.from_ for r in nest.refs if r.dir == "out"] == ["Y"]
    assert {i.name for i in nest.idxs} == {"rows_h", "rows_m"}
    assert nest is result.root.stmts[-1]  # nothing after it: the merge is inside
    want = _attention(q, k, v, nhd=True).transpose(1, 0, 2).reshape(m, h * d)
    inputs = {"Q": q, "K": k, "V": v}
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-4, atol=1e-5)
    for threads in (1, 2):
        opts = CpuOptions(threads=threads, vector_width=8, min_chunk_work=1)
        got = CpuBackend(opts).compile(result).run(inputs)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_write_row_blocks_would_share_ends_the_chain():
    """``c*h + e`` separates the heads only while ``e`` stays below ``c``."""
    from stripeml.ir.affine import Affine
    from stripeml.passes._nest_blocks import separates as _separates

    h, e, m = Affine.index("h"), Affine.index("e"), Affine.index("m")
    ranges = {"h": 4, "e": 16, "m": 8}
    assert _separates((m, h * 16 + e), "h", ranges)
    assert _separates((m, h * 16 + e), "m", ranges)
    assert not _separates((m, h * 8 + e), "h", ranges)  # head 0's 8..15 are head 1's 0..7
    assert not _separates((m, h + e), "h", ranges)
    assert not _separates((m + 1, h * 16 + e), "m", ranges)  # an offset: see _splits_epilogue
    assert not _separates((m, h * 16 + e + 1), "h", ranges)


def test_reread_inputs_are_laid_out_in_panels_once():
    """The keys, read whole by every block of queries and across the scores'
    vector index, are copied once at the root into dense panels of the products'
    vector tile; the product inside the nest reads them in place, unpacked."""
    q, k, v = _inputs(2, 32, 64, 8, nhd=True)
    program = stripeml.compile(ATTENTION_NHD, target="interp").lower(q, k, v).program
    result = run_pipeline(program, _pipeline(cache_bytes=16384)).program
    (nest,) = _nests(result)
    panels = [r for r in result.root.refs if r.into.startswith("K_panels")]
    assert len(panels) == 1 and panels[0].shape.sizes == (4, 2, 8, 16)  # 64 keys in 4 x 16
    copies = [s for s in result.root.stmts if isinstance(s, Block) and "copy" in s.tags]
    assert copies and result.root.stmts.index(copies[0]) < result.root.stmts.index(nest)
    from stripeml.ir import format

    assert "K_pack" not in format(result)  # nothing packs the keys per block
    _check(result, {"Q": q, "K": k, "V": v}, _attention(q, k, v, nhd=True))


def test_intermediates_that_fit_the_cache_are_left_alone():
    q, k, v = _inputs(2, 16, 16, 8)
    program = stripeml.compile(ATTENTION, target="interp").lower(q, k, v).program
    fused = run_pipeline(program, [Fuse(), Dce()]).program
    assert Nest(cache_bytes=1 << 20).run(fused) is fused


def test_a_row_read_at_another_row_is_not_nested():
    """``R = S^T`` reads the scores of query m at row n: rows would cross blocks."""
    src = """function (Q[M, D], K[N, D]) -> (R) {
        S[m, n : M, N] = +(Q[m, d] * K[n, d]);
        T = exp(S);
        R[n, m : N, M] = =(T[m, n]);
    }"""
    q, k, _ = _inputs(1, 32, 32, 8)
    q, k = q[0], k[0]
    program = stripeml.compile(src, target="interp").lower(q, k).program
    fused = run_pipeline(program, [Fuse(), Dce()]).program
    result = Nest(cache_bytes=1024, min_points=2).run(fused)
    assert not _nests(result)


def test_a_result_read_later_keeps_the_chain_apart():
    """An intermediate that is a program result cannot become a block's allocation."""
    src = """function (Q[M, D], K[N, D]) -> (S, Mx) {
        S[m, n : M, N] = +(Q[m, d] * K[n, d]);
        Mx[m, 0 : M, 1] = >(S[m, n]);
    }"""
    q, k, _ = _inputs(1, 32, 32, 8)
    program = stripeml.compile(src, target="interp").lower(q[0], k[0]).program
    fused = run_pipeline(program, [Fuse(), Dce()]).program
    assert Nest(cache_bytes=1024, min_points=2).run(fused) is fused


def test_a_weight_reread_from_beyond_the_cache_keeps_its_kernel():
    """Rows then a product with a weight matrix larger than the cache: every block
    of rows would read all of it again, more than nesting saves."""
    src = """function (X[M, K], W[K, N]) -> (Y) {
        A = exp(X);
        Y[m, n : M, N] = +(A[m, k] * W[k, n]);
    }"""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    w = rng.standard_normal((64, 256)).astype(np.float32)
    program = stripeml.compile(src, target="interp").lower(x, w).program
    fused = run_pipeline(program, [Fuse(), Dce()]).program
    assert Nest(cache_bytes=8192, min_points=2).run(fused) is fused


def test_the_cpu_target_nests_attention_and_agrees_with_numpy():
    """With the bundled target (half of the machine's L2 per block)."""
    q, k, v = _inputs(4, 256, 256, 32)
    exe = stripeml.compile(ATTENTION, target="cpu").lower(q, k, v)
    if "nest" not in [name for name, _ in exe.stages]:
        pytest.skip("this machine's L2 holds the whole attention")
    assert "#nest" in exe.ir
    np.testing.assert_allclose(exe(q, k, v), _attention(q, k, v), rtol=1e-4, atol=1e-5)


def test_depthwise_then_pointwise_runs_by_whole_image_rows():
    """The depthwise output (its bias and ReLU fused in, A) is a block's allocation of a few whole image rows
    (``x`` kept whole for the register tiles along it); the pointwise kernel reads it
    there.  The blocks share evenly between two threads (8 of 2 rows, not 16 of 1
    or a prime count)."""
    a = _dw_pw_inputs()
    program = stripeml.compile(DW_PW, target="interp").lower(**a).program
    passes = [
        Fuse(),
        Dce(),
        Nest(cache_bytes=16384, fraction=0.25, min_points=4, min_rows=4, threads=2),
        Unroll(vector_width=8),
        Epilogue(),
        Vectorize(width=8),
        Thread(threads=2),
    ]
    result = run_pipeline(program, passes).program
    (nest,) = _nests(result)
    (d,) = [r for r in nest.refs if r.dir == "none"]
    assert d.into == "A" and d.shape.sizes == (1, 2, 12, 24)  # 2 rows of 12 pixels, 24 channels
    assert [(i.name, i.range) for i in nest.idxs] == [("rows_y", 8)]
    assert not {"A", "D"} & {r.into for r in result.root.refs}
    np.testing.assert_allclose(run(result, a)["O"], _dw_pw_reference(a), rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, vector_width=8, min_chunk_work=1))
            .compile(result)
            .run(a)["O"]
        )
        np.testing.assert_allclose(got, _dw_pw_reference(a), rtol=1e-4, atol=1e-4)


# Then a pointwise expansion whose bias and ReLU the ``halo`` pass writes into
# the zero-haloed input of a padded depthwise convolution: that write is at an
# offset (row y + 1), so the chain cannot take the bias; the expansion stays out
# of the chain with it.
DW_PW_EXPAND = """function (X[N, HP, WP, C], K[KY, KX, C], B[C], W[KY1, KX1, C, CO], B2[CO],
                            W3[KY1, KX1, CO, C], B3[C], K2[KY, KX, C]) -> (R) {
    D[n, y, x, c : N, HP - 2, WP - 2, C] = +(X[n, y + ky, x + kx, c] * K[ky, kx, c]);
    A = relu(D + B);
    P[n, y, x, co : N, HP - 2, WP - 2, CO] = +(A[n, y + ky, x + kx, c] * W[ky, kx, c, co]);
    O = P + B2;
    F[n, y, x, c : N, HP - 2, WP - 2, C] = +(O[n, y + ky, x + kx, co] * W3[ky, kx, co, c]);
    G = relu(F + B3);
    R[n, y, x, c : N, HP - 2, WP - 2, C] = +(G[n, y + ky - 1, x + kx - 1, c] * K2[ky, kx, c]);
}"""


def test_without_unit_taps_a_pointwise_convolution_stays_out():
    """``unit_taps = false`` (the GPU targets): ``y + ky`` is not row ``y``, so the
    1x1 convolution cannot join the chain, and the depthwise part alone has no
    row-wise read: nothing nests."""
    a = _dw_pw_inputs()
    program = stripeml.compile(DW_PW, target="interp").lower(**a).program
    fused = run_pipeline(program, [Fuse(), Dce()]).program
    on = Nest(cache_bytes=16384, fraction=0.25, min_points=4, min_rows=4)
    assert len(_nests(on.run(fused))) == 1
    assert (
        Nest(cache_bytes=16384, fraction=0.25, min_points=4, min_rows=4, unit_taps=False).run(fused)
        is fused
    )


def test_a_chain_does_not_end_between_a_product_and_its_bias():
    """The chain ends after the first block's bias, not after the expansion: the
    expansion's bias and ReLU stay in its register tiles (``epilogue``)."""
    a = _dw_pw_inputs()
    rng = np.random.default_rng(4)
    a["W3"] = rng.standard_normal((1, 1, 16, 24)).astype(np.float32)
    a["B3"] = rng.standard_normal(24).astype(np.float32)
    a["K2"] = rng.standard_normal((3, 3, 24)).astype(np.float32)
    program = stripeml.compile(DW_PW_EXPAND, target="interp").lower(**a).program
    from dataclasses import replace

    from pipelines import cpu_passes

    passes = [
        replace(p, cache_bytes=16384, fraction=0.25, threads=2) if isinstance(p, Nest) else p
        for p in cpu_passes(vector_width=8)
    ]
    result = run_pipeline(program, passes).program
    (nest,) = _nests(result)
    assert [b.name for b in nest.sub_blocks if "contraction" in b.tags][-1].endswith("_P")
    roots = [s for s in result.root.stmts if isinstance(s, Block)]
    expand = next(s for s in roots if s.name.endswith("_F"))
    from stripeml.ir import format

    assert "_G_epilogue" in format(Program(expand))  # bias and ReLU on its register tiles
    assert not any(s.name.endswith("_G") for s in roots)
    g = np.maximum(np.einsum("nyxo,oc->nyxc", _dw_pw_reference(a), a["W3"][0, 0]) + a["B3"], 0)
    g = np.pad(g, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = g.shape[1] - 2, g.shape[2] - 2
    want = sum(g[:, i : i + h, j : j + w] * a["K2"][i, j] for i in range(3) for j in range(3))
    got = CpuBackend(CpuOptions(threads=2, vector_width=8)).compile(result).run(a)["R"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_options_are_checked():
    from stripeml.errors import StripeError

    with pytest.raises(StripeError):
        Nest(fraction=1.5)
    with pytest.raises(StripeError):
        Nest(min_points=0)
    assert (
        Nest(cache_bytes=0).run(
            stripeml.compile(ATTENTION, target="interp").lower(*_inputs(1, 4, 4, 2)).program
        )
        is not None
    )


def _small_cache_passes():
    """The bundled CPU pipeline with a cache so small that ``nest`` takes any chain."""
    from dataclasses import replace

    from pipelines import cpu_passes

    return [
        replace(p, cache_bytes=64, min_points=2, min_rows=1) if isinstance(p, Nest) else p
        for p in cpu_passes(vector_width=8)
    ]


def test_small_cache_pipeline_has_a_nest_pass():
    assert any(isinstance(p, Nest) for p in _small_cache_passes())


from hypothesis import HealthCheck, given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from .helpers import assert_close, chain_inputs, checker  # noqa: E402
from .test_random_chains import chains  # noqa: E402


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), n=st.integers(2, 4), m=st.integers(2, 6))
def test_random_chains_nested_keep_their_results(chain, n: int, m: int) -> None:
    """Random elementwise chains with row reductions (tests/passes/test_random_chains.py)
    through the CPU pipeline with a tiny cache, every stage re-run on the
    interpreter, then compiled for the CPU: the results of the unnested program."""
    source, _ = chain
    note(source)
    inputs = chain_inputs(n, m)
    program = stripeml.compile(source, target="interp").lower(**inputs).program
    expected = run(program, inputs)
    tol = {"rtol": 1e-5, "atol": 1e-6}
    result = run_pipeline(program, _small_cache_passes(), check=checker(inputs, expected, **tol))
    note(result.stages[-1][1])
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, vector_width=8, min_chunk_work=1))
            .compile(result.program)
            .run(inputs)
        )
        assert_close(got, expected, f"cpu, {threads} threads", rtol=1e-4, atol=1e-5)
