"""``unroll``: register tiles for GEMM-like kernels, checked on the interpreter and the CPU."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stripeml
from stripeml.ir.nodes import Block, Program, walk_blocks
from stripeml.passes.epilogue import Epilogue
from stripeml.passes.halo import Halo
from stripeml.passes.manager import run_pipeline
from stripeml.passes.thread import Thread
from stripeml.passes.unroll import Unroll
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run

MATMUL = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[k, n]); }"
BATCHED = "function (A[B, M, K], W[B, K, N]) -> (C) { C[b, m, n : B, M, N] = +(A[b, m, k] * W[b, k, n]); }"
MAXPLUS = "function (A[M, K], B[K, N]) -> (C) { C[m, n : M, N] = >(A[m, k] + B[k, n]); }"
CONV = """function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[kx, ky, ci, co]);
}"""


def _check(src: str, shapes, reference, **options):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    f = stripeml.compile(src, target="interp")
    program = f.lower(*arrays).program
    inputs = dict(zip(f.params, arrays))
    result = run_pipeline(program, [Unroll(**options)])
    assert len(result.stages) == 2, "the kernel was register-tiled"
    assert "register_tile" in result.stages[-1][1]
    want = reference(*arrays)
    np.testing.assert_allclose(
        run(result.program, inputs)[f.outputs[0]], want, rtol=1e-4, atol=1e-4
    )
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, vector_width=options.get("vector_width", 8)))
            .compile(result.program)
            .run(inputs)
        )
        np.testing.assert_allclose(got[f.outputs[0]], want, rtol=1e-4, atol=1e-4)
    return result


def _conv3x3(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    """NHWC 3x3 convolution, padding 1, stride 1 (``k``: KX, KY, CI, CO), in NumPy."""
    p = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    x, y = i.shape[1], i.shape[2]
    return sum(
        np.einsum("nxyc,cd->nxyd", p[:, a : a + x, b : b + y], k[a, b])
        for a in range(3)
        for b in range(3)
    )


def _check_cpu(program, inputs, name: str, want: np.ndarray) -> None:
    """``program`` on the interpreter and on the CPU (1 and 2 threads, every split taken)."""
    np.testing.assert_allclose(run(program, inputs)[name], want, rtol=1e-4, atol=1e-4)
    for threads in (1, 2):
        got = (
            CpuBackend(CpuOptions(threads=threads, fma=True, min_chunk_work=1))
            .compile(program)
            .run(inputs)[name]
        )
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("m", "k", "n"), [(4, 1, 16), (8, 5, 32), (12, 37, 48), (64, 64, 64)])
def test_matmul(m, k, n):
    _check(MATMUL, [(m, k), (k, n)], lambda a, b: a @ b)


def test_tile_options_and_no_packing():
    _check(MATMUL, [(6, 9), (9, 24)], lambda a, b: a @ b, rows=3, vectors=3, pack_max_bytes=0)
    _check(MATMUL, [(8, 9), (9, 32)], lambda a, b: a @ b, vector_width=4, vectors=4, rows=2)


def test_one_row_streams_its_panels_unpacked():
    """A matrix-vector product: each panel meets one tile, so no packed copy;
    with two rows the packed panel serves both."""
    one = _check(MATMUL, [(1, 300), (300, 64)], lambda a, b: a @ b, vector_width=8, rows=4)
    assert "cache_in" not in one.stages[-1][1]
    four = _check(MATMUL, [(4, 300), (300, 64)], lambda a, b: a @ b, vector_width=8, rows=4)
    assert "cache_in" in four.stages[-1][1]


def test_panels_read_by_few_tiles_are_not_packed():
    """``pack_min_tiles``: a packed copy costs a pass over the panel, so a panel
    read by fewer register tiles than that is read in place (4 x 2 tiles of 16
    rows: 4 per panel), one read by enough is packed (64 rows: 16 per panel)."""
    few = _check(
        MATMUL, [(16, 40), (40, 32)], lambda a, b: a @ b, vector_width=8, rows=4, pack_min_tiles=8
    )
    assert "cache_in" not in few.stages[-1][1]
    many = _check(
        MATMUL, [(64, 40), (40, 32)], lambda a, b: a @ b, vector_width=8, rows=4, pack_min_tiles=8
    )
    assert "cache_in" in many.stages[-1][1]


def test_panel_over_the_size_limit_is_read_in_place():
    """``pack_max_bytes`` bounds a packed panel: 40 x 16 floats (2,560 bytes)."""
    small = dict(vector_width=8, rows=4, vectors=2)
    over = _check(MATMUL, [(8, 40), (40, 32)], lambda a, b: a @ b, pack_max_bytes=2559, **small)
    assert "cache_in" not in over.stages[-1][1]
    at = _check(MATMUL, [(8, 40), (40, 32)], lambda a, b: a @ b, pack_max_bytes=2560, **small)
    assert "cache_in" in at.stages[-1][1]


@pytest.mark.parametrize(("m", "k", "n"), [(4, 768, 768), (512, 3072, 768)])
def test_cpu_target_matmuls_of_few_rows_and_long_panels(m, k, n):
    """The cpu target's packing rule on the shapes it was chosen for (a batch of 4
    rows reads its panels in place; 512 rows pack a 3072-deep panel larger than
    L2): both against NumPy in float64."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    exe = stripeml.compile(MATMUL, target="cpu").lower(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(exe(a, b), want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
    assert ("cache_in" in exe.ir) == (m >= 64)


def test_one_row_with_constant_weights_reads_them_laid_out_in_panels():
    """A matrix-vector product with a constant matrix (a classifier at batch 1): no
    per-call packing, but the weights are laid out once in dense panels, so the
    tile streams each panel instead of reading rows a page apart."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 300)).astype(np.float32)
    w = rng.standard_normal((300, 1024)).astype(np.float32)  # several panels of any width
    f = stripeml.compile(MATMUL, target="cpu", constants={"B": w})
    exe = f.lower(a)
    assert "B_panels" in exe.ir and "cache_in" not in exe.ir
    np.testing.assert_allclose(exe(a), a @ w, rtol=1e-4, atol=1e-4)


def test_ragged_classifier_lays_out_the_whole_vector_prefix():
    """1000 classes in 16 lanes: the first 992 columns of the constant matrix are laid
    out in 31 panels, the last 8 read in place by the narrower part."""
    rng = np.random.default_rng(12)
    a = rng.standard_normal((1, 64)).astype(np.float32)
    w = rng.standard_normal((64, 1000)).astype(np.float32)
    f = stripeml.compile(MATMUL, target="cpu", constants={"B": w})
    exe = f.lower(a)
    width = exe.function.target.vector_width
    if width != 16:
        pytest.skip("the panel count below is for 16 lanes")
    assert "none B_panels f32(31, 64, 32)" in exe.ir, exe.ir
    np.testing.assert_allclose(exe(a), a @ w, rtol=1e-4, atol=1e-4)


MATMUL_BT = "function (A[M, K], B[N, K]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[n, k]); }"


@pytest.mark.parametrize(("m", "n"), [(8, 64), (13, 197), (1, 48)])
def test_transposed_operand_is_packed_with_the_vector_index_innermost(m, n):
    """``A @ B.T`` (attention's scores): B is read across the vector index, so
    its panels are packed with that index innermost (strides ``(1, 32)``) and
    the product is still register-tiled; with one row nothing would pack it
    (each panel meets one tile) and the kernel is left alone."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, 20)).astype(np.float32)
    b = rng.standard_normal((n, 20)).astype(np.float32)
    program = stripeml.compile(MATMUL_BT, target="interp").lower(a, b).program
    result = run_pipeline(program, [Unroll(vector_width=16, rows=4, vectors=2)])
    text = result.stages[-1][1]
    if m == 1:
        assert len(result.stages) == 1  # unchanged
        return
    assert "register_tile" in text and "none B_pack f32(32, 20):(1, 32)" in text, text
    _check_cpu(result.program, {"A": a, "B": b}, "C", a @ b.T)


SCORES = """function (Q[M, H, D], K[N, H, D]) -> (S) {
    S[h, m, n : H, M, N] = +(Q[m, h, d] * K[n, h, d]);
}"""
ROW_MAX = "function (S[H, M, N]) -> (R) { R[h, m, 0 : H, M, 1] = >(S[h, m, n]); }"


def test_multi_head_scores_pack_one_heads_panel():
    """Attention's scores of several heads: the keys read across the vector index
    depend on the head, so the head goes on the panel level and each packed copy is
    one head's panel (32 keys x 8), not every head's (32 keys x 3 x 8)."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((12, 3, 8)).astype(np.float32)
    k = rng.standard_normal((64, 3, 8)).astype(np.float32)
    program = stripeml.compile(SCORES, target="interp").lower(q, k).program
    result = run_pipeline(program, [Unroll(vector_width=16, rows=4, vectors=2)])
    text = result.stages[-1][1]
    assert "[h:3, n_o:2]" in text and "none K_pack f32(32, 1, 8):(1, 256, 32)" in text, text
    _check_cpu(result.program, {"Q": q, "K": k}, "S", np.einsum("mhd,nhd->hmn", q, k))


def test_row_maximum_is_not_register_tiled():
    """A row maximum reads every input element once: packing its rows across the
    vector index would only copy them; it is left for ``vectorize``."""
    s = np.zeros((2, 64, 64), np.float32)
    program = stripeml.compile(ROW_MAX, target="interp").lower(s).program
    result = run_pipeline(program, [Unroll(vector_width=16, rows=4, vectors=2)])
    assert len(result.stages) == 1, result.stages[-1][1]


def test_reduction_blocks():
    result = _check(MATMUL, [(8, 64), (64, 32)], lambda a, b: a @ b, k_block=16)
    assert "k_o:4" in result.stages[-1][1]
    _check(MATMUL, [(8, 40), (40, 16)], lambda a, b: a @ b, k_block=16)  # 40 % 16: not blocked


def test_batched_and_max_plus():
    _check(BATCHED, [(3, 4, 7), (3, 7, 16)], lambda a, w: np.einsum("bmk,bkn->bmn", a, w))
    _check(MAXPLUS, [(4, 6), (6, 16)], lambda a, b: (a[:, :, None] + b[None]).max(1))


def test_padded_conv_tiles_channels_only():
    result = _check(CONV, [(1, 5, 6, 3), (3, 3, 3, 16)], _conv3x3)
    # x and y carry the padding constraints, so only the output channels are tiled.
    assert "co_o" in result.stages[-1][1] and "x_o" not in result.stages[-1][1]


def test_not_applicable_is_unchanged():
    a = np.zeros((5, 3), np.float32)
    b = np.zeros((3, 7), np.float32)  # 7 columns: no vector tile
    program = stripeml.compile(MATMUL, target="interp").lower(a, b).program
    assert Unroll().run(program) is program
    elt = (
        stripeml.compile("function (A) -> (B) { B = A * 2; }", target="interp")
        .lower(np.zeros(16, np.float32))
        .program
    )
    assert Unroll().run(elt) is elt


@settings(max_examples=25, deadline=None)
@given(
    m=st.sampled_from([4, 8, 12]),
    n=st.sampled_from([8, 16, 32, 48]),
    k=st.integers(1, 9),
    agg=st.sampled_from(["+", ">", "<"]),
    transpose_a=st.booleans(),
    batch=st.integers(1, 2),
)
def test_random_gemm_like(m, n, k, agg, transpose_a, batch):
    """Random GEMM-like contractions: unrolled on the CPU equals NumPy."""
    a_access, a_dims = (
        ("A[b, kk, i]", "A[B, K, M]") if transpose_a else ("A[b, i, kk]", "A[B, M, K]")
    )
    src = f"""function ({a_dims}, W[B, K, N]) -> (C) {{
        C[b, i, j : B, M, N] = {agg}({a_access} * W[b, kk, j]);
    }}"""
    rng = np.random.default_rng(m * 100 + n + k)
    a_shape = (batch, k, m) if transpose_a else (batch, m, k)
    a = rng.standard_normal(a_shape).astype(np.float32)
    w = rng.standard_normal((batch, k, n)).astype(np.float32)
    am = a.transpose(0, 2, 1) if transpose_a else a
    prod = am[:, :, :, None] * w[:, None, :, :]
    want = {"+": prod.sum(2), ">": prod.max(2), "<": prod.min(2)}[agg]
    f = stripeml.compile(src, target="interp")
    program = f.lower(a, w).program
    result = run_pipeline(program, [Unroll()])
    inputs = {"A": a, "W": w}
    np.testing.assert_allclose(run(result.program, inputs)["C"], want, rtol=1e-4, atol=1e-4)
    got = CpuBackend(CpuOptions(threads=2, fma=True)).compile(result.program).run(inputs)["C"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


DENSE_RELU = """function (X[B, K], W[K, N], Bias[N]) -> (Y) {
    Z[b, n : B, N] = +(X[b, k] * W[k, n]);
    Y = relu(Z + Bias);
}"""


@pytest.mark.parametrize(("b", "k", "n"), [(4, 3, 16), (8, 5, 32), (12, 7, 16)])
def test_epilogue_runs_on_each_register_tile(b, k, n):
    rng = np.random.default_rng(b + k + n)
    x = rng.standard_normal((b, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(program, [Unroll(), Epilogue()]).program
    text = stripeml.ir.format(result)
    assert "#epilogue" in text and "none Z " not in text  # Z lives only per tile now
    (kernel,) = result.root.stmts
    inputs = {"X": x, "W": w, "Bias": bias}
    want = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-5, atol=1e-5)
    got = CpuBackend(CpuOptions(threads=2)).compile(result).run(inputs)["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_no_epilogue_when_the_result_is_needed_elsewhere():
    src = """function (X[B, K], W[K, N], Bias[N]) -> (Y, Z) {
        Z[b, n : B, N] = +(X[b, k] * W[k, n]);
        Y = relu(Z + Bias);
    }"""
    arrays = [np.ones((4, 3), np.float32), np.ones((3, 16), np.float32), np.ones(16, np.float32)]
    program = stripeml.compile(src, target="interp").lower(*arrays).program
    result = run_pipeline(program, [Unroll(), Epilogue()]).program
    assert "#epilogue" not in stripeml.ir.format(result) and len(result.root.stmts) == 2
    off = run_pipeline(
        stripeml.compile(DENSE_RELU, target="interp").lower(*arrays).program, [Unroll()]
    )
    assert "#epilogue" not in off.stages[-1][1]


def test_no_epilogue_on_a_blocked_reduction():
    """With k blocks, each tile sees partial sums: the epilogue must wait, so it is not fused."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(program, [Unroll(k_block=16), Epilogue()]).program
    assert "#epilogue" not in stripeml.ir.format(result)
    want = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(
        run(result, {"X": x, "W": w, "Bias": bias})["Y"], want, rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("m", [5, 6, 7, 13])
@pytest.mark.parametrize("rows", [4, 6])
def test_ragged_rows_split_into_two_kernels(m, rows):
    """A row range that is not a multiple of ``rows`` is tiled as two root kernels
    (taller whole tiles turned off)."""
    result = _check(MATMUL, [(m, 5), (5, 32)], lambda a, b: a @ b, rows=rows, vectors=2, max_rows=0)
    split = m > rows and m % rows
    assert len(result.program.root.stmts) == (2 if split else 1)
    assert ("k0_C_rest" in result.stages[-1][1]) == bool(split)


POINTWISE = """function (I[N, Y, X, CI], W[CI, CO]) -> (O) {
    O[n, y, x, co : N, Y, X, CO] = +(I[n, y, x, ci] * W[ci, co]);
}"""


def test_ragged_rows_rest_tiles_along_another_row_index():
    """13 x 13 pixels in 4-row tiles: the last column (13 pixels) is tiled along
    the other pixel index in full tiles (12 rows, then the one pixel left), not
    in 13 one-row tiles that would each read all the weights."""
    ref = lambda i, w: np.einsum("nyxc,cd->nyxd", i, w)  # noqa: E731
    result = _check(POINTWISE, [(1, 13, 13, 8), (8, 32)], ref, rows=4, vectors=2, max_rows=0)
    text = result.stages[-1][1]
    names = [s.name for s in result.program.root.stmts]
    assert names == ["k0_O", "k0_O_rest", "k0_O_rest_rest"]
    main, rest = result.program.root.stmts[:2]

    def tile_rows(kernel):
        (tile,) = [b for b in walk_blocks(kernel) if "register_tile" in b.tags]
        return {i.name for i in tile.idxs if i.name in ("y_r", "x_r") and i.range == 4}

    # the main part tiles one pixel index by 4, its rest (one value of that
    # index) the other one, also by 4
    assert len(tile_rows(main)) == 1 and len(tile_rows(rest)) == 1, text
    assert tile_rows(main) != tile_rows(rest), text


def test_ragged_rests_read_the_heads_weight_panels():
    """Constant weights laid out in panels for the main part: both remainders (the
    last column, then the corner pixel) read those panels, in cache, not the plain
    weights that no other kernel reads (SqueezeNet's 13 x 13 corners: 71 us each
    for 590 KB of cold weights)."""
    rng = np.random.default_rng(5)
    i = rng.standard_normal((1, 13, 13, 8)).astype(np.float32)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    f = stripeml.compile(POINTWISE, target="interp", constants={"W": w})
    program = f.lower(i).program
    result = run_pipeline(
        program, [Unroll(vector_width=8, rows=4, vectors=2, max_rows=0, max_vectors=8)]
    ).program
    kernels = {s.name: s for s in result.root.stmts if isinstance(s, Block)}
    assert {"k0_O", "k0_O_rest", "k0_O_rest_rest"} <= set(kernels)
    for name in ("k0_O", "k0_O_rest", "k0_O_rest_rest"):
        sources = {r.from_ for r in kernels[name].refs if r.dir == "in"}
        assert "W" not in sources and any(s.startswith("W_panels") for s in sources), name
    want = np.einsum("nyxc,cd->nyxd", i, w)
    _check_cpu(result, {"I": i, "W": w}, "O", want)


@pytest.mark.parametrize("m", [5, 6, 7, 13])
@pytest.mark.parametrize("rows", [4, 6])
def test_ragged_rows_with_epilogue(m, rows):
    """bias + relu runs as an epilogue of both parts of a split (or there is no split)."""
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 9)).astype(np.float32)
    w = rng.standard_normal((9, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(program, [Unroll(rows=rows, vectors=2, max_rows=0), Epilogue()]).program
    text = stripeml.ir.format(result)
    assert "#epilogue" in text and "none Z " not in text
    split = m > rows and m % rows
    assert len(result.root.stmts) == (2 if split else 1)
    inputs = {"X": x, "W": w, "Bias": bias}
    want = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-5, atol=1e-5)
    for threads in (1, 2):
        got = CpuBackend(CpuOptions(threads=threads, fma=True)).compile(result).run(inputs)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [5, 6, 7, 14, 21])
def test_ragged_rows_with_a_divisor_get_taller_whole_tiles(m):
    """Rows with a divisor in (rows, max_rows] are one kernel of taller tiles."""
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 9)).astype(np.float32)
    w = rng.standard_normal((9, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(program, [Unroll(rows=4, vectors=2, max_rows=7), Epilogue()]).program
    text = stripeml.ir.format(result)
    assert len(result.root.stmts) == 1 and "_rest" not in text
    assert "#register_tile" in text and "#epilogue" in text
    inputs = {"X": x, "W": w, "Bias": bias}
    want = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-5, atol=1e-5)
    for threads in (1, 2):
        got = CpuBackend(CpuOptions(threads=threads, fma=True)).compile(result).run(inputs)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_ragged_rows_keep_a_needed_result():
    """A split whose result is read later keeps it: no epilogue, two kernels and the eltwise."""
    src = """function (X[B, K], W[K, N], Bias[N]) -> (Y, Z) {
        Z[b, n : B, N] = +(X[b, k] * W[k, n]);
        Y = relu(Z + Bias);
    }"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 3)).astype(np.float32)
    w = rng.standard_normal((3, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    f = stripeml.compile(src, target="interp")
    result = run_pipeline(f.lower(x, w, bias).program, [Unroll(max_rows=0), Epilogue()]).program
    assert "#epilogue" not in stripeml.ir.format(result) and len(result.root.stmts) == 3
    inputs = {"X": x, "W": w, "Bias": bias}
    got = CpuBackend(CpuOptions(threads=2)).compile(result).run(inputs)
    np.testing.assert_allclose(got["Z"], x @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["Y"], np.maximum(x @ w + bias, 0), rtol=1e-5, atol=1e-5)


def test_row_blocks_when_one_block_of_rows_fits():
    """Rows read by every panel (A: 16x40 floats, 2560 bytes) exceed ``pack_max_bytes``
    but half of them fit: the rows split into 2 outer blocks, first in the kernel."""
    result = _check(
        MATMUL, [(16, 40), (40, 32)], lambda a, b: a @ b, pack_max_bytes=2048, row_blocks=2
    )
    text = result.stages[-1][1]
    assert "[m_b:2, n_o:2]" in text and "in A[8*m_b, 0] f32(8, 40)" in text
    # Already fitting (or not fitting even split): no row blocks.
    for limit in (1 << 18, 1024):
        text = _check(
            MATMUL, [(16, 40), (40, 32)], lambda a, b: a @ b, pack_max_bytes=limit, row_blocks=2
        )
        assert "m_b" not in text.stages[-1][1]
    assert (
        "m_b"
        not in _check(MATMUL, [(16, 40), (40, 32)], lambda a, b: a @ b, pack_max_bytes=2048).stages[
            -1
        ][1]
    )  # fmt: skip  (off by default)


def test_row_blocks_with_epilogue_and_conv():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 40)).astype(np.float32)
    w = rng.standard_normal((40, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(program, [Unroll(pack_max_bytes=2048, row_blocks=2), Epilogue()]).program
    text = stripeml.ir.format(result)
    assert "#epilogue" in text and "b_b:2" in text
    inputs = {"X": x, "W": w, "Bias": bias}
    want = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-5, atol=1e-5)
    for threads in (1, 2):
        got = CpuBackend(CpuOptions(threads=threads, fma=True)).compile(result).run(inputs)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # The padded conv through the whole CPU pipeline (halo, then row blocks).
    i = rng.standard_normal((1, 56, 56, 64)).astype(np.float32)
    k = rng.standard_normal((3, 3, 64, 64)).astype(np.float32)
    halo = run_pipeline(
        stripeml.compile(CONV, target="interp").lower(i, k).program, [Halo()]
    ).program
    blocked = run_pipeline(halo, [Unroll(pack_max_bytes=1 << 19, row_blocks=2)]).program
    assert "[y_b:2, co_o:4]" in stripeml.ir.format(blocked)
    got = CpuBackend(CpuOptions(threads=2, fma=True)).compile(blocked).run({"I": i, "K": k})["O"]
    exe = stripeml.compile(CONV, target="cpu").lower(i, k)
    p = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = sum(
        np.einsum("nxyc,cd->nxyd", p[:, a : a + 56, b : b + 56], k[a, b])
        for a in range(3)
        for b in range(3)
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(exe(i, k), want, rtol=1e-4, atol=1e-3)


BLOCKED_CONV = """function (I[N, X, Y, CI], K[CB, KX, KY, CI, C], Bias[CO]) -> (R) {
    O[n, x, y, BLK * cb + c : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[cb, kx, ky, ci, c]);
    R = relu(O + Bias);
}"""


@pytest.mark.parametrize(("size", "blk"), [(7, 8), (8, 16), (6, 16)])
def test_blocked_weights_are_panels_not_rows(size, blk):
    """Weights in blocks of output channels, ``K[cb, ..., c]`` with ``co = blk*cb + c``:
    ``cb`` selects a panel (it never becomes the row index, which would read a
    different panel per accumulator row), goes outermost so each panel serves all
    its tiles in turn, and the dense panel is read in place (no copy)."""
    rng = np.random.default_rng(size)
    co, ci = 4 * blk, 5
    i = rng.standard_normal((1, size, size, ci)).astype(np.float32)
    k = rng.standard_normal((3, 3, ci, co)).astype(np.float32)
    bias = rng.standard_normal(co).astype(np.float32)
    kb = np.ascontiguousarray(k.reshape(3, 3, ci, co // blk, blk).transpose(3, 0, 1, 2, 4))
    src = BLOCKED_CONV.replace("BLK", str(blk))
    f = stripeml.compile(src, target="interp")
    program = f.lower(i, kb, bias).program
    result = run_pipeline(
        program, [Halo(), Unroll(rows=4, vectors=2, max_rows=7), Epilogue(), Thread(threads=2)]
    )
    text = result.stages[-1][1]
    tiled = [b for b in walk_blocks(result.program.root) if "tiled" in b.tags]
    assert len(tiled) == 1
    assert tiled[0].idxs[0].name == "cb", "the panel index is outermost (and the threads' index)"
    tile = next(b for b in walk_blocks(tiled[0]) if "register_tile" in b.tags)
    assert "cb" not in {x.name for x in tile.idxs}
    assert "_pack" not in text, "blocked panels are dense: no copy"
    want = np.maximum(_conv3x3(i, k) + bias, 0)
    _check_cpu(result.program, {"I": i, "K": kb, "Bias": bias}, "R", want)


@pytest.mark.parametrize("size", [6, 14])
def test_two_dimensional_row_tiles(size):
    """No pixel index is a multiple of 4 but two are even: 2 x 2 pixel tiles of
    the full shape (4 rows x 2 vectors), not 7 x 1 vectors or a split."""
    rng = np.random.default_rng(size)
    i = rng.standard_normal((1, size, size, 7)).astype(np.float32)
    k = rng.standard_normal((3, 3, 7, 32)).astype(np.float32)
    program = stripeml.compile(CONV, target="interp").lower(i, k).program
    result = run_pipeline(program, [Halo(), Unroll(rows=4, vectors=2, max_rows=7)])
    (tile,) = [b for b in walk_blocks(result.program.root) if "register_tile" in b.tags]
    ranges = {x.name: x.range for x in tile.idxs}
    assert ranges["x_r"] == ranges["y_r"] == 2 and ranges["co_r"] == 16
    assert len([b for b in result.program.root.stmts if "tiled" in b.tags]) == 1
    _check_cpu(result.program, {"I": i, "K": k}, "O", _conv3x3(i, k))


@pytest.mark.parametrize(
    ("src", "reference"),
    [
        # A row the contraction never reaches: a fill writes Z before the kernel.
        (
            """function (X[B, K], W[K, N], Bias[N]) -> (Y) {
                Z[b, n : B + 1, N] = +(X[b, k] * W[k, n]);
                Y = relu(Z + Bias);
            }""",
            lambda x, w, bias: np.maximum(np.vstack([x @ w, np.zeros((1, w.shape[1]))]) + bias, 0),
        ),
        # A residual: the elementwise kernel reads the contraction's input X too.
        (
            """function (X[B, K], W[K, N], Bias[N]) -> (Y) {
                Z[b, n : B, N] = +(X[b, k] * W[k, n]);
                Y = relu(Z + X + Bias);
            }""",
            lambda x, w, bias: np.maximum(x @ w + x + bias, 0),
        ),
    ],
)
def test_cpu_pipeline_keeps_an_unfusable_result(src, reference):
    """The elementwise kernel after a tiled contraction that cannot be its epilogue
    (see the golden cases) stays a kernel of its own on the CPU target."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    f = stripeml.compile(src, target="cpu")
    assert "#epilogue" not in f.lower(x, w, bias).ir
    np.testing.assert_allclose(f(x, w, bias), reference(x, w, bias), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [20, 24, 37, 40, 1000])
def test_ragged_vectors_split_into_whole_and_narrower_lanes(n):
    """A vector range that whole vectors do not divide (1000 channels in 16 lanes) is
    two kernels: whole vectors, and the rest in the widest power-of-two lanes
    (at least 4) that divide it; a rest of fewer lanes stays untiled.  (Mixed
    tiles off: with them, ranges of a few vectors are one tile, below.)"""
    result = _check(
        MATMUL, [(8, 6), (6, n)], lambda a, b: a @ b, vector_width=16, vectors=2, mixed_vectors=0
    )
    rest = n % 16
    names = [b.name for b in result.program.root.stmts]
    assert names == ["k0_C", "k0_C_lanes"], names
    tail = result.program.root.stmts[1]
    tiled = "register_tile" in stripeml.ir.format(
        Program(replace(result.program.root, stmts=(tail,)))
    )
    assert tiled == (rest & -rest >= 4), (n, tiled)


@pytest.mark.parametrize("n,rows", [(20, 6), (24, 6), (37, 4), (40, 4), (68, 2)])
def test_ragged_vectors_of_few_registers_are_one_mixed_tile(n, rows):
    """A ragged vector range of a few vectors (24 channels in 16 lanes: 16 + 8) is
    one kernel whose tile covers the whole range, as many rows as the
    accumulators allow (12 of them: 6 rows of 2 registers, 4 of 3, 2 of 5);
    with its epilogue, on the interpreter and on the CPU in 16-lane vectors
    (1 and 2 threads), whatever the host's own width."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal((24, 9)).astype(np.float32)
    w = rng.standard_normal((9, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(
        program, [Unroll(vector_width=16, vectors=2, rows=6, max_vectors=12), Epilogue()]
    ).program
    kernels = [b for b in result.root.stmts if isinstance(b, Block)]
    assert len(kernels) == 1, [b.name for b in kernels]
    (tile,) = [b for b in walk_blocks(kernels[0]) if "register_tile" in b.tags]
    assert sorted(i.range for i in tile.idxs if i.name.endswith("_r")) == sorted([n, rows])
    want = np.maximum(x.astype(np.float64) @ w + bias, 0)
    inputs = {"X": x, "W": w, "Bias": bias}
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-5, atol=1e-4)
    for threads in (1, 2):
        opts = CpuOptions(threads=threads, fma=True, vector_width=16, min_chunk_work=1)
        got = CpuBackend(opts).compile(result).run(inputs)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(
    m=st.integers(1, 30),
    k=st.integers(1, 12),
    n=st.integers(9, 140),
    width=st.sampled_from([8, 16]),
    rows=st.sampled_from([2, 4, 6]),
)
def test_mixed_or_split_tiles_match_numpy(m, k, n, width, rows):
    """Any shape, mixed tile or split: the tiled program with its epilogue equals
    NumPy on the interpreter and on the CPU in ``width``-lane vectors."""
    rng = np.random.default_rng(m * 1000 + n)
    x = rng.standard_normal((m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    tiled = Unroll(vector_width=width, vectors=2, rows=rows, max_vectors=12)
    result = run_pipeline(program, [tiled, Epilogue()]).program
    want = np.maximum(x.astype(np.float64) @ w + bias, 0)
    inputs = {"X": x, "W": w, "Bias": bias}
    np.testing.assert_allclose(run(result, inputs)["Y"], want, rtol=1e-5, atol=1e-4)
    opts = CpuOptions(threads=2, fma=True, vector_width=width, min_chunk_work=1)
    got = CpuBackend(opts).compile(result).run(inputs)["Y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_ragged_vectors_with_ragged_rows_and_an_epilogue():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((13, 9)).astype(np.float32)
    w = rng.standard_normal((9, 1000)).astype(np.float32)
    bias = rng.standard_normal(1000).astype(np.float32)
    program = stripeml.compile(DENSE_RELU, target="interp").lower(x, w, bias).program
    result = run_pipeline(program, [Unroll(vector_width=16, rows=4, max_rows=0), Epilogue()])
    names = [b.name for b in result.program.root.stmts]
    assert len(set(names)) == len(names) >= 3, names
    inputs = {"X": x, "W": w, "Bias": bias}
    want = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(run(result.program, inputs)["Y"], want, rtol=1e-5, atol=1e-5)
    for threads in (1, 2):
        opts = CpuOptions(threads=threads, fma=True, vector_width=16)
        got = CpuBackend(opts).compile(result.program).run(inputs)["Y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_ragged_vector_parts_round_alike():
    """Columns of equal weights give bitwise equal results in both parts of a ragged
    vector split: the narrower-lane rest is a register tile too (same summation
    order, same fused multiply-adds), so a softmax over the row stays uniform.
    (The shipped SqueezeNet's 1000 equal logits of 9.5e9 differed by 2 ulp when
    the rest ran as a plain loop.)"""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((13, 512)) * 1e3).astype(np.float32)
    w = np.repeat(rng.standard_normal((512, 1)).astype(np.float32), 1000, axis=1)
    f = stripeml.compile(MATMUL, target="cpu")
    names = [b.name for b in f.lower(x, w).program.root.sub_blocks]
    assert any(n.endswith("_lanes") for n in names), names
    got = f(x, w)
    assert (got == got[:, :1]).all(), np.unique(got[0]).size
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-2)


def test_ragged_vectors_with_constraints_are_not_split():
    """A padded 3x3/2 max pool over 24 channels keeps one kernel: its narrower rest
    could not be a register tile (its window may be empty) and would run scalar."""
    src = """function (I[N, H, W, C]) -> (O) {
        O[n, y, x, c : N, H / 2, W / 2, C] = >(I[n, 2 * y + ky - 1, 2 * x + kx - 1, c]), ky < 3, kx < 3;
    }"""
    rng = np.random.default_rng(11)
    i = rng.standard_normal((1, 8, 8, 24)).astype(np.float32)
    f = stripeml.compile(src, target="interp")
    program = f.lower(i).program
    result = run_pipeline(program, [Unroll(vector_width=16)]).program
    assert [b.name for b in result.root.stmts if "_lanes" in b.name] == []
    want = run(program, {"I": i})["O"]
    np.testing.assert_array_equal(run(result, {"I": i})["O"], want)
    got = CpuBackend(CpuOptions(threads=2, vector_width=16)).compile(result).run({"I": i})["O"]
    np.testing.assert_array_equal(got, want)


def test_short_row_ranges_are_tiled_whole():
    """A 3 x 3 convolution's weight gradient (training): its output pixels are
    the 3 taps, shorter than any tile's rows.  The register tile takes the
    three taps of ``ky`` as its rows (not one row, whose accumulators wait on
    each other's adds), and the result is NumPy's."""
    src = """function (X[2, 12, 12, 3], G[2, 12, 12, 16]) -> (W) {
        W[ky, kx, ci, co : 3, 3, 3, 16] = +(X[n, y + ky - 1, x + kx - 1, ci] * G[n, y, x, co]);
    }"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    g = rng.standard_normal((2, 12, 12, 16)).astype(np.float32)
    exe = stripeml.compile(src, target="cpu").lower(x, g)
    tiles = [
        blk
        for s in exe.program.root.stmts
        if isinstance(s, Block)
        for blk in s.sub_blocks
        if "register_tile" in blk.tags
    ]
    assert tiles and any(i.name == "ky_r" and i.range == 3 for i in tiles[0].idxs), tiles
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.stack(
        [
            np.stack(
                [np.einsum("nyxc,nyxo->co", xp[:, a : a + 12, b : b + 12], g) for b in range(3)]
            )
            for a in range(3)
        ]
    )
    np.testing.assert_allclose(exe(x, g), want, rtol=1e-4, atol=1e-4)
