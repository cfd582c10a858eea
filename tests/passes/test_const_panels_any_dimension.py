"""Constant panels along any dimension (``passes/_const_panels.py``): a constant
read with the register tile's vector index in a dimension other than its last
(a convolution's weights as an ONNX file stores them, ``(CO, CI, KH, KW)``; the
``B`` of ``A @ B.T``) is laid out once in dense panels, as a constant whose last
dimension is that index always was, instead of being packed at every call or
read a row stride apart.  Results are checked against NumPy."""

from __future__ import annotations

import re

import numpy as np
import pytest

import stripeml

MATMUL_BT = "function (A[M, K], B[N, K]) -> (C) { C[m, n : M, N] = +(A[m, k] * B[n, k]); }"
CONV_OIHW = """function (I[N, X, Y, CI], K[CO, CI, KX, KY]) -> (O) {
    O[n, x, y, co : N, X, Y, CO] = +(I[n, x + kx - 1, y + ky - 1, ci] * K[co, ci, kx, ky]);
}"""


def _conv_oihw(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    """NumPy's ``CONV_OIHW``: a same-size correlation, zeros outside the image."""
    n, x, y, _ = i.shape
    _, _, kx, ky = k.shape
    padded = np.pad(i.astype(np.float64), ((0, 0), (1, kx - 2), (1, ky - 2), (0, 0)))
    out = np.zeros((n, x, y, k.shape[0]))
    for a in range(kx):
        for b in range(ky):
            out += np.einsum("nxyc,oc->nxyo", padded[:, a : a + x, b : b + y], k[:, :, a, b])
    return out


@pytest.mark.parametrize(("m", "n"), [(32, 256), (4, 200)])
def test_a_constant_read_across_its_first_dimension_is_laid_out_in_panels(m, n):
    """``A @ B.T`` with a constant ``B``: its panels are made once (a constant
    step), so no call packs it."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, 48)).astype(np.float32)
    b = rng.standard_normal((n, 48)).astype(np.float32)
    exe = stripeml.compile(MATMUL_BT, target="cpu", constants={"B": b}).lower(a)
    assert "B_panels" in exe.ir, exe.ir
    assert "cache_in" not in exe.ir
    np.testing.assert_allclose(exe(a), a.astype(np.float64) @ b.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("ci", "co", "kx"), [(16, 64, 3), (40, 96, 3), (3, 64, 3), (16, 32, 3)])
def test_convolution_weights_in_file_order_are_laid_out_in_panels(ci, co, kx):
    """A convolution reading its constant weights ``(CO, CI, KX, KY)`` as the file
    has them: the panels are taken from them directly (no channels-last copy
    first), one panel too (32 channels: read in place, the weights would be a
    row apart, and the kernel would not be register-tiled), and the convolution
    is NumPy's."""
    rng = np.random.default_rng(ci * co)
    i = rng.standard_normal((1, 9, 7, ci)).astype(np.float32)
    k = rng.standard_normal((co, ci, kx, kx)).astype(np.float32)
    exe = stripeml.compile(CONV_OIHW, target="cpu", constants={"K": k}).lower(i)
    # the panels hold the taps and input channels in the order the kernel's loops
    # read them (kx, ky, ci: the channels-last weights' own order), not the file's
    assert re.search(rf"none K_panels f32\(\d+, {kx}, {kx}, {ci}, \d+\)", exe.ir), exe.ir
    np.testing.assert_allclose(exe(i), _conv_oihw(i, k), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(exe(i), _conv_oihw(i, k), rtol=1e-4, atol=1e-4)  # primed once
