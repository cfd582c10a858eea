"""Gradients through ``dot4`` and the byte views are refused with a clear error
(they compute on integer bytes); parameters that do not flow through them are
differentiated as usual (the float scale of a quantised layer)."""

from __future__ import annotations

import numpy as np
import pytest

import stripeml
from stripeml.autodiff import AutodiffError

QGEMM = """function (X[M, K], W4[K4, N], S[N]) -> (Y) {
    X4 = view_int(X, 32);
    C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]));
    Y = as_float(C, 32) * S;
}"""


@pytest.mark.parametrize(
    "src,wrt,quoted",
    [
        (QGEMM, ["W4"], "'C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]))': the combination 'dot4'"),
        (QGEMM, ["X"], "'C[m, n : M, N] = +(dot4(X4[m, k], W4[k, n]))'"),
        (
            "function (A[N], B[N], S[N]) -> (Y) { Y = as_float(dot4(A, B) + 1, 32) * S; }",
            ["B"],
            "'dot4(A, B)': 'dot4' multiplies integer bytes",
        ),
        (
            "function (X[N], S[N]) -> (Y) { V = view_int(X, 8); Y = as_float(V, 32) + S; }",
            ["X"],
            "'V = view_int(X, 8)': 'view_int' reinterprets bytes",
        ),
    ],
)
def test_gradient_through_integer_bytes_is_refused(src: str, wrt: list[str], quoted: str) -> None:
    f = stripeml.compile(src, target="interp")
    with pytest.raises(AutodiffError) as info:
        stripeml.grad(f, wrt=wrt)
    assert quoted in str(info.value)
    assert "no gradient" in str(info.value)


def test_the_scale_of_a_dot4_layer_is_differentiated() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(3, 8), dtype=np.uint8)
    w = rng.integers(-128, 128, size=(2, 5, 4), dtype=np.int8)
    w4 = w.view(np.int32)[..., 0]
    s = rng.uniform(0.5, 1.5, size=5).astype(np.float32)
    g = stripeml.grad(stripeml.compile(QGEMM, target="interp"), wrt=["S"])
    dy = rng.standard_normal((3, 5)).astype(np.float32)
    c = x.astype(np.int64) @ w.transpose(0, 2, 1).reshape(8, 5).astype(np.int64)
    got = g(x, w4, s, dy)
    np.testing.assert_allclose(got, (c.astype(np.float32) * dy).sum(0), rtol=1e-5)
