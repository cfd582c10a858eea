"""``halo``: padded convolutions on a zero-filled copy of their input, on the interpreter and the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stripeml
from pipelines import cpu_passes
from stripeml.ir.nodes import Block, Constant, walk_blocks
from stripeml.passes.halo import Halo
from stripeml.passes.manager import run_pipeline
from stripeml.passes.unroll import Unroll
from stripeml.runtime.cpu import CpuBackend, CpuOptions
from stripeml.runtime.interp import run

from .helpers import checker


def _conv_src(pad: int, stride: int, dil: int, xo: int, yo: int) -> str:
    """A 2-D NHWC convolution with literal output sizes (xo, yo)."""
    ax = f"{stride}*x + {dil}*kx - {pad}"
    ay = f"{stride}*y + {dil}*ky - {pad}"
    return f"""function (I[N, X, Y, CI], K[KX, KY, CI, CO]) -> (O) {{
        O[n, x, y, co : N, {xo}, {yo}, CO] = +(I[n, {ax}, {ay}, ci] * K[kx, ky, ci, co]);
    }}"""


def _conv_numpy(i, k, pad: int, stride: int, dil: int, xo: int, yo: int) -> np.ndarray:
    p = np.pad(i, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    out = np.zeros((i.shape[0], xo, yo, k.shape[3]), np.float64)
    for a in range(k.shape[0]):
        for b in range(k.shape[1]):
            xs = slice(dil * a, dil * a + stride * (xo - 1) + 1, stride)
            ys = slice(dil * b, dil * b + stride * (yo - 1) + 1, stride)
            out += np.einsum("nxyc,cd->nxyd", p[:, xs, ys], k[a, b])
    return out.astype(np.float32)


def _case(n, x, y, ci, co, kx, ky, pad, stride, dil, seed=0):
    xo = (x + 2 * pad - dil * (kx - 1) - 1) // stride + 1
    yo = (y + 2 * pad - dil * (ky - 1) - 1) // stride + 1
    rng = np.random.default_rng(seed)
    i = rng.standard_normal((n, x, y, ci)).astype(np.float32)
    k = rng.standard_normal((kx, ky, ci, co)).astype(np.float32)
    f = stripeml.compile(_conv_src(pad, stride, dil, xo, yo), target="interp")
    program = f.lower(i, k).program
    want = _conv_numpy(i, k, pad, stride, dil, xo, yo)
    return program, {"I": i, "K": k}, want


def _halo_stage(program, inputs, want, **options):
    """Run ``halo`` under the pass manager's check; the result and whether it changed."""
    expected = run(program, inputs)
    np.testing.assert_allclose(expected["O"], want, rtol=1e-4, atol=1e-4)
    result = run_pipeline(program, [Halo(**options)], check=checker(inputs, expected, atol=1e-5))
    return result.program, len(result.stages) == 2


@settings(max_examples=20, deadline=None)
@given(
    x=st.integers(3, 7),
    y=st.integers(3, 7),
    k=st.sampled_from([1, 2, 3]),
    pad=st.sampled_from([1, 2]),
    stride=st.sampled_from([1, 2]),
    dil=st.sampled_from([1, 2]),
    seed=st.integers(0, 3),
)
def test_random_padded_convs_interpreter(x, y, k, pad, stride, dil, seed):
    """Random padded convolutions: the halo program equals the unoptimised one and NumPy."""
    if x + 2 * pad < dil * (k - 1) + 1 or y + 2 * pad < dil * (k - 1) + 1:
        return
    program, inputs, want = _case(1, x, y, 2, 3, k, k, pad, stride, dil, seed)
    new, changed = _halo_stage(program, inputs, want)
    # Pads of at most k - 1 (times the dilation) leave every output an in-bounds tap;
    # lowering may also have trimmed the box so that no constraint is left.
    constrained = any(isinstance(b, Block) and b.constraints for b in program.root.stmts)
    assert changed or pad > dil * (k - 1) or not constrained
    if changed:
        *_, fill, copy, kernel = new.root.stmts
        assert isinstance(kernel, Block) and not kernel.constraints
        assert "fill" in fill.tags and "copy" in copy.tags
        np.testing.assert_allclose(run(new, inputs)["O"], want, rtol=1e-4, atol=1e-4)
        assert Halo().run(new) is new, "a second run changes nothing"


@pytest.mark.parametrize(
    ("pad", "stride", "dil"), [(1, 1, 1), (2, 1, 1), (1, 2, 1), (2, 1, 2), (2, 2, 2)]
)
def test_padded_convs_change(pad, stride, dil):
    """The usual padded convolutions all qualify (every output sees an in-bounds tap)."""
    program, inputs, want = _case(2, 6, 5, 3, 4, 3, 3, pad, stride, dil)
    _, changed = _halo_stage(program, inputs, want)
    assert changed


def test_options():
    program, inputs, want = _case(1, 5, 5, 2, 3, 3, 3, 1, 1, 1)
    assert Halo(max_bytes=4 * 7 * 7 * 2 - 1).run(program) is program
    assert Halo(max_bytes=4 * 7 * 7 * 2).run(program) is not program
    assert Halo(select="nothing").run(program) is program
    # Without assume_finite, 0 * K is not known to be 0 (K may hold inf or nan).
    assert Halo(assume_finite=False).run(program) is program


def test_assume_finite_trade_off():
    """A non-finite weight: the constrained kernel skips the padding, the halo one gives nan."""
    program, inputs, _ = _case(1, 4, 4, 1, 1, 3, 3, 1, 1, 1)
    inputs["K"][0, 0, 0, 0] = np.inf
    before = run(program, inputs)["O"]
    after = run(Halo().run(program), inputs)["O"]
    assert np.isnan(after[0, 0, 0, 0]) and not np.isnan(before[0, 0, 0, 0])


def test_integer_conv_needs_no_finiteness():
    src = "function (I[X], K[KX]) -> (O) { O[x : X] = +(I[x + kx - 1] * K[kx]); }"
    i = np.arange(1, 9, dtype=np.int32)
    k = np.array([1, -2, 3], np.int32)
    program = stripeml.compile(src, target="interp").lower(i, k).program
    new = Halo(assume_finite=False).run(program)
    assert new is not program
    want = np.convolve(np.pad(i, 1), k[::-1], mode="valid")
    np.testing.assert_array_equal(run(new, {"I": i, "K": k})["O"], want)


@pytest.mark.parametrize(
    ("shape", "pad", "stride", "dil"),
    [((1, 8, 8, 3, 16), 1, 1, 1), ((2, 8, 6, 4, 16), 2, 1, 2), ((1, 9, 9, 2, 8), 1, 2, 1)],
)
def test_cpu_passes(shape, pad, stride, dil):
    """``halo`` before the CPU pipeline: the compiled conv equals NumPy on 1 and 2 threads."""
    n, x, y, ci, co = shape
    program, inputs, want = _case(n, x, y, ci, co, 3, 3, pad, stride, dil)
    passes = cpu_passes(vector_width=8)
    after_dce = [p.name for p in passes].index("dce") + 1
    for pipeline in ([Halo(), *passes], [*passes[:after_dce], Halo(), *passes[after_dce:]]):
        result = run_pipeline(program, pipeline, check=checker(inputs, run(program, inputs)))
        assert "halo" in [s for s, _ in result.stages]
        for threads in (1, 2):
            backend = CpuBackend(CpuOptions(threads=threads, vector_width=8))
            final = run_pipeline(program, pipeline).program
            out = backend.compile(final).run(inputs)["O"]
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


def test_unroll_tiles_rows_after_halo():
    """Without constraints, ``unroll`` register-tiles output pixels (rows along y, the
    innermost pixel index: adjacent pixels) as well as the channels."""
    program, inputs, want = _case(1, 8, 8, 3, 16, 3, 3, 1, 1, 1)
    result = run_pipeline(program, [Halo(), Unroll()])
    assert [s for s, _ in result.stages] == ["lower", "halo", "unroll"]
    assert "y_r:4" in result.stages[-1][1]
    out = CpuBackend(CpuOptions(threads=2, vector_width=8)).compile(result.program).run(inputs)["O"]
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


POOL = """function (I[N, H, W, C]) -> (O) {
    O[n, y, x, c : N, (H + 1) / 2, (W + 1) / 2, C] = %s(I[n, 2*y + ky - 1, 2*x + kx - 1, c]),
        ky < 3, kx < 3;
}"""


def _pool_numpy(i: np.ndarray, agg: str) -> np.ndarray:
    """3x3, stride 2, pad 1 max (or min) pooling in NumPy: the padding never wins."""
    f = np.fmax if agg == "max" else np.fmin  # the window always has a real value
    ho, wo = (i.shape[1] + 1) // 2, (i.shape[2] + 1) // 2
    out = None
    for a in range(3):
        for b in range(3):
            ys = [2 * y + a - 1 for y in range(ho)]
            xs = [2 * x + b - 1 for x in range(wo)]
            ok = np.array([[0 <= y < i.shape[1] and 0 <= x < i.shape[2] for x in xs] for y in ys])
            yc, xc = np.clip(ys, 0, i.shape[1] - 1), np.clip(xs, 0, i.shape[2] - 1)
            tap = i[:, yc][:, :, xc]
            tap = np.where(ok[None, :, :, None], tap, np.nan if i.dtype.kind == "f" else tap)
            if i.dtype.kind != "f":
                fill = np.iinfo(i.dtype).min if agg == "max" else np.iinfo(i.dtype).max
                tap = np.where(ok[None, :, :, None], tap, fill)
            out = tap if out is None else f(out, tap)
    return out


@pytest.mark.parametrize("agg", ["max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
def test_padded_pooling_reads_a_halo_of_the_identity(agg, dtype):
    """A padded max (min) pool: the halo holds -inf (+inf; the type's least or
    greatest value for integers), the identity of the aggregation, so the results
    are exactly those of the constrained kernel, nan and infinities included."""
    rng = np.random.default_rng(1)
    i = (rng.standard_normal((1, 9, 8, 24)) * 40).astype(dtype)
    if dtype == "float32":
        i[0, 0, 0, 0], i[0, 4, 3, 5], i[0, 8, 7, 2] = np.nan, -np.inf, np.inf
    src = POOL % (">" if agg == "max" else "<")
    program = stripeml.compile(src, target="interp").lower(i).program
    new = Halo().run(program)
    assert new is not program
    fills = [s for s in new.root.stmts if isinstance(s, Block) and "fill" in s.tags]
    # what the fills store (their nested blocks' constants: one kernel, a block per slab)
    (value,) = {
        t.value for f in fills for b in walk_blocks(f) for t in b.stmts if isinstance(t, Constant)
    }
    if dtype == "float32":
        assert value == (-np.inf if agg == "max" else np.inf)
    else:
        assert value == (np.iinfo(dtype).min if agg == "max" else np.iinfo(dtype).max)
    want = _pool_numpy(i, agg)
    want[0, 0, 0, 0] = np.nan if dtype == "float32" else want[0, 0, 0, 0]  # nan propagates
    np.testing.assert_array_equal(run(new, {"I": i})["O"], want)
    exe = stripeml.compile(src, target="cpu").lower(i)
    assert "_halo" in exe.ir and "#register_tile" in exe.ir
    np.testing.assert_array_equal(exe(i), want)


def test_a_maximum_of_products_keeps_its_constraints():
    """``>(I * K)`` would store ``-inf * K`` at a padding point (``+inf`` for a
    negative weight): only a pool that stores the load itself takes the halo."""
    src = """function (I[H, C], K[KY, C]) -> (O) {
        O[y, c : (H + 1) / 2, C] = >(I[2*y + ky - 1, c] * K[ky, c]), ky < 3;
    }"""
    i = np.arange(30, dtype=np.float32).reshape(10, 3)
    k = -np.ones((3, 3), np.float32)
    program = stripeml.compile(src, target="interp").lower(i, k).program
    assert any(isinstance(b, Block) and b.constraints for b in program.root.stmts)
    assert Halo().run(program) is program
